"""Running a sweep with Ray Tune (the ``dpsd sweep`` command; ``run_sweeps``: several specs as one
experiment, for ``dpsd reproduce``).

``run_sweep`` (the ``dpsd sweep`` command):

1. expands the cells and asks MLflow which are done;
2. starts Ray (locally, dashboard off, or joins ``address``), then prepares each distinct teacher
   (dataset, architecture, seed, recipe) once, as a Ray task that also finds out whether the
   dataset's files are there (the teachers share the node's CPUs: nothing else runs yet); cells
   whose data is absent get a run tagged ``cell_status=data_absent`` and are listed as such;
3. runs the remaining cells, one of each method in turn (:func:`interleaved_by_method`), as trials of
   one Tune experiment (``tune.with_resources``: a CPU share,
   and a fractional GPU where the cluster has GPUs), each trial one ``run_experiment`` recorded as a
   child of the sweep's parent run. A killed driver's experiment is resumed with ``Tuner.restore``;
   each trial checks MLflow again and claims its cell (:func:`~dpsd.sweep.store.claim_cell`) before
   it trains, so nothing finished is run twice, even by two drivers at once. A cell another driver
   holds is waited for and taken over if that driver's claim goes stale; a cell that raises is
   recorded FAILED with a one-line reason, listed as failed and retried by the next sweep.

A local Ray (no ``--address``) listens on loopback only: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
makes Ray 2.x take 127.0.0.1 as the node address, and then its GCS, raylet, object manager and
workers bind it (``ray.init(_node_ip_address="127.0.0.1")`` alone does not: Ray replaces a loopback
node address by the machine's routable one). Set the variable to 1 to let other nodes reach it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from omegaconf import DictConfig, OmegaConf

from dpsd.config import compose, resolve_device, resolve_paths
from dpsd.errors import ConfigError, Fault
from dpsd.experiment import resolve_run, run_experiment
from dpsd.member_rates import RATES_FILE, MemberRate, MemberWork, read_rates, teacher_work
from dpsd.progress import keep_alive
from dpsd.sweep.fairness import declared_groups, unequal_budgets
from dpsd.sweep.spec import Cell, Spec, expand_configs, group_label, load_spec, varied_keys, with_seeds
from dpsd.sweep.store import (DATA_ABSENT, DONE, abandon_stale_claims, archived_figures, archived_versions, cell_tags,
                              claim_cell, client_for, failed_cells, finished_by, heartbeat, is_done, live_claims,
                              merged_versions, parent_run, done_runs, figures_of, record_data_absent, record_failure,
                              recorded_hashes, release_claim, cell_state, versions_of)
from dpsd.threads import set_threads, worker_env
from dpsd.tracking import this_hardware
from dpsd.version import method_code_version
from dpsd.sweep.summary import summarize
from dpsd.sweep.timing import (Progress, Timing, archived_timings, estimate, gpu_classes, register, stored_timings,
                               tune_callback)

CLAIM_TIMEOUT = 120.0  # seconds without a heartbeat after which a claim is taken over
LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's node address is 127.0.0.1


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
    return resources_on(_live_nodes(), cpus_per_trial, gpus_per_trial)


def local_resources(cpus_per_trial: float | None, gpus_per_trial: float | None) -> Resources:
    """:func:`trial_resources` on a local Ray of this machine (its CPUs and GPUs), without starting Ray."""
    import torch

    return resources_on([{"CPU": float(os.cpu_count() or 1), "GPU": float(torch.cuda.device_count())}],
                        cpus_per_trial, gpus_per_trial)


def resources_on(nodes: list[dict], cpus_per_trial: float | None, gpus_per_trial: float | None) -> Resources:
    """:func:`trial_resources` on a cluster of ``nodes`` (each node's ``CPU`` and ``GPU``)."""
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
    set_threads(threads)  # the trial's CPU share (dpsd.threads)
    return compose(list(overrides))


def prepare_teacher(overrides: Sequence[str], threads: float | None = None) -> dict[str, Any]:
    """Load the dataset of a cell and train (or find cached) its full-data teacher.

    Returns ``{"absent": reason}`` when the dataset's files are missing, else the teacher record."""
    from dpsd.data import DataAbsent, load_data
    from dpsd.teachers import load_or_train_teacher

    cfg = _cell_config(overrides, threads)
    setup = resolve_run(cfg)
    cfg = resolve_paths(cfg)
    try:
        data = load_data(cfg, setup.convention)
    except DataAbsent as err:
        return {"absent": str(err)}
    _, record = load_or_train_teacher(cfg, data, resolve_device(cfg.device))
    return record


def one_line(err: BaseException) -> str:
    """An exception as one line: a ConfigError or Fault's own words, else its type and first line
    (``OutOfMemoryError: CUDA out of memory...``, ``OSError: [Errno 28] No space left on device``)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(err, (ConfigError, Fault)):
        return first
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def run_cell(config: dict, cells: dict[str, dict]) -> None:
    """A Tune trial: one cell, unless MLflow already has it FINISHED (``skipped``) or another driver
    holds a live claim on it (``claimed_elsewhere``). Reports ``outcome`` (``ran``, ``fallback``,
    ``failed``) and, for the last two, a one-line ``reason``; it never raises."""
    from ray import tune

    digest = config["config_hash"]
    cell = cells.get(digest)
    if cell is None:  # a restored experiment's cell that is no longer pending (done, or not in the spec)
        tune.report({"outcome": "not_pending"})
        return
    claim = None
    try:
        cfg = _cell_config(cell["overrides"], cell["threads"])
        cfg.tracking.parent_run_id = cell["parent_run_id"]
        cfg.tracking.tags = cell["tags"]
        client, experiment_id = client_for(cfg)
        if is_done(client, experiment_id, digest, str(cfg.method.name)):
            tune.report({"outcome": "skipped"})
            return
        tags = {**cell["tags"], "mlflow.parentRunId": cell["parent_run_id"]}
        claim = claim_cell(client, experiment_id, digest, tags, cell["owner"], cell["claim_timeout"])
        if claim is None:
            tune.report({"outcome": "claimed_elsewhere"})
            return
        if is_done(client, experiment_id, digest, str(cfg.method.name)):  # finished by another driver between the check and the claim
            release_claim(client, claim)
            tune.report({"outcome": "skipped"})
            return
        cfg.tracking.run_id = claim
        with heartbeat(client, claim, cell["claim_timeout"] / 4), keep_alive(f"{cfg.method.name} [{cell['tags']['cell']}]"):
            summary = run_experiment(cfg)  # a trial's stdout is no terminal: progress lines go to its Ray log
    except Exception as err:  # out of memory, disk full, NaN loss, tracking server gone: the cell failed
        reason = _tracking_problem(cell) or one_line(err)
        if claim is not None:
            try:
                record_failure(client, claim, reason)
            except Exception as unrecorded:
                reason += f" (failure not recorded: {one_line(unrecorded)})"
        tune.report({"outcome": "failed", "reason": reason})
        return
    if summary.get("tracking_fallback"):
        tune.report({"outcome": "fallback", "run_id": summary["run_id"],
                     "reason": f"{summary['tracking_fallback']}; the run is in {summary['tracking_uri']} "
                               "(push it with dpsd sync)"})
        return
    tune.report({"outcome": "ran", "run_id": summary["run_id"],
                 "student_test_accuracy": summary["metrics"]["student_test_accuracy"]})


def _tracking_problem(cell: dict) -> str | None:
    """"tracking server <uri> does not answer (...)" when the cell's server is away, else None."""
    from dpsd.tracking import is_server, server_problem, tracking_uri

    cfg = compose(list(cell["overrides"]))
    uri = tracking_uri(cfg)
    problem = server_problem(uri, float(cfg.tracking.check_timeout)) if is_server(uri) else None
    return f"tracking server {uri} does not answer ({problem})" if problem else None


def init_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address``, or start a local one of its own (never another driver's)
    that listens on loopback only, unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` is set (dashboard
    off; no usage reporting). Returns whether this call started Ray (and so should shut it down)."""
    import ray
    from ray._private import ray_constants

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    handed = worker_env()  # the waiting policy in force here, for workers started by another process too
    hygiene = {"runtime_env": {"env_vars": handed}} if handed else {}
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False, **hygiene)
        return True
    chosen = os.environ.get(LOOPBACK_ONLY)
    os.environ[LOOPBACK_ONLY] = "0" if chosen is None else chosen  # inherited by every Ray process
    # Ray reads the variable when it is first imported: a process that imported it earlier (a test
    # session) is told here. Once started, the node keeps its address.
    imported = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = ray_constants.env_bool(LOOPBACK_ONLY, True)
    try:
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                 log_to_driver=False, configure_logging=False, object_store_memory=256 * 1024**2, **hygiene)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = imported
        if chosen is None:
            del os.environ[LOOPBACK_ONLY]
    return True


def _experiment_name(name: str, scale: str, cells: Iterable[Cell]) -> str:
    digest = hashlib.sha256(" ".join(sorted(c.config_hash for c in cells)).encode()).hexdigest()[:8]
    return f"{name}-{scale}-{digest}"


def run_tune(storage: Path, name: str, scale: str, to_run: list[Cell], trials: dict[str, dict],
             resources: Resources, progress: Progress | None = None) -> dict[str, Any]:
    """Run ``to_run`` as one Tune experiment named after ``name`` (the spec, or ``reproduce`` for
    several), or resume the killed driver's experiment with ``Tuner.restore`` when one for the same
    name and scale is unfinished and covers every cell left.

    ``storage/<name>-<scale>.current`` names the experiment in progress and the trial resources it was
    started with (a restored experiment keeps its own concurrency, so a driver asking for other resources
    starts afresh); it is removed once ``fit`` returns, so only a driver that died mid-sweep leaves one.
    ``progress`` gets each trial's outcome as it reports (:func:`~dpsd.sweep.timing.tune_callback`)."""
    from ray import tune

    trainable = tune.with_resources(tune.with_parameters(run_cell, cells=trials),
                                    {"cpu": resources.cpus, "gpu": resources.gpus})
    storage.mkdir(parents=True, exist_ok=True)
    pointer = storage / f"{name}-{scale}.current"
    restored = False
    tuner = None
    live = False  # the pointer names a driver still running here: its experiment is not ours to restore
    if pointer.exists():
        previous = json.loads(pointer.read_text())
        path = storage / previous["name"]
        live = owned_by_live_driver(previous)
        if (not live and {c.config_hash for c in to_run} <= set(previous["cells"]) and previous.get("resources") == resources.__dict__
                and tune.Tuner.can_restore(str(path))):
            try:
                register(previous["name"], progress)  # the restored experiment's pickled callback reports here
                tuner = tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                           restart_errored=True)
                restored = True
            except Exception as err:  # a state too early to restore: start afresh
                print(f"dpsd sweep: could not restore {path} ({err}); starting a new experiment")
    if tuner is None:
        experiment = f"{_experiment_name(name, scale, to_run)}-{time.strftime('%Y%m%d-%H%M%S')}"
        if not live:
            pointer.write_text(json.dumps({"name": experiment, "cells": [c.config_hash for c in to_run],
                                           "resources": resources.__dict__,
                                           "driver": f"{socket.gethostname()}:{os.getpid()}"}))
        tuner = tune.Tuner(
            trainable,
            param_space={"config_hash": tune.grid_search([c.config_hash for c in to_run])},
            # reuse_actors: a trial's worker keeps torch and the dataset modules imported for the next
            # (every trial asks for the same resources); each run still seeds and builds its own state.
            tune_config=tune.TuneConfig(max_concurrent_trials=resources.concurrent, reuse_actors=True,
                                        trial_dirname_creator=lambda trial: trial.trial_id),
            run_config=tune.RunConfig(name=experiment, storage_path=str(storage), verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=0),
                                      callbacks=[tune_callback(experiment, progress)]),
        )
    grid = tuner.fit()
    if not live:
        pointer.unlink(missing_ok=True)
    errors = [str(r.error).strip().splitlines()[-1] for r in grid if r.error is not None]
    outcomes = {r.config["config_hash"]: (r.metrics or {}) for r in grid if r.config}
    return {"restored": restored, "errors": errors, "outcomes": outcomes}


def interleaved_by_method(cells: list[Cell]) -> list[Cell]:
    """``cells`` in the order Tune starts them: one cell of each method in turn (each method's cells in
    spec order), so that trials side by side are seldom of one method. Two cells of one method that
    need the same ensemble members (PATE's or DGD's at two ε) would otherwise start together, and the
    second would wait on the members' lock (:mod:`dpsd.ensembles`) with its CPU share idle."""
    queues: dict[str, list[Cell]] = {}
    for cell in cells:
        queues.setdefault(cell.method, []).append(cell)
    order: list[Cell] = []
    while any(queues.values()):
        order += [queue.pop(0) for queue in queues.values() if queue]
    return order


def owned_by_live_driver(pointer: dict) -> bool:
    """Whether the Tune experiment a pointer file names belongs to another driver still running on
    this host (its ``host:pid``): a second ``dpsd sweep`` on the spec must start its own experiment
    (its trials then claim cells as usual) instead of restoring, and writing into, the live one's.
    A driver on another host, or one whose process is gone, has left its experiment to be restored."""
    host, _, pid = str(pointer.get("driver", "")).partition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user
        pass
    return True


def _teacher_group(cfg: DictConfig) -> str:
    from dpsd.data import input_convention
    from dpsd.teachers import teacher_key

    return json.dumps({**teacher_key(cfg, input_convention(cfg)).__dict__, "root": cfg.data.root}, sort_keys=True)


def _data_absent_locally(cells: list[Cell], configs: list[DictConfig], seen: dict[str, str | None]) -> dict[str, str]:
    """``config_hash -> reason`` for cells whose dataset cannot be loaded here. ``seen`` (dataset ->
    reason, or None where it loads) carries what earlier specs found: each dataset is loaded once."""
    from dpsd.data import DataAbsent, load_data

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


class PlanMemo:
    """What planning several specs (``dpsd reproduce``) reads once instead of once a spec: the store's done and
    failed runs and its client (per tracking URI and experiment), each method's code version (its sources hashed)
    and each distinct set of paths made absolute. Reading the store twice a spec took about 20 of the 57 s a dry run
    of every spec took (2 cores, under load); the store does not change while a plan is made (a dry run writes
    nothing; a real run records absent data only, which these reads do not count). ``archive``: a runs archive whose
    completed runs' figures a summary reads where the store has none of the cell (a fresh checkout's store is empty)."""

    def __init__(self, archive: Path | None = None) -> None:
        self._archive = archive
        self._clients: dict[tuple, tuple[Any, str]] = {}
        self._runs: dict[tuple[str, str], list] = {}
        self._figures: dict[tuple[str, str], dict] = {}
        self._failed: dict[tuple[str, str], dict[str, str]] = {}
        self._versions: dict[str, str] = {}
        self._paths: dict[tuple, tuple[str, str, str | None]] = {}

    def client(self, cfg: DictConfig) -> tuple[Any, str]:
        from dpsd.tracking import tracking_uri

        key = (tracking_uri(cfg), str(cfg.tracking.experiment), str(cfg.tracking.artifact_location), str(cfg.results_dir))
        if key not in self._clients:
            self._clients[key] = client_for(cfg)
        return self._clients[key]

    def done_runs(self, client, experiment_id: str) -> list:
        key = (client.tracking_uri, experiment_id)
        if key not in self._runs:
            self._runs[key] = done_runs(client, experiment_id)
        return self._runs[key]

    def figures(self, client, experiment_id: str) -> dict[str, dict[str, float]]:
        key = (client.tracking_uri, experiment_id)
        if key not in self._figures:
            self._figures[key] = {**archived_figures(self._archive),
                                  **figures_of(self.done_runs(client, experiment_id))}
        return self._figures[key]

    def failed_cells(self, client, experiment_id: str) -> dict[str, str]:
        key = (client.tracking_uri, experiment_id)
        if key not in self._failed:
            self._failed[key] = failed_cells(client, experiment_id)
        return self._failed[key]

    def code_version(self, method: str) -> str:
        if method not in self._versions:
            self._versions[method] = method_code_version(method)
        return self._versions[method]

    def resolve_in_place(self, cfg: DictConfig) -> DictConfig:
        """``cfg`` (a config of the caller's own) with :func:`dpsd.config.resolve_paths`'s absolute paths, set in
        place: they are worked out once per distinct set of paths, and no copy is made."""
        key = (cfg.results_dir, cfg.checkpoint.dir, cfg.data.root)
        if key not in self._paths:
            done = resolve_paths(cfg)
            self._paths[key] = (done.results_dir, done.checkpoint.dir, done.data.root)
        cfg.results_dir, cfg.checkpoint.dir, cfg.data.root = self._paths[key]
        return cfg


@dataclass
class SweepPlan:
    """One spec's cells at a scale and what MLflow says of them, before anything runs."""

    spec: Spec
    cells: list[Cell]
    pending: list[tuple[Cell, DictConfig]]  # to run here: not done, not stale (unless re-run), data found
    status: dict[str, str]                 # config_hash -> done | stale | to_run | data_absent
    reasons: dict[str, str]                # label -> last failure, for cells failed before
    client: Any
    experiment_id: str
    sweep_cfg: DictConfig
    summary: dict[str, Any]


def run_sweep(spec_path: str | os.PathLike, scale: str = "smoke", overrides: Sequence[str] = (),
              address: str | None = None, dry_run: bool = False,
              cpus_per_trial: float | None = None, gpus_per_trial: float | None = None,
              claim_timeout: float = CLAIM_TIMEOUT, rerun_stale: bool = False,
              match: str | None = None, archive: Path | None = None, seeds: int | None = None) -> dict[str, Any]:
    """Run every cell of a spec that has no FINISHED run yet; returns what was done, ran, skipped,
    was stale, had absent data or failed (lists of cell labels, ``failure_reasons`` by label) and
    ``cells`` (label, config_hash, status).

    A cell whose FINISHED runs were all recorded by another code version (:mod:`dpsd.version`) is
    ``stale``: listed, not re-run, unless ``rerun_stale`` (a commit that fixes a typo must not cost
    hours of re-runs; a fix that changes results is re-run on request). ``dry_run`` starts nothing
    and trains nothing: it lists the cells done, stale, failed (their last attempt, retried by the
    next run) and to run (and those whose data cannot be found here). ``claim_timeout``: seconds
    without a heartbeat after which another driver's claim on a cell is taken over. ``match`` (a
    regular expression): only the cells whose label it matches (``re.search``) run; the others that
    would have run are listed as ``left_out``. ``archive``: a runs archive (the CLI passes results/runs.csv
    unless ``--no-archive``) whose completed runs count as the store's would, so a fresh checkout does not
    re-run what the archive holds; None: the store alone. ``seeds``: N runs every cell at seeds 0..N-1 in place
    of the spec's ``seeds:`` list (None: the spec's)."""
    return run_sweeps([spec_path], scale, overrides, address, dry_run, cpus_per_trial, gpus_per_trial,
                      claim_timeout, rerun_stale, match, archive, seeds)[0]


def run_sweeps(spec_paths: Sequence[str | os.PathLike], scale: str = "smoke", overrides: Sequence[str] = (),
               address: str | None = None, dry_run: bool = False,
               cpus_per_trial: float | None = None, gpus_per_trial: float | None = None,
               claim_timeout: float = CLAIM_TIMEOUT, rerun_stale: bool = False,
               match: str | None = None, archive: Path | None = None,
               seeds: int | None = None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """:func:`run_sweep` for several specs at once (``dpsd reproduce``): one summary per spec, in order.
    ``scale``: one for every spec, or one per spec (``dpsd reproduce --scale pages``: a spec at two scales is
    listed twice). ``progress``: gets the time the cells to run will take (:func:`~dpsd.sweep.timing.estimate`,
    its ``estimate_line``; on a dry run too) and, while they run, each finished trial.

    Every spec's pending cells run in one Ray session as one Tune experiment, so a spec's last cell
    does not hold a free core idle while the next spec starts Ray, trains or loads its teacher and
    starts Tune (about 16 s a spec measured on 2 cores). A cell that several specs share runs once,
    under the first spec's parent run; the others list it as done."""
    datasets: dict[str, str | None] = {}  # which datasets load here, found once for every spec
    pattern = cell_pattern(match)
    archived = archived_versions(archive)
    memo = PlanMemo(archive)  # the store's state, its client and the methods' code versions, read once for every spec
    scales = [scale] * len(spec_paths) if isinstance(scale, str) else list(scale)
    if len(scales) != len(spec_paths):
        raise ValueError(f"{len(spec_paths)} specs, {len(scales)} scales")
    plans = [_plan(path, at, overrides, address, dry_run, rerun_stale, datasets, pattern, archived, seeds, memo=memo)
             for path, at in zip(spec_paths, scales)]
    timings = _timings(plans, memo, archive) if progress is not None else []
    if dry_run:
        if progress is not None:
            to_run = {c.config_hash: (c, p.summary["scale"]) for p in reversed(plans) for c in p.cells
                      if p.status[c.config_hash] == "to_run"}
            resources = local_resources(cpus_per_trial, gpus_per_trial)
            here = this_hardware()
            rates = _member_rates(archive)
            teachers = absent_teachers(cfg for p in plans for _, cfg in p.pending)
            progress.estimate_line = "\n".join([
                estimate(list(to_run.values()), timings, here, resources.concurrent, _where(address), rates,
                         teachers).line(),
                *(estimate(list(to_run.values()), timings, gpu, 1, "a recorded GPU machine's", rates).line()
                  for gpu in gpu_classes(timings, here))])
        for plan in plans:
            plan.status.update({c.config_hash: "failed" for c, _ in plan.pending if c.label in plan.reasons})
        return [summarize(p.summary, p.cells, p.status, p.reasons) for p in plans]
    owner: dict[str, tuple[SweepPlan, Cell, DictConfig]] = {}  # config_hash -> (the spec recording it, cell, config)
    for plan in plans:
        for cell, cfg in plan.pending:
            owner.setdefault(cell.config_hash, (plan, cell, cfg))
    outcomes: dict[str, dict] = {}
    driver = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"  # the claims' owner
    if owner:
        started = init_ray(address)
        try:
            label = scale if isinstance(scale, str) else "+".join(sorted(set(scales)))
            ran = _run_pending(plans, owner, driver, label, cpus_per_trial, gpus_per_trial, claim_timeout,
                               progress, timings, _where(address), _member_rates(archive))
            outcomes = ran["outcomes"]
            for plan in plans:
                plan.summary.update(restored=ran["restored"], resources=ran["resources"])
                plan.summary["errors"] += ran["errors"]
        finally:
            if started:
                import ray

                ray.shutdown()
            if progress is not None:
                progress.end()
    after = PlanMemo(archive)  # the store as the trials left it, read once for every spec
    return [_finish(plan, outcomes, owner, driver, after) for plan in plans]


def _timings(plans: list[SweepPlan], memo: PlanMemo, archive: Path | None) -> list[Timing]:
    """The recorded runs' wall times the estimate reads: the archive's and each store's (read once)."""
    timings = archived_timings(archive)
    for key in {(p.client.tracking_uri, p.experiment_id): p for p in plans}.values():
        timings += stored_timings(memo.done_runs(key.client, key.experiment_id))
    return timings


def absent_teachers(configs: Iterable[DictConfig]) -> list[MemberWork]:
    """The full-data teachers ``configs``' cells read that this machine's cache lacks, each once
    (:func:`dpsd.member_rates.teacher_work`): what a sweep trains before those cells."""
    found: dict[str, MemberWork] = {}
    for cfg in configs:
        work = teacher_work(resolve_paths(cfg))
        if work is not None:
            found.setdefault(work.ensemble, work)
    return list(found.values())


def _member_rates(archive: Path | None) -> list[MemberRate]:
    """The ensemble benchmark's records beside the runs archive (:data:`dpsd.member_rates.RATES_FILE`)."""
    return read_rates(Path(archive).parent / RATES_FILE) if archive is not None else []


def _where(address: str | None) -> str:
    """Whose hardware the estimate is priced on: this machine's, the driver's when the trials run on a cluster."""
    return "the driver's" if address else "this machine's"


def cell_pattern(match: str | None, option: str = "--match") -> re.Pattern | None:
    """``option``'s regular expression, compiled; a one-line error before any compute if it is not one."""
    if match is None:
        return None
    try:
        return re.compile(match)
    except re.error as err:
        raise ConfigError(f"{option} {match!r} is not a regular expression ({err})") from None


def _plan(spec_path: str | os.PathLike, scale: str, overrides: Sequence[str], address: str | None, dry_run: bool,
          rerun_stale: bool, datasets: dict[str, str | None], pattern: re.Pattern | None = None,
          archived: dict[str, set[str]] | None = None, seeds: int | None = None,
          skip: re.Pattern | None = None, memo: PlanMemo | None = None) -> SweepPlan:
    """Expand a spec (at seeds 0..``seeds``-1 where given), check the cells ``pattern`` matches (less those
    ``skip`` matches), ask MLflow which are done, stale or failed before, find absent data (recorded as such
    unless ``dry_run``), leave out the other cells: what :func:`run_sweeps` runs."""
    from dpsd.tracking import check_tracking

    spec = with_seeds(load_spec(spec_path), seeds)
    expanded = expand_configs(spec, scale, overrides)
    cells = [cell for cell, _ in expanded]
    if pattern is not None and not any(pattern.search(c.label) for c in cells):
        raise ConfigError(f"--match {pattern.pattern!r} matches none of spec {spec.name}'s {len(cells)} cell labels "
                          f"(e.g. {cells[0].label!r}); dpsd sweep {spec.name} --dry-run lists them")
    memo = memo or PlanMemo()
    configs = [memo.resolve_in_place(cfg) for _, cfg in expanded]  # expand_configs' copies, this plan's own
    sweep_cfg = configs[0]
    if not sweep_cfg.tracking.enabled:
        raise ConfigError("dpsd sweep records every cell in MLflow; tracking=none is not accepted")

    def chosen(label: str) -> bool:
        return (pattern is None or bool(pattern.search(label))) and not (skip is not None and skip.search(label))

    for cell, cfg in zip(cells, configs):  # the cells it may run: a run-time override (checkpoint.every_steps)
        if chosen(cell.label):  # may suit only the cells --match picks and --skip leaves
            try:
                resolve_run(cfg)
            except ConfigError as err:
                raise ConfigError(f"{spec.name} cell {cell.label!r}: {err} (--match or --skip chooses the cells a "
                                  "setting suits)") from None
    check_tracking(sweep_cfg)
    client, experiment_id = memo.client(sweep_cfg)
    done = memo.done_runs(client, experiment_id)
    versions = merged_versions(versions_of(done), archived or {})
    current = {method: memo.code_version(method) for method in sorted({c.method for c in cells})}
    failed_before = memo.failed_cells(client, experiment_id)
    unequal = unequal_budgets(varied_keys(spec), [(group_label(c.label), cfg) for c, cfg in zip(cells, configs)],
                              declared_groups(spec.feeds, spec.name))
    for label, note in unequal.items():  # before anything runs: the report marks the same rows
        print(f"dpsd sweep {spec.name}: warning: unequal budget in cell {label or 'base'}: {note}", file=sys.stderr)
    summary: dict[str, Any] = {"spec": spec.name, "scale": scale, "tracking_uri": client.tracking_uri,
                               "parent_run_id": None, "restored": False, "errors": [], "code_versions": current,
                               "unequal_budgets": unequal, "figures": memo.figures(client, experiment_id)}
    status = {c.config_hash: cell_state(versions, c.config_hash, current[c.method]) for c in cells}
    if rerun_stale:
        status = {digest: "to_run" if state == "stale" else state for digest, state in status.items()}
    status.update({c.config_hash: "left_out" for c in cells
                   if status[c.config_hash] == "to_run" and not chosen(c.label)})
    reasons = {c.label: failed_before[c.config_hash] for c in cells
               if status[c.config_hash] == "to_run" and c.config_hash in failed_before}
    pending = [(c, cfg) for c, cfg in zip(cells, configs) if status[c.config_hash] == "to_run"]

    # Locally the driver sees the workers' files, so absent data is found before Ray starts; on a
    # cluster (--address) the teacher tasks find it where the data should be.
    absent = ({} if address and not dry_run
              else _data_absent_locally([c for c, _ in pending], [cfg for _, cfg in pending], datasets))
    status.update({h: "data_absent" for h in absent})
    plan = SweepPlan(spec, cells, pending, status, reasons, client, experiment_id, sweep_cfg, summary)
    if dry_run:
        return plan
    recorded = recorded_hashes(client, experiment_id, DATA_ABSENT) if absent else set()
    unrecorded = [(c, cfg) for c, cfg in pending if c.config_hash in absent and c.config_hash not in recorded]
    plan.pending = [(c, cfg) for c, cfg in pending if c.config_hash not in absent]
    plan.reasons = {}  # from here on: this run's failures
    if unrecorded:  # a re-run with nothing new to record leaves MLflow as it was
        parent = _parent(plan)
        for cell, cfg in unrecorded:
            record_data_absent(client, experiment_id, parent, cell, cfg, absent[cell.config_hash])
        if not plan.pending:
            client.set_terminated(parent, "FINISHED")
    return plan


def _parent(plan: SweepPlan) -> str:
    """The spec's parent run at the plan's scale (opened or reopened once per driver)."""
    if plan.summary["parent_run_id"] is None:
        plan.summary["parent_run_id"] = parent_run(plan.client, plan.experiment_id, plan.spec, plan.summary["scale"])
    return plan.summary["parent_run_id"]


def _finish(plan: SweepPlan, outcomes: dict[str, dict], owner: dict[str, tuple], driver: str,
            memo: PlanMemo | None = None) -> dict[str, Any]:
    """The plan's summary once the trials are over: each pending cell ran (trained by this driver, in
    this spec's parent run), is done (by another spec's trial or another driver) or failed, with its
    reason."""
    current = plan.summary["code_versions"]
    memo = memo or PlanMemo()
    try:
        recorded = versions_of(memo.done_runs(plan.client, plan.experiment_id))
        finished = {c.config_hash for c in plan.cells if current[c.method] in recorded.get(c.config_hash, ())}
        ran_here = finished_by(plan.client, plan.experiment_id, driver)
    except Exception as err:  # the tracking server went away: only what the trials saw recorded counts
        plan.summary["errors"].append(f"tracking server {plan.client.tracking_uri} did not answer at the end "
                                      f"({one_line(err)}); re-run the sweep once it is back")
        finished = {h for h, outcome in outcomes.items() if outcome.get("outcome") in ("ran", "skipped")}
        ran_here = {h for h, outcome in outcomes.items() if outcome.get("outcome") == "ran"}
    status, reasons = plan.status, plan.reasons
    for c in plan.cells:
        if status[c.config_hash] != "to_run":
            continue
        outcome = outcomes.get(c.config_hash, {})
        if c.config_hash in finished:  # by this driver, or by another one meanwhile (then: done)
            mine = c.config_hash in ran_here and owner[c.config_hash][0] is plan
            status[c.config_hash] = "ran" if mine else "done"
        else:
            status[c.config_hash] = "failed"
            reasons[c.label] = outcome.get("reason") or f"no outcome ({outcome.get('outcome', 'trial did not report')})"
    try:
        plan.summary["figures"] = memo.figures(plan.client, plan.experiment_id)
    except Exception as err:  # the figures are a courtesy; the statuses above are the sweep's result
        plan.summary["errors"].append(f"could not read the cells' figures back ({one_line(err)})")
    return summarize(plan.summary, plan.cells, status, reasons)


def _run_pending(plans: list[SweepPlan], owner: dict[str, tuple], driver: str, scale: str, cpus_per_trial,
                 gpus_per_trial, claim_timeout, progress: Progress | None = None, timings: Sequence[Timing] = (),
                 where: str = "this machine's", rates: Sequence[MemberRate] = ()):
    """Teachers first (one Ray task per distinct teacher, which also finds absent data; the teacher
    tasks share the cluster's CPUs, not a trial's share of them: nothing else runs yet), then the
    trials of every plan: rounds of Tune until no cell is left that another driver held
    (:func:`wait_for_claims`)."""
    import ray

    resources = trial_resources(cpus_per_trial, gpus_per_trial)
    if progress is not None:
        priced = estimate([(cell, plan.summary["scale"]) for plan, cell, _ in owner.values()], timings,
                          this_hardware(), resources.concurrent, where, rates,
                          absent_teachers(cfg for _, _, cfg in owner.values()))
        progress.estimate_line = priced.line()
        progress.start({h: f"{plan.spec.name} ({plan.summary['scale']}): {cell.label}"
                        for h, (plan, cell, _) in owner.items()}, priced,
                       Path(plans[0].sweep_cfg.results_dir) / "ray")
    groups: dict[str, list] = {}
    for plan, cell, cfg in owner.values():
        groups.setdefault(_teacher_group(cfg), []).append((plan, cell, cfg))
    teacher_cpus = max(resources.cpus, float(max(n.get("CPU", 1) for n in _live_nodes()) // len(groups)))
    task = ray.remote(prepare_teacher).options(num_cpus=teacher_cpus, num_gpus=resources.gpus)
    futures = {key: task.remote(list(members[0][1].overrides) + _path_overrides(members[0][2]), teacher_cpus)
               for key, members in groups.items()}
    if progress is not None:
        progress.note(f"preparing {len(groups)} teacher{'s' if len(groups) != 1 else ''}")
    to_run = []
    outcome = {"restored": False, "errors": [], "outcomes": {}, "resources": resources.__dict__}
    for key, members in groups.items():
        try:
            record = ray.get(futures[key])
        except Exception as err:  # the teacher could not be trained: every cell that needs it failed
            record = {"failed": one_line(getattr(err, "cause", None) or err)}
        for plan, cell, cfg in members:
            if "failed" in record:
                tags = {**cell_tags(cell, DONE), "mlflow.parentRunId": _parent(plan)}
                run = plan.client.create_run(plan.experiment_id, run_name=cell.label, tags=tags).info.run_id
                record_failure(plan.client, run, f"teacher: {record['failed']}")
                outcome["outcomes"][cell.config_hash] = {"outcome": "failed", "reason": f"teacher: {record['failed']}"}
                if progress is not None:
                    progress.finished(cell.config_hash, "failed (its teacher)")
            elif "absent" in record:
                if cell.config_hash not in recorded_hashes(plan.client, plan.experiment_id, DATA_ABSENT):
                    record_data_absent(plan.client, plan.experiment_id, _parent(plan), cell, cfg,
                                       record["absent"])
                for each in plans:  # every spec that lists the cell
                    if cell.config_hash in each.status:
                        each.status[cell.config_hash] = "data_absent"
                if progress is not None:
                    progress.finished(cell.config_hash, "data absent")
            else:
                to_run.append((plan, cell, cfg))
    remaining = interleaved_by_method([cell for _, cell, _ in to_run])
    if to_run:
        trials = {cell.config_hash: {"overrides": list(cell.overrides) + _path_overrides(cfg),
                                     "threads": resources.cpus, "parent_run_id": _parent(plan),
                                     "tags": cell_tags(cell, DONE), "owner": driver,
                                     "claim_timeout": claim_timeout} for plan, cell, cfg in to_run}
        storage = Path(plans[0].sweep_cfg.results_dir) / "ray"
        name = plans[0].spec.name if len(plans) == 1 else "reproduce"
        client, experiment_id = plans[0].client, plans[0].experiment_id
        restored = None
        while remaining:
            round_ = run_tune(storage, name, scale, remaining, trials, resources, progress)
            restored = round_["restored"] if restored is None else restored
            outcome["errors"] += round_["errors"]
            outcome["outcomes"].update(round_["outcomes"])
            elsewhere = [c for c in remaining
                         if round_["outcomes"].get(c.config_hash, {}).get("outcome") == "claimed_elsewhere"]
            remaining = wait_for_claims(client, experiment_id, elsewhere, claim_timeout)
        outcome["restored"] = bool(restored)
    for plan in plans:
        if plan.summary["parent_run_id"] is None:
            continue
        try:
            plan.client.set_terminated(plan.summary["parent_run_id"], "FINISHED")
        except Exception as err:  # the tracking server went away; the parent is reopened by the next run
            outcome["errors"].append(f"parent run {plan.summary['parent_run_id']} not closed ({one_line(err)})")
    return outcome


def _live_nodes() -> list[dict]:
    """The resources (``CPU``, ``GPU``, ...) of each live node of the running Ray cluster."""
    import ray

    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def wait_for_claims(client, experiment_id: str, cells: list[Cell], claim_timeout: float,
                    poll: float = 2.0) -> list[Cell]:
    """Wait while other drivers hold ``cells``: returns, once one of them is neither done nor live
    claimed (its claim went stale, its driver gave it up or failed it), those not done, to run
    again; [] once all are done."""
    while cells:
        cells = [c for c in cells if not is_done(client, experiment_id, c.config_hash, c.method)]
        for cell in cells:
            abandon_stale_claims(client, experiment_id, cell.config_hash, claim_timeout)
        if any(not live_claims(client, experiment_id, c.config_hash, claim_timeout) for c in cells):
            return cells
        if cells:
            time.sleep(poll)
    return []


def _path_overrides(cfg: DictConfig) -> list[str]:
    """Absolute ``results_dir`` and ``data.root``: Ray workers run in their own directories."""
    paths = [f"results_dir={cfg.results_dir}"]
    if cfg.data.root is not None:
        paths.append(f"data.root={cfg.data.root}")
    return paths
