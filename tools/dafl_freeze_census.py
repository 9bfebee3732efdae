"""Which long runs of DAFL's loop froze, from the files the project keeps of them (docs/anchors.md, "It froze").

    python tools/dafl_freeze_census.py [--min-epochs 40]

DAFL's recipe sometimes freezes mid-run: its generator comes to give one image for every latent, its last,
affine-free BatchNorm turns that batch into zeros, and from then on the student matches the teacher on it exactly
and stops moving. This lists every run of the loop, ours (``method=dafl``) and DAFL's own script, that the
repository holds a record of and that lasted at least ``--min-epochs`` epochs, and says whether and where it froze:

* per-epoch test accuracies (``results/summaries/dafl_side_by_side_*.json`` and ``dafl_ours_diag_*.json``): a run
  froze where its accuracy reads the same for its last :data:`FROZEN_EPOCHS` epochs and after (a moving student's
  accuracy on 10,000 test images does not repeat to the image five epochs running);
* progress lines (``results/gpu/gpu_run_*.log``, ``results/cpu/*.log``, :mod:`dpsd.progress`): a line whose student
  loss reads 0.000 is a frozen cell's (a learning run's stays near 0.05-0.3), and a cell froze where one generator
  loss recurs on :data:`FROZEN_LINES` such lines. Lines naming their cell (``dafl [seed=0]: ...``) are grouped by the
  name across files (a resumed run's logs are one run); a GPU run's unnamed lines interleave its cells, so
  the cells are the most lines that share one percentage mark, the last that many lines are each cell's last,
  and a cell froze where its last line is frozen (the state is absorbing).

A run stopped before its end counts with the epochs it reached; runs of which nothing was kept (the first GPU run's
tracked cells) cannot be counted. Epochs are DAFL's (``method.iterations_per_epoch`` of ``method=dafl``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from dpsd.config import compose
from dpsd.progress import Line, read_line

ROOT = Path(__file__).resolve().parents[1]
ACCURACY_FILES = ("results/summaries/dafl_side_by_side_*.json", "results/summaries/dafl_ours_diag_*.json")
LOG_FILES = ("results/gpu/gpu_run_*.log", "results/cpu/*.log")
FROZEN_EPOCHS = 5
"""Accuracies equal over this many last epochs: a frozen run."""
FROZEN_LINES = 3
"""Progress lines with student loss 0.000 and one generator loss: a frozen cell."""


@dataclass(frozen=True)
class Run:
    """One run of DAFL's loop: where it is recorded, whose code, how far it went and where it froze (None: never)."""

    source: str
    side: str  # "ours" or "official"
    name: str
    epochs: float
    froze_at_epoch: float | None


def froze_from_accuracies(accuracies: list[float]) -> int | None:
    """The epoch from which ``accuracies`` stays the same to the end, where that is :data:`FROZEN_EPOCHS` or more."""
    start = len(accuracies) - 1
    while start > 0 and accuracies[start - 1] == accuracies[-1]:
        start -= 1
    return start if len(accuracies) - start >= FROZEN_EPOCHS else None


def accuracy_runs(path: Path) -> list[Run]:
    """The runs of a side-by-side JSON (``{"ours"|"official": [{"seed", "epochs": [{"accuracy"}]}]}``) or of a
    diagnosis JSON (``{"epochs": [{"epoch", "acc"}]}``, ours, its seed in the file name)."""
    data = json.loads(path.read_text())
    if "ours" in data or "official" in data:
        found = [(side, f"seed {run.get('seed', '?')}", [e["accuracy"] for e in run["epochs"]])
                 for side in ("ours", "official") for run in data.get(side, [])]
    else:
        found = [("ours", path.stem.rsplit("_", 1)[-1].replace("seed", "seed "), [e["acc"] for e in data["epochs"]])]
    return [Run(path.name, side, name, len(accuracies), froze_from_accuracies(accuracies))
            for side, name, accuracies in found]


def frozen_cells(lines: list[Line]) -> dict[float, int]:
    """Per frozen cell among ``lines``, its generator loss and the step of its first frozen line: a generator loss on
    :data:`FROZEN_LINES` or more lines whose student loss reads 0.000."""
    first, count = {}, defaultdict(int)
    for line in lines:
        if is_frozen_line(line):
            count[line.values["generator_loss"]] += 1
            first.setdefault(line.values["generator_loss"], line.step)
    return {loss: first[loss] for loss, n in count.items() if n >= FROZEN_LINES}


def is_frozen_line(line: Line) -> bool:
    """A progress line whose student loss reads 0.000 (-0.000 too)."""
    return abs(line.values["student_loss"]) < 5e-4


def dafl_lines(path: Path) -> list[Line]:
    """The progress lines of ``method=dafl``'s training loop in ``path`` (:func:`dpsd.progress.read_line`) that name
    their total (a line without one cannot be placed in its run's schedule)."""
    lines = [line for line in map(read_line, path.read_text().splitlines()) if line and line.desc == "dafl"]
    return [line for line in lines if line.total and {"student_loss", "generator_loss"} <= line.values.keys()]


def log_runs(paths: list[Path], iterations_per_epoch: int) -> list[Run]:
    """Our runs in progress logs: named cells grouped across ``paths``, each file's unnamed lines as its cells."""
    named: dict[str, list[Line]] = defaultdict(list)
    sources: dict[str, set[str]] = defaultdict(set)
    runs = []
    for path in paths:
        lines = dafl_lines(path)
        unnamed = [line for line in lines if not line.cell]
        for line in lines:
            if line.cell:
                named[line.cell].append(line)
                sources[line.cell].add(path.name)
        if unnamed:
            cells = max(Counter(round(100 * line.step / line.total) for line in unnamed).values())
            froze = frozen_cells(unnamed)
            last = sorted(unnamed[-cells:], key=lambda line: line.step)  # each cell's last line
            for index, line in enumerate(last):  # a frozen cell's last line carries its frozen losses
                at = froze.get(line.values["generator_loss"]) if is_frozen_line(line) else None
                runs.append(Run(path.name, "ours", f"cell {index + 1} of {cells}", line.step / iterations_per_epoch,
                                None if at is None else at / iterations_per_epoch))
    for cell, lines in named.items():
        froze = frozen_cells(lines)
        runs.append(Run(", ".join(sorted(sources[cell])), "ours", cell, max(line.step for line in lines) / iterations_per_epoch,
                        min(froze.values()) / iterations_per_epoch if froze else None))
    return runs


def census(root: Path, min_epochs: float) -> list[Run]:
    """Every run the repository holds a record of that lasted ``min_epochs`` epochs or more."""
    iterations_per_epoch = int(compose(["method=dafl", "scale=paper"]).method.iterations_per_epoch)
    runs = [run for pattern in ACCURACY_FILES for path in sorted(root.glob(pattern)) for run in accuracy_runs(path)]
    runs += log_runs([path for pattern in LOG_FILES for path in sorted(root.glob(pattern))], iterations_per_epoch)
    return [run for run in runs if run.epochs >= min_epochs]


def table(runs: list[Run]) -> list[str]:
    """A markdown table of ``runs`` and a line a side: how many froze."""
    lines = ["| record | code | run | epochs reached | froze by epoch |", "| --- | --- | --- | ---: | ---: |"]
    lines += [f"| {run.source} | {run.side} | {run.name} | {run.epochs:.0f} | "
              f"{'—' if run.froze_at_epoch is None else f'{run.froze_at_epoch:.0f}'} |" for run in runs]
    for side in ("ours", "official"):
        of_side = [run for run in runs if run.side == side]
        lines.append(f"{side}: {sum(run.froze_at_epoch is not None for run in of_side)} of {len(of_side)} froze")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-epochs", type=float, default=40.0, help="leave out runs shorter than this (default 40)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose results/ is read")
    args = parser.parse_args(argv)
    print("\n".join(table(census(args.root, args.min_epochs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
