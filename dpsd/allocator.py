"""The memory allocator of a CPU run (docs/performance.md, "The allocator on the CPU").

glibc's ``malloc`` serves each block above its mmap threshold (32 MiB at most) with a fresh ``mmap`` and returns
it to the system when it is freed, so a training step whose activations are hundreds of MiB (DAFL's generator at
batch 512) faults every page of them in again on each iteration: a quarter of the process's CPU time is the
kernel's. jemalloc with page purging off (``dirty_decay_ms:-1,muzzy_decay_ms:-1``) keeps the freed pages for the
next iteration; the process stays at its peak resident memory. PyTorch's CPU tuning guide recommends jemalloc or
TCMalloc for the same reason. The allocator changes no arithmetic: the same kernels run on the same numbers
(``tests/test_allocator.py`` compares a trainer's weights under both, bit for bit).

The allocator is chosen when a process starts (``LD_PRELOAD``), so it is set in the environment of a process yet to
be started: :func:`jemalloc_env` gives that environment, ``python -m dpsd.allocator`` prints it for a shell
(``env $(python -m dpsd.allocator) dpsd run ...``), ``tools/run_cells.py --jemalloc`` starts its workers in
it and ``python -m dpsd.bench --allocator`` times an iteration under each. The library is the one ``DPSD_JEMALLOC``
names, else the copy Ray ships (``ray/core/libjemalloc.so``, installed with this project), else the system's
(``libjemalloc``, found by the dynamic loader's search).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import sys
from pathlib import Path
from typing import Mapping

from dpsd.errors import ConfigError

LIBRARY_VARIABLE = "DPSD_JEMALLOC"  # a path to libjemalloc.so, chosen over the copies found
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"  # never hand freed pages back to the system
ALLOCATORS = ("malloc", "jemalloc")  # glibc's (what a process gets unless told) and jemalloc


def find_jemalloc(environ: Mapping[str, str] = os.environ) -> str:
    """The jemalloc library to preload: ``DPSD_JEMALLOC``, Ray's copy or the system's, in that order."""
    if not sys.platform.startswith("linux"):
        raise ConfigError(f"jemalloc is preloaded with LD_PRELOAD, on Linux only (this is {sys.platform})")
    named = environ.get(LIBRARY_VARIABLE)
    if named:
        if not Path(named).is_file():
            raise ConfigError(f"{LIBRARY_VARIABLE}={named}: no such file (expected a libjemalloc.so)")
        return named
    ray = importlib.util.find_spec("ray")
    if ray is not None and ray.submodule_search_locations:
        bundled = Path(next(iter(ray.submodule_search_locations))) / "core" / "libjemalloc.so"
        if bundled.is_file():
            return str(bundled)
    system = ctypes.util.find_library("jemalloc")
    if system is None:
        raise ConfigError(f"no jemalloc found: install Ray (`pip install ray`, which ships one), the system's "
                          f"libjemalloc, or set {LIBRARY_VARIABLE} to a libjemalloc.so")
    return system


def available(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this machine can start a process under jemalloc (Linux, and a library found)."""
    try:
        find_jemalloc(environ)
    except ConfigError:
        return False
    return True


def _preloads_but_jemalloc(environ: Mapping[str, str]) -> list[str]:
    """The libraries ``environ`` preloads (``LD_PRELOAD``, colon- or space-separated), any jemalloc left out."""
    return [part for part in environ.get("LD_PRELOAD", "").replace(" ", ":").split(":")
            if part and "jemalloc" not in part]


def jemalloc_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``environ`` in which a process starts with jemalloc (:data:`JEMALLOC_CONF`) preloaded, once."""
    preload = ":".join([find_jemalloc(environ), *_preloads_but_jemalloc(environ)])
    return {**environ, "LD_PRELOAD": preload, "MALLOC_CONF": JEMALLOC_CONF}


def env_for(allocator: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of a process that is to run under ``allocator`` (one of :data:`ALLOCATORS`)."""
    if allocator not in ALLOCATORS:
        raise ConfigError(f"allocator {allocator!r}: expected one of {', '.join(ALLOCATORS)}")
    if allocator == "jemalloc":
        return jemalloc_env(environ)
    kept = ":".join(_preloads_but_jemalloc(environ))
    env = {key: value for key, value in environ.items() if key not in ("LD_PRELOAD", "MALLOC_CONF")}
    return {**env, "LD_PRELOAD": kept} if kept else env


def in_use() -> str:
    """The allocator this process runs under: ``jemalloc`` where a jemalloc library is mapped into it."""
    maps = Path("/proc/self/maps")
    if maps.is_file() and "jemalloc" in maps.read_text():
        return "jemalloc"
    return "malloc"


def main() -> int:
    """Print the variables that start a process under jemalloc, for ``env $(python -m dpsd.allocator) ...``."""
    env = jemalloc_env()
    print(f"LD_PRELOAD={env['LD_PRELOAD']} MALLOC_CONF={env['MALLOC_CONF']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
