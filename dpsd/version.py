"""The code version a result was produced by (issue 15, item 4).

``code_version()`` is the package version plus the git commit of the checkout, with ``-dirty`` when
tracked source files (``dpsd/``, ``baselines/``, ``pyproject.toml``) have uncommitted changes; without
a git checkout (an installed wheel) it is the package version plus a hash of the installed sources.
Every run is tagged with it, and a sweep cell recorded by other code is *stale*: listed as such by
``dpsd sweep/reproduce --dry-run``, marked STALE in the report, and re-run only on request
(``--rerun-stale``), so that a commit fixing a README typo costs no re-runs.

``teacher_code_version()`` is the narrower version a cached teacher depends on: the package version
plus a hash of the sources that train it (:data:`TEACHER_SOURCES`), so a change to a method does not
retrain every teacher, while a change to the teacher recipe, models or data loading does.
"""

from __future__ import annotations

import hashlib
import subprocess
from functools import lru_cache
from pathlib import Path

from dpsd import __version__

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
SOURCES = ("dpsd", "baselines", "pyproject.toml")
"""What counts as source for ``-dirty`` (tracked files only; results, reports and notes do not)."""
TEACHER_SOURCES = ("teachers.py", "models", "data.py", "datafiles.py")
"""The modules (under ``dpsd/``) that determine a trained teacher's weights."""


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(PACKAGE.parent)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _python_files(names: tuple[str, ...], under: Path) -> list[Path]:
    found: list[Path] = []
    for name in names:
        path = under / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else ([path] if path.is_file() else [])
    return found


@lru_cache(maxsize=1)
def code_version() -> str:
    """``<version>+g<commit 12>[-dirty]`` in a git checkout, else ``<version>+src<hash 12>``."""
    commit = _git("rev-parse", "HEAD")
    if commit:
        dirty = _git("status", "--porcelain", "--untracked-files=no", "--", *SOURCES)
        return f"{__version__}+g{commit[:12]}{'-dirty' if dirty else ''}"
    return f"{__version__}+src{_hash_files(_python_files(('.',), PACKAGE))}"


@lru_cache(maxsize=1)
def teacher_code_version() -> str:
    """``<version>+t<hash 12>`` of :data:`TEACHER_SOURCES`."""
    return f"{__version__}+t{_hash_files(_python_files(TEACHER_SOURCES, PACKAGE))}"
