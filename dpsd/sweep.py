"""Sweeps: a spec (``sweeps/<name>.yaml``, data) expanded into cells and run with Ray Tune.

A *cell* is one run: the spec's ``base`` overrides + one ``grid`` combination (or one explicit
``cells`` entry) + ``seed=<s>``, at a scale (``smoke`` adds the spec's ``smoke`` overrides), with the
command line's overrides last (they win). Its identity is :func:`config_hash` of the resolved config,
so a cell that already has a FINISHED MLflow run (tag ``cell_status=done``) is never run again,
whichever spec or sweep produced it: an interrupted sweep, re-run, does only what is left. The
tags every trial run carries (``sweep``, ``cell``, ``config_hash``, ``cell_status``,
``mlflow.parentRunId``) are what ``dpsd report`` reads.

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
import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf

from dpsd.config import compose, resolve_paths, validate
from dpsd.errors import ConfigError

SCALES = ("smoke", "paper")
SPEC_KEYS = ("name", "paper", "feeds", "base", "grid", "cells", "seeds", "smoke")
REPO_SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
# The smoke overrides every spec of a folder shares (less the keys a spec varies): ``common/smoke.yaml``
# in the spec's folder (the repository's is ``sweeps/common/smoke.yaml``).
COMMON_SMOKE = Path("common") / "smoke.yaml"
# Not part of a cell's identity: where results go, where data lives, how runs are tracked.
_UNHASHED = ("tracking", "results_dir")

DONE, DATA_ABSENT = "done", "data_absent"


# ---------------------------------------------------------------------------------------------
# Specs and cells


@dataclass(frozen=True)
class Spec:
    """A sweep spec as written in ``sweeps/<name>.yaml`` (keys: SPEC_KEYS)."""

    name: str
    paper: str | None
    feeds: dict
    base: tuple[str, ...]
    grid: dict[str, tuple]
    cells: tuple[tuple[str, ...], ...]
    seeds: tuple[int, ...]
    smoke: tuple[str, ...]
    path: str | None = None


@dataclass(frozen=True)
class Cell:
    """One run of a sweep. ``label`` is the cell's own overrides (grid values or explicit cell, and
    ``seed=``) joined by spaces; ``overrides`` is everything that composes it."""

    spec: str
    label: str
    overrides: tuple[str, ...]
    config_hash: str
    dataset: str = ""
    method: str = ""

    def compose(self) -> DictConfig:
        return compose(list(self.overrides))


def spec_path(spec: str | os.PathLike) -> Path:
    """A spec file, given as a path or a name under ``./sweeps/`` or the repository's ``sweeps/``."""
    path = Path(spec)
    candidates = [path] if path.suffix in (".yaml", ".yml") else []
    candidates += [Path("sweeps") / f"{spec}.yaml", REPO_SWEEPS / f"{spec}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = ", ".join(sorted(p.stem for p in REPO_SWEEPS.glob("*.yaml"))) or "none"
    raise ConfigError(f"no sweep spec {str(spec)!r}; give a path or one of: {known}")


def _overrides(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(o, str) and "=" in o for o in value):
        raise ConfigError(f"{where} must be a list of key=value overrides, got {value!r}")
    return tuple(value)


def override_key(override: str) -> str:
    """``++method.x=1`` -> ``method.x``; ``model/teacher=small_cnn`` -> ``model/teacher``."""
    return override.split("=", 1)[0].lstrip("+~")


def common_smoke(spec_file: Path) -> tuple[str, ...]:
    """The shared smoke list (:data:`COMMON_SMOKE` in the spec's folder); () if the folder has none."""
    shared = spec_file.parent / COMMON_SMOKE
    if not shared.is_file():
        return ()
    return _overrides((yaml.safe_load(shared.read_text()) or {}).get("smoke"), f"{shared}: smoke")


def smoke_overrides(spec_file: Path, grid: dict, cells: Sequence[Sequence[str]], own: Sequence[str]) -> tuple[str, ...]:
    """A spec's smoke overrides: the shared list less every key the cells vary (``grid``, ``cells``)
    or the spec's own ``smoke`` list sets (a shared value must never collapse the cells a spec
    varies), then the spec's own list. ``base`` keys are not dropped: the shared list is what swaps a
    paper's base teacher for the small CNN."""
    varied = {override_key(o) for o in [*own, *itertools.chain.from_iterable(cells)]} | set(grid)
    return tuple(o for o in common_smoke(spec_file) if override_key(o) not in varied) + tuple(own)


def load_spec(path: str | os.PathLike) -> Spec:
    """Read and check a sweep spec; unknown keys or malformed entries are a ConfigError. Its
    ``smoke`` is :func:`smoke_overrides` (the shared list, then the spec's own)."""
    path = spec_path(path)
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a sweep spec is a mapping with keys {', '.join(SPEC_KEYS)}")
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(SPEC_KEYS)}")
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"{path}: grid must map override keys to non-empty lists of values")
    cells = tuple(_overrides(c, f"{path}: each entry of cells") for c in raw.get("cells") or [])
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{path}: seeds must be a non-empty list of integers, got {seeds!r}")
    base = _overrides(raw.get("base"), f"{path}: base")
    smoke = smoke_overrides(path, grid, cells, _overrides(raw.get("smoke"), f"{path}: smoke"))
    return Spec(
        name=str(raw.get("name") or path.stem), paper=raw.get("paper"), feeds=dict(raw.get("feeds") or {}),
        base=base, grid={str(k): tuple(v) for k, v in grid.items()},
        cells=cells, seeds=tuple(seeds), smoke=smoke, path=str(path),
    )


def _value(value: Any) -> str:
    """A YAML value as a Hydra override value (``true``/``false``/``null`` spelled the way Hydra reads them)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def cell_overrides(spec: Spec) -> list[tuple[str, ...]]:
    """The spec's cells (without seeds): the grid's cartesian product, then the explicit cells."""
    keys = list(spec.grid)
    combos = [] if not keys else [
        tuple(f"{k}={_value(v)}" for k, v in zip(keys, values))
        for values in itertools.product(*(spec.grid[k] for k in keys))
    ]
    if not keys and not spec.cells:
        combos = [()]  # a spec with only base overrides is one cell
    return combos + list(spec.cells)


def split_scale(overrides: Sequence[str], default: str = "smoke") -> tuple[str, list[str]]:
    """Take ``scale=...`` out of command-line overrides: ``(scale, the rest)``."""
    scale, rest = default, []
    for override in overrides:
        if override.startswith("scale="):
            scale = override.partition("=")[2]
        else:
            rest.append(override)
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    return scale, rest


def config_hash(cfg: DictConfig) -> str:
    """sha256 (16 hex) of the resolved config as sorted YAML, without ``tracking``, ``results_dir``
    and ``data.root``: two configs that would train the same thing hash the same."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in _UNHASHED:
        container.pop(key, None)
    container.get("data", {}).pop("root", None)
    text = yaml.safe_dump(container, sort_keys=True, default_flow_style=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand_cells(spec: Spec | str | os.PathLike, scale: str = "smoke", overrides: Sequence[str] = ()) -> list[Cell]:
    """Every cell of ``spec`` at ``scale`` with the command-line ``overrides``, in spec order
    (cells of the grid, then explicit cells; seeds innermost). Composition errors are ConfigErrors."""
    return [cell for cell, _ in expand_configs(spec, scale, overrides)]


def expand_configs(spec: Spec | str | os.PathLike, scale: str = "smoke",
                   overrides: Sequence[str] = ()) -> list[tuple[Cell, DictConfig]]:
    """:func:`expand_cells` with each cell's composed config."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    tail = [f"scale={scale}", *(spec.smoke if scale == "smoke" else ()), *overrides]
    cells = []
    for own in cell_overrides(spec):
        for seed in spec.seeds:
            mine = [*own, f"seed={seed}"]
            full = (*spec.base, *mine, *tail)
            try:
                cfg = compose(list(full))
            except ConfigError as err:
                raise ConfigError(f"sweep {spec.name}, cell {' '.join(mine)}: {err}") from None
            cells.append((Cell(spec.name, " ".join(mine), full, config_hash(cfg),
                               str(cfg.dataset.name), str(cfg.method.name)), cfg))
    return cells


# ---------------------------------------------------------------------------------------------
# MLflow: what is done, the parent run, data-absent records


def _client(cfg: DictConfig):
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
    client, experiment_id = _client(cfg)
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


def _cell_tags(cell: Cell, status: str) -> dict[str, str]:
    return {"sweep": cell.spec, "cell": cell.label, "config_hash": cell.config_hash, "cell_status": status}


def record_data_absent(client, experiment_id: str, parent: str, cell: Cell, cfg: DictConfig, reason: str) -> str:
    """A FINISHED run tagged ``cell_status=data_absent`` (with the cell's config as parameters) so
    the report lists the cell instead of dropping it."""
    from mlflow.entities import Param

    from dpsd.tracking import flatten

    tags = {**_cell_tags(cell, DATA_ABSENT), "mlflow.parentRunId": parent, "data_absent_reason": reason[:5000],
            "method": cell.method, "dataset": cell.dataset, "scale": str(cfg.scale.name),
            "privacy_mode": str(cfg.privacy.mode)}
    run_id = client.create_run(experiment_id, run_name=cell.label, tags=tags).info.run_id
    params = [Param(k, str(v)) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True))]
    for start in range(0, len(params), 100):
        client.log_batch(run_id, params=params[start:start + 100])
    client.set_terminated(run_id, "FINISHED")
    return run_id


# ---------------------------------------------------------------------------------------------
# Ray: resources, teachers, trials


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
    from dpsd.data import DataAbsent
    from dpsd.experiment import load_data, resolve_device
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


# ---------------------------------------------------------------------------------------------
# The sweep


def _teacher_group(cfg: DictConfig) -> str:
    from dpsd.teachers import teacher_key

    return json.dumps({**teacher_key(cfg).__dict__, "root": cfg.data.root}, sort_keys=True)


def _data_absent_locally(cells: list[Cell], configs: list[DictConfig]) -> dict[str, str]:
    """``config_hash -> reason`` for cells whose dataset cannot be loaded here (dry run)."""
    from dpsd.data import DataAbsent
    from dpsd.experiment import load_data

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
    client, experiment_id = _client(sweep_cfg)
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
        return _summarize(summary, cells, status)
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
    return _summarize(summary, cells, status)


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
                                     "tags": _cell_tags(cell, DONE)} for cell, cfg in to_run}
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


def _summarize(summary: dict[str, Any], cells: list[Cell], status: dict[str, str]) -> dict[str, Any]:
    labels = lambda wanted: [c.label for c in cells if status[c.config_hash] == wanted]  # noqa: E731
    summary.update(done=labels("done"), skipped=labels("done"), ran=labels("ran"), to_run=labels("to_run"),
                   data_absent=labels("data_absent"), failed=labels("failed"),
                   cells=[{"label": c.label, "config_hash": c.config_hash, "status": status[c.config_hash]}
                          for c in cells])
    return summary


def format_summary(summary: dict[str, Any], dry_run: bool = False) -> str:
    """The sweep's cells, one line each, grouped by status, then counts."""
    titles = [("done", "done (a FINISHED run exists)"), ("to_run", "to run"), ("ran", "ran"),
              ("data_absent", "data absent (listed, not run)"), ("failed", "failed")]
    lines = [f"sweep {summary['spec']} (scale={summary['scale']}){' — dry run' if dry_run else ''}"]
    for key, title in titles:
        if summary[key]:
            lines.append(f"{title}: {len(summary[key])}")
            lines += [f"  {label}" for label in summary[key]]
    lines += [f"error: {e}" for e in summary.get("errors", [])]
    if summary.get("parent_run_id"):
        lines.append(f"MLflow parent run {summary['parent_run_id']} in {summary['tracking_uri']}")
    return "\n".join(lines)
