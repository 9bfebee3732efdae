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
(default 30). Prints seconds per member, the vmap/serial ratio, and the time for all parts at that rate.

``--layout``: instead, each method's ``privacy=none`` iteration with its networks (teacher included) in the
channels-last layout every model is built in (:func:`dpsd.models.channels_last`) against the same networks
converted back to NCHW, interleaved as above. Prints both and their ratio.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

from dpsd.config import available_devices, compose, resolve_device, resolve_paths, validate
from dpsd.data import load_data
from dpsd.ensembles import load_or_train_members, with_member_steps
from dpsd.methods import METHODS
from dpsd.methods.base import Method, RunContext, Trainer
from dpsd.privacy.accounting import Ledger
from dpsd.teachers import disjoint_partition, load_or_train_teacher

REFERENCE = "none"
LAYOUTS = ("channels_last", "nchw")
PRIVATE_MODES = ("label", "data")
REPEATS = 20
WARMUP = 3
ENSEMBLE_BACKENDS = ("serial", "vmap")


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
    validate(cfg)
    cfg = resolve_paths(cfg)
    torch.manual_seed(int(cfg.seed))  # the same initial networks in every mode
    rng = torch.Generator(device=device).manual_seed(int(cfg.seed))
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=device, rng=rng, ledger=Ledger())
    return METHODS.get(method)().make_trainer(ctx)


def _synchronised(trainer: Trainer, device: torch.device):
    def step() -> None:
        trainer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
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


def bench_ensemble(cfg, data, device, members: int, parts: int, steps: int) -> dict[str, float]:
    """Seconds per member for each backend: the first ``members`` of a ``parts``-way split of the
    private set, ``steps`` optimiser steps each, trained into an empty cache in this process."""
    split, _ = disjoint_partition(len(data.train), parts, 0, int(cfg.seed))
    names = [f"bench {i}/{parts}" for i in range(members)]
    seconds: dict[str, float] = {}
    for name in ENSEMBLE_BACKENDS:
        with tempfile.TemporaryDirectory() as cache:
            member_cfg = with_member_steps(cfg, steps)
            member_cfg.results_dir = cache
            member_cfg.model.teacher.ensemble.backend = name
            seconds[name] = _seconds(lambda: load_or_train_members(member_cfg, data, device, split[:members], names))
    return {name: total / members for name, total in seconds.items()}


def print_ensemble(cfg, data, members: int, parts: int, steps: int) -> None:
    print(f"teacher ensemble on {cfg.dataset.name}: {cfg.model.teacher.arch} members, the private split dealt "
          f"{parts} ways, {members} members timed per backend, {steps} steps of {cfg.model.teacher.recipe.batch_size}")
    print(f"{'s/member serial':>16} {'s/member vmap':>14} {'vmap / serial':>14} {f'{parts} serial min':>16} "
          f"{f'{parts} vmap min':>14}  device")
    for device in devices(cfg.device):
        per_member = bench_ensemble(cfg, data, device, members, parts, steps)
        serial, batched = per_member["serial"], per_member["vmap"]
        print(f"{serial:>16.3f} {batched:>14.3f} {batched / serial:>14.2f} {serial * parts / 60:>16.1f} "
              f"{batched * parts / 60:>14.1f}  {describe(device)}")


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
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for `dpsd run`")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.ensemble is not None and not 1 <= args.ensemble <= args.parts:
        parser.error(f"--ensemble must be between 1 and --parts ({args.parts}), got {args.ensemble}")
    overrides = [*args.overrides, "tracking=none"]
    repeats = args.repeats or REPEATS
    cfg = compose(overrides)
    validate(cfg)
    cfg = resolve_paths(cfg)
    data = load_data(cfg)
    if args.ensemble is not None:
        print_ensemble(cfg, data, args.ensemble, args.parts, args.member_steps)
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
