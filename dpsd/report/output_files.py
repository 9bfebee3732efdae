"""A render's files: each named by a file-system-safe stem of the spec and scale it comes from, and written as
UTF-8 text into a folder made for it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from dpsd.sweep.spec import Spec

SLUG_LENGTH = 120  # characters of a file name's stem, within every file system's limit with room for a suffix


def slug(text: str) -> str:
    """``text`` as a file name's stem: runs of other characters than letters, digits, ``.``, ``_`` and ``-`` become
    one ``_``; a stem longer than :data:`SLUG_LENGTH` keeps its start and ends in a hash of the whole, so two long
    names that differ only past the cut stay two files."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
    if len(stem) <= SLUG_LENGTH:
        return stem
    digest = hashlib.sha1(stem.encode()).hexdigest()[:8]
    return f"{stem[:SLUG_LENGTH - len(digest) - 1]}_{digest}"


def artifact_stem(spec: Spec, scale: str) -> str:
    """The stem every file a spec's render writes starts with: the spec's name and the scale it was rendered at."""
    return slug(f"{spec.name}_{scale}")


def write_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
