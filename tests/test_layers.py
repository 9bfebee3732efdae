"""The import layers (DESIGN.md, "Layers"; the contract is ``[tool.importlinter]`` in pyproject.toml).

Each test runs import-linter in a fresh interpreter on a tree: the repository's must keep the
contract, and a copy with one upward import planted in the privacy core must break it.
"""

from __future__ import annotations

import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import dpsd

ROOT = Path(__file__).resolve().parent.parent
LINT = "from importlinter.cli import lint_imports; raise SystemExit(lint_imports(no_cache=True, no_logo=True))"


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-c", LINT], cwd=tree, env=env, capture_output=True, text=True)


def test_the_layer_contract_is_kept():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_every_module_of_dpsd_has_a_layer():
    """A module the contract does not name is not checked at all: each new one must be placed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    named = {name for layer in layers for name in re.split(r"[|:]", layer.replace(" ", ""))}
    modules = {f"dpsd.{m.name}" for m in pkgutil.iter_modules(dpsd.__path__)}
    assert modules <= named, f"not in any layer of pyproject.toml: {sorted(modules - named)}"


def test_an_upward_import_breaks_the_contract(tmp_path):
    for name in ("dpsd", "baselines"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    events = tmp_path / "dpsd" / "privacy" / "events.py"
    events.write_text(events.read_text() + "\nfrom dpsd.experiment import run_experiment  # noqa: E402\n")
    # an import deferred into a function body is an import all the same: it does not hide from the contract
    input_space = tmp_path / "dpsd" / "input_space.py"
    input_space.write_text(input_space.read_text() + "\n\ndef deferred():\n    from dpsd.methods import METHODS\n")
    result = lint(tmp_path)
    assert result.returncode == 1
    assert "dpsd.privacy.events -> dpsd.experiment" in result.stdout
    assert "dpsd.input_space -> dpsd.methods" in result.stdout
