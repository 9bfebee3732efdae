"""What privacy costs per iteration: ``python -m dpsd.bench [--methods a,b] [--repeats N] [overrides]``.

With ``device=auto`` (the default) every device found is benchmarked in turn: the CPU, then each
CUDA (or MPS) device; each row ends with its iterations per second and the device.

For each method that implements ``make_trainer(ctx)`` (found through the METHODS registry; the
others are skipped with a printed line), times one training iteration under each private mode
against the same iteration with ``privacy=none``: same networks (same seed), batch, data and
teacher, in one process, modes interleaved round by round. Prints the ratio to the reference and
the privatisation's share of the private iteration, ``(t_private - t_none) / t_private``. Timing
claims belong here, not in tests: the numbers depend on the machine.

``--ensemble M``: instead, the teacher-ensemble backends (:mod:`dpsd.ensembles`). The private split is
dealt ``--parts`` ways (default 250, PATE's and DGD's size); the first M members are trained from an
empty cache by the serial and then the vmap backend, each member ``--member-steps`` optimiser steps
(default 30). Prints seconds per member, the vmap/serial ratio, and the time for all parts at that rate; then the
members per second answering ``--queries`` images (default 1,000) one after another and as one batched model
(:func:`dpsd.ensembles.ensemble_votes`), and their ratio. With ``--record``, each backend's seconds per member step on
the device runs here use go into ``<results_dir>/member_rates.csv`` (:mod:`dpsd.member_rates`), which prices the cells
that train members and have no recorded run (``dpsd reproduce --dry-run``).

``--layout``: instead, each method's ``privacy=none`` iteration with its networks (teacher included) in the
channels-last layout every model is built in (:func:`dpsd.models.channels_last`) against the same networks
converted back to NCHW, interleaved as above. Prints both and their ratio.

``--teacher-paths``: instead, the run's teacher (``model.teacher``: e.g. ``scale=paper method=dpsd dataset=mnist``, the
papers' ResNet-34) on random images of the data's shape: one training step of its recipe's batch and one answer to
128 queries, along each numeric path (:data:`TEACHER_PATHS`: fp32 in the channels-last layout every model is built in,
fp32 in NCHW, bfloat16 autocast), on the CPU with 1 and 2 threads and the threads this process was given (each device
found), paths interleaved round by round in one process. Prints milliseconds and each path's ratio to fp32
channels-last. With ``--record``, the fp32 channels-last step at the threads given goes into
``<results_dir>/member_rates.csv`` as one network's rate, which prices a teacher absent from this machine's cache
(``dpsd reproduce --dry-run``: a sweep trains such a teacher before its cells).

``--contention K``: instead, one DPSD iteration (``method=dpsd``, the overrides' cell, on the CPU) quiet
and beside K competing processes (:mod:`dpsd.contention`: ``--competitor-threads`` torch threads each,
default 2, a matmul loop under the default waiting policy), which the benchmark starts for the timed
rounds only and stops (at the latest after ``--contention-limit`` seconds, on an exception or Ctrl-C
too). It runs once without the thread hygiene (``before``: torch's defaults) and once with it
(``after``: :mod:`dpsd.threads`), each in a process of its own, rounds interleaved. Prints seconds per
step quiet and contended and their ratio, with the load average before it started.

``--allocator``: instead, each of ``--methods``' ``privacy=none`` iteration on the CPU (default: DPSD and DAFL) under
glibc's malloc and under jemalloc (:mod:`dpsd.allocator`), each in a process of its own, rounds of
``ALLOCATOR_STEPS`` steps interleaved. Prints seconds per step under each and their ratio.
"""

from __future__ import annotations

from dpsd.threads import set_threads, wait_passively, without_hygiene

wait_passively()  # before torch is imported: its OpenMP runtime reads it when loaded

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from dpsd.allocator import ALLOCATORS, env_for, in_use
from dpsd.contention import Competitors, Worker, serve, workers
from dpsd.config import available_devices, compose, resolve_device, resolve_paths
from dpsd.data import load_data
from dpsd.ensembles import ensemble_votes, load_or_train_members, member_predictions, with_member_steps
from dpsd.errors import Fault
from dpsd.experiment import resolve_run
from dpsd.member_rates import RATES_FILE, MemberRate, network, record_rates
from dpsd.methods import METHODS
from dpsd.methods.base import Method, RunContext, Trainer
from dpsd.privacy.accounting import Ledger
from dpsd.teachers import disjoint_partition, load_or_train_teacher
from dpsd.tracking import this_hardware

REFERENCE = "none"
LAYOUTS = ("channels_last", "nchw")
PRIVATE_MODES = ("label", "data")
REPEATS = 20
WARMUP = 3
ENSEMBLE_BACKENDS = ("serial", "vmap")
CONTENTION_CELL = ("dpsd", "label")  # --contention's method and privacy mode
CONTENTION_ROUNDS = 5
CONTENTION_STEPS = 10  # iterations per timed round of --contention
CONTENTION_LIMIT = 600.0  # seconds a competitor runs at most
ALLOCATOR_METHODS = "dpsd,dafl"  # --allocator's methods unless --methods names others
ALLOCATOR_STEPS = 5  # iterations per timed round of --allocator


def _seconds(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def has_trainer(name: str) -> bool:
    """Whether method ``name`` overrides :meth:`Method.make_trainer`."""
    return METHODS.get(name).make_trainer is not Method.make_trainer


def build_trainer(overrides: list[str], method: str, mode: str, teacher, data, device) -> Trainer:
    """Method ``method``'s trainer under ``privacy=mode``, networks initialised from the run's seed."""
    cfg = compose([*overrides, f"method={method}", f"privacy={mode}"])
    resolve_run(cfg)
    cfg = resolve_paths(cfg)
    torch.manual_seed(int(cfg.seed))  # the same initial networks in every mode
    rng = torch.Generator(device=device).manual_seed(int(cfg.seed))
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=device, rng=rng, ledger=Ledger())
    return METHODS.get(method)().make_trainer(ctx)


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a CUDA device's kernels run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _synchronised(trainer: Trainer, device: torch.device):
    def step() -> None:
        trainer.step()
        synchronize(device)
    return step


def time_modes(trainers: dict[str, Trainer], repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds of one iteration per mode, the modes interleaved round by round so that a
    slow spell of the machine hits them all alike."""
    steps = {mode: _synchronised(trainer, device) for mode, trainer in trainers.items()}
    for step in steps.values():
        for _ in range(WARMUP):  # allocator, thread pools, lazy initialisation
            step()
    seconds: dict[str, list[float]] = {mode: [] for mode in trainers}
    for _ in range(repeats):
        for mode, step in steps.items():
            seconds[mode].append(_seconds(step))
    return {mode: statistics.median(values) for mode, values in seconds.items()}


def bench_method(name: str, overrides: list[str], teacher, data, device, repeats: int) -> dict[str, float] | None:
    """Median iteration seconds per mode for method ``name`` (None when it cannot be benchmarked)."""
    if not has_trainer(name):
        print(f"skip {name}: no make_trainer (not an iterative method)")
        return None
    trainers: dict[str, Trainer] = {}
    for mode in (REFERENCE, *PRIVATE_MODES):
        try:
            trainers[mode] = build_trainer(overrides, name, mode, teacher, data, device)
        except Exception as error:  # a method may not support a mode, or the overrides may not fit it
            reason = " ".join(str(error).split())[:160]
            print(f"skip {name} privacy={mode}: {type(error).__name__}: {reason}")
            if mode == REFERENCE:
                return None
    if len(trainers) == 1:
        return None
    return time_modes(trainers, repeats, device)


def nchw(trainer: Trainer) -> Trainer:
    """``trainer`` with every network it holds (its attributes that are modules) in NCHW layout."""
    for value in vars(trainer).values():
        if isinstance(value, nn.Module):
            value.to(memory_format=torch.contiguous_format)
    return trainer


def bench_layout(name: str, overrides: list[str], teacher, data, device, repeats: int) -> dict[str, float] | None:
    """Median iteration seconds of method ``name`` under ``privacy=none`` per layout (:data:`LAYOUTS`):
    the networks as built, and the same networks (the teacher a copy) converted to NCHW."""
    if not has_trainer(name):
        print(f"skip {name}: no make_trainer (not an iterative method)")
        return None
    built = build_trainer(overrides, name, REFERENCE, teacher, data, device)
    in_nchw = copy.deepcopy(teacher).to(memory_format=torch.contiguous_format)
    converted = nchw(build_trainer(overrides, name, REFERENCE, in_nchw, data, device))
    return time_modes(dict(zip(LAYOUTS, (built, converted))), repeats, device)


def bench_ensemble(cfg, data, device, members: int, parts: int, steps: int, queries: int) -> dict[str, float]:
    """Seconds per member for each backend: the first ``members`` of a ``parts``-way split of the
    private set, ``steps`` optimiser steps each, trained into an empty cache in this process; then the seconds per
    member to answer ``queries`` images one member after another (``answer serial``: :func:`member_predictions`)
    and as one batched model (``answer vmap``: :func:`ensemble_votes`)."""
    split, _ = disjoint_partition(len(data.train), parts, 0, int(cfg.seed))
    names = [f"bench {i}/{parts}" for i in range(members)]
    seconds: dict[str, float] = {}
    for name in ENSEMBLE_BACKENDS:
        with tempfile.TemporaryDirectory() as cache:
            member_cfg = with_member_steps(cfg, steps)
            member_cfg.results_dir = cache
            member_cfg.model.teacher.ensemble.backend = name
            trained: list = []
            seconds[name] = _seconds(lambda: trained.extend(
                load_or_train_members(member_cfg, data, device, split[:members], names)))
    images = torch.randn(queries, data.channels, data.image_size, data.image_size)
    seconds["answer serial"] = _seconds(lambda: member_predictions(trained, images, device))
    chunk = int(cfg.model.teacher.ensemble.chunk)
    seconds["answer vmap"] = _seconds(lambda: ensemble_votes(trained, images, device, chunk=chunk))
    return {name: total / members for name, total in seconds.items()}


def print_ensemble(cfg, data, members: int, parts: int, steps: int, queries: int, record: bool = False) -> None:
    """The ensemble benchmark's table (module docstring); ``record``: also write the rate of each backend on the
    device runs here use (``device``) into ``<results_dir>/member_rates.csv``, where a dry run prices the cells that
    train members (:mod:`dpsd.member_rates`)."""
    print(f"teacher ensemble on {cfg.dataset.name}: {cfg.model.teacher.arch} members, the private split dealt "
          f"{parts} ways, {members} members timed per backend, {steps} steps of {cfg.model.teacher.recipe.batch_size}"
          f"; then each member answering {queries} images")
    print(f"{'s/member serial':>16} {'s/member vmap':>14} {'vmap / serial':>14} {f'{parts} serial min':>16} "
          f"{f'{parts} vmap min':>14} {'answer members/s serial':>24} {'vmap':>8} {'vmap / serial':>14}  device")
    for device in devices(cfg.device):
        per_member = bench_ensemble(cfg, data, device, members, parts, steps, queries)
        serial, batched = per_member["serial"], per_member["vmap"]
        answer_serial, answer_vmap = 1 / per_member["answer serial"], 1 / per_member["answer vmap"]
        print(f"{serial:>16.3f} {batched:>14.3f} {batched / serial:>14.2f} {serial * parts / 60:>16.1f} "
              f"{batched * parts / 60:>14.1f} {answer_serial:>24.1f} {answer_vmap:>8.1f} "
              f"{answer_vmap / answer_serial:>14.2f}  {describe(device)}")
        if record and device == resolve_device(cfg.device):
            path = _record(cfg, {name: per_member[name] / steps for name in ENSEMBLE_BACKENDS}, members, steps)
            print(f"recorded the {' and '.join(ENSEMBLE_BACKENDS)} rates on {this_hardware()} in {path}")


def _record(cfg, rates: dict[str, float], timed: int, steps: int) -> Path:
    """Write ``rates`` (backend -> seconds a training step of ``cfg``'s teacher network on this hardware; ``timed``
    networks of ``steps`` steps each timed) into ``<results_dir>/member_rates.csv``; returns its path."""
    path = Path(cfg.results_dir) / RATES_FILE
    teacher = cfg.model.teacher
    record_rates(path, [MemberRate(this_hardware(), str(cfg.dataset.name), network(teacher),
                                   int(teacher.recipe.batch_size), backend, seconds, timed, steps)
                        for backend, seconds in rates.items()])
    return path


TEACHER_PATHS = ("fp32 channels_last", "fp32 nchw", "bf16 autocast")
"""The numeric paths ``--teacher-paths`` times: the models' default layout, NCHW, and bfloat16 autocast."""


def bench_teacher_paths(cfg, data, device: torch.device, repeats: int) -> dict[str, tuple[float, float]]:
    """``path -> (median seconds of a training step, of answering 128 queries)`` for ``cfg``'s teacher on ``device``
    (untrained weights: the time of a step does not depend on them), paths interleaved round by round."""
    from dpsd.teachers import teacher_network

    batch = int(cfg.model.teacher.recipe.batch_size)
    shape = (data.channels, data.image_size, data.image_size)
    nets, optimizers, times = {}, {}, {path: ([], []) for path in TEACHER_PATHS}
    for path in TEACHER_PATHS:
        torch.manual_seed(0)
        net = teacher_network(cfg.model.teacher, data).to(device)
        nets[path] = net.to(memory_format=torch.contiguous_format) if path == "fp32 nchw" else net
        optimizers[path] = torch.optim.Adam(nets[path].parameters(), lr=1e-3)
    x, y, queries = torch.randn(batch, *shape, device=device), torch.randint(0, data.num_classes, (batch,), device=device), \
        torch.randn(128, *shape, device=device)

    def run(path: str) -> tuple[float, float]:
        net, optimizer = nets[path], optimizers[path]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=path == "bf16 autocast"):
            start = time.perf_counter()
            net.train()
            loss = torch.nn.functional.cross_entropy(net(x).float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            synchronize(device)
            step = time.perf_counter() - start
            start = time.perf_counter()
            with torch.no_grad():
                net.eval()(queries)
            synchronize(device)
        return step, time.perf_counter() - start

    for round_ in range(repeats + WARMUP):
        for path in TEACHER_PATHS:
            step, answer = run(path)
            if round_ >= WARMUP:
                times[path][0].append(step)
                times[path][1].append(answer)
    return {path: (statistics.median(steps), statistics.median(answers)) for path, (steps, answers) in times.items()}


def print_teacher_paths(cfg, data, repeats: int, record: bool = False) -> None:
    """The teacher paths' table (module docstring); ``record``: also write the step of the path every model trains
    in (fp32 channels-last) on the device runs here use, at the threads this process was given, into
    ``<results_dir>/member_rates.csv`` as one network's rate, where a dry run prices a teacher absent from the cache
    (:func:`dpsd.member_rates.teacher_work`)."""
    given = torch.get_num_threads()
    print(f"teacher {cfg.model.teacher.arch} (stem {cfg.model.teacher.get('stem') or 'default'}) on {cfg.dataset.name}: "
          f"a training step of {cfg.model.teacher.recipe.batch_size} and 128 answers, median of {repeats} interleaved "
          "rounds; ratio: the path's time over fp32 channels_last's")
    print(f"{'path':<20} {'threads':>7} {'step ms':>9} {'ratio':>6} {'answer ms':>10} {'ratio':>6}  device")
    for device in devices(cfg.device):
        for threads in (sorted({1, 2, given}) if device.type == "cpu" else (given,)):
            torch.set_num_threads(threads)
            results = bench_teacher_paths(cfg, data, device, repeats)
            base_step, base_answer = results[TEACHER_PATHS[0]]
            for path, (step, answer) in results.items():
                print(f"{path:<20} {threads:>7} {step * 1e3:>9.1f} {step / base_step:>6.2f} {answer * 1e3:>10.1f} "
                      f"{answer / base_answer:>6.2f}  {describe(device)}")
            if record and device == resolve_device(cfg.device) and threads == given:
                path = _record(cfg, {"serial": base_step}, 1, repeats)
                print(f"recorded the teacher's rate ({TEACHER_PATHS[0]}, {threads} threads) on {this_hardware()} "
                      f"in {path}")
    torch.set_num_threads(given)


def cell_worker(overrides: list[str], cell: str) -> None:
    """The process a ``--contention`` or ``--allocator`` row is timed in: the trainer of ``cell``
    (``METHOD:PRIVACY``) on the CPU (the teacher from the cache), served to the benchmark
    (:func:`dpsd.contention.serve`), which it tells its threads, waiting policy and allocator."""
    method, mode = cell.split(":")
    device = torch.device("cpu")
    cfg = resolve_paths(compose(overrides))
    data = load_data(cfg)
    teacher, _ = load_or_train_teacher(cfg, data, device)
    trainer = build_trainer(overrides, method, mode, teacher, data, device)
    serve(trainer.step, WARMUP,
          f"{torch.get_num_threads()} {os.environ.get('OMP_WAIT_POLICY', 'default')} {in_use()}")


def worker_argv(overrides: list[str], method: str, mode: str) -> list[str]:
    """The command line of a :func:`cell_worker` process."""
    return [sys.executable, "-m", "dpsd.bench", "--worker", f"{method}:{mode}", *overrides]


def _rounds(started: dict[str, Worker], rounds: int, steps: int) -> dict[str, float]:
    """Median seconds per step of each worker over ``rounds`` rounds of ``steps``, workers interleaved."""
    seconds: dict[str, list[float]] = {name: [] for name in started}
    for _ in range(rounds):
        for name, worker in started.items():
            seconds[name].append(worker.seconds_per_step(steps))
    return {name: statistics.median(values) for name, values in seconds.items()}


def bench_contention(overrides: list[str], competitors: int, threads: int, rounds: int, steps: int,
                     limit: float) -> dict[str, dict[str, float | str]]:
    """Per hygiene ("before": :func:`dpsd.threads.without_hygiene`'s environment, "after": this one's),
    the worker's threads and waiting policy and its median seconds per step quiet and beside
    ``competitors`` competitors of ``threads`` threads, rounds interleaved across the two workers."""
    argv = worker_argv(overrides, *CONTENTION_CELL)
    with workers({"before": (argv, without_hygiene()), "after": (argv, os.environ)}) as started:
        quiet = _rounds(started, rounds, steps)
        with Competitors(competitors, threads, limit) as running:
            contended = _rounds(started, rounds, steps)
            if running.running() < competitors:
                raise Fault(f"a competitor ended before the contended rounds did (--contention-limit {limit:g} s)")
    return {name: {"threads": worker.ready.split()[0], "wait": worker.ready.split()[1], "quiet": quiet[name],
                   "contended": contended[name]} for name, worker in started.items()}


def print_contention(cfg, overrides: list[str], competitors: int, threads: int, rounds: int, limit: float) -> None:
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    load_or_train_teacher(cfg, load_data(cfg), torch.device("cpu"))  # cached once, before the workers start
    print(f"one {CONTENTION_CELL[0]} iteration (privacy={CONTENTION_CELL[1]}) on {cfg.dataset.name}, batch "
          f"{cfg.method.batch_size}, on the CPU: median of {rounds} interleaved rounds of {CONTENTION_STEPS} steps, "
          f"quiet and beside {competitors} processes of {threads} threads (a matmul loop each)")
    print(f"load average before: {load} ({os.cpu_count()} CPUs)")
    print(f"{'hygiene':<8} {'threads':>7} {'wait':<8} {'quiet s/step':>13} {'contended s/step':>17} "
          f"{'contended / quiet':>18}")
    rows = bench_contention(overrides, competitors, threads, rounds, CONTENTION_STEPS, limit)
    for name, row in rows.items():
        print(f"{name:<8} {row['threads']:>7} {row['wait']:<8} {row['quiet']:>13.4f} {row['contended']:>17.4f} "
              f"{row['contended'] / row['quiet']:>18.2f}")


def bench_allocator(overrides: list[str], names: list[str], rounds: int, steps: int) -> dict[str, dict[str, float]]:
    """Per method, the median seconds per step of its ``privacy=none`` iteration under each of
    :data:`dpsd.allocator.ALLOCATORS`, in a worker each, ``rounds`` rounds of ``steps`` interleaved."""
    rows: dict[str, dict[str, float]] = {}
    for name in names:
        if not has_trainer(name):
            print(f"skip {name}: no make_trainer (not an iterative method)")
            continue
        argv = worker_argv(overrides, name, REFERENCE)
        with workers({allocator: (argv, env_for(allocator)) for allocator in ALLOCATORS}) as started:
            for allocator, worker in started.items():
                running = worker.ready.split()[2]
                if running != allocator:
                    raise Fault(f"the {allocator} worker runs under {running} (LD_PRELOAD={os.environ.get('LD_PRELOAD', '')})")
            rows[name] = _rounds(started, rounds, steps)
    return rows


def print_allocator(cfg, overrides: list[str], names: list[str], rounds: int) -> None:
    load_or_train_teacher(cfg, load_data(cfg), torch.device("cpu"))  # cached once, before the workers start
    print(f"one privacy=none iteration on {cfg.dataset.name} on the CPU ({torch.get_num_threads()} threads): median "
          f"of {rounds} interleaved rounds of {ALLOCATOR_STEPS} steps, under each allocator in a process of its own "
          f"(dpsd.allocator; load average before: {' '.join(f'{value:.2f}' for value in os.getloadavg())})")
    print(f"{'method':<10} {'batch':>6} {'malloc s/step':>14} {'jemalloc s/step':>16} {'malloc / jemalloc':>18}")
    for name, row in bench_allocator(overrides, names, rounds, ALLOCATOR_STEPS).items():
        batch = compose([*overrides, f"method={name}"]).method.batch_size
        print(f"{name:<10} {batch:>6} {row['malloc']:>14.4f} {row['jemalloc']:>16.4f} "
              f"{row['malloc'] / row['jemalloc']:>18.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dpsd.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=None, help="comma-separated method names (default: every "
                        "registered method with a per-iteration trainer)")
    parser.add_argument("--repeats", type=int, default=None, help=f"timed iterations per mode (default {REPEATS})")
    parser.add_argument("--ensemble", type=int, metavar="M", help="time M teacher-ensemble members per backend "
                        "(serial, vmap) instead of the methods' iterations")
    parser.add_argument("--layout", action="store_true", help="time each method's iteration in channels-last "
                        "and in NCHW layout instead of its privacy modes")
    parser.add_argument("--parts", type=int, default=250, help="--ensemble: ways the private split is dealt (default 250)")
    parser.add_argument("--member-steps", type=int, default=30, help="--ensemble: optimiser steps per member (default 30)")
    parser.add_argument("--record", action="store_true", help="--ensemble: write each backend's seconds per member "
                        "step into <results_dir>/member_rates.csv, which prices the cells that train members in a dry "
                        "run; --teacher-paths: write the teacher's fp32 step at this process's threads there, which "
                        "prices a teacher absent from the cache")
    parser.add_argument("--queries", type=int, default=1000,
                        help="--ensemble: images each trained member answers, timed per backend (default 1000)")
    parser.add_argument("--teacher-paths", action="store_true", help="time the run's teacher's training step and "
                        "answers in fp32 channels-last, fp32 NCHW and bfloat16, at 1 and 2 CPU threads")
    parser.add_argument("--contention", type=int, metavar="K", help="time one DPSD iteration quiet and beside K "
                        "competing processes, without and with the thread hygiene")
    parser.add_argument("--competitor-threads", type=int, default=2, help="--contention: torch threads of each "
                        "competitor (default 2)")
    parser.add_argument("--contention-limit", type=float, default=CONTENTION_LIMIT, help="--contention: seconds "
                        f"a competitor runs at most (default {CONTENTION_LIMIT:g})")
    parser.add_argument("--allocator", action="store_true", help="time each method's privacy=none iteration on "
                        "the CPU under glibc's malloc and under jemalloc")
    parser.add_argument("--worker", metavar="METHOD:PRIVACY", help=argparse.SUPPRESS)  # a timed row's process
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for `dpsd run`")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.record and args.ensemble is None and not args.teacher_paths:
        parser.error("--record writes a benchmark's rates: give it with --ensemble M or --teacher-paths")
    if args.ensemble is not None and not 1 <= args.ensemble <= args.parts:
        parser.error(f"--ensemble must be between 1 and --parts ({args.parts}), got {args.ensemble}")
    if args.contention is not None and (args.contention < 1 or args.competitor_threads < 1):
        parser.error(f"--contention and --competitor-threads must be at least 1, got {args.contention} and "
                     f"{args.competitor_threads}")
    set_threads()  # the CPUs this process was given (torch's own count with DPSD_THREAD_HYGIENE=0)
    overrides = [*args.overrides, "tracking=none"]
    if args.worker:
        return cell_worker(overrides, args.worker)
    repeats = args.repeats or REPEATS
    cfg = compose(overrides)
    setup = resolve_run(cfg)
    cfg = resolve_paths(cfg)
    if args.contention is not None:
        print_contention(cfg, [*overrides, "device=cpu"], args.contention, args.competitor_threads,
                         args.repeats or CONTENTION_ROUNDS, args.contention_limit)
        return
    if args.allocator:
        names = (args.methods or ALLOCATOR_METHODS).split(",")
        print_allocator(cfg, [*overrides, "device=cpu"], names, args.repeats or CONTENTION_ROUNDS)
        return
    data = load_data(cfg, setup.convention)
    if args.teacher_paths:
        print_teacher_paths(cfg, data, args.repeats or REPEATS, args.record)
        return
    if args.ensemble is not None:
        print_ensemble(cfg, data, args.ensemble, args.parts, args.member_steps, args.queries, args.record)
        return
    names = args.methods.split(",") if args.methods else [name for name in METHODS.names() if has_trainer(name)]
    if args.layout:
        print_layout(cfg, overrides, data, names, repeats)
        return
    print(f"one iteration on {cfg.dataset.name}, batch {cfg.method.batch_size}, median of {repeats} interleaved "
          f"iterations; privacy=none is the reference; share = (t_private - t_none) / t_private")
    print(f"{'method':<10} {'privacy':<8} {'iteration ms':>13} {'ratio to none':>14} {'privatisation share':>20} "
          f"{'it/s':>9}  device")
    for device in devices(cfg.device):
        per_device = [*overrides, f"device={device}"]
        teacher, _ = load_or_train_teacher(resolve_paths(compose(per_device)), data, device)
        for name in names:
            results = bench_method(name, per_device, teacher, data, device, repeats)
            if results is None:
                continue
            reference = results[REFERENCE]
            for mode, seconds in results.items():
                print(f"{name:<10} {mode:<8} {seconds * 1e3:>13.2f} {seconds / reference:>14.3f} "
                      f"{(seconds - reference) / seconds:>20.1%} {1 / seconds:>9.2f}  {describe(device)}")


def print_layout(cfg, overrides: list[str], data, names: list[str], repeats: int) -> None:
    print(f"one privacy=none iteration on {cfg.dataset.name}, batch {cfg.method.batch_size}, median of {repeats} "
          f"interleaved iterations per layout")
    print(f"{'method':<10} {'channels_last ms':>17} {'nchw ms':>9} {'nchw / channels_last':>21}  device")
    for device in devices(cfg.device):
        per_device = [*overrides, f"device={device}"]
        teacher, _ = load_or_train_teacher(resolve_paths(compose(per_device)), data, device)
        for name in names:
            results = bench_layout(name, per_device, teacher, data, device, repeats)
            if results is not None:
                fast, slow = (results[layout] for layout in LAYOUTS)
                print(f"{name:<10} {fast * 1e3:>17.2f} {slow * 1e3:>9.2f} {slow / fast:>21.2f}  {describe(device)}")


def devices(setting: str) -> list[torch.device]:
    """``device=auto``: every device found (:func:`dpsd.config.available_devices`); otherwise the one named."""
    if setting != "auto":
        return [resolve_device(setting)]
    return [torch.device(name) for name in available_devices()]


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"


if __name__ == "__main__":
    main()
