"""Export the training curves of every teacher trained to a target (``model.teacher.recipe.target``) in a teacher cache:
steps against validation accuracy (the cut of the private split that stops training) and test accuracy (measured for
this curve only), one row a check, with the machine that trained it to that check (``dpsd.teachers.training_machine``:
its CPU, cores, torch's threads and torch's version; empty for a teacher cached before teachers recorded it), and draw
them.

    python tools/teacher_curves.py [--results-dir results] [--csv results/teacher_curves.csv]
                                   [--figure results/figures/teacher_curves.png]

The CSV is what a page cites (each teacher by arch, stem, seed, its cache key's digest and its weights' sha256); the
cache itself stays untracked (a teacher is the one thing a run must never release). Rows of a teacher already in the CSV
are replaced, others kept, so curves from several machines accumulate.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from dpsd.teachers import read_cached, weights_digest  # noqa: E402
from dpsd.version import teacher_code_version  # noqa: E402

KEY = ["file", "arch", "stem", "seed"]


def curves(cache: Path) -> pd.DataFrame:
    """One row a check of every cached teacher that was trained to a target, once a teacher (by its weights): where
    ``tools/rekey_teachers.py`` carried a file to today's teacher code, the two hold the same weights and the file
    today's code reads is the one listed (the other stays in the cache for the older code)."""
    rows = []
    records = [(path, read_cached(path)) for path in sorted(cache.glob("*.pt"))]
    today = teacher_code_version()
    for path, stored in sorted(records, key=lambda record: (record[1] or {}).get("key", {}).get("code") != today):
        if not stored or not stored.get("training"):
            continue
        key, training = stored["key"], stored["training"]
        digest = weights_digest(_Weights(stored["state_dict"]))
        for point in training["curve"]:
            rows.append({"file": path.name, "arch": key["arch"], "stem": key["stem"] or "default", "seed": key["seed"],
                         "step": point["step"], "val_accuracy": point["val_accuracy"],
                         "test_accuracy": point["test_accuracy"], "seconds": round(point["seconds"], 1),
                         "reached": training["reached"], "final_test_accuracy": stored["test_accuracy"],
                         "weights_sha256": digest, "machine": point.get("machine", "")})
    return pd.DataFrame(rows).drop_duplicates(["weights_sha256", "step"]) if rows else pd.DataFrame(rows)


class _Weights(torch.nn.Module):
    """A state dict as :func:`weights_digest` reads it."""

    def __init__(self, state: dict) -> None:
        super().__init__()
        self._state = state

    def state_dict(self, *args, **kwargs) -> dict:  # noqa: D102
        return self._state


def merged(new: pd.DataFrame, csv: Path) -> pd.DataFrame:
    """``new`` with the rows of ``csv`` whose teacher ``new`` does not hold (by file, or by weights: a re-keyed file's
    rows replace its old file's)."""
    if not csv.exists() or not len(new):
        return new
    old = pd.read_csv(csv, keep_default_na=False, dtype={"machine": str})
    kept = old[~old["file"].isin(set(new["file"])) & ~old["weights_sha256"].isin(set(new["weights_sha256"]))]
    return pd.concat([kept, new], ignore_index=True).sort_values(["arch", "stem", "seed", "step"])


def labels(frame: pd.DataFrame) -> dict[str, str]:
    """``file -> legend name`` of each teacher: its arch, stem and seed, and its weights' sha256 prefix where the seed
    has several teachers (one retrained elsewhere, or at another thread count, comes out other weights)."""
    teachers = frame.drop_duplicates("file").set_index("file")
    several = teachers.groupby(KEY[1:])["weights_sha256"].transform("nunique") > 1
    return {file: f"{row.arch} {row.stem} seed {row.seed}" + (f" ({row.weights_sha256[:8]})" if several[file] else "")
            for file, row in teachers.iterrows()}


def draw(frame: pd.DataFrame, figure_path: Path) -> None:
    figure, axes = plt.subplots(figsize=(9.5, 4.2))
    names = labels(frame)
    for file, rows in frame.groupby("file", sort=False):
        line, = axes.plot(rows["step"], 100 * rows["val_accuracy"], marker="o", label=f"{names[file]}: validation")
        axes.plot(rows["step"], 100 * rows["test_accuracy"], marker="x", linestyle="--", color=line.get_color(),
                  label=f"{names[file]}: test")
    axes.axhline(99.21, color="#999", linestyle=":", label="the papers' 99.21%")
    axes.set_xlabel("optimiser steps (batch 128)")
    axes.set_ylabel("accuracy (%)")
    axes.set_ylim(max(90, 100 * frame["val_accuracy"].min() - 1), 100)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside: hides no line
    axes.set_title("Teachers trained to a target: validation (chooses when to stop) and test (chooses nothing)", fontsize=9)
    figure.tight_layout()
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(figure_path, dpi=100, metadata={"Software": None})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--csv", default="results/teacher_curves.csv")
    parser.add_argument("--figure", default="results/figures/teacher_curves.png")
    args = parser.parse_args(argv)
    frame = merged(curves(Path(args.results_dir) / "teachers"), Path(args.csv))
    if not len(frame):
        raise SystemExit(f"no teacher trained to a target in {Path(args.results_dir) / 'teachers'}")
    frame.to_csv(args.csv, index=False)
    draw(frame, Path(args.figure))
    print(f"{frame['file'].nunique()} teachers, {len(frame)} checks: {args.csv}, {args.figure}")


if __name__ == "__main__":
    main()
