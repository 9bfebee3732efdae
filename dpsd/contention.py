"""Processes that compete for the cores, and timed workers beside them: the machinery of
``python -m dpsd.bench --contention K`` (docs/performance.md).

A competitor (``python -m dpsd.contention THREADS SECONDS``) is what other work on a shared machine
looks like: a torch matmul loop on THREADS threads under the runtime's default waiting policy (the
environment of :func:`dpsd.threads.without_hygiene`). It ends by itself after SECONDS, or as soon as
the process that started it is gone; :class:`Competitors` also stops them when its block ends, by an
exception or Ctrl-C included.

A :class:`Worker` is a child process that runs :func:`serve`: it warms up, says ``ready`` and then,
for each line ``N`` it reads, runs N steps and answers their seconds per step. Its waiting policy and
thread count are fixed when it starts (the OpenMP runtime reads them when torch is loaded), which is
why the benchmark's "before" and "after" each run in a worker of their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence

from dpsd.threads import without_hygiene

MATMUL = 512  # a competitor's square matrices: a few milliseconds a product on one core
STOP_SECONDS = 5.0  # how long a competitor or worker has to end after being told, before it is killed


def compete(threads: int, seconds: float, parent: int) -> None:
    """Multiply matrices on ``threads`` torch threads for ``seconds``, or until ``parent`` is gone."""
    import torch

    torch.set_num_threads(threads)
    a = torch.tanh(torch.randn(MATMUL, MATMUL) @ torch.randn(MATMUL, MATMUL))
    print("ready", flush=True)  # torch loaded and computing: the timed rounds may start
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and os.getppid() == parent:
        a = torch.tanh(a @ a)


def _start(argv: Sequence[str], env: Mapping[str, str], stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """``argv`` in a session of its own (a Ctrl-C reaches this process alone, which then stops it)."""
    return subprocess.Popen(list(argv), env=dict(env), stdin=stdin, stdout=subprocess.PIPE, text=True, bufsize=1,
                            start_new_session=True)


def _await(process: subprocess.Popen, word: str) -> str:
    """The rest of ``process``'s next line that starts with ``word`` (other lines, such as a teacher's
    training log, are passed on to stderr)."""
    for line in process.stdout:
        if line.startswith(word):
            return line[len(word):].strip()
        sys.stderr.write(line)
    process.wait()
    raise RuntimeError(f"{process.args[2]} ended (status {process.returncode}) before saying {word!r}")


def _stop(process: subprocess.Popen) -> None:
    """Terminate ``process`` (killed if it has not ended after :data:`STOP_SECONDS`) and close its pipes."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdin, process.stdout):
        if pipe:
            pipe.close()


class Competitors:
    """``with Competitors(k, threads, seconds):`` k competitors run for the block (at most ``seconds``)."""

    def __init__(self, k: int, threads: int, seconds: float) -> None:
        self.argv = [sys.executable, "-m", "dpsd.contention", str(threads), str(seconds), str(os.getpid())]
        self.k = k
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> "Competitors":
        env = without_hygiene()
        try:
            for _ in range(self.k):
                self.processes.append(_start(self.argv, env))
            for process in self.processes:
                _await(process, "ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def running(self) -> int:
        return sum(process.poll() is None for process in self.processes)

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            _stop(process)


class Worker:
    """A child process running :func:`serve` (``argv`` in environment ``env``); ``ready`` is the
    rest of its ``ready`` line, ``seconds_per_step(n)`` times n steps there."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.process = _start(argv, env, stdin=subprocess.PIPE)
        try:
            self.ready = _await(self.process, "ready")
        except BaseException:
            self.close()
            raise

    def seconds_per_step(self, steps: int) -> float:
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()
        return float(_await(self.process, "seconds"))

    def close(self) -> None:
        _stop(self.process)


@contextmanager
def workers(specs: Mapping[str, tuple[Sequence[str], Mapping[str, str]]]) -> Iterator[dict[str, Worker]]:
    """A :class:`Worker` per name (its ``argv`` and ``env``), started in order; every one started is
    closed when the block ends, by an exception (a later worker failing to start included) or not."""
    started: dict[str, Worker] = {}
    try:
        for name, (argv, env) in specs.items():
            started[name] = Worker(argv, env)
        yield started
    finally:
        for worker in started.values():
            worker.close()


def serve(step: Callable[[], None], warmup: int, about: str) -> None:
    """The worker's side: ``warmup`` steps, ``ready <about>``, then ``seconds <s/step>`` for each
    line ``N`` read (N steps), until the input ends."""
    for _ in range(warmup):
        step()
    print(f"ready {about}", flush=True)
    for line in sys.stdin:
        steps = int(line)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        print(f"seconds {(time.perf_counter() - start) / steps}", flush=True)


if __name__ == "__main__":
    compete(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))
