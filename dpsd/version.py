"""The code version a result was produced by (issue 15, item 4).

``code_version()`` is the package version plus a hash of what the result-producing sources *mean*:
each Python module's syntax tree without docstrings, each YAML file's parsed content, the parsed
``pyproject.toml`` (:data:`SOURCES`, less :data:`RESULT_FREE`). A comment, a docstring, the README,
or the code that only starts, records or renders runs therefore leaves it unchanged, while any change
to what a run computes changes it. The git commit is recorded beside it for provenance (:func:`git_commit`), not used for
staleness: keyed on the commit, every commit (a README typo, a diagnosis comment in a method's YAML)
would mark every recorded cell stale.

Every run is tagged with both, and a sweep cell recorded by other code is *stale*: listed as such by
``dpsd sweep/reproduce --dry-run``, marked STALE in the report, and re-run only on request
(``--rerun-stale``).

``teacher_code_version()`` is the narrower version a cached teacher depends on: the same hash over the
sources that train it (:data:`TEACHER_SOURCES`), so a change to a method does not retrain every
teacher, while a change to the teacher recipe, models or data loading does.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import tomllib
from functools import lru_cache
from pathlib import Path

import yaml

from dpsd import __version__

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
SOURCES = ("dpsd", "baselines", "pyproject.toml")
"""Where the code that produces results lives (relative to the checkout or the installed package's parent)."""
RESULT_FREE = ("dpsd/version.py", "dpsd/cli.py", "dpsd/reproduce.py", "dpsd/quickstart.py", "dpsd/bench.py",
               "dpsd/sweep", "dpsd/tracking.py", "dpsd/progress.py", "dpsd/jsonio.py", "dpsd/report")
"""Code that starts, schedules, records, prints or renders runs: changing it changes no recorded number (a
run's result is a function of its config, recorded and hashed with it, and of the code that computes it)."""
TEACHER_SOURCES = ("dpsd/teachers.py", "dpsd/models", "dpsd/data.py", "dpsd/datafiles.py")
"""The modules that determine a trained teacher's weights."""


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def meaning(path: Path) -> bytes:
    """What a source file computes, without its comments and docstrings: the bytes hashed for it."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return ast.dump(_without_docstrings(ast.parse(text, filename=str(path)))).encode()
    if path.suffix in (".yaml", ".yml"):
        return json.dumps(yaml.safe_load(text), sort_keys=True, default=str).encode()
    if path.suffix == ".toml":
        return json.dumps(tomllib.loads(text), sort_keys=True).encode()
    return text.encode()


def _files(names: tuple[str, ...], excluded: tuple[str, ...] = ()) -> list[Path]:
    found: list[Path] = []
    for name in names:
        path = ROOT / name
        if path.is_dir():
            found += [p for p in path.rglob("*") if p.suffix in (".py", ".yaml", ".yml")]
        elif path.is_file():
            found.append(path)
    skip = tuple(ROOT / name for name in excluded)
    return sorted(p for p in found if not any(p.is_relative_to(s) for s in skip) and "__pycache__" not in p.parts)


def source_hash(names: tuple[str, ...], excluded: tuple[str, ...] = ()) -> str:
    """12 hex digits of sha256 over each file's relative path and :func:`meaning`."""
    digest = hashlib.sha256()
    for path in _files(names, excluded):
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(meaning(path))
    return digest.hexdigest()[:12]


@lru_cache(maxsize=1)
def code_version() -> str:
    """``<version>+src<hash 12>`` of the result-producing sources (:func:`source_hash`)."""
    return f"{__version__}+src{source_hash(SOURCES, RESULT_FREE)}"


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The checkout's commit (12 hex digits, ``-dirty`` with uncommitted source changes), or ``""`` outside git."""
    head = _git("rev-parse", "HEAD")
    if not head:
        return ""
    return head[:12] + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no", "--", *SOURCES) else "")


@lru_cache(maxsize=1)
def teacher_code_version() -> str:
    """``<version>+t<hash 12>`` of :data:`TEACHER_SOURCES`."""
    return f"{__version__}+t{source_hash(TEACHER_SOURCES)}"
