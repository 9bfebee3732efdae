"""Thread hygiene on a shared machine (docs/performance.md): no busy-waiting, and as many intra-op
threads as the CPUs this process was given.

Waiting: an OpenMP worker that finds no work spins before it sleeps (libgomp, which torch's pip wheels
ship, spins ``GOMP_SPINCOUNT`` = 300,000 rounds by default; Intel's libiomp ``KMP_BLOCKTIME`` = 200 ms).
On cores shared with other processes that spinning takes the cores from whoever would run, this
process's own threads included. ``OMP_WAIT_POLICY=PASSIVE`` (honoured by libgomp and by LLVM/Intel's
libomp, where it also makes the block time 0) makes them sleep at once. The runtime reads it when it is
loaded, that is when torch is first imported, so each entry point calls :func:`wait_passively` before
it imports torch (``dpsd.cli``, ``dpsd.bench``, ``tests/conftest.py``); processes started from it
(Ray's workers, a benchmark's children) inherit it, and :func:`worker_env` hands it to Ray's workers
(:func:`dpsd.sweep.runner.init_ray`, a cluster started elsewhere included). A value the user set is
left as it is.

Threads: :func:`set_threads` sets torch's intra-op threads to what the entry point was given (a
trial's ``--cpus-per-trial``, ``threads=N``), else to ``OMP_NUM_THREADS`` if the user set it, else to
the CPUs this process may run on (``os.sched_getaffinity``: a ``taskset`` or a container's cpuset).

``DPSD_THREAD_HYGIENE=0`` turns both off (torch's own defaults: the behaviour before; the contention
benchmark's "before" row).
"""

from __future__ import annotations

import os
from typing import MutableMapping

HYGIENE = "DPSD_THREAD_HYGIENE"  # "0": leave the waiting policy and the thread count to torch
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}  # what libgomp and libomp honour (module docstring)
# The variables wait_passively set in this process (not the user's): left out where "before" is wanted.
set_here: dict[str, str] = {}


def enabled(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Whether the hygiene is on (anything but ``DPSD_THREAD_HYGIENE=0``)."""
    return environ.get(HYGIENE, "1") != "0"


def wait_passively(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set :data:`WAIT_POLICY`'s variables the user did not set (none when the hygiene is off);
    returns those it set. Takes effect only in a process whose OpenMP runtime is not loaded yet."""
    if not enabled(environ):
        return {}
    added = {key: value for key, value in WAIT_POLICY.items() if key not in environ}
    environ.update(added)
    if environ is os.environ:
        set_here.update(added)
    return added


def worker_env() -> dict[str, str]:
    """The variables a worker process (a Ray trial) needs for the same hygiene as this one: the
    waiting policy in force here and the switch itself."""
    names = (HYGIENE, *WAIT_POLICY)
    return {key: os.environ[key] for key in names if key in os.environ}


def without_hygiene(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``environ`` for a process that must behave as before the hygiene: the switch off and
    the variables this process set (not the user's) removed."""
    return {**{key: value for key, value in environ.items() if key not in set_here}, HYGIENE: "0"}


def given_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the machine's count where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_count(threads: float | None = None, environ: MutableMapping[str, str] = os.environ) -> int | None:
    """Intra-op threads for ``threads`` CPUs given (a fraction rounds down, at least 1); without it the
    user's ``OMP_NUM_THREADS``, else :func:`given_cpus`. None: leave torch's count (the hygiene off and
    nothing given)."""
    if threads:
        return max(1, int(threads))
    if not enabled(environ):
        return None
    user = environ.get("OMP_NUM_THREADS", "")
    return max(1, int(user)) if user.isdigit() else given_cpus()


def set_threads(threads: float | None = None) -> int:
    """Set torch's intra-op threads to :func:`thread_count`; returns the count in force."""
    import torch

    count = thread_count(threads)
    if count is not None and count != torch.get_num_threads():
        torch.set_num_threads(count)
    return torch.get_num_threads()
