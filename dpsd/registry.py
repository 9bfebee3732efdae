"""Name -> builder registries (in the spirit of torchdistill's decorator registries).

Every pluggable piece (methods, baselines, datasets, architectures) registers itself by name;
looking up an unknown name raises a :class:`~dpsd.errors.ConfigError` that lists the known ones.
Nothing else in the code base dispatches on names with if/elif.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from dpsd.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of builders of one kind (``"method"``, ``"dataset"``, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated object under ``name``."""

        def add(entry: T) -> T:
            if name in self._entries and self._entries[name] is not entry:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = entry
            return entry

        return add

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
