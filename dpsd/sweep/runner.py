"""Running a sweep with Ray Tune (the ``dpsd sweep`` command).

``run_sweep`` (the ``dpsd sweep`` command):

1. expands the cells and asks MLflow which are done;
2. starts Ray (locally, dashboard off, or joins ``address``), then prepares each distinct teacher
   (dataset, architecture, seed, recipe) once, as a Ray task that also finds out whether the
   dataset's files are there; cells whose data is absent get a run tagged ``cell_status=data_absent``
   and are listed as such;
3. runs the remaining cells as trials of one Tune experiment (``tune.with_resources``: a CPU share,
   and a fractional GPU where the cluster has GPUs), each trial one ``run_experiment`` recorded as a
   child of the sweep's parent run. A killed driver's experiment is resumed with ``Tuner.restore``;
   each trial checks MLflow again before it trains, so nothing finished is run twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from omegaconf import DictConfig, OmegaConf

from dpsd.config import compose, resolve_device, resolve_paths, validate
from dpsd.errors import ConfigError
from dpsd.sweep.spec import Cell, Spec, expand_configs, load_spec
from dpsd.sweep.store import (DATA_ABSENT, DONE, cell_tags, client_for, is_done, parent_run, record_data_absent,
                              recorded_hashes)
from dpsd.sweep.summary import summarize


@dataclass
class Resources:
    cpus: float
    gpus: float
    concurrent: int


def trial_resources(cpus_per_trial: float | None, gpus_per_trial: float | None) -> Resources:
    """A trial's CPU and GPU share on the running Ray cluster.

    Defaults: where nodes have GPUs, half a GPU per trial (two trials share one) and the matching
    share of that node's CPUs; without GPUs, all the CPUs of the largest node (trials run one per
    node at a time, each with every core: on this 2-core machine, one after another)."""
    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    node_cpus = max(n.get("CPU", 1) for n in nodes)
    node_gpus = max(n.get("GPU", 0) for n in nodes)
    if gpus_per_trial is None:
        gpus_per_trial = 0.5 if node_gpus else 0.0
    if cpus_per_trial is None:
        share = gpus_per_trial / node_gpus if gpus_per_trial and node_gpus else 1.0
        cpus_per_trial = max(1, int(node_cpus * share))
    if cpus_per_trial > node_cpus or gpus_per_trial > max(node_gpus, 0):
        raise ConfigError(f"a trial asks for {cpus_per_trial} CPUs and {gpus_per_trial} GPUs; the largest "
                          f"node has {node_cpus} CPUs and {node_gpus} GPUs")
    per_node = [min(n.get("CPU", 0) // cpus_per_trial,
                    n.get("GPU", 0) // gpus_per_trial if gpus_per_trial else float("inf")) for n in nodes]
    return Resources(float(cpus_per_trial), float(gpus_per_trial), max(1, int(sum(per_node))))


def _cell_config(overrides: Sequence[str], threads: float | None = None) -> DictConfig:
    if threads:
        import torch

        torch.set_num_threads(max(1, int(threads)))
    return compose(list(overrides))


def prepare_teacher(overrides: Sequence[str], threads: float | None = None) -> dict[str, Any]:
    """Load the dataset of a cell and train (or find cached) its full-data teacher.

    Returns ``{"absent": reason}`` when the dataset's files are missing, else the teacher record."""
    from dpsd.data import DataAbsent, load_data
    from dpsd.teachers import load_or_train_teacher

    cfg = _cell_config(overrides, threads)
    validate(cfg)
    cfg = resolve_paths(cfg)
    try:
        data = load_data(cfg)
    except DataAbsent as err:
        return {"absent": str(err)}
    _, record = load_or_train_teacher(cfg, data, resolve_device(cfg.device))
    return record


def run_cell(config: dict, cells: dict[str, dict]) -> None:
    """A Tune trial: one cell, unless MLflow already has it FINISHED (then it reports ``skipped``)."""
    from ray import tune

    from dpsd.experiment import run_experiment

    digest = config["config_hash"]
    cell = cells.get(digest)
    if cell is None:  # a restored experiment's cell that is no longer pending (done, or not in the spec)
        tune.report({"outcome": "not_pending"})
        return
    cfg = _cell_config(cell["overrides"], cell["threads"])
    cfg.tracking.parent_run_id = cell["parent_run_id"]
    cfg.tracking.tags = cell["tags"]
    if is_done(cfg, digest):
        tune.report({"outcome": "skipped"})
        return
    summary = run_experiment(cfg, show_progress=False)
    tune.report({"outcome": "ran", "run_id": summary["run_id"],
                 "student_test_accuracy": summary["metrics"]["student_test_accuracy"]})


def init_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address``, or start a local one (dashboard off; no usage reporting).
    Returns whether this call started Ray (and so should shut it down)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 configure_logging=False, object_store_memory=256 * 1024**2)
    return True


def _experiment_name(spec: Spec, scale: str, cells: Iterable[Cell]) -> str:
    digest = hashlib.sha256(" ".join(sorted(c.config_hash for c in cells)).encode()).hexdigest()[:8]
    return f"{spec.name}-{scale}-{digest}"


def run_tune(storage: Path, spec: Spec, scale: str, to_run: list[Cell], trials: dict[str, dict],
             resources: Resources) -> dict[str, Any]:
    """Run ``to_run`` as one Tune experiment, or resume the killed driver's experiment with
    ``Tuner.restore`` when one for the same spec and scale is unfinished and covers every cell left.

    ``storage/<spec>-<scale>.current`` names the experiment in progress; it is removed once
    ``fit`` returns, so only a driver that died mid-sweep leaves one to restore."""
    from ray import tune

    trainable = tune.with_resources(tune.with_parameters(run_cell, cells=trials),
                                    {"cpu": resources.cpus, "gpu": resources.gpus})
    storage.mkdir(parents=True, exist_ok=True)
    pointer = storage / f"{spec.name}-{scale}.current"
    restored = False
    tuner = None
    if pointer.exists():
        previous = json.loads(pointer.read_text())
        path = storage / previous["name"]
        if {c.config_hash for c in to_run} <= set(previous["cells"]) and tune.Tuner.can_restore(str(path)):
            try:
                tuner = tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                           restart_errored=True)
                restored = True
            except Exception as err:  # a state too early to restore: start afresh
                print(f"dpsd sweep: could not restore {path} ({err}); starting a new experiment")
    if tuner is None:
        name = f"{_experiment_name(spec, scale, to_run)}-{time.strftime('%Y%m%d-%H%M%S')}"
        pointer.write_text(json.dumps({"name": name, "cells": [c.config_hash for c in to_run]}))
        tuner = tune.Tuner(
            trainable,
            param_space={"config_hash": tune.grid_search([c.config_hash for c in to_run])},
            # reuse_actors: a trial's worker keeps torch and the dataset modules imported for the next
            # (every trial asks for the same resources); each run still seeds and builds its own state.
            tune_config=tune.TuneConfig(max_concurrent_trials=resources.concurrent, reuse_actors=True,
                                        trial_dirname_creator=lambda trial: trial.trial_id),
            run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=1,
                                      failure_config=tune.FailureConfig(max_failures=0)),
        )
    grid = tuner.fit()
    pointer.unlink(missing_ok=True)
    errors = [str(r.error).strip().splitlines()[-1] for r in grid if r.error is not None]
    return {"restored": restored, "errors": errors}


def _teacher_group(cfg: DictConfig) -> str:
    from dpsd.teachers import teacher_key

    return json.dumps({**teacher_key(cfg).__dict__, "root": cfg.data.root}, sort_keys=True)


def _data_absent_locally(cells: list[Cell], configs: list[DictConfig]) -> dict[str, str]:
    """``config_hash -> reason`` for cells whose dataset cannot be loaded here (dry run)."""
    from dpsd.data import DataAbsent, load_data

    seen: dict[str, str | None] = {}
    absent = {}
    for cell, cfg in zip(cells, configs):
        key = json.dumps([cfg.dataset.name, OmegaConf.to_container(cfg.dataset.options), cfg.data.root])
        if key not in seen:
            try:
                load_data(resolve_paths(cfg))
                seen[key] = None
            except DataAbsent as err:
                seen[key] = str(err)
        if seen[key]:
            absent[cell.config_hash] = seen[key]
    return absent


def run_sweep(spec_path: str | os.PathLike, scale: str = "smoke", overrides: Sequence[str] = (),
              address: str | None = None, dry_run: bool = False,
              cpus_per_trial: float | None = None, gpus_per_trial: float | None = None) -> dict[str, Any]:
    """Run every cell of a spec that has no FINISHED run yet; returns what was done, ran, skipped,
    had absent data or failed (lists of cell labels) and ``cells`` (label, config_hash, status).

    ``dry_run`` starts nothing and trains nothing: it lists the cells done and to run (and those
    whose data cannot be found here)."""
    spec = load_spec(spec_path)
    expanded = expand_configs(spec, scale, overrides)
    cells = [cell for cell, _ in expanded]
    configs = [resolve_paths(cfg) for _, cfg in expanded]
    sweep_cfg = configs[0]
    if not sweep_cfg.tracking.enabled:
        raise ConfigError("dpsd sweep records every cell in MLflow; tracking=none is not accepted")
    for cfg in configs:
        validate(cfg)
    client, experiment_id = client_for(sweep_cfg)
    done = recorded_hashes(client, experiment_id)
    summary: dict[str, Any] = {"spec": spec.name, "scale": scale, "tracking_uri": client.tracking_uri,
                               "parent_run_id": None, "restored": False, "errors": []}
    status = {c.config_hash: "done" if c.config_hash in done else "to_run" for c in cells}
    pending = [(c, cfg) for c, cfg in zip(cells, configs) if status[c.config_hash] == "to_run"]

    # Locally the driver sees the workers' files, so absent data is found before Ray starts; on a
    # cluster (--address) the teacher tasks find it where the data should be.
    absent = {} if address and not dry_run else _data_absent_locally([c for c, _ in pending], [cfg for _, cfg in pending])
    status.update({h: "data_absent" for h in absent})
    if dry_run:
        return summarize(summary, cells, status)
    recorded = recorded_hashes(client, experiment_id, DATA_ABSENT) if absent else set()
    unrecorded = [(c, cfg) for c, cfg in pending if c.config_hash in absent and c.config_hash not in recorded]
    pending = [(c, cfg) for c, cfg in pending if c.config_hash not in absent]
    if unrecorded:  # a re-run with nothing new to record leaves MLflow as it was
        parent = parent_run(client, experiment_id, spec, scale)
        for cell, cfg in unrecorded:
            record_data_absent(client, experiment_id, parent, cell, cfg, absent[cell.config_hash])
        summary["parent_run_id"] = parent
        if not pending:
            client.set_terminated(parent, "FINISHED")
    if pending:
        started = init_ray(address)
        try:
            summary.update(_run_pending(spec, scale, pending, client, experiment_id, sweep_cfg, status,
                                        cpus_per_trial, gpus_per_trial))
        finally:
            if started:
                import ray

                ray.shutdown()
    finished = recorded_hashes(client, experiment_id)
    for c in cells:
        if status[c.config_hash] == "to_run":
            status[c.config_hash] = "ran" if c.config_hash in finished else "failed"
    return summarize(summary, cells, status)


def _run_pending(spec, scale, pending, client, experiment_id, sweep_cfg, status, cpus_per_trial, gpus_per_trial):
    """Teachers first (one Ray task per distinct teacher, which also finds absent data), then trials."""
    import ray

    parent = parent_run(client, experiment_id, spec, scale)
    resources = trial_resources(cpus_per_trial, gpus_per_trial)
    groups: dict[str, list] = {}
    for cell, cfg in pending:
        groups.setdefault(_teacher_group(cfg), []).append((cell, cfg))
    task = ray.remote(prepare_teacher).options(num_cpus=resources.cpus, num_gpus=resources.gpus)
    futures = {key: task.remote(list(members[0][0].overrides) + _path_overrides(members[0][1]), resources.cpus)
               for key, members in groups.items()}
    to_run = []
    for key, members in groups.items():
        record = ray.get(futures[key])
        for cell, cfg in members:
            if "absent" in record:
                if cell.config_hash not in recorded_hashes(client, experiment_id, DATA_ABSENT):
                    record_data_absent(client, experiment_id, parent, cell, cfg, record["absent"])
                status[cell.config_hash] = "data_absent"
            else:
                to_run.append((cell, cfg))
    outcome = {"restored": False, "errors": []}
    if to_run:
        trials = {cell.config_hash: {"overrides": list(cell.overrides) + _path_overrides(cfg),
                                     "threads": resources.cpus, "parent_run_id": parent,
                                     "tags": cell_tags(cell, DONE)} for cell, cfg in to_run}
        storage = Path(sweep_cfg.results_dir) / "ray"
        outcome = run_tune(storage, spec, scale, [c for c, _ in to_run], trials, resources)
    client.set_terminated(parent, "FINISHED")
    return {"parent_run_id": parent, **outcome, "resources": resources.__dict__}


def _path_overrides(cfg: DictConfig) -> list[str]:
    """Absolute ``results_dir`` and ``data.root``: Ray workers run in their own directories."""
    paths = [f"results_dir={cfg.results_dir}"]
    if cfg.data.root is not None:
        paths.append(f"data.root={cfg.data.root}")
    return paths
