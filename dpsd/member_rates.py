"""What training a teacher ensemble's members, or a teacher absent from this machine's cache, costs, measured by
``python -m dpsd.bench --ensemble M --record`` and ``python -m dpsd.bench --teacher-paths --record``.

PATE's and DGD's paper cells train 250 members each before their first query; a dry run has no recorded run of
them to price them from (:mod:`dpsd.sweep.timing`), so the ensemble benchmark's seconds per member step price
their members instead. Each record (a row of ``member_rates.csv`` beside the runs archive, ``results/``) is one
benchmark's rate on one class of hardware (:func:`dpsd.tracking.hardware_class`, as a run there is tagged),
for one dataset, member architecture, recipe batch and backend; a newer record of the same key replaces it.

:func:`member_work` says which members a cell trains and how many steps, and which cells share them: the cells of
one method and seed that differ only in their privacy (PATE's and DGD's ε 1 and ε 10) train the same members once
(the second waits for the first, :func:`dpsd.ensembles.load_or_train_members`), so a dry run prices them once.
:func:`teacher_work` says which full-data teacher a cell reads that this machine's cache lacks: a sweep trains each
such teacher once before its cells (:func:`dpsd.sweep.runner.prepare_teacher`), a cost no recorded cell's time holds.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from dpsd.data import input_convention
from dpsd.ensembles import backend
from dpsd.teachers import teacher_cache_dir, teacher_key

MEMBER_KEYS = ("num_teachers", "member_steps", "member_augment", "pool_fraction", "vae_data")
"""The method settings that decide which members a cell trains (its partition and each member's training)."""

RATES_FILE = "member_rates.csv"
"""The benchmark's records, in the runs archive's folder (``results/``)."""


@dataclass(frozen=True)
class MemberRate:
    """One benchmark's seconds per optimiser step of one member (the backend's seconds per member over its steps)."""

    hardware: str
    dataset: str
    arch: str
    batch_size: int
    backend: str
    seconds_per_step: float
    members: int  # members the benchmark timed
    member_steps: int  # steps each took

    @property
    def key(self) -> tuple[str, str, str, int, str]:
        return self.hardware, self.dataset, self.arch, self.batch_size, self.backend


@dataclass(frozen=True)
class MemberWork:
    """The members a cell trains: ``ensemble`` (the same text for the cells that share them), ``count`` members of
    ``steps`` steps each, priced by the rate of ``dataset``, ``arch``, ``batch_size`` and the backend its
    ``backend_setting`` resolves to on the hardware priced."""

    ensemble: str
    count: int
    steps: int
    dataset: str
    arch: str
    batch_size: int
    backend_setting: str

    def rate_key(self, hardware: str) -> tuple[str, str, str, int, str]:
        """The key of the rate that prices this work on ``hardware`` (a class naming ``no GPU``: the CPU's backend)."""
        device = torch.device("cpu" if "no GPU" in hardware else "cuda")
        chosen = backend(OmegaConf.create({"model": {"teacher": {"ensemble": {"backend": self.backend_setting}}}}),
                         device)
        return hardware, self.dataset, self.arch, self.batch_size, chosen


def network(teacher: DictConfig) -> str:
    """A teacher config's network as a rate names it: its arch, with its stem where the config names one (a
    ResNet-34's step with the CIFAR 3x3 stem costs about ten of torchvision's 7x7 stem's on a CPU)."""
    stem = teacher.get("stem")
    return f"{teacher.arch} ({stem} stem)" if stem else str(teacher.arch)


def teacher_work(cfg: DictConfig) -> MemberWork | None:
    """The full-data teacher ``cfg``'s run reads, where ``<results_dir>/teachers`` lacks it: one network trained
    alone over its recipe's ``steps`` (at most: a recipe with a ``target`` stops at the first check that reaches it),
    named by its cache file so the cells that share it price it once; None where it is cached."""
    filename = teacher_key(cfg, input_convention(cfg)).filename
    if (teacher_cache_dir(cfg) / filename).is_file():
        return None
    teacher = cfg.model.teacher
    return MemberWork(filename, 1, int(teacher.recipe.steps), str(cfg.dataset.name), network(teacher),
                      int(teacher.recipe.batch_size), "serial")


def member_work(cfg: DictConfig) -> MemberWork | None:
    """The members ``cfg``'s method trains (a method with ``num_teachers`` and ``member_steps``: PATE, DGD,
    dfpate); None for one that trains none. Its ``ensemble`` digests what decides the members (:data:`MEMBER_KEYS`
    of the method, its name, the dataset, the teacher config and the seed), nothing of ``privacy``."""
    method = cfg.method
    if "num_teachers" not in method or "member_steps" not in method:
        return None
    teacher = cfg.model.teacher
    steps = int(method.member_steps if method.member_steps is not None else teacher.recipe.steps)
    count = int(method.num_teachers)
    shared = {"method": {key: method.get(key) for key in ("name", *MEMBER_KEYS)}, "seed": int(cfg.seed),
              "dataset": OmegaConf.to_container(cfg.dataset, resolve=True),
              "teacher": OmegaConf.to_container(teacher, resolve=True)}
    ensemble = hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return MemberWork(ensemble, count, steps, str(cfg.dataset.name), network(teacher), int(teacher.recipe.batch_size),
                      str(teacher.ensemble.backend))


def read_rates(path: Path | None) -> list[MemberRate]:
    """The records of ``path`` (none where there is no file)."""
    if path is None or not Path(path).is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return [MemberRate(row["hardware"], row["dataset"], row["arch"], int(row["batch_size"]), row["backend"],
                           float(row["seconds_per_step"]), int(row["members"]), int(row["member_steps"]))
                for row in csv.DictReader(handle)]


def record_rates(path: Path, rates: list[MemberRate]) -> None:
    """Write ``rates`` into ``path``, each replacing the record of its key; rows sorted by key (stable diffs)."""
    kept = {rate.key: rate for rate in [*read_rates(path), *rates]}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(MemberRate)])
        writer.writeheader()
        for key in sorted(kept):
            writer.writerow({**asdict(kept[key]), "seconds_per_step": f"{kept[key].seconds_per_step:.6g}"})
