"""Strict JSON for every file the harness writes (RFC 8259 has no infinity and no NaN).

A non-finite float is written as the string ``"inf"``, ``"-inf"`` or ``"nan"`` and read back as the
float; ``json.dumps(..., allow_nan=False)`` then guarantees that no ``Infinity`` or ``NaN`` token
(which Python accepts but strict parsers such as ``jq`` or JavaScript's ``JSON.parse`` reject) is ever
written.
"""

from __future__ import annotations

import json
import math
from typing import Any

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def to_strict(value: Any) -> Any:
    """``value`` with every non-finite float (in nested dicts, lists and tuples) as its string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: to_strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_strict(item) for item in value]
    return value


def from_strict(value: Any) -> Any:
    """The inverse of :func:`to_strict`: the strings ``"inf"``, ``"-inf"``, ``"nan"`` as floats."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {key: from_strict(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_strict(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``value`` (``kwargs`` as for ``json.dumps``, e.g. ``indent``, ``default``)."""
    return json.dumps(to_strict(value), allow_nan=False, **kwargs)


def loads(text: str) -> Any:
    """A value written by :func:`dumps`, with its non-finite floats restored."""
    return from_strict(json.loads(text))
