"""The commits at which a method's code changed between two of its code versions, read from git.

An archive row names the method code version its run counts as (:func:`dpsd.version.method_code_version`; a run
vouched result-neutral carries the later version it was vouched for, ``tools/retag_code_version.py``), not the
commit that recorded it. :func:`changes_between` therefore walks the main line of commits (first parents) that touch
the files a run of the method executes in the checkout (:func:`method_files`: the import closure its version
hashes), newest first from the later run's start, computing the method's version at each
(:func:`dpsd.version.method_code_version_at`) until it meets the earlier run's version: the commits on the way where
the version changed are the ones between the two runs, one of which (or several together) moved a number. A file the
method executed once and no longer does is not watched: a change to it shows at the next commit that touches a
watched one. Nothing is found, and nothing fails, without git, for a version no commit of the walk computes (a
whole-tree ``+src`` version, one under an older hashing rule), or past :data:`LOOKBACK` before the earlier run.
"""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path

from dpsd.version import DRIVER, RESULT_FREE, ROOT, SOURCES, closure, hashed, method_code_version_at, method_module

LOOKBACK = timedelta(days=2)
"""How long before the earlier run the walk still looks for its version: a run is recorded from a checkout of a recent
commit, and each commit walked costs a read of the sources at it."""


def method_of(version: str) -> str:
    """The method a :func:`~dpsd.version.method_code_version` names (``0.1.0+dpsd.0114c6580293`` -> ``dpsd``);
    ``""`` for a whole-tree version (``+src...``)."""
    return version.partition("+")[2].rpartition(".")[0]


@lru_cache(maxsize=None)
def method_files(method: str, root: Path = ROOT) -> tuple[str, ...]:
    """The checkout's files that :func:`dpsd.version.method_code_version` hashes for ``method`` (its driver's and
    module's import closure, and ``pyproject.toml``); empty for a method no module registers."""
    paths = [p for name in SOURCES for p in ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name])]
    files = {rel: path.read_text(encoding="utf-8") for path in paths if path.is_file()
             for rel in [path.relative_to(root).as_posix()] if hashed(rel, SOURCES, RESULT_FREE)}
    try:
        return tuple(sorted(closure([DRIVER, method_module(method, files)], files) | {"pyproject.toml"}))
    except ValueError:
        return ()


@lru_cache(maxsize=None)
def main_line(method: str, root: Path = ROOT) -> tuple[tuple[str, datetime], ...]:
    """The first-parent commits of ``root``'s HEAD that touch :func:`method_files`, newest first, each with its commit
    time; empty without git or such files."""
    pathspec = method_files(method, root)
    if not pathspec:
        return ()
    try:
        done = subprocess.run(["git", "log", "--first-parent", "--format=%H %cI", "--", *pathspec], cwd=root,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode:
        return ()
    lines = (line.split() for line in done.stdout.splitlines() if line.strip())
    return tuple((commit, datetime.fromisoformat(when)) for commit, when in lines)


@lru_cache(maxsize=None)
def _version_at(commit: str, method: str, root: Path) -> str | None:
    return method_code_version_at(commit, method, root)


def changes_between(before: str, after: str, since: datetime, until: datetime, root: Path = ROOT) -> tuple[str, ...]:
    """The main-line commits (12 hex digits, oldest first) at which the code version of ``after``'s method changed
    since the last commit computing ``before``, among those committed by ``until`` (the later run's start) and no
    earlier than :data:`LOOKBACK` before ``since`` (the earlier run's start); empty where that commit is not found
    (module docstring) or the two versions name different methods."""
    method = method_of(after)
    if not method or method_of(before) != method:
        return ()
    walked = [commit for commit, when in main_line(method, root) if since - LOOKBACK <= when <= until]
    versions: list[str | None] = []
    for commit in walked:
        versions.append(_version_at(commit, method, root))
        if versions[-1] == before:
            changed = [walked[i] for i in range(len(versions) - 1) if versions[i] != versions[i + 1]]
            return tuple(commit[:12] for commit in reversed(changed))
    return ()
