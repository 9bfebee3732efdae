"""Teacher ensembles: n members, each trained on its own disjoint part of the private split with its
own seed (PATE's teachers, DGD's discriminative stream, DPDFD's §4.4 teachers, FedDPSD's clients).

A member whose first stage is a :class:`~dpsd.models.teachers.FixedFront` (no parameter, no data: the scattering
transform of ``scattering_mlp``) has it computed once for all members, on their training images and on the images
they answer; only the rest of each member trains and is batched (:func:`split_front`).

Two backends give the same members (``model.teacher.ensemble.backend``):

* ``serial``: one member after another, through :func:`dpsd.teachers.train_classifier`;
* ``vmap``: the members of a chunk as one batched model, ``torch.func.stack_module_state`` +
  ``vmap(functional_call)``, one optimiser step for all of them. Each member sees the batches its
  serial loader would (the same seeded ``DataLoader`` over its part's indices), its loss is its own
  mean cross-entropy (the sum over members keeps each member's gradient its own), and Adam and the
  one-cycle schedule act element-wise, so a member's weights follow the serial ones up to float
  rounding. ``auto`` takes ``vmap`` on a GPU and ``serial`` on a CPU, where batched (grouped)
  convolutions measured slower than one member after another.

Members are cached one file each under the key the serial path uses, whichever backend trained
them, and trained under a lock on their ensemble, so that runs needing the same members at once (a
sweep's cells at two ε) train them once. A member's record carries no test accuracy: scoring n members on the whole test split would
cost more than training them; callers score the members on the images they need.
"""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from filelock import FileLock
from omegaconf import DictConfig, open_dict
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.utils.data import DataLoader, Dataset, Subset

from dpsd.augment import affine_from_draws
from dpsd.data import DataSplits, teacher_view
from dpsd.privacy.boundary import CountedTeacher, counted_members
from dpsd.errors import ConfigError
from dpsd.models import channels_last
from dpsd.models.teachers import FixedFront
from dpsd.progress import ProgressLog
from dpsd.teachers import TeacherKey, read_cached, save_teacher, teacher_cache_dir, teacher_key, teacher_network, train_classifier

BACKENDS = ("auto", "serial", "vmap")
MEMBER_AUGMENTS = ("none", "affine")
"""How a member's batches are moved in training: as drawn, or each image by its own random affine map."""


def member_seed(seed: int, index: int) -> int:
    """Member ``index``'s own seed (initial weights and batch order), derived from the run's ``seed``."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


def backend(cfg: DictConfig, device: torch.device) -> str:
    name = str(cfg.model.teacher.ensemble.backend)
    if name not in BACKENDS:
        raise ConfigError(f"model.teacher.ensemble.backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "auto":
        return "vmap" if device.type == "cuda" else "serial"
    return name


def with_member_steps(cfg: DictConfig, steps: int | None, augment: str = "none") -> DictConfig:
    """The teacher config members train with: ``steps`` (a method's ``member_steps``) in place of the
    recipe's (a member sees 1/n of the data; the step count is part of the member's cache key); with ``augment``
    ``affine``, the recipe's ``augment`` too, so each member's batches are moved as :func:`_train_chunk` says (a key
    of the recipe, hence of the member's cache key, only where it is set: members trained as before keep theirs)."""
    if augment not in MEMBER_AUGMENTS:
        raise ConfigError(f"member augmentation must be one of {', '.join(MEMBER_AUGMENTS)}, got {augment!r}")
    if steps is None and augment == "none":
        return cfg
    member = cfg.copy()
    if steps is not None:
        member.model.teacher.recipe.steps = int(steps)
    if augment != "none":
        with open_dict(member.model.teacher.recipe):
            member.model.teacher.recipe.augment = augment
    return member


def member_augment(recipe: DictConfig) -> str:
    """The member augmentation a teacher ``recipe`` asks for (:func:`with_member_steps`); ``none`` where it names none."""
    return str(recipe.get("augment", "none"))


def split_front(member: nn.Module) -> tuple[FixedFront | None, nn.Module]:
    """``(front, rest)``: a member's :class:`~dpsd.models.teachers.FixedFront` and what follows it (the part that
    trains), or ``(None, member)`` where it has none."""
    front = getattr(member, "front", None)
    return (front, member.head) if isinstance(front, FixedFront) else (None, member)


def front_features(front: FixedFront | None, images: Tensor, device: torch.device, batch_size: int = 1024) -> Tensor:
    """``images`` through ``front`` (as they are where there is none), a batch at a time, on ``device``."""
    if front is None:
        return images.to(device)
    front = front.to(device)
    with torch.no_grad():
        return torch.cat([front(images[start:start + batch_size].to(device))
                          for start in range(0, len(images), batch_size)])


def _member_cfg(cfg: DictConfig, index: int) -> DictConfig:
    member = cfg.copy()
    member.seed = member_seed(int(cfg.seed), index)
    return member


def _fresh_member(cfg: DictConfig, data: DataSplits) -> nn.Module:
    teacher = cfg.model.teacher
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(cfg.seed))
        return teacher_network(teacher, data)


def train_member(cfg: DictConfig, data: DataSplits, part: list[int], index: int, device: torch.device,
                 name: str | None = None) -> nn.Module:
    """Member ``index`` of ``cfg``'s ensemble trained on the private records ``part`` as the serial backend trains
    it: a fresh ``model.teacher`` network drawn under its own seed (:func:`member_seed`), then the teacher recipe
    under that seed. ``name`` labels its progress (default its index)."""
    member_cfg = _member_cfg(cfg, index)
    model = _fresh_member(member_cfg, data)
    with torch.random.fork_rng(devices=[]):
        train_classifier(model, Subset(teacher_view(data.train), part), cfg.model.teacher.recipe, device,
                         int(member_cfg.seed), desc=f"member {index if name is None else name}")
    return model


def load_or_train_members(cfg: DictConfig, data: DataSplits, device: torch.device, parts: list[list[int]],
                          names: list[str],
                          phase_log: Callable[[str, int], ProgressLog | None] | None = None) -> list[nn.Module]:
    """Member ``i`` trained on ``parts[i]`` with seed ``member_seed(seed, i)`` and cached under the
    member key ``names[i]`` (which must say which split it was trained on); returned in eval mode.
    ``phase_log`` (a run's :attr:`~dpsd.methods.base.RunContext.phase_log`): a line as members finish."""
    chosen = backend(cfg, device)
    if member_augment(cfg.model.teacher.recipe) != "none":
        if chosen == "serial":
            raise ConfigError("member augmentation needs the batched trainer: set model.teacher.ensemble.backend=vmap "
                              "(the serial one trains each member as a plain teacher, unmoved)")
        if split_front(_fresh_member(cfg, data))[0] is not None:
            raise ConfigError(f"member augmentation moves a member's images before its fixed front, which is computed "
                              f"once for all members: {cfg.model.teacher.arch} takes member augmentation none")
    configs = [_member_cfg(cfg, i) for i in range(len(parts))]
    keys = [teacher_key(member_cfg, data.convention, name) for member_cfg, name in zip(configs, names)]
    files = [teacher_cache_dir(cfg) / key.filename for key in keys]
    members = _cached_members(configs, files, data, device)
    if any(model is None for model in members):
        with _ensemble_lock(cfg, files):  # another run training the same members: wait, then load theirs
            members = _cached_members(configs, files, data, device)
            _train_missing(cfg, chosen, data, device, parts, keys, configs, members, phase_log)
    return counted_members([model.eval() for model in members], parts, names)


def _ensemble_lock(cfg: DictConfig, files: list[Path]) -> FileLock:
    """An exclusive lock on one ensemble (its members' cache files), held while its missing members
    train: two trials of a sweep that need the same members (PATE's or DGD's cells at two ε) train
    them once, the second waiting for the first. ``filelock`` comes with torch (a requirement of it)."""
    digest = hashlib.sha256("\n".join(sorted(f.name for f in files)).encode()).hexdigest()[:16]
    folder = Path(cfg.results_dir) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / f"members-{digest}.lock")


def _cached_members(configs: list[DictConfig], files: list[Path], data: DataSplits,
                    device: torch.device) -> list[nn.Module | None]:
    """Each member read from its cache file, None where it has none."""
    members: list[nn.Module | None] = []
    for member_cfg, path in zip(configs, files):
        stored = read_cached(path)
        if stored is not None:
            model = _fresh_member(member_cfg, data)
            model.load_state_dict(stored["state_dict"])
            members.append(model.to(device).eval())
        else:
            members.append(None)
    return members


def _train_missing(cfg: DictConfig, chosen: str, data: DataSplits, device: torch.device, parts: list[list[int]],
                   keys: list[TeacherKey],
                   configs: list[DictConfig], members: list[nn.Module | None],
                   phase_log: Callable[[str, int], ProgressLog | None] | None) -> None:
    """Train (with the ``chosen`` backend) and cache under its key, in place, each member of ``members`` that is
    None: each as it is trained (one by one, or a batched chunk at a time), so a run stopped part way keeps the members
    it trained and the next one trains only the rest."""
    pending = [i for i, model in enumerate(members) if model is None]
    log = phase_log(f"members ({chosen})", len(pending)) if phase_log is not None and pending else None

    def keep(i: int, model: nn.Module) -> None:
        members[i] = model
        save_teacher(cfg, keys[i], model, test_accuracy=None)

    if chosen == "serial":
        for done, i in enumerate(pending):
            keep(i, train_member(cfg, data, parts[i], i, device, keys[i].member))
            if log is not None:
                log.update(done, {})
    else:
        _train_vmap(cfg, data, device, [configs[i] for i in pending], [parts[i] for i in pending],
                    lambda j, model: keep(pending[j], model), log)


def _loader(size: int, batch_size: int, seed: int) -> DataLoader:
    """The index batches :func:`dpsd.teachers.train_classifier`'s loader draws for a part of ``size``."""
    return DataLoader(range(size), batch_size=batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(seed), drop_last=size > batch_size)


def _endless(loader: DataLoader) -> Iterator[Tensor]:
    """Reshuffled epochs of ``loader`` without end, as :func:`dpsd.teachers.train_classifier` draws them."""
    while True:
        yield from loader


def images_and_labels(dataset: Dataset, indices: list[int]) -> tuple[Tensor, Tensor]:
    """The images and labels of ``dataset[indices]`` (sliced from memory where the split is held there)."""
    tensors = getattr(dataset, "tensors", None)
    if tensors is not None:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tensors[0][index], tensors[1][index].long()
    items = [dataset[i] for i in indices]
    return torch.stack([x for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


def _train_vmap(cfg: DictConfig, data: DataSplits, device: torch.device, configs: list[DictConfig],
                parts: list[list[int]], trained_one: Callable[[int, nn.Module], None],
                log: ProgressLog | None = None) -> None:
    """Members grouped by their batch size (a part smaller than a batch is one whole batch), trained
    ``model.teacher.ensemble.chunk`` at a time as one batched model, each handed to ``trained_one`` (its index in
    ``configs``, the model) as its chunk ends (``log``: a line per chunk)."""
    recipe = cfg.model.teacher.recipe
    batch = int(recipe.batch_size)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, part in enumerate(parts):
        groups[min(batch, len(part))].append(i)
    chunk = int(cfg.model.teacher.ensemble.chunk)
    done = 0
    for indices in groups.values():
        for start in range(0, len(indices), chunk):
            selected = indices[start:start + chunk]
            models = _train_chunk(data, device, recipe, [configs[i] for i in selected], [parts[i] for i in selected])
            for i, model in zip(selected, models):
                trained_one(i, model)
            done += len(selected)
            if log is not None:
                log.update(done - 1, {})


def _train_chunk(data: DataSplits, device: torch.device, recipe: DictConfig, configs: list[DictConfig],
                 parts: list[list[int]]) -> list[nn.Module]:
    # stacked in the default (NCHW) layout: inside vmap, cuDNN's convolutions ask a channels-last weight
    # is_contiguous(memory_format=channels_last), which vmap does not implement ("NYI") on a GPU
    models = [_fresh_member(member_cfg, data).to(device, memory_format=torch.contiguous_format).train()
              for member_cfg in configs]
    front = split_front(models[0])[0]
    trained = [split_front(model)[1] for model in models]  # each whole member, or the head after its fixed front
    params, buffers = stack_module_state(trained)
    skeleton = copy.deepcopy(trained[0]).to("meta")

    def member_loss(p: dict, b: dict, x: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(functional_call(skeleton, (p, b), (x,)), y)

    batched_loss = vmap(member_loss, randomness="different")
    images = [images_and_labels(teacher_view(data.train), part) for part in parts]
    images = [(front_features(front, x, device), y.to(device)) for x, y in images]
    streams = [_endless(_loader(len(part), int(recipe.batch_size), int(member_cfg.seed)))
               for part, member_cfg in zip(parts, configs)]
    moves = ([torch.Generator().manual_seed(int(member_cfg.seed) + 2) for member_cfg in configs]
             if member_augment(recipe) == "affine" else None)  # apart from the batch order's stream
    steps = int(recipe.steps)
    optimizer = torch.optim.Adam(list(params.values()), lr=float(recipe.lr), weight_decay=float(recipe.weight_decay))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=float(recipe.lr), total_steps=steps)
    for _ in range(steps):
        batches = [next(stream).to(device) for stream in streams]
        x = torch.stack([xs[index] for (xs, _), index in zip(images, batches)])
        y = torch.stack([ys[index] for (_, ys), index in zip(images, batches)])
        if moves is not None:  # each member's images moved by its own stream, all in one call
            draw = torch.cat([torch.rand(x.shape[1], 4, generator=stream) for stream in moves])
            x = affine_from_draws(x.flatten(0, 1), draw).view_as(x)
        loss = batched_loss(params, buffers, x, y).sum()  # member i's gradient is its own loss's
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    for i, part in enumerate(trained):
        part.load_state_dict({name: value[i].detach() for name, value in {**params, **buffers}.items()})
    return [channels_last(model) for model in models]


def member_predictions(members: list[nn.Module], images: Tensor, device: torch.device,
                       batch_size: int = 512, log: ProgressLog | None = None) -> Tensor:
    """``n x len(images)``: each member's argmax class for each image (``log``: a line as members finish;
    250 members voting on a few thousand images take about as long as training them)."""
    predictions = []
    with torch.no_grad():
        for done, member in enumerate(members):
            predictions.append(torch.cat([member(images[start:start + batch_size].to(device)).argmax(dim=1)
                                          for start in range(0, len(images), batch_size)]))
            if log is not None:
                log.update(done, {})
    return torch.stack(predictions)


def vote_counts(predictions: Tensor, num_classes: int) -> Tensor:
    """``len(images) x classes``: the vote counts V_k(x) of PATE and DGD Eq. (3)."""
    return F.one_hot(predictions, num_classes).sum(dim=0).float()


def ensemble_votes(members: list[nn.Module], images: Tensor, device: torch.device, chunk: int = 256,
                   batch_size: int = 1024, log: ProgressLog | None = None) -> tuple[Tensor, Tensor]:
    """``(soft, hard)``, each ``len(images) x classes``: the members' summed softmax outputs and their vote counts
    (PATE's n_j(x)), with ``chunk`` members at a time run as one batched model (``torch.func.stack_module_state`` +
    ``vmap(functional_call)``: one batched matrix product a layer instead of one small product a member; the members
    must share an architecture; a fixed front runs once for all of them). Each member is counted at the privacy boundary as answering every image
    (:class:`dpsd.privacy.boundary.CountedTeacher`). Members are evaluated in eval mode (``log``: a line a chunk)."""
    networks = [member.teacher if isinstance(member, CountedTeacher) else member for member in members]
    for member in members:
        if isinstance(member, CountedTeacher):
            member.count(len(images))
    front = split_front(networks[0])[0]
    images = front_features(front, images, device)  # a fixed front's output, once for all members
    soft = hard = None
    for done, start in enumerate(range(0, len(networks), chunk)):
        group = [split_front(network.to(device, memory_format=torch.contiguous_format).eval())[1]
                 for network in networks[start:start + chunk]]
        params, buffers = stack_module_state(group)
        skeleton = copy.deepcopy(group[0]).to("meta")

        def member_output(p: dict, b: dict, x: Tensor) -> Tensor:
            return functional_call(skeleton, (p, b), (x,))

        batched = vmap(member_output, in_dims=(0, 0, None))
        with torch.no_grad():
            for first in range(0, len(images), batch_size):
                outputs = batched(params, buffers, images[first:first + batch_size].to(device))  # members x b x C
                probabilities = outputs.softmax(dim=2).sum(dim=0)
                counts = F.one_hot(outputs.argmax(dim=2), outputs.shape[2]).sum(dim=0).float()
                if soft is None:
                    soft = torch.zeros(len(images), outputs.shape[2], device=device)
                    hard = torch.zeros_like(soft)
                soft[first:first + batch_size] += probabilities
                hard[first:first + batch_size] += counts
        if log is not None:
            log.update(done, {})
    return soft, hard
