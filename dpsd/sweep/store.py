"""A sweep's state in MLflow: which cells are done or have absent data, and the sweep's parent run."""

from __future__ import annotations

import json

from omegaconf import DictConfig, OmegaConf

from dpsd.sweep.spec import Cell, Spec

DONE, DATA_ABSENT = "done", "data_absent"


def client_for(cfg: DictConfig):
    from mlflow.tracking import MlflowClient

    from dpsd.tracking import ensure_experiment, tracking_uri

    experiment_id = ensure_experiment(cfg)
    return MlflowClient(tracking_uri(cfg)), experiment_id


def _search(client, experiment_id: str, filter_string: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string, max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


def recorded_hashes(client, experiment_id: str, status: str = DONE) -> dict[str, str]:
    """``config_hash -> run id`` of the FINISHED runs tagged ``cell_status=<status>``."""
    runs = _search(client, experiment_id, f"tags.cell_status = '{status}' and attributes.status = 'FINISHED'")
    return {run.data.tags["config_hash"]: run.info.run_id for run in runs if "config_hash" in run.data.tags}


def is_done(cfg: DictConfig, digest: str) -> bool:
    """Whether the config hash ``digest`` has a FINISHED run (a trial's own check before training)."""
    client, experiment_id = client_for(cfg)
    filter_string = (f"tags.config_hash = '{digest}' and tags.cell_status = '{DONE}' "
                     "and attributes.status = 'FINISHED'")
    return bool(client.search_runs([experiment_id], filter_string, max_results=1))


def parent_run(client, experiment_id: str, spec: Spec, scale: str) -> str:
    """The sweep's parent run (one per spec and scale, reused by re-runs), set RUNNING."""
    runs = _search(client, experiment_id, f"tags.sweep_parent = '{spec.name}' and tags.scale = '{scale}'")
    if runs:
        run_id = runs[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        return run_id
    tags = {"sweep_parent": spec.name, "scale": scale, "paper": str(spec.paper or ""),
            "feeds": json.dumps(spec.feeds), "spec_path": str(spec.path)}
    return client.create_run(experiment_id, run_name=f"sweep {spec.name} ({scale})", tags=tags).info.run_id


def cell_tags(cell: Cell, status: str) -> dict[str, str]:
    return {"sweep": cell.spec, "cell": cell.label, "config_hash": cell.config_hash, "cell_status": status}


def record_data_absent(client, experiment_id: str, parent: str, cell: Cell, cfg: DictConfig, reason: str) -> str:
    """A FINISHED run tagged ``cell_status=data_absent`` (with the cell's config as parameters) so
    the report lists the cell instead of dropping it."""
    from mlflow.entities import Param

    from dpsd.tracking import flatten

    tags = {**cell_tags(cell, DATA_ABSENT), "mlflow.parentRunId": parent, "data_absent_reason": reason[:5000],
            "method": cell.method, "dataset": cell.dataset, "scale": str(cfg.scale.name),
            "privacy_mode": str(cfg.privacy.mode)}
    run_id = client.create_run(experiment_id, run_name=cell.label, tags=tags).info.run_id
    params = [Param(k, str(v)) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True))]
    for start in range(0, len(params), 100):
        client.log_batch(run_id, params=params[start:start + 100])
    client.set_terminated(run_id, "FINISHED")
    return run_id
