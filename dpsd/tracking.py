"""MLflow: where runs are recorded. Methods never call this; the runner does.

By default a SQLite store ``<results_dir>/mlflow.db`` with artifacts under
``<results_dir>/mlartifacts`` (absolute paths, as MLflow 3 refuses a plain ``./mlruns`` file store
and Ray trials change their working directory); ``tracking.uri`` may point at an ``mlflow server``.

A server is asked whether it answers (:func:`check_tracking`) before anything trains. One that goes
away while a run trains does not lose the run: :func:`record_run` writes it to the local fallback
store ``<results_dir>/fallback/`` instead, and ``dpsd sync`` (:func:`sync_runs`) copies it to the
server later.
"""

from __future__ import annotations

import fcntl
import math
import os
import platform
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import mlflow
import requests
import torch
from omegaconf import DictConfig, OmegaConf
from torchvision.utils import save_image

from dpsd import jsonio
from dpsd.allocator import in_use
from dpsd.errors import Fault
from dpsd.version import METHOD_CODE_VERSION, method_code_version

FALLBACK = "fallback"  # <results_dir>/fallback: runs finished while the tracking server was away
INTENDED_URI = "dpsd.intended_uri"  # tag of a fallback run: the store it was meant for
SYNCED_TO = "dpsd.synced_to"  # tag of a fallback run once copied: "<uri> <run id there>"


def tracking_uri(cfg: DictConfig) -> str:
    if cfg.tracking.uri:
        return str(cfg.tracking.uri)
    return f"sqlite:///{Path(cfg.results_dir) / 'mlflow.db'}"  # an absolute path gives four slashes


def is_server(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")


def server_problem(uri: str, timeout: float) -> str | None:
    """Why the MLflow server at ``uri`` does not answer its ``/health`` endpoint within ``timeout``
    seconds (a few words), or None when it does."""
    try:
        response = requests.get(uri.rstrip("/") + "/health", timeout=timeout)
    except requests.Timeout:
        return f"no answer within {timeout:g} s"
    except requests.ConnectionError:
        return "connection refused or host unreachable"
    except requests.RequestException as err:
        return type(err).__name__
    return None if response.ok else f"HTTP {response.status_code} from /health"


def check_tracking(cfg: DictConfig) -> None:
    """Stop with one line naming ``tracking.uri`` when it does not answer within
    ``tracking.check_timeout`` seconds (a local store: when its folder cannot be written); called
    before anything trains."""
    if not cfg.tracking.enabled:
        return
    uri = tracking_uri(cfg)
    if is_server(uri):
        problem = server_problem(uri, float(cfg.tracking.check_timeout))
        if problem:
            raise Fault(f"tracking server {uri} does not answer ({problem}); start it (mlflow server "
                        "--host 127.0.0.1 ...) or leave tracking.uri unset for the local store under results/")
        return
    folder = Path(cfg.results_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise Fault(f"cannot create the tracking store's folder {folder}: {err.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise Fault(f"cannot write the tracking store's folder {folder}")


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
    # MLflow retries a refused request 7 times with exponential backoff (about 4 minutes); a run
    # that finished has the fallback store instead, so a few retries suffice.
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(int(cfg.tracking.http_retries))
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


@dataclass(frozen=True)
class Recorded:
    """Where a finished run was recorded: ``fallback`` says why the configured server was not used."""

    run_id: str
    uri: str
    fallback: str | None = None


def fallback_config(cfg: DictConfig) -> DictConfig:
    """The store a run falls back to: SQLite under ``<results_dir>/fallback``."""
    store = cfg.copy()
    store.results_dir = str(Path(cfg.results_dir) / FALLBACK)
    store.tracking.uri = None
    store.tracking.artifact_location = None
    return store


def record_run(
    cfg: DictConfig,
    metrics: dict[str, float],
    privacy: dict[str, Any],
    models: dict[str, torch.nn.Module],
    samples: torch.Tensor | None,
    tags: dict[str, str] | None = None,
) -> Recorded:
    """Log one finished run.

    ``models`` are the *releasable* models only (student, generator): the teacher and any private
    data stay in the teacher cache, outside the tracked artifacts. The wall times are the whole run's
    (:func:`whole_run_wall`, written back into ``metrics``), and a new MLflow run starts when the run did
    (``time_total_s`` before it is logged), so its span in MLflow's UI is the run's. A tracking server that does not
    answer when the run is logged gets the run written to :func:`fallback_config`'s store instead,
    tagged with the URI it was meant for (``dpsd sync`` copies it there). ``tracking.run_id`` (a
    sweep cell's claim) is logged into rather than a new run.
    """
    metrics.update(whole_run_wall(metrics))  # the summary a caller returns shares the dict: it says the same
    # the version a sweep reads to tell a current run from a stale one (dpsd.version)
    tags = {**(tags or {}), METHOD_CODE_VERSION: method_code_version(str(cfg.method.name))}
    uri = tracking_uri(cfg)
    try:
        return Recorded(_record_with_retries(cfg, cfg, metrics, privacy, models, samples, tags, cfg.tracking.get("run_id")), uri)
    except Exception:
        problem = server_problem(uri, float(cfg.tracking.check_timeout)) if is_server(uri) else None
        if problem is None:
            raise
    store = fallback_config(cfg)
    run_id = _record_with_retries(cfg, store, metrics, privacy, models, samples, {**tags, INTENDED_URI: uri}, None)
    return Recorded(run_id, tracking_uri(store), f"tracking server {uri}: {problem}")


def _record_with_retries(cfg, store, metrics, privacy, models, samples, tags, into) -> str:
    for attempt in range(_RETRIES):
        try:
            return _record_run_once(cfg, store, metrics, privacy, models, samples, tags, into)
        except Exception as err:  # SQLite under concurrent trials: "database is locked"
            if attempt + 1 == _RETRIES or "locked" not in str(err).lower():
                raise
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


_RETRIES = 6


def _record_run_once(cfg, store, metrics, privacy, models, samples, tags, into) -> str:
    """One attempt of :func:`record_run`: the run ``cfg`` describes, logged in the store ``store``
    names, into the RUNNING run ``into`` or a new one. ``tracking.tags`` are added to ``tags`` and
    ``tracking.parent_run_id`` makes the run a child (``dpsd sweep`` sets both); the run is FINISHED
    only once everything is logged, so an interrupted one never counts as done."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    experiment_id = ensure_experiment(store)
    client = MlflowClient(tracking_uri(store))
    tags = {"hardware": hardware_text(), **(tags or {}), **dict(cfg.tracking.get("tags") or {})}
    parent = cfg.tracking.get("parent_run_id")
    if parent:
        tags["mlflow.parentRunId"] = parent  # a plain tag: a fallback store does not hold the parent
    if into:
        run_id = into
        client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
    else:
        run_id = client.create_run(experiment_id, start_time=run_start_ms(metrics), tags=tags).info.run_id
    now = int(time.time() * 1000)
    params = [Param(k, str(v)) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True))]
    values = [Metric(k, v, now, 0) for k, v in finite_metrics({**metrics, LOAD_METRIC: load_per_core()}).items()]
    for start in range(0, max(len(params), len(values)), 100):  # MLflow takes 100 parameters a batch
        client.log_batch(run_id, metrics=values[start:start + 100], params=params[start:start + 100])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        (folder / "ledger.json").write_text(jsonio.dumps(privacy, indent=2, default=str))
        for name, model in models.items():
            torch.save(model.state_dict(), folder / f"{name}.pt")
        if samples is not None:
            save_sample_grid(samples, folder / "samples.png")
        client.log_artifacts(run_id, str(folder))
    client.set_terminated(run_id, "FINISHED")
    return run_id


RESUMED_BEFORE = "train_s_before_resume"
"""The metric a run resumed from a checkpoint carries: its training seconds before the resume (dpsd.methods.base)."""
SINCE_RESUME = "time_since_resume_s"
"""The metric that keeps a resumed run's last process's wall seconds, once ``time_total_s`` counts the whole run."""


def whole_run_wall(metrics: dict[str, float]) -> dict[str, float]:
    """A resumed run's wall times as the whole run's: ``time_total_s`` (this process's seconds, from the driver) plus
    the training before the resume (:data:`RESUMED_BEFORE`), the process's own kept as :data:`SINCE_RESUME`
    (``time_train_s`` already counts it). Empty for a run that was not resumed, or whose times are already whole."""
    if RESUMED_BEFORE not in metrics or SINCE_RESUME in metrics or "time_total_s" not in metrics:
        return {}
    process = float(metrics["time_total_s"])
    return {"time_total_s": process + float(metrics[RESUMED_BEFORE]), SINCE_RESUME: process}


def run_start_ms(metrics: dict[str, float], now: float | None = None) -> int:
    """When the run began, in MLflow's milliseconds: now less its whole wall (``time_total_s``; now without one)."""
    now = time.time() if now is None else now
    return int((now - float(metrics.get("time_total_s", 0.0))) * 1000)


def hardware_text() -> str:
    """The machine a run ran on, as its ``hardware`` tag: CPU model and logical cores, torch's intra-op threads,
    the GPU (``no GPU``) and, where the run had it, the jemalloc allocator (:mod:`dpsd.allocator`: faster on the
    CPU, the same numbers), so a table's wall minutes say where and how they were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    allocator = ", jemalloc" if in_use() == "jemalloc" else ""
    return f"{cpu}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads, {gpu}{allocator}"


_THREADS = re.compile(r", \d+ torch threads|, jemalloc")


def hardware_class(hardware: str) -> str:
    """A run's ``hardware`` tag less what varies between trials of one machine (torch's threads, the allocator):
    ``AMD EPYC, 2 logical cores, no GPU``; what timings are compared on (:mod:`dpsd.sweep.timing`,
    :mod:`dpsd.member_rates`)."""
    return _THREADS.sub("", hardware or "").strip()


def this_hardware() -> str:
    """This machine's :func:`hardware_class`, as a run here would be tagged."""
    return hardware_class(hardware_text())


LOAD_METRIC = "load_per_core"
"""The run metric holding :func:`load_per_core` as the run was recorded."""


def load_per_core() -> float | None:
    """The machine's 15-minute load average per logical core as a run is recorded (its ``load_per_core`` metric):
    about 1/cores for a one-thread run alone, 1 or more where work waited for the cores; so that a page's wall
    minutes say whether they were taken alone or beside other work. None where the platform keeps no load
    average."""
    try:
        return os.getloadavg()[2] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return None


def finite_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics MLflow can hold: finite numbers (an infinite epsilon is kept in the run's tags and JSON)."""
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}


def record_report(cfg: DictConfig, metrics: dict[str, float], tags: dict[str, str], report: dict[str, Any],
                  name: str = "report.json") -> str:
    """Log a run that trains nothing (an audit): ``cfg`` as parameters, the finite ``metrics``,
    ``tags`` and ``report`` as a JSON artifact ``name``; returns its run id."""
    experiment_id = ensure_experiment(cfg)
    with mlflow.start_run(experiment_id=experiment_id, tags=tags) as run:
        mlflow.log_params(dict(flatten(OmegaConf.to_container(cfg, resolve=True))))
        mlflow.log_metrics(finite_metrics(metrics))
        mlflow.log_text(jsonio.dumps(report, indent=2, default=str), name)
    return run.info.run_id


UNENDED = ("RUNNING", "SCHEDULED")
"""MLflow run statuses of a run that has not ended: :func:`sync_runs` leaves such a run for a later sync."""


@dataclass(frozen=True)
class Synced:
    """What :func:`sync_runs` did: ``copied``, ``(fallback run id, target uri, new run id)`` per copied run;
    ``unended``, the fallback run ids it left because they had not ended."""

    copied: list[tuple[str, str, str]]
    unended: list[str]


def sync_runs(fallback_dir: str | os.PathLike, to: str | None = None, timeout: float = 3.0) -> Synced:
    """Copy every ended run of the fallback store in ``fallback_dir`` not yet copied to the store it was
    meant for (its ``dpsd.intended_uri`` tag; ``to`` overrides): parameters, every metric's history,
    tags, artifacts, status and times, into the experiment of the same name. Each copied run is
    tagged ``dpsd.synced_to`` in the fallback store, so a second sync copies nothing. A run that has not
    ended (:data:`UNENDED`: still running, or its process killed before it ended) is left untagged: copied,
    it would be marked synced half made and its end never copied; a later sync copies it once it has ended.

    MLflow has no built-in copy between stores (``mlflow-export-import`` is a separate package whose
    last release predates MLflow 3); this is that copy with :class:`~mlflow.tracking.MlflowClient`.
    """
    from mlflow.entities import Param, RunTag
    from mlflow.tracking import MlflowClient

    database = Path(fallback_dir) / "mlflow.db"
    if not database.is_file():
        raise Fault(f"no fallback store at {database}")
    source = MlflowClient(f"sqlite:///{database.resolve()}")
    copied, unended = [], []
    for experiment in source.search_experiments():
        for run in source.search_runs([experiment.experiment_id], max_results=50000):
            target_uri = to or run.data.tags.get(INTENDED_URI)
            if run.data.tags.get(SYNCED_TO) or not target_uri:
                continue
            if run.info.status in UNENDED:
                unended.append(run.info.run_id)
                continue
            if is_server(target_uri) and (problem := server_problem(target_uri, timeout)):
                raise Fault(f"tracking server {target_uri} does not answer ({problem}); nothing synced after "
                            f"{len(copied)} run(s)")
            target = MlflowClient(target_uri)
            found = target.get_experiment_by_name(experiment.name)
            experiment_id = found.experiment_id if found else target.create_experiment(
                experiment.name, artifact_location=_local_artifacts(target_uri))
            tags = {k: v for k, v in run.data.tags.items() if k != INTENDED_URI}
            new_id = target.create_run(experiment_id, start_time=run.info.start_time, tags=tags,
                                       run_name=run.info.run_name).info.run_id
            params = [Param(k, v) for k, v in run.data.params.items()]
            for start in range(0, len(params), 100):
                target.log_batch(new_id, params=params[start:start + 100])
            for key in run.data.metrics:
                history = source.get_metric_history(run.info.run_id, key)
                for start in range(0, len(history), 1000):
                    target.log_batch(new_id, metrics=history[start:start + 1000])
            with tempfile.TemporaryDirectory() as tmp:
                local = source.download_artifacts(run.info.run_id, "", tmp)
                if any(Path(local).iterdir()):
                    target.log_artifacts(new_id, local)
            target.set_terminated(new_id, run.info.status, end_time=run.info.end_time)
            source.log_batch(run.info.run_id, tags=[RunTag(SYNCED_TO, f"{target_uri} {new_id}")])
            copied.append((run.info.run_id, target_uri, new_id))
    return Synced(copied, unended)


def _local_artifacts(uri: str) -> str | None:
    """``<folder>/mlartifacts`` beside a SQLite store (MLflow's default, ``./mlruns``, depends on
    the working directory); None for a server, which chooses its own."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
