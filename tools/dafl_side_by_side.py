"""DAFL on MNIST beside DAFL's own code, epoch by epoch, on one machine (the calibration anchor).

    python tools/dafl_side_by_side.py --official PATH/TO/DAFL [--epochs 5] [--seeds 0 1] [--sides official ours]
        [--teacher own|official] [--json OUT] data.root=../shared/data [overrides]
    python tools/dafl_side_by_side.py --combine A.json B.json ...   # one table from runs made apart

``PATH/TO/DAFL`` is the ``DAFL/`` folder of ``huawei-noah/Data-Efficient-Model-Compression`` (Chen et
al., ICCV 2019; BSD-3; not part of this repository: clone it yourself). For each seed, in turn:

* **official**: its ``teacher-train.py`` (LeNet-5, 9 epochs), then its ``DAFL-train.py`` for
  ``--epochs`` epochs of 120 iterations, each run as it is in a subprocess through :data:`SHIM`, which
  changes only what the scripts need to run here: on a machine without CUDA, CUDA calls become no-ops
  (the CPU runs them; with CUDA the scripts run as written),
  ``torch.load`` reads the full pickled teacher (``weights_only=False``, which torch >= 2.6 asks for),
  torch's global RNG is seeded (the scripts set no seed: the seed only makes a run repeatable), and a
  line is printed when an Adam optimiser is made (just before each script's loop) and when a test
  evaluation starts, so that an epoch's training seconds run from the optimiser (epoch 0) or the previous
  evaluation's end to the next evaluation's start;
* **ours**: ``method=dafl`` (its teacher trained or found in the cache; ``--teacher official``: the official
  ``teacher-train.py``'s teacher at the same seed, its weights loaded into our LeNet-5, a crossed run that asks
  whether the teacher explains a gap between the sides), the same epochs of the same
  trainer that ``dpsd run`` steps, the student evaluated on the test split after each epoch (the final
  iterate; nothing is selected).

Prints one row per epoch (the official and our test accuracy, per seed and their mean, and the
difference), the teachers' accuracies, and the median seconds per training iteration of each side over
its epochs with the ratio ours / official. Both sides run in the same torch
with the same intra-op threads (printed). ``--json`` writes everything, again after every epoch (a run
stopped early keeps the epochs it finished). ``--sides`` runs one side only (two processes, one per side
and seed, run side by side on a GPU); ``--combine`` prints the table of such runs' JSON files together.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import scipy.stats
import torch

from dpsd.config import compose, resolve_device, resolve_paths
from dpsd.data import load_data
from dpsd.errors import ConfigError
from dpsd.experiment import resolve_run
from dpsd.methods import METHODS
from dpsd.methods.base import RunContext
from dpsd.models import build_classifier
from dpsd.privacy.accounting import Ledger
from dpsd.teachers import evaluate_accuracy, load_or_train_teacher

SHIM = r"""
import functools, runpy, sys, time
import torch, torch.utils.data
if not torch.cuda.is_available():
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
torch.load = functools.partial(torch.load, weights_only=False)
seed, script = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(seed)
_iter = torch.utils.data.DataLoader.__iter__
def _marked_iter(self):
    if getattr(self.dataset, "train", True) is False:
        print(f"@@eval_start {time.time():.6f}", flush=True)
    return _iter(self)
torch.utils.data.DataLoader.__iter__ = _marked_iter
_adam = torch.optim.Adam.__init__
def _marked_adam(self, *args, **kwargs):
    _adam(self, *args, **kwargs)
    print(f"@@optimizer {time.time():.6f}", flush=True)
torch.optim.Adam.__init__ = _marked_adam
print(f"@@threads {torch.get_num_threads()}", flush=True)
sys.argv = sys.argv[2:]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
"""
"""Runs one official script (``python -c SHIM SEED SCRIPT ARGS...``) with only the device changed."""

ITERATIONS_PER_EPOCH = 120  # DAFL-train.py: ``for i in range(120)``
_ACCURACY = re.compile(r"Accuracy: ([0-9.]+)")


def run_official(script: Path, seed: int, args: list[str], log: Path, epochs: list | None = None,
                 on_epoch=lambda: None) -> list[dict]:
    """One official script's test evaluations: ``[{"accuracy", "train_s"}]`` per epoch (appended to
    ``epochs``, ``on_epoch`` called after each), where ``train_s`` is the wall time from the last
    optimiser's making or the previous evaluation's end."""
    command = [sys.executable, "-u", "-c", SHIM, str(seed), str(script), *args]
    epochs = [] if epochs is None else epochs
    eval_start, previous_end = None, None
    with log.open("w") as out, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                 text=True, cwd=script.parent) as process:
        for line in process.stdout:
            out.write(line)
            out.flush()
            if line.startswith("@@optimizer"):
                previous_end = float(line.split()[1])
            elif line.startswith("@@eval_start"):
                eval_start = float(line.split()[1])
            elif (match := _ACCURACY.search(line)) is not None:
                train_s = eval_start - previous_end
                epochs.append({"accuracy": float(match.group(1)), "train_s": train_s})
                print(f"  official {script.name} seed {seed} epoch {len(epochs) - 1}: {float(match.group(1)):.4f} "
                      f"({train_s:.1f} s of training)", flush=True)
                on_epoch()
                previous_end = time.time()
    if process.returncode:
        raise SystemExit(f"{script.name} failed (exit {process.returncode}); its output is in {log}")
    return epochs


def official_teacher(folder: Path, seed: int, data_root: Path, work: Path) -> tuple[Path, float]:
    """The official ``teacher-train.py`` at ``seed``: the folder its pickled ``teacher`` lies in, and its last test
    accuracy."""
    models = work / f"official_seed{seed}"
    models.mkdir(parents=True, exist_ok=True)
    teacher = run_official(folder / "teacher-train.py", seed,
                           ["--dataset", "MNIST", "--data", f"{data_root}/", "--output_dir", f"{models}/"],
                           work / f"official_teacher_seed{seed}.log")
    return models, teacher[-1]["accuracy"]


@contextlib.contextmanager
def official_lenet(folder: Path):
    """DAFL's ``lenet.py`` in ``folder`` importable (unpickling its teacher needs it), imported afresh: another
    folder's ``lenet``, imported earlier, is not this one."""
    sys.modules.pop("lenet", None)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("lenet", None)


def matched_by_position(names: list[str], shapes: list, tensors: list[torch.Tensor], what: str) -> dict:
    """``tensors`` under ``names``, in order, where their shapes are ``shapes``; else one line naming both."""
    if len(tensors) != len(names) or any(t.shape != s for t, s in zip(tensors, shapes)):
        raise ConfigError(f"the official {what} is not ours: shapes {[tuple(t.shape) for t in tensors]} "
                          f"against {[tuple(s) for s in shapes]}")
    return dict(zip(names, tensors))


def official_teacher_weights(folder: Path, models: Path, ours: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The official pickled teacher's weights as a state dict of our LeNet-5 ``ours``: both hold the same tensors
    in the same order (conv1-3, fc1-2 there; features.*, classifier.* here), matched by position and shape."""
    with official_lenet(folder):
        theirs = list(torch.load(models / "teacher", map_location="cpu", weights_only=False).state_dict().values())
    mine = ours.state_dict()
    return matched_by_position(list(mine), [t.shape for t in mine.values()], theirs, f"teacher in {models}")


def official_seed(folder: Path, seed: int, epochs: int, data_root: Path, work: Path, result: dict,
                  on_epoch=lambda: None) -> dict:
    """The official teacher, then the official DAFL for ``epochs`` epochs, at ``seed``, filled into ``result``."""
    models, accuracy = official_teacher(folder, seed, data_root, work)
    result.update(seed=seed, teacher_accuracy=accuracy, epochs=[])
    run_official(folder / "DAFL-train.py", seed,
                 ["--dataset", "MNIST", "--data", f"{data_root}/", "--teacher_dir", f"{models}/",
                  "--output_dir", f"{models}/", "--n_epochs", str(epochs)],
                 work / f"official_dafl_seed{seed}.log", result["epochs"], on_epoch)
    return result


def dafl_trainer(overrides: list[str], seed: int, teacher_weights: dict[str, torch.Tensor] | None = None):
    """``method=dafl`` at DAFL's sizes and ``seed``, untracked: ``(cfg, data, trainer, teacher record)``, its teacher
    trained or found in the cache, or holding ``teacher_weights`` (the official teacher's, for a crossed run); the
    trainer's ``step()`` is one iteration of ``dpsd run``'s loop."""
    cfg = compose(["method=dafl", "dataset=mnist", "scale=paper", "tracking=none", *overrides, f"seed={seed}"])
    setup = resolve_run(cfg)
    cfg = resolve_paths(cfg)
    device = resolve_device(cfg.device)
    torch.manual_seed(seed)
    data = load_data(cfg, setup.convention)
    teacher, record = load_or_train_teacher(cfg, data, device)
    if teacher_weights is not None:
        teacher.load_state_dict(teacher_weights)
        record = {**record, "test_accuracy": evaluate_accuracy(teacher, data.test, device), "source": "official"}
    torch.manual_seed(seed)
    rng = torch.Generator(device=device).manual_seed(seed)
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=device, rng=rng, ledger=Ledger())
    return cfg, data, METHODS.get("dafl")().make_trainer(ctx), record


def ours_seed(overrides: list[str], seed: int, epochs: int, result: dict, on_epoch=lambda: None,
              teacher_weights: dict[str, torch.Tensor] | None = None) -> dict:
    """``method=dafl`` at ``seed``: its teacher (or ``teacher_weights``), then ``epochs`` x 120 steps of its trainer,
    the student evaluated on the test split after each epoch, filled into ``result``."""
    cfg, data, trainer, record = dafl_trainer(overrides, seed, teacher_weights)
    device = trainer.device
    per_epoch = int(cfg.method.iterations_per_epoch)
    result.update(seed=seed, teacher_accuracy=record["test_accuracy"], epochs=[], device=str(device),
                  teacher=record.get("source", "ours"))
    for epoch in range(epochs):
        start = time.perf_counter()
        for _ in range(per_epoch):
            trainer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the steps' kernels finished, as the official side's .item() waits for them
        train_s = time.perf_counter() - start
        accuracy = evaluate_accuracy(trainer.student, data.test, device)
        result["epochs"].append({"accuracy": accuracy, "train_s": train_s})
        print(f"  ours method=dafl seed {seed} epoch {epoch}: {accuracy:.4f} ({train_s / per_epoch:.4f} s/it)", flush=True)
        on_epoch()
    return result


def seconds_per_iteration(runs: list[dict]) -> float:
    """Median training seconds of one iteration over every run's epochs."""
    return statistics.median(e["train_s"] / ITERATIONS_PER_EPOCH for run in runs for e in run["epochs"])


def percentages(fractions) -> str:
    return ", ".join(f"{100 * value:.2f}" for value in fractions)


def shown_epochs(count: int) -> list[int]:
    """The epochs a table shows: the first five (DAFL rises fastest there), then every tenth, and the last."""
    return sorted({e for e in range(min(count, 5))} | {e for e in range(9, count, 10)} | ({count - 1} if count else set()))


def spread(fractions: list[float]) -> str:
    """``mean ± sample std`` in percent (the mean alone for one run)."""
    if len(fractions) < 2:
        return f"{100 * fractions[0]:.2f}"
    return f"{100 * statistics.mean(fractions):.2f} ± {100 * statistics.stdev(fractions):.2f}"


def welch_p(a: list[float], b: list[float]) -> str:
    """Two-sided p of Welch's t-test of equal means (``—`` with fewer than two runs a side or no spread)."""
    if min(len(a), len(b)) < 2 or statistics.stdev(a) + statistics.stdev(b) == 0:
        return "—"
    return f"{scipy.stats.ttest_ind(a, b, equal_var=False).pvalue:.3f}"


def table(official: list[dict], ours: list[dict], seeds: list[int], threads: list[int] | None = None) -> list[str]:
    """The side-by-side rows (percent: mean ± sample std over the runs, then each run) at the epochs every run
    reached, with Welch's test of equal means; ``threads``: the intra-op threads the runs had (each file records
    its own; default: this process's)."""
    lines = [f"| epoch | official (n = {len(official)}: mean ± std; per run) | ours (n = {len(ours)}: mean ± std; per run) "
             "| ours - official (points) | Welch p |",
             "| ---: | --- | --- | ---: | ---: |"]
    for epoch in shown_epochs(min(len(run["epochs"]) for run in official + ours)):
        theirs = [run["epochs"][epoch]["accuracy"] for run in official]
        mine = [run["epochs"][epoch]["accuracy"] for run in ours]
        lines.append(f"| {epoch} | {spread(theirs)} ({percentages(theirs)}) | {spread(mine)} ({percentages(mine)}) | "
                     f"{100 * (statistics.mean(mine) - statistics.mean(theirs)):+.2f} | {welch_p(mine, theirs)} |")
    lines.append(f"seeds {seeds}; epochs reached: official {[len(r['epochs']) for r in official]}, ours "
                 f"{[len(r['epochs']) for r in ours]}; last epoch's test %: official "
                 f"{percentages(r['epochs'][-1]['accuracy'] for r in official)}, ours "
                 f"{percentages(r['epochs'][-1]['accuracy'] for r in ours)}")
    lines.append(f"teachers (test %): official {percentages(r['teacher_accuracy'] for r in official)}, ours "
                 f"{percentages(r['teacher_accuracy'] for r in ours)}")
    theirs, mine = seconds_per_iteration(official), seconds_per_iteration(ours)
    lines.append(f"seconds per training iteration (median over epochs and seeds): official {theirs:.4f}, ours "
                 f"{mine:.4f}, ratio ours / official {mine / theirs:.2f} "
                 f"(intra-op threads a process: {' or '.join(map(str, threads or [torch.get_num_threads()]))})")
    return lines


def combine(paths: list[Path]) -> dict:
    """The runs of several ``--json`` files (one side or seed each) as one."""
    merged, threads = {"official": [], "ours": []}, set()
    for path in paths:
        saved = json.loads(path.read_text())
        for side in merged:
            merged[side] += [run for run in saved[side] if run.get("epochs")]
        threads.add(saved.get("threads"))
    merged["seeds"] = sorted({run["seed"] for side in ("official", "ours") for run in merged[side]})
    merged["threads"] = sorted(threads - {None})
    return merged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="overrides of our run (data.root=... is required)")
    parser.add_argument("--official", type=Path, help="the DAFL/ folder of DAFL's repository")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sides", nargs="+", choices=("official", "ours"), default=["official", "ours"])
    parser.add_argument("--json", type=Path, help="write every figure to this file (again after every epoch)")
    parser.add_argument("--combine", type=Path, nargs="+", help="print the table of these --json files instead")
    parser.add_argument("--teacher", choices=("own", "official"), default="own",
                        help="ours with its own teacher, or with the official teacher-train.py's (a crossed run: "
                             "does the teacher explain a gap between the sides?)")
    args = parser.parse_args(argv)
    if args.combine:
        merged = combine(args.combine)
        if not merged["official"] or not merged["ours"]:
            raise ConfigError("--combine needs runs of both sides (official and ours) with an epoch each")
        print("\n".join(table(merged["official"], merged["ours"], merged["seeds"], merged["threads"])))
        return
    if args.official is None:
        parser.error("--official PATH/TO/DAFL is required (or --combine FILES)")
    scripts = [args.official / name for name in ("teacher-train.py", "DAFL-train.py", "lenet.py")]
    if missing := [str(s) for s in scripts if not s.is_file()]:
        raise ConfigError(f"--official must be DAFL's folder: missing {', '.join(missing)}")
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    cfg = resolve_paths(compose(["dataset=mnist", "tracking=none", *args.overrides]))
    if cfg.data.root is None:
        raise ConfigError("set data.root=... to the folder that holds MNIST/raw/ (both sides read it)")
    state = {"seeds": args.seeds, "official": [], "ours": [], "threads": torch.get_num_threads()}

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(state, indent=1))

    work = Path(cfg.results_dir) / "dafl_side_by_side"
    print(f"the official scripts' teachers and logs go to {work}", flush=True)
    for seed in args.seeds:  # interleaved, so that a slow spell of the machine hits both sides
        if "official" in args.sides:
            state["official"].append({})
            official_seed(args.official.resolve(), seed, args.epochs, Path(cfg.data.root), work, state["official"][-1], save)
        if "ours" in args.sides:
            state["ours"].append({})
            weights = None
            if args.teacher == "official":
                models, _ = official_teacher(args.official.resolve(), seed, Path(cfg.data.root), work)
                weights = official_teacher_weights(args.official.resolve(), models,
                                                   build_classifier("lenet5", 1, 32, 10))
            ours_seed(args.overrides, seed, args.epochs, state["ours"][-1], save, weights)
    if state["official"] and state["ours"]:
        state["table"] = table(state["official"], state["ours"], args.seeds)
        print("\n".join(state["table"]))
    save()


if __name__ == "__main__":
    main()
