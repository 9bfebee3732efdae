"""Carry a long CPU run across sessions whose machines may keep nothing but git.

A run with ``checkpoint.every_steps`` (:mod:`dpsd.checkpoint`) resumes from its checkpoint when the same command is
started again, but the checkpoint and the teacher cache live under ``results_dir``, which a new machine does not
have. At a session's end ``save`` copies the run's checkpoints and the teachers they distil into ``carry/`` (to be
committed); the next session's ``restore`` puts them back, then starts the same command again.

    python tools/carry_run.py save RESULTS_DIR TEACHER_GLOB [--carry carry]
    python tools/carry_run.py restore RESULTS_DIR [--carry carry]
    python tools/carry_run.py peek CHECKPOINT [overrides]
    python tools/carry_run.py compare OLDER_CHECKPOINT NEWER_CHECKPOINT
    python tools/carry_run.py pace LOG

``save`` copies ``RESULTS_DIR/checkpoints/*.pt`` and ``RESULTS_DIR/teachers/TEACHER_GLOB``. ``restore`` copies a
checkpoint only where ``RESULTS_DIR`` holds none for that run or one with fewer steps (a machine that kept its disk
keeps its newer file), and a teacher only where the cache lacks it. Each prints one line a file, with the steps a
checkpoint had done. ``peek`` reads a checkpoint's student on the test split of the run the overrides describe (the
cell's own): a look at a run in progress, to see it learn or freeze, not a result (a run's number is its last step's,
recorded when it ends), and, where the checkpoint holds a generator, how much its images differ across a batch of
latents: 0 where every latent gives the same image, the absorbing state in which DAFL's recipe freezes (its last,
affine-free BatchNorm then turns the batch into zeros and passes no gradient back; docs/anchors.md). ``compare``
says how far each network's weights moved between two checkpoints of one run (none: a run that no longer learns).
``pace`` reads a run's log (its ``step N/T (..), S s`` progress lines, :mod:`dpsd.progress`) and gives the median
seconds an iteration over consecutive lines, the pace carry/README.md's table records (a resume restarts the
seconds, so the interval across it is left out).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

import torch

CHECKPOINTS, TEACHERS = "checkpoints", "teachers"


def steps_done(path: Path) -> int:
    """The steps a checkpoint file had done (-1 where there is no file)."""
    if not path.is_file():
        return -1
    return int(torch.load(path, map_location="cpu", weights_only=False)["steps_done"])  # our own file


def save(results_dir: Path, teacher_glob: str, carry: Path) -> list[str]:
    """Copy the run's checkpoints and the teachers ``teacher_glob`` names into ``carry``; returns one line a file."""
    checkpoints = sorted((results_dir / CHECKPOINTS).glob("*.pt"))
    teachers = sorted((results_dir / TEACHERS).glob(teacher_glob))
    if not checkpoints or not teachers:
        missing = f"{results_dir / CHECKPOINTS}/*.pt" if not checkpoints else f"{results_dir / TEACHERS}/{teacher_glob}"
        raise SystemExit(f"carry_run: nothing matches {missing}")
    lines = []
    for folder, files in ((CHECKPOINTS, checkpoints), (TEACHERS, teachers)):
        (carry / folder).mkdir(parents=True, exist_ok=True)
        for source in files:
            shutil.copyfile(source, carry / folder / source.name)
            steps = f" (after step {steps_done(source)})" if folder == CHECKPOINTS else ""
            lines.append(f"saved {carry / folder / source.name}{steps}")
    return lines


def restore(results_dir: Path, carry: Path) -> list[str]:
    """Copy the carried files into ``results_dir`` where they are ahead of what it holds; one line a file."""
    if not (carry / CHECKPOINTS).is_dir():
        raise SystemExit(f"carry_run: no {carry / CHECKPOINTS}: nothing was carried")
    lines = []
    for source in sorted((carry / CHECKPOINTS).glob("*.pt")):
        target = results_dir / CHECKPOINTS / source.name
        carried, held = steps_done(source), steps_done(target)
        if carried > held:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            lines.append(f"restored {target} (after step {carried})")
        else:
            lines.append(f"kept {target} (after step {held}; carried: {carried})")
    for source in sorted((carry / TEACHERS).glob("*.pt")):
        target = results_dir / TEACHERS / source.name
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            lines.append(f"restored {target}")
    return lines


PEEK_LATENTS = 64  # the batch of latents a peek draws (a fixed seed) to see whether the generator's images differ
FROZEN_SPREAD = 1e-6  # a spread below it: every latent gives the same image (float32 rounding aside)


def image_spread(generator: torch.nn.Module, latent_dim: int) -> float:
    """The generator's images' standard deviation across a batch of :data:`PEEK_LATENTS` latents, averaged over
    pixels, the generator in training mode as DAFL runs it (batch statistics): 0 where every latent gives one image."""
    latents = torch.randn(PEEK_LATENTS, latent_dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        images = generator.train()(latents)
    return float(images.std(dim=0).mean())


def peek(checkpoint: Path, overrides: list[str]) -> str:
    """The student a checkpoint holds, on the test split of the run ``overrides`` describe, and where it holds a
    generator, its images' spread across latents (:func:`image_spread`), as one line."""
    from dpsd.config import compose
    from dpsd.data import data_info, load_data
    from dpsd.models import build_classifier, generator_from_config
    from dpsd.teachers import evaluate_accuracy

    cfg = compose(overrides)
    info = data_info(cfg)
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)  # our own file
    student = build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
    student.load_state_dict(state["trainer"]["student"])
    accuracy = evaluate_accuracy(student, load_data(cfg).test, torch.device("cpu"))
    line = f"{checkpoint.name} after step {state['steps_done']}: student test accuracy {100 * accuracy:.2f}%"
    if "generator" in state["trainer"]:
        generator = generator_from_config(cfg.model.generator, info.channels, info.image_size, int(cfg.seed), info.space)
        generator.load_state_dict(state["trainer"]["generator"])
        spread = image_spread(generator, int(cfg.model.generator.latent_dim))
        line += f"; generator images' spread across {PEEK_LATENTS} latents {spread:.3f}" + (
            " (every latent gives the same image: frozen)" if spread < FROZEN_SPREAD else "")
    return line + " (a look, not a result)"


RUNNING_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")  # BatchNorm buffers, not weights


def compare(older: Path, newer: Path) -> list[str]:
    """Per network two checkpoints of one run hold, the largest change of a weight between them, one line each
    (BatchNorm's running statistics are left out: they follow every batch even where no weight moves)."""
    states = [torch.load(path, map_location="cpu", weights_only=False) for path in (older, newer)]  # our own files
    lines = [f"steps {states[0]['steps_done']} -> {states[1]['steps_done']}"]
    for network, before in states[0]["trainer"].items():
        if not network.endswith("_opt"):
            after = states[1]["trainer"][network]
            weights = [key for key in before if not key.endswith(RUNNING_STATISTICS)]
            moved = max((after[key].double() - before[key].double()).abs().max().item() for key in weights)
            same = sum(torch.equal(before[key], after[key]) for key in weights)
            lines.append(f"{network}: {same} of {len(weights)} weight tensors unchanged, largest change {moved:.3e}")
    return lines


def pace(log: Path) -> str:
    """The median seconds an iteration between consecutive progress lines of ``log``, and the steps they span."""
    from dpsd.progress import read_line

    points = [(line.step, line.seconds) for line in map(read_line, log.read_text().splitlines()) if line]
    rates = [(seconds - last_seconds) / (step - last_step)
             for (last_step, last_seconds), (step, seconds) in zip(points, points[1:])
             if step > last_step and seconds >= last_seconds]  # a resume starts its seconds again
    if not rates:
        raise SystemExit(f"carry_run: {log} has fewer than two consecutive progress lines (`step N/T (..), S s`)")
    return (f"steps {points[0][0]} -> {points[-1][0]}: median {statistics.median(rates):.3f} s an iteration "
            f"over {len(rates)} intervals")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["save", "restore", "peek", "compare", "pace"])
    parser.add_argument("path", type=Path, help="save, restore: the runs' results_dir; peek, compare: a checkpoint file; "
                                                     "pace: a run's log")
    parser.add_argument("rest", nargs="*", help="save: the teachers to carry, a glob under RESULTS_DIR/teachers; "
                                                "peek: the run's overrides; compare: the newer checkpoint file")
    parser.add_argument("--carry", type=Path, default=Path("carry"), help="the committed folder (default carry/)")
    args = parser.parse_args(argv)
    if args.action == "save" and len(args.rest) != 1:
        parser.error("save needs one TEACHER_GLOB (e.g. 'mnist-lenet5-seed0-*.pt')")
    if args.action == "compare" and len(args.rest) != 1:
        parser.error("compare needs the newer checkpoint after the older one")
    if args.action == "save":
        lines = save(args.path, args.rest[0], args.carry)
    elif args.action == "restore":
        lines = restore(args.path, args.carry)
    elif args.action == "compare":
        lines = compare(args.path, Path(args.rest[0]))
    elif args.action == "pace":
        lines = [pace(args.path)]
    else:
        lines = [peek(args.path, args.rest)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
