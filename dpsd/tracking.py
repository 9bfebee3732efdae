"""MLflow: where runs are recorded. Methods never call this; the runner does.

By default a SQLite store ``<results_dir>/mlflow.db`` with artifacts under
``<results_dir>/mlartifacts`` (absolute paths, as MLflow 3 refuses a plain ``./mlruns`` file store
and Ray trials change their working directory); ``tracking.uri`` may point at an ``mlflow server``.
"""

from __future__ import annotations

import fcntl
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import mlflow
import torch
from omegaconf import DictConfig, OmegaConf
from torchvision.utils import save_image


def tracking_uri(cfg: DictConfig) -> str:
    if cfg.tracking.uri:
        return str(cfg.tracking.uri)
    return f"sqlite:///{Path(cfg.results_dir) / 'mlflow.db'}"  # an absolute path gives four slashes


def _artifact_location(cfg: DictConfig) -> str | None:
    if cfg.tracking.artifact_location:
        return str(cfg.tracking.artifact_location)
    if cfg.tracking.uri:
        return None  # a tracking server chooses its own artifact store
    return (Path(cfg.results_dir) / "mlartifacts").as_uri()


def ensure_experiment(cfg: DictConfig) -> str:
    """Point MLflow at the configured store and return the experiment's id (created if absent).

    Two runs opening a new SQLite store at once would both run MLflow's schema migration, and one
    fails ("Online migration expected to match one row"): a lock file next to the store serialises
    its creation.
    """
    mlflow.set_tracking_uri(tracking_uri(cfg))
    Path(cfg.results_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(cfg.results_dir) / "mlflow.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        experiment = mlflow.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is not None:
            return experiment.experiment_id
        return mlflow.create_experiment(cfg.tracking.experiment, artifact_location=_artifact_location(cfg))


def flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` -> ``("a.b", 1)``: config keys as MLflow parameter names."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], tree


def save_sample_grid(samples: torch.Tensor, path: Path, min_side: int = 48) -> None:
    """An 8-wide grid of synthetic images in [-1, 1], enlarged (nearest) so small ones stay visible."""
    scale = max(1, math.ceil(min_side / samples.shape[-1]))
    enlarged = torch.nn.functional.interpolate(samples, scale_factor=scale, mode="nearest")
    save_image(enlarged, path, nrow=8, normalize=True, value_range=(-1, 1), pad_value=1.0)


def record_run(
    cfg: DictConfig,
    metrics: dict[str, float],
    privacy: dict[str, Any],
    models: dict[str, torch.nn.Module],
    samples: torch.Tensor | None,
    tags: dict[str, str] | None = None,
) -> str:
    """Log one finished run; returns its run id.

    ``models`` are the *releasable* models only (student, generator): the teacher and any private
    data stay in the teacher cache, outside the tracked artifacts.
    """
    for attempt in range(_RETRIES):
        try:
            return _record_run_once(cfg, metrics, privacy, models, samples, tags)
        except Exception as err:  # SQLite under concurrent trials: "database is locked"
            if attempt + 1 == _RETRIES or "locked" not in str(err).lower():
                raise
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


_RETRIES = 6


def _record_run_once(cfg, metrics, privacy, models, samples, tags) -> str:
    """One attempt of :func:`record_run`. ``tracking.tags`` are added to ``tags`` and
    ``tracking.parent_run_id`` makes the run a child (``dpsd sweep`` sets both); the run is
    FINISHED only once everything is logged, so an interrupted one never counts as done."""
    experiment_id = ensure_experiment(cfg)
    container = OmegaConf.to_container(cfg, resolve=True)
    finite = {k: v for k, v in metrics.items() if v is not None}
    tags = {**(tags or {}), **dict(cfg.tracking.get("tags") or {})}
    parent = cfg.tracking.get("parent_run_id")
    with mlflow.start_run(experiment_id=experiment_id, tags=tags, parent_run_id=parent) as run:
        mlflow.log_params(dict(flatten(container)))
        mlflow.log_metrics({k: float(v) for k, v in finite.items()})
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            (folder / "ledger.json").write_text(json.dumps(privacy, indent=2, default=str))
            for name, model in models.items():
                torch.save(model.state_dict(), folder / f"{name}.pt")
            if samples is not None:
                save_sample_grid(samples, folder / "samples.png")
            mlflow.log_artifacts(str(folder))
    return run.info.run_id


def record_report(cfg: DictConfig, metrics: dict[str, float], tags: dict[str, str], report: dict[str, Any],
                  name: str = "report.json") -> str:
    """Log a run that trains nothing (an audit): ``cfg`` as parameters, the finite ``metrics``,
    ``tags`` and ``report`` as a JSON artifact ``name``; returns its run id."""
    experiment_id = ensure_experiment(cfg)
    with mlflow.start_run(experiment_id=experiment_id, tags=tags) as run:
        mlflow.log_params(dict(flatten(OmegaConf.to_container(cfg, resolve=True))))
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))})
        mlflow.log_text(json.dumps(report, indent=2, default=str), name)
    return run.info.run_id
