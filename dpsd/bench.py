"""What privacy costs per iteration: ``python -m dpsd.bench [overrides]``.

Times one training iteration of each private mode against the same iteration with privacy
switched off (same networks, batch and data), in one process, and prints the ratios. Timing
claims belong here, not in tests: the numbers depend on the machine.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from dpsd.config import compose, resolve_paths, validate
from dpsd.experiment import load_data, resolve_device
from dpsd.methods.base import RunContext
from dpsd.methods.dpsd import DPSDTrainer
from dpsd.privacy.accounting import Ledger
from dpsd.teachers import load_or_train_teacher

MODES = ("none", "label", "data")
REPEATS = 20


def _seconds(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def build_trainer(overrides: list[str], mode: str, teacher, data, device) -> DPSDTrainer:
    cfg = resolve_paths(compose([*overrides, f"privacy={mode}"]))
    rng = torch.Generator(device=device).manual_seed(int(cfg.seed))
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=device, rng=rng, ledger=Ledger())
    return DPSDTrainer(ctx)


def time_modes(trainers: dict[str, DPSDTrainer], repeats: int) -> dict[str, dict[str, float]]:
    """Median seconds of one iteration and of the annotation alone, per mode.

    Modes are interleaved round by round, so a slow spell of the machine hits them all alike.
    """
    for trainer in trainers.values():
        for _ in range(3):  # warm-up: allocator, thread pools
            trainer.step()
    iterations = {mode: [] for mode in trainers}
    annotations = {mode: [] for mode in trainers}
    for _ in range(repeats):
        for mode, trainer in trainers.items():
            iterations[mode].append(_seconds(trainer.step))
            with torch.no_grad():
                samples = trainer.generator(trainer.latents)
                teacher_logits, student_logits = trainer.teacher(samples), trainer.student(samples)
            annotations[mode].append(_seconds(lambda: trainer.annotate(teacher_logits, student_logits)))
    return {
        mode: {"iteration_s": statistics.median(iterations[mode]), "annotation_s": statistics.median(annotations[mode])}
        for mode in trainers
    }


def main(argv: list[str] | None = None) -> None:
    overrides = [*(sys.argv[1:] if argv is None else argv), "tracking=none"]
    cfg = compose(overrides)
    validate(cfg)
    cfg = resolve_paths(cfg)
    device = resolve_device(cfg.device)
    data = load_data(cfg)
    teacher, _ = load_or_train_teacher(cfg, data, device)
    repeats = REPEATS
    trainers = {mode: build_trainer(overrides, mode, teacher, data, device) for mode in MODES}
    results = time_modes(trainers, repeats)
    reference = results["none"]["iteration_s"]
    print(f"DPSD iteration on {cfg.dataset.name}, batch {cfg.method.batch_size}, device {device}, "
          f"median of {repeats} (privacy=none is the reference)")
    print(f"{'privacy':<8} {'iteration ms':>13} {'ratio to none':>14} {'mechanism ms':>13} {'mechanism share':>16}")
    for mode, timing in results.items():
        print(f"{mode:<8} {timing['iteration_s'] * 1e3:>13.2f} {timing['iteration_s'] / reference:>14.3f} "
              f"{timing['annotation_s'] * 1e3:>13.3f} {timing['annotation_s'] / timing['iteration_s']:>15.1%}")


if __name__ == "__main__":
    main()
