"""Imports made inside a function body (deferred imports) against the import layers (DESIGN.md, "Layers").

A deferred import is still an import: import-linter reads it as one (``tests/test_layers.py`` plants one), and
one that climbs to a higher layer than its module's is a call back up the flow. :func:`deferred_imports` lists
every deferred import of ``dpsd`` and ``baselines`` with the layers of both ends; the test allows no upward one
beyond :data:`ALLOWED_UPWARD` (each with the reason it must stay).
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ALLOWED_UPWARD: dict[tuple[str, str], str] = {}
"""(importing module, imported module) -> why the upward deferred import must stay. Empty: there is none."""


@dataclass(frozen=True)
class DeferredImport:
    """One ``import``/``from ... import`` inside a function body of a project module."""

    path: str  # relative to the repository root
    line: int
    function: str
    module: str  # the importing module
    target: str  # the imported module
    module_layer: int | None  # index in the contract's layers, top first (None: in no layer)
    target_layer: int | None

    @property
    def upward(self) -> bool:
        """Whether the target sits in a higher layer than the importing module."""
        return None not in (self.module_layer, self.target_layer) and self.target_layer < self.module_layer

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.function}: {self.module} -> {self.target}"


def layer_index(root: Path = ROOT) -> dict[str, int]:
    """Each module the layers contract of ``pyproject.toml`` names -> its layer's index (0: the top)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return {name: i for i, layer in enumerate(layers) for name in re.split(r"[|:]", layer.replace(" ", ""))}


def layer_of(module: str, index: dict[str, int]) -> int | None:
    """The layer of ``module``: that of the longest named package holding it (None: no layer names it)."""
    parts = module.split(".")
    return next((index[".".join(parts[:k])] for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in index), None)


def deferred_imports(root: Path = ROOT, packages: tuple[str, ...] = ("dpsd", "baselines")) -> list[DeferredImport]:
    """Every import of a ``packages`` module made inside a function body of a ``packages`` module."""
    index, found = layer_index(root), []
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        relative = path.relative_to(root)
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(relative))
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    targets = [node.module]
                else:
                    continue
                found += [DeferredImport(relative.as_posix(), node.lineno, function.name, module, target,
                                         layer_of(module, index), layer_of(target, index))
                          for target in targets if target.split(".")[0] in packages]
    return sorted(set(found), key=lambda d: (d.path, d.line, d.target))


def test_no_deferred_import_climbs_a_layer():
    upward = [d for d in deferred_imports() if d.upward and (d.module, d.target) not in ALLOWED_UPWARD]
    assert not upward, "deferred imports into a higher layer:\n" + "\n".join(map(str, upward))


def test_the_scan_finds_an_upward_deferred_import(tmp_path):
    (tmp_path / "dpsd").mkdir()
    (tmp_path / "baselines").mkdir()
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "dpsd" / "data.py").write_text("def f():\n    from dpsd.experiment import run_experiment\n"
                                               "    from dpsd.errors import ConfigError\n")
    (found_up,) = [d for d in deferred_imports(tmp_path) if d.upward]
    assert (found_up.module, found_up.target, found_up.line) == ("dpsd.data", "dpsd.experiment", 2)
    assert len(deferred_imports(tmp_path)) == 2
