"""Is ``method=dafl`` the same loop as DAFL's own ``DAFL-train.py``? Step for step, in float64 on the CPU.

    python tools/dafl_step_check.py --official PATH/TO/DAFL [--steps 5] [--seed 0] data.root=../shared/data

The official script runs as written through :data:`STEP_SHIM` (in a subprocess, as
``tools/dafl_side_by_side.py`` runs it, with these changes only: float64 by default, CUDA calls no-ops,
``torch.load`` with ``weights_only=False``, torch seeded with ``--seed``; and hooks that record, without changing
them, every latent ``torch.randn`` draws, every Adam's parameters when it is made and, after each iteration's last
Adam step, every Adam's parameters; the script is stopped after ``--steps`` iterations). Its teacher is ours
(``method=dafl``'s cached LeNet-5 at ``--seed``), pickled as the official ``lenet.py``'s LeNet-5. Then ours starts
from the official generator's and student's first weights (matched by position and shape) and steps on the same
latents. After each iteration it prints the largest absolute difference of the two generators' parameters, of
their images on the first latents and of the students' parameters; then how far our MNIST test images lie from
those DAFL-train.py tests on.

In float64 two implementations of one loop stay together to rounding, which Adam at 0.2 amplifies about tenfold a
step; a loop that differs (a loss weight, an update order, a normalisation) parts at the first step by orders of
magnitude more. In float32 the same loop also parts within a step or two: the conv biases before DAFL's BatchNorms
have a gradient that is zero up to rounding, and Adam at 0.2 turns that rounding into steps of about 0.2 in
directions the rounding decides.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dafl_side_by_side import dafl_trainer, matched_by_position, official_lenet  # noqa: E402  (a tool beside this one)

from dpsd.errors import ConfigError  # noqa: E402

STEP_SHIM = r"""
import os, runpy, sys, torch
torch.set_default_dtype(torch.float64)
torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.nn.Module.cuda = lambda self, *args, **kwargs: self
_load = torch.load
torch.load = lambda *args, **kwargs: _load(*args, **{**kwargs, "weights_only": False})
steps, out = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(int(sys.argv[3]))  # the script sets no seed: this one makes a check repeatable
record, optimizers = {"latents": [], "start": [], "after": []}, []
_randn = torch.randn
def randn(*args, **kwargs):
    x = _randn(*args, **kwargs)
    record["latents"].append(x.clone())
    return x
torch.randn = randn
_init = torch.optim.Adam.__init__
def init(self, params, *args, **kwargs):
    params = list(params)
    _init(self, params, *args, **kwargs)
    optimizers.append(self)
    record["start"].append([p.detach().clone() for p in params])
torch.optim.Adam.__init__ = init
_step = torch.optim.Adam.step
def step(self, *args, **kwargs):
    result = _step(self, *args, **kwargs)
    if self is optimizers[-1]:  # the last Adam made (the student's) steps last in an iteration
        record["after"].append([[p.detach().clone() for g in o.param_groups for p in g["params"]] for o in optimizers])
        if len(record["after"]) == steps:
            torch.save(record, out)
            os._exit(0)
    return result
torch.optim.Adam.step = step
sys.argv = sys.argv[4:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
"""
"""Runs ``DAFL-train.py`` (``python -c STEP_SHIM STEPS OUT SEED SCRIPT ARGS...``) and records its first iterations."""


def pickle_official_teacher(folder: Path, ours: torch.nn.Module, models: Path) -> None:
    """``models/teacher``: the official ``lenet.py``'s LeNet-5 holding ``ours``'s weights (matched by position and
    shape), pickled whole as ``teacher-train.py`` saves it."""
    with official_lenet(folder):
        import lenet
        theirs = lenet.LeNet5().to(next(ours.parameters()).dtype)
        target = theirs.state_dict()
        theirs.load_state_dict(matched_by_position(list(target), [t.shape for t in target.values()],
                                                   list(ours.state_dict().values()), "teacher (lenet.py's LeNet5)"))
        torch.save(theirs, models / "teacher")


def load_by_position(module: torch.nn.Module, tensors: list[torch.Tensor], what: str) -> None:
    """Copy ``tensors`` into ``module``'s parameters, in order; refuse where the shapes differ."""
    params = dict(module.named_parameters())
    matched = matched_by_position(list(params), [p.shape for p in params.values()], tensors, what)
    with torch.no_grad():
        for name, tensor in matched.items():
            params[name].copy_(tensor)


def largest_difference(module: torch.nn.Module, tensors: list[torch.Tensor]) -> float:
    return max(float((p.detach() - t).abs().max()) for p, t in zip(module.parameters(), tensors))


def image_difference(twin: torch.nn.Module, ours: torch.nn.Module, theirs: list[torch.Tensor], z: torch.Tensor) -> float:
    """The largest difference between the images of generators holding ``ours``'s and ``theirs`` parameters on the
    latents ``z`` (both in training mode, on ``twin``: blind to the conv biases a BatchNorm cancels)."""
    with torch.no_grad():
        load_by_position(twin, [p.detach() for p in ours.parameters()], "generator")
        mine = twin(z)
        load_by_position(twin, theirs, "generator")
        return float((mine - twin(z)).abs().max())


def evaluation_image_difference(ours: torch.Tensor, root: str) -> float:
    """The largest difference, in normalised units, between ``ours`` (our MNIST test split as ``method=dafl`` reads
    it: 32 px, MNIST's mean and std) and DAFL-train.py's test transform of the same files under ``root``
    (torchvision's ``Resize((32, 32))``, ``ToTensor``, ``Normalize((0.1307,), (0.3081,))``)."""
    from torchvision import transforms
    from torchvision.datasets.mnist import MNIST

    theirs = MNIST(root, train=False, transform=transforms.Compose([
        transforms.Resize((32, 32)), transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]))
    return float((ours - torch.stack([image for image, _ in theirs])).abs().max())


def step_check(folder: Path, trainer, data_root: str, steps: int, args: list[str] = (), seed: int = 0) -> list[dict]:
    """The official script's first ``steps`` iterations and ``trainer`` (a ``method=dafl`` trainer on the CPU) from
    the same start on the same latents, both in float64: ``[{"step", "generator", "images", "student"}]`` after
    each iteration, the largest absolute difference of the generators' parameters, of their images on the first
    latents (:func:`image_difference`), of the students' parameters. ``args``: extra arguments for the official
    script (its defaults are DAFL's MNIST recipe; ``--batch_size`` must be ``trainer``'s); ``seed``: torch's seed in
    it (its first weights and latents)."""
    for module in (trainer.teacher, trainer.generator, trainer.student):
        module.double()  # in place: the trainer's optimisers hold the same parameters, their state still empty
    with tempfile.TemporaryDirectory() as work:
        models, out = Path(work), Path(work) / "record.pt"
        pickle_official_teacher(folder, trainer.teacher, models)
        command = [sys.executable, "-c", STEP_SHIM, str(steps), str(out), str(seed), str(folder / "DAFL-train.py"),
                   "--dataset", "MNIST", "--data", f"{data_root}/", "--teacher_dir", f"{models}/",
                   "--output_dir", f"{models}/", *args]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        if done.returncode or not out.is_file():
            raise SystemExit(f"DAFL-train.py failed under the step shim (exit {done.returncode}):\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        record = torch.load(out, weights_only=False)
    generator_start, student_start = record["start"]
    load_by_position(trainer.generator, generator_start, "generator")
    load_by_position(trainer.student, student_start, "student")
    latents = iter(record["latents"])
    trainer.images = lambda: trainer.generator(next(latents))
    twin, probe = copy.deepcopy(trainer.generator), record["latents"][0]
    rows = []
    for step, (generator_after, student_after) in enumerate(record["after"]):
        trainer.step()
        rows.append({"step": step, "generator": largest_difference(trainer.generator, generator_after),
                     "images": image_difference(twin, trainer.generator, generator_after, probe),
                     "student": largest_difference(trainer.student, student_after)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="overrides of our run (data.root=... is required)")
    parser.add_argument("--official", type=Path, required=True, help="the DAFL/ folder of DAFL's repository")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if missing := [name for name in ("DAFL-train.py", "lenet.py") if not (args.official / name).is_file()]:
        raise ConfigError(f"--official must be DAFL's folder: missing {', '.join(missing)} in {args.official}")
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    if not any(o.startswith("data.root=") for o in args.overrides):
        raise ConfigError("set data.root=... to the folder that holds MNIST/raw/ (both sides read it)")
    cfg, data, trainer, _ = dafl_trainer([*args.overrides, "device=cpu"], args.seed)  # its teacher trained or cached
    rows = step_check(args.official.resolve(), trainer, cfg.data.root, args.steps,
                      ["--batch_size", str(cfg.method.batch_size)], args.seed)
    print("| iteration | generator parameters | generator images | student parameters |")
    print("| ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['step']} | {row['generator']:.2e} | {row['images']:.2e} | {row['student']:.2e} |")
    print(f"test images, ours against DAFL-train.py's test transform: max abs difference "
          f"{evaluation_image_difference(data.test.tensors[0], cfg.data.root):.3g} (normalised units)")


if __name__ == "__main__":
    main()
