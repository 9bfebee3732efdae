"""Train, cache and load teachers, keyed by (dataset, architecture, seed, recipe).

A teacher is trained on the private split once and stored under ``results/teachers/``, outside
every tracked artifact: it is the one thing a run must never release. Later runs with the same
key load it instead of retraining.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm.auto import tqdm

from dpsd.data import DataSplits, teacher_view
from dpsd.errors import ConfigError
from dpsd.input_space import InputConvention
from dpsd.models import build_classifier
from dpsd.tracking import hardware_text
from dpsd.version import teacher_code_version


SCHEDULES = ("onecycle", "constant")
"""``model.teacher.recipe.schedule``: the learning-rate schedules :func:`train_classifier` follows."""


def training_machine() -> str:
    """Where a teacher trains, as its cache record and each check of its curve keep it: the run's hardware tag
    (:func:`dpsd.tracking.hardware_text`: the CPU, its logical cores, torch's threads, the GPU, the allocator) and
    torch's version. The thread count changes a teacher's weights on a CPU (docs/reproducing.md), so a retrain
    reproduces one only where this reads the same; a teacher's seconds a step are read beside it."""
    return f"{hardware_text()}, torch {torch.__version__}"


def teacher_cache_dir(cfg: DictConfig) -> Path:
    """``<results_dir>/teachers``: outside every tracked artifact."""
    return Path(cfg.results_dir) / "teachers"


@dataclass(frozen=True)
class TeacherKey:
    """Everything that determines a trained teacher's weights."""

    dataset: str
    dataset_options: str
    arch: str
    seed: int
    recipe: str
    member: str = "full"  # "full", or "i/n" for member i of an n-way disjoint partition
    input: str = ""  # model.teacher.input: the image side and normalisation it reads (its InputConvention)
    stem: str = ""  # model.teacher.stem of a torchvision family ("" where the teacher config has none)
    code: str = ""  # dpsd.version.teacher_code_version(): the code that trains it

    @property
    def filename(self) -> str:
        digest = hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.dataset}-{self.arch}-seed{self.seed}-{digest}.pt"


def teacher_key(cfg: DictConfig, convention: InputConvention, member: str = "full") -> TeacherKey:
    """The cache key of the teacher ``cfg`` trains (``member``: an ensemble member's part) on data loaded in the
    input ``convention`` (:attr:`dpsd.data.DataSplits.convention`)."""
    teacher = cfg.model.teacher
    return TeacherKey(
        dataset=cfg.dataset.name,
        dataset_options=json.dumps(OmegaConf.to_container(cfg.dataset.options), sort_keys=True),
        arch=teacher.arch,
        seed=int(cfg.seed),
        recipe=json.dumps({**OmegaConf.to_container(teacher.recipe), "pretrained": teacher.pretrained}, sort_keys=True),
        member=member,
        code=teacher_code_version(),
        input=json.dumps({"image_size": convention.image_size, "mean": convention.space.mean,
                          "std": convention.space.std}),
        stem=str(teacher.get("stem") or ""),
    )


def teacher_network(teacher: DictConfig, data: DataSplits) -> nn.Module:
    """The untrained network ``model.teacher`` names for ``data``'s images: its arch, its pretrained weights and, for a
    torchvision family, its stem (``model.teacher.stem``, dpsd/models/teachers.py ``STEMS``; absent: the default)."""
    return build_classifier(teacher.arch, data.channels, data.image_size, data.num_classes, teacher.pretrained,
                            stem=teacher.get("stem"))


def evaluate_accuracy(model: nn.Module, dataset: Dataset, device: torch.device, batch_size: int = 512) -> float:
    """Top-1 accuracy of ``model`` on ``dataset`` (fraction in [0, 1])."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in DataLoader(dataset, batch_size=batch_size):
            prediction = model(x.to(device)).argmax(dim=1).cpu()
            correct += int((prediction == torch.as_tensor(y)).sum())
            total += len(prediction)
    return correct / max(total, 1)


@dataclass
class Partial:
    """Where a targeted training (:func:`train_to_target`) writes its state at each check, so that a killed one goes on
    from its last check: ``path`` (beside the teacher's cache file, named by the same key), and ``extra``, its caller's
    record (the curve so far), saved with it and restored into it in place."""

    path: Path
    extra: dict


def train_classifier(
    model: nn.Module, dataset: Dataset, recipe: DictConfig, device: torch.device, seed: int, desc: str,
    check: Callable[[int, nn.Module], bool] | None = None, partial: Partial | None = None,
) -> nn.Module:
    """Plain supervised training on private data: Adam, cross-entropy, and the recipe's ``schedule``:
    ``onecycle`` (one-cycle to ``lr``, the default where the recipe names none) or ``constant`` (``lr``
    throughout, as DAFL's ``teacher-train.py`` trains its LeNet-5).

    The recipe counts optimiser ``steps`` rather than epochs, so one recipe suits 1,437 digits and
    60,000 MNIST images alike; the loader reshuffles each time it runs out. A last partial batch of an
    epoch is dropped unless ``drop_last: false`` (DAFL's loader keeps it: 235 batches an MNIST epoch at 256).

    ``check(step, model)``, where given, is called every ``recipe.target.every`` steps and after the last; training
    stops at the first call that returns True (a recipe sized by its target: :func:`train_to_target`). ``steps`` is
    then the most it may take, and the length of the one-cycle schedule. With ``partial`` the state after each check
    that does not stop (weights, optimiser, schedule, the loader's place and random streams, ``partial.extra``) is
    written to ``partial.path``; a training that finds the file goes on from it, and ends with the weights of one that
    was never stopped (on a deterministic device: ``tests/test_teacher_target.py``).
    """
    torch.manual_seed(seed)
    model.to(device).train()
    shuffle = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        dataset, batch_size=int(recipe.batch_size), shuffle=True, generator=shuffle,
        drop_last=bool(recipe.get("drop_last", True)) and len(dataset) > int(recipe.batch_size),
    )
    steps = int(recipe.steps)
    every = int(recipe.target.every) if check is not None else steps
    optimizer = torch.optim.Adam(model.parameters(), lr=float(recipe.lr), weight_decay=float(recipe.weight_decay))
    name = recipe.get("schedule", "onecycle")
    if name not in SCHEDULES:
        raise ConfigError(f"model.teacher.recipe.schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    schedule = (torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=float(recipe.lr), total_steps=steps)
                if name == "onecycle" else torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0))
    done, place = 0, {"epoch": shuffle.get_state(), "within": 0}  # the loader's place: its epoch's stream, batches into it
    stored = read_partial(partial.path) if partial is not None else None
    if stored is not None:
        model.load_state_dict(stored["model"])
        optimizer.load_state_dict(stored["optimizer"])
        schedule.load_state_dict(stored["schedule"])
        torch.set_rng_state(stored["torch_rng"])
        done, place = stored["steps_done"], stored["place"]
        partial.extra.update(stored["extra"])
        print(f"progress: {desc}: resumed after step {done}/{steps} from {partial.path.name}", file=sys.stderr, flush=True)

    def endless():  # reshuffled epochs, from the loader's place
        shuffle.set_state(place["epoch"])
        skip = place["within"]
        while True:
            place["epoch"], place["within"] = shuffle.get_state(), 0
            for batch in loader:
                place["within"] += 1
                if skip:
                    skip -= 1
                    continue
                yield batch

    for step, (x, y) in zip(tqdm(range(done, steps), desc=desc, unit="step", leave=False, disable=None,
                                 initial=done, total=steps), endless()):
        loss = F.cross_entropy(model(x.to(device)), torch.as_tensor(y).to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if check is not None and ((step + 1) % every == 0 or step + 1 == steps):
            stop = check(step + 1, model.eval())
            model.train()
            if stop:
                break
            if partial is not None and step + 1 < steps:
                _write_atomically(partial.path, {
                    "steps_done": step + 1, "place": dict(place), "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                    "torch_rng": torch.get_rng_state(), "extra": partial.extra})
    return model.eval()


def read_partial(path: Path) -> dict | None:
    """The state :func:`train_classifier` wrote at ``path``; None where there is none, or (with a one-line warning)
    where it is unreadable, so the training starts afresh."""
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a truncated file: start again
        print(f"dpsd: warning: partial teacher {path} is unreadable ({type(err).__name__}); training afresh",
              file=sys.stderr)
        return None


def validation_split(dataset: Dataset, size: int, seed: int) -> tuple[Dataset, Dataset]:
    """``(train, validation)``: a seeded cut of ``size`` records from the private ``dataset`` (never the test split),
    the rest to train on."""
    if not 0 < size < len(dataset):
        raise ConfigError(f"model.teacher.recipe.target.validation must be between 1 and {len(dataset) - 1} "
                          f"(the private split's size less one), got {size}")
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    return Subset(dataset, order[size:]), Subset(dataset, order[:size])


def train_to_target(model: nn.Module, data: DataSplits, recipe: DictConfig, device: torch.device, seed: int,
                    desc: str, partial: Path | None = None) -> dict[str, Any]:
    """Train ``model`` on the private split less a validation cut until its validation accuracy reaches
    ``recipe.target.accuracy`` (the paper's stated teacher accuracy plus the margin the recipe states), checked every
    ``recipe.target.every`` steps, or until ``recipe.steps``. Test accuracy is measured at each check for the curve
    only: it chooses nothing. Returns ``{"steps", "val_accuracy", "reached", "curve"}``, the curve a point a check (its
    step, validation and test accuracy, seconds and :func:`training_machine`); each check is printed as a
    progress line, so a terminal and a log show it. With ``partial`` (a path), the training's state is kept there at
    each check and a killed training goes on from its last (:class:`Partial`); the curve's seconds then count the
    seconds trained before the kill too."""
    target = recipe.target
    train, validation = validation_split(teacher_view(data.train), int(target.validation), seed)
    record: dict[str, Any] = {"curve": []}  # restored in place by a resumed training
    kept = Partial(partial, record) if partial is not None else None
    started, before = time.perf_counter(), None

    def check(step: int, net: nn.Module) -> bool:
        nonlocal before
        curve = record["curve"]
        if before is None:  # the seconds trained before a resume: its curve's last
            before = curve[-1]["seconds"] if curve else 0.0
        val, test = evaluate_accuracy(net, validation, device), evaluate_accuracy(net, data.test, device)
        curve.append({"step": step, "val_accuracy": val, "test_accuracy": test,
                      "seconds": before + time.perf_counter() - started, "machine": training_machine()})
        print(f"progress: {desc} step {step}/{int(recipe.steps)}: validation {100 * val:.2f}% "
              f"(target {100 * float(target.accuracy):.2f}%), test {100 * test:.2f}%; "
              f"{curve[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
        return val >= float(target.accuracy)

    train_classifier(model, train, recipe, device, seed, desc, check=check, partial=kept)
    curve = record["curve"]
    last = curve[-1]
    return {"steps": int(last["step"]), "val_accuracy": last["val_accuracy"],
            "reached": last["val_accuracy"] >= float(target.accuracy), "curve": curve}


def weights_digest(model: nn.Module) -> str:
    """sha256 of ``model``'s parameters and buffers in state-dict order: same seed, same weights, same digest."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def disjoint_partition(size: int, parts: int, pool_size: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """Teacher-ensemble split of ``size`` private indices (PATE; DGD's discriminative stream): a
    seeded permutation whose first ``pool_size`` indices are held out (the pool) and whose rest is
    dealt round-robin into ``parts`` disjoint member subsets."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist()
    private = order[pool_size:]
    return [private[i::parts] for i in range(parts)], order[:pool_size]


def save_teacher(cfg: DictConfig, key: TeacherKey, model: nn.Module, test_accuracy: float | None,
                 training: dict[str, Any] | None = None) -> Path:
    """Store ``model`` in ``cfg``'s teacher cache under ``key`` (with ``training``: :func:`train_to_target`'s record,
    and the :func:`training_machine` it finished on); returns the path."""
    path = teacher_cache_dir(cfg) / key.filename
    _write_atomically(path, {"state_dict": model.state_dict(), "key": key.__dict__, "test_accuracy": test_accuracy,
                             "training": training, "machine": training_machine()})
    return path


def load_or_train_teacher(cfg: DictConfig, data: DataSplits, device: torch.device) -> tuple[nn.Module, dict]:
    """The full-data teacher for ``cfg`` (from cache, or trained on the private split and cached).

    Returns the model in eval mode and a record ``{"path", "cached", "test_accuracy", "weights_sha256"}``, with
    ``"training"`` (steps, validation accuracy, the curve) where the recipe has a ``target``
    (:func:`train_to_target`). Ensemble members (trained on parts of the split) come from :mod:`dpsd.ensembles`.
    """
    teacher_cfg = cfg.model.teacher
    key = teacher_key(cfg, data.convention)
    path = teacher_cache_dir(cfg) / key.filename
    # Seeded initial weights, whatever ran before; the caller's random stream is left as it was,
    # whether the teacher is cached or trained.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(cfg.seed))
        model = teacher_network(teacher_cfg, data)
    stored = read_cached(path)
    if stored is not None:
        model.load_state_dict(stored["state_dict"])
        return model.to(device).eval(), {"path": str(path), "cached": True, "test_accuracy": stored["test_accuracy"],
                                         "weights_sha256": weights_digest(model),
                                         **({"training": stored["training"]} if stored.get("training") else {})}
    training = None
    with torch.random.fork_rng(devices=[]):
        desc = f"teacher {key.arch}"
        if teacher_cfg.recipe.get("target") is not None:
            training = train_to_target(model, data, teacher_cfg.recipe, device, int(cfg.seed), desc,
                                       partial=path.with_name(path.name + ".partial"))
        else:
            train_classifier(model, teacher_view(data.train), teacher_cfg.recipe, device, int(cfg.seed), desc=desc)
    accuracy = evaluate_accuracy(model, data.test, device)
    save_teacher(cfg, key, model, accuracy, training)
    path.with_name(path.name + ".partial").unlink(missing_ok=True)
    return model, {"path": str(path), "cached": False, "test_accuracy": accuracy,
                   "weights_sha256": weights_digest(model), **({"training": training} if training else {})}


def read_cached(path: Path) -> dict | None:
    """The cached teacher at ``path``; None when there is none, or (with a one-line warning) when
    the file is truncated or unreadable, so the caller retrains it."""
    if not path.exists():
        return None
    try:
        stored = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(stored, dict) or not {"state_dict", "test_accuracy"} <= set(stored):
            raise ValueError("not a teacher record")
        return stored
    except Exception as err:  # a truncated zip, a foreign pickle, an unreadable file: retrain
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"dpsd: warning: teacher cache {path} is unreadable ({reason[:200]}); retraining it", file=sys.stderr)
        return None


def _write_atomically(path: Path, record: dict) -> None:
    """Save to a temporary file of its own in the same folder, then rename: a reader sees the old
    file or the whole new one, never half of it, even with two writers at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as partial:
        try:
            torch.save(record, partial)
            partial.flush()
            os.fsync(partial.fileno())
        except BaseException:
            Path(partial.name).unlink(missing_ok=True)
            raise
    os.replace(partial.name, path)
