"""Model audit: membership inference against a finished run's released models.

``dpsd audit model <run id | artifact folder>`` asks how well an attacker can tell the private
training records (members) from records the run never trained on (non-members):

* members: ``samples`` records drawn (seeded) from the private training split; non-members: as many
  from the test split, which no method trains or selects on. Equal counts, so AUC 0.5 is chance.
* **loss threshold** (Yeom et al. 2018, "Privacy risk in machine learning", the ``loss`` attack):
  score = -cross-entropy of the model on the record's true label; a member is predicted above a
  threshold. Run against the released student and, as the reference, the non-private teacher the
  run used (from the teacher cache, never a tracked artifact).
* **generator distance** (the "distance to closest record" heuristic, cf. Chen et al. 2020,
  GAN-Leaks, full black-box attack): score = -min_j ||x - g(z_j)||_2 over ``synthetic`` samples
  g(z_j), z_j ~ N(0, I); a member is predicted when some synthetic sample lies closer to it than
  the threshold. Only for runs that release a generator. The generator is audited with fresh
  latents: a DPSD run's trained latents are not part of its artifacts.

No shadow models (LiRA, Carlini et al. 2022) are trained: on a CPU one shadow run costs as much as
the audited run. The attacks are threshold-free: the report gives the ROC's AUC and the TPR at
FPR 1% and 0.1% (the largest TPR among thresholds whose FPR does not exceed the target, the
convention of Carlini et al. 2022). With fewer than 1/fpr non-members the lowest reachable nonzero
FPR is above the target, so the TPR reported there is the TPR at FPR 0; ``non_members`` says how
many there were.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from dpsd.errors import ConfigError

FPR_TARGETS = (0.01, 0.001)
"""False-positive rates at which the report gives the attack's TPR."""


def roc_points(member_scores: np.ndarray, non_member_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of the rule "member iff score >= t" for every distinct score t, from the
    strictest (t = +inf: (0, 0)) to the loosest ((1, 1)); tied scores move together."""
    scores = np.concatenate([member_scores, non_member_scores]).astype(float)
    is_member = np.concatenate([np.ones(len(member_scores)), np.zeros(len(non_member_scores))])
    order = np.argsort(-scores, kind="mergesort")
    scores, is_member = scores[order], is_member[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    tpr = np.r_[0.0, np.cumsum(is_member)[last_of_tie] / len(member_scores)]
    fpr = np.r_[0.0, np.cumsum(1 - is_member)[last_of_tie] / len(non_member_scores)]
    return fpr, tpr


def attack_metrics(member_scores: np.ndarray, non_member_scores: np.ndarray) -> dict[str, float]:
    """AUC (trapezoids under the ROC: the probability a member outscores a non-member, ties half)
    and the TPR at each of :data:`FPR_TARGETS`."""
    if len(member_scores) == 0 or len(non_member_scores) == 0:
        raise ConfigError("audit model: needs at least one member and one non-member")
    fpr, tpr = roc_points(np.asarray(member_scores), np.asarray(non_member_scores))
    metrics = {"auc": float(np.trapezoid(tpr, fpr))}
    for target in FPR_TARGETS:
        metrics[f"tpr_at_fpr_{target:g}"] = float(tpr[fpr <= target].max())
    return metrics


@torch.no_grad()
def loss_scores(model: nn.Module, dataset: Dataset, device: torch.device) -> np.ndarray:
    """-cross-entropy of ``model`` on each record's own label (Yeom et al. 2018's loss attack)."""
    model.eval()
    losses = [F.cross_entropy(model(x.to(device)), torch.as_tensor(y).to(device), reduction="none").cpu()
              for x, y in DataLoader(dataset, batch_size=512)]
    return -torch.cat(losses).double().numpy()


@torch.no_grad()
def distance_scores(synthetic: Tensor, dataset: Dataset, device: torch.device) -> np.ndarray:
    """-min over synthetic samples of the L2 distance to each record (GAN-Leaks-style)."""
    flat = synthetic.flatten(1).to(device)
    nearest = [torch.cdist(x.to(device).flatten(1), flat).min(dim=1).values.cpu()
               for x, _ in DataLoader(dataset, batch_size=512)]
    return -torch.cat(nearest).double().numpy()


def audit_sets(train: Dataset, test: Dataset, samples: int, seed: int) -> tuple[Subset, Subset]:
    """Equal-sized, seeded random members (private training split) and non-members (test split)."""
    count = min(samples, len(train), len(test))
    if count < 1:
        raise ConfigError(f"audit model: --samples must be >= 1, got {samples}")
    rng = torch.Generator().manual_seed(seed)
    members = torch.randperm(len(train), generator=rng)[:count].tolist()
    non_members = torch.randperm(len(test), generator=rng)[:count].tolist()
    return Subset(train, members), Subset(test, non_members)


def run_artifacts(run: str, cfg: DictConfig, into: Path) -> tuple[Path, str | None]:
    """The folder holding ``config.yaml`` and the released ``*.pt`` of ``run`` (a folder, or an
    MLflow run id looked up in ``cfg``'s store and downloaded into ``into``), and the run id."""
    folder = Path(run).expanduser()
    if folder.is_dir():
        return folder, None
    if "/" in run or "\\" in run:
        raise ConfigError(f"audit model: no artifact folder {run!r}")
    import mlflow

    from dpsd.tracking import tracking_uri

    uri = tracking_uri(cfg)
    try:
        path = mlflow.artifacts.download_artifacts(run_id=run, tracking_uri=uri, dst_path=str(into))
    except Exception as err:  # MLflow raises several types for an unknown run
        raise ConfigError(f"audit model: {run!r} is neither a folder nor a run id in {uri} ({type(err).__name__})") from err
    return Path(path), run


def load_released(folder: Path, cfg: DictConfig, device: torch.device) -> dict[str, nn.Module]:
    """The student (and generator, where the run released one) from a run's artifacts."""
    from dpsd.data import data_info
    from dpsd.models import build_classifier, generator_from_config

    info = data_info(cfg)
    student = build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
    if cfg.method.name == "dpsgd":
        from opacus.validators import ModuleValidator

        student = ModuleValidator.fix(student)  # as baselines/dpsgd.py trained it
    models = {"student": student}
    if (folder / "generator.pt").exists():
        models["generator"] = generator_from_config(cfg.model.generator, info.channels, info.image_size,
                                                    int(cfg.seed), info.space)
    for name, model in models.items():
        model.load_state_dict(torch.load(folder / f"{name}.pt", map_location="cpu", weights_only=True))
        model.to(device).eval()
    return models


def audit_models(cfg: DictConfig, released: dict[str, nn.Module], samples: int, synthetic: int) -> dict[str, Any]:
    """Membership-inference results for ``released`` and the run's non-private teacher."""
    from dpsd.config import resolve_device
    from dpsd.data import load_data
    from dpsd.teachers import load_or_train_teacher

    device = resolve_device(cfg.device)
    data = load_data(cfg)
    members, non_members = audit_sets(data.train, data.test, samples, int(cfg.seed))
    teacher, _ = load_or_train_teacher(cfg, data, device)
    result: dict[str, Any] = {"members": len(members), "non_members": len(non_members), "attacks": {}}
    for name, model in (("teacher", teacher), ("student", released["student"])):
        result["attacks"][f"{name}_loss"] = attack_metrics(loss_scores(model, members, device),
                                                           loss_scores(model, non_members, device))
    if "generator" in released:
        images = generated_images(released["generator"], synthetic, int(cfg.seed), device)
        result["synthetic"] = synthetic
        result["attacks"]["generator_distance"] = attack_metrics(distance_scores(images, members, device),
                                                                 distance_scores(images, non_members, device))
    return result


def generated_images(generator: nn.Module, count: int, seed: int, device: torch.device) -> Tensor:
    """``count`` images of ``generator`` from fresh seeded N(0, I) latents, in chunks of 512."""
    rng = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        z = torch.randn(count, generator.latent_dim, generator=rng, device=device)
        return torch.cat([generator(chunk) for chunk in z.split(512)])


def released_run(run: str, overrides: list[str]) -> tuple[DictConfig, dict[str, nn.Module], str | None]:
    """``run``'s config with dotted ``overrides`` applied (``data.root=...``, ``device=cpu``), its released
    models (:func:`load_released`) and its MLflow run id (None for a folder)."""
    from dpsd.config import compose, resolve_device

    with tempfile.TemporaryDirectory() as tmp:
        folder, run_id = run_artifacts(run, compose(overrides), Path(tmp))
        if not (folder / "config.yaml").exists() or not (folder / "student.pt").exists():
            raise ConfigError(f"audit model: {folder} lacks config.yaml or student.pt (a `dpsd run` artifact folder)")
        cfg = OmegaConf.merge(OmegaConf.load(folder / "config.yaml"), OmegaConf.from_dotlist(overrides))
        return cfg, load_released(folder, cfg, resolve_device(cfg.device)), run_id


def audit_run(run: str, overrides: list[str], samples: int = 1000, synthetic: int = 2000) -> tuple[DictConfig, dict]:
    """Load ``run``'s config and released models (:func:`released_run`, with ``overrides`` such as
    ``tracking.enabled=false``) and attack them; returns the config and the report."""
    if samples < 1 or synthetic < 1:
        raise ConfigError(f"audit model: --samples and --synthetic must be >= 1, got {samples}, {synthetic}")
    cfg, released, run_id = released_run(run, overrides)
    result = audit_models(cfg, released, samples, synthetic)
    return cfg, {"audited_run": run_id or str(Path(run).resolve()), "method": cfg.method.name,
                 "dataset": cfg.dataset.name, **result}


def flat_metrics(result: dict[str, Any]) -> dict[str, float]:
    """``{"student_loss": {"auc": a}}`` -> ``{"student_loss.auc": a}``."""
    return {f"{attack}.{key}": value for attack, values in result["attacks"].items() for key, value in values.items()}
