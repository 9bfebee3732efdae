"""A sweep's state in MLflow: which cells are done, failed, claimed or have absent data, and the
sweep's parent run.

A cell is *claimed* before it trains, by a RUNNING run tagged with its ``config_hash``, the
claiming driver (``claim_owner``) and a heartbeat (``claim_heartbeat``, seconds since the epoch)
that the trial refreshes while it trains. :func:`claim_cell` makes claims atomic on any store
that shows a run to every search after it is created: a driver creates its claim, then searches,
and keeps it only if it is the only live claim (two drivers that see each other both back off). A
claim whose heartbeat is older than the claim timeout belongs to a driver that died: the next
driver marks it ``abandoned`` (KILLED) and claims the cell itself. The claim run is the run the
cell's result is logged into (``done``, FINISHED) or its failure (``failed`` with a one-line
``failure_reason``, FAILED), so a failed cell is listed as failed and retried by the next sweep.
"""

from __future__ import annotations

import csv
from pathlib import Path

import json
import random
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from omegaconf import DictConfig, OmegaConf

from dpsd.errors import ConfigError
from dpsd.progress import every
from dpsd.sweep.spec import Cell, Spec
from dpsd.version import METHOD_CODE_VERSION, code_version, method_code_version, method_code_version_at

DONE, DATA_ABSENT, CLAIMED, FAILED, ABANDONED = "done", "data_absent", "claimed", "failed", "abandoned"
CLAIM_OWNER, HEARTBEAT, FAILURE_REASON = "claim_owner", "claim_heartbeat", "failure_reason"


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


def done_runs(client, experiment_id: str) -> list:
    """The FINISHED runs tagged ``cell_status=done``: one search, from which :func:`versions_of` and
    :func:`figures_of` read (planning many specs against one store searches it once, not twice a spec)."""
    return _search(client, experiment_id, f"tags.cell_status = '{DONE}' and attributes.status = 'FINISHED'")


def recorded_versions(client, experiment_id: str) -> dict[str, set[str]]:
    """``config_hash -> method code versions`` of the FINISHED done runs (``""`` for a run recorded
    before runs were tagged with :func:`dpsd.version.method_code_version`)."""
    return versions_of(done_runs(client, experiment_id))


def versions_of(runs: list) -> dict[str, set[str]]:
    """:func:`recorded_versions` of the runs :func:`done_runs` found."""
    versions: dict[str, set[str]] = {}
    for run in runs:
        if "config_hash" in run.data.tags:
            versions.setdefault(run.data.tags["config_hash"], set()).add(run.data.tags.get(METHOD_CODE_VERSION, ""))
    return versions


DEFAULT_ARCHIVE = Path("results/runs.csv")
"""The runs archive tracked in git (dpsd.report.runs): read by default where it exists."""


def _archived_done(path: Path | None) -> list[dict[str, str]]:
    """The rows of a runs archive that are completed runs of a cell (none without the file)."""
    if path is None or not Path(path).is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle)
                if row.get("status") == "FINISHED" and row.get("cell_status") == DONE and row.get("config_hash")]


def archived_versions(path: Path | None) -> dict[str, set[str]]:
    """``config_hash -> method code versions`` of the completed runs in a runs archive (none without the
    file), so a fresh checkout's sweep counts what the archive holds as done, or stale, as the store would."""
    versions: dict[str, set[str]] = {}
    for row in _archived_done(path):
        versions.setdefault(row["config_hash"], set()).add(row.get("code_version", ""))
    return versions


def archived_figures(path: Path | None) -> dict[str, dict[str, float]]:
    """:func:`recorded_figures` of a runs archive's completed runs (the latest run of a hash), so a fresh
    checkout's sweep summarises the cells the archive holds as the store's would. The archive keeps accuracy in
    percent (:func:`dpsd.report.runs.normalise`); a figure here is a fraction, as the runs log it."""
    figures: dict[str, dict[str, float]] = {}
    for row in sorted(_archived_done(path), key=lambda r: r.get("start_time", "")):
        figures[row["config_hash"]] = {"accuracy": _number(row.get("accuracy")) / 100,
                                       **{key: _number(row.get(key)) for key in ("eps_claimed", "eps_rigorous")}}
    return figures


def _number(text: str | None) -> float:
    """A figure from an archive cell: NaN where it is empty."""
    return float(text) if text else float("nan")


def merged_versions(*sources: dict[str, set[str]]) -> dict[str, set[str]]:
    """The union of several ``config_hash -> versions`` maps."""
    out: dict[str, set[str]] = {}
    for source in sources:
        for digest, versions in source.items():
            out.setdefault(digest, set()).update(versions)
    return out


def recorded_figures(client, experiment_id: str) -> dict[str, dict[str, float]]:
    """``config_hash -> {accuracy, eps_claimed, eps_rigorous}`` of the FINISHED done runs (the latest
    run of a hash); an infinite epsilon is read from the run's tag, which keeps it (metrics cannot)."""
    return figures_of(done_runs(client, experiment_id))


def figures_of(runs: list) -> dict[str, dict[str, float]]:
    """:func:`recorded_figures` of the runs :func:`done_runs` found."""
    figures: dict[str, dict[str, float]] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        tags, metrics = run.data.tags, run.data.metrics
        if "config_hash" in tags:
            figures[tags["config_hash"]] = {
                "accuracy": metrics.get("student_test_accuracy", float("nan")),
                **{key: float(tags.get(key, metrics.get(key, float("nan")))) for key in ("eps_claimed", "eps_rigorous")},
            }
    return figures


def finished_by(client, experiment_id: str, owner: str) -> set[str]:
    """The config hashes of the FINISHED done runs that ``owner`` (a driver) claimed and trained: what it
    ran, known from MLflow even where Tune lost a trial's reported result (a restored trial)."""
    runs = _search(client, experiment_id, f"tags.cell_status = '{DONE}' and attributes.status = 'FINISHED' "
                                          f"and tags.{CLAIM_OWNER} = '{owner}'")
    return {run.data.tags["config_hash"] for run in runs if "config_hash" in run.data.tags}


def equivalent_versions(client, experiment_ids: list[str], version_at=None) -> dict[tuple[str, str], str]:
    """``(recorded version, method) -> vouching commit`` for the runs whose method code version is not
    today's (:func:`dpsd.version.method_code_version`; a run recorded before that tag has none), where a
    commit the runs name (tag ``git_commit``) has today's version of their method under today's rule
    (``version_at``; default :func:`dpsd.version.method_code_version_at`): those runs were computed by
    today's code of their method. A recorded version is the method one, or for a run without it the
    whole tree's (tag ``code_version``): one commit vouches for every run of that method and version,
    and today's whole-tree version vouches for itself."""
    version_at = version_at or method_code_version_at  # None for a dirty tree's '<commit>-dirty': no such commit
    tree = code_version()
    commits: dict[tuple[str, str], set[str]] = {}
    vouched: dict[tuple[str, str], str] = {}
    for experiment_id in experiment_ids:
        for run in _search(client, experiment_id, "tags.method != ''"):
            tags = run.data.tags
            method, recorded = tags["method"], _recorded_version(tags)
            if recorded == tree:  # recorded by today's whole tree, a dirty one too: today's code of its method
                vouched[(recorded, method)] = f"tree {tree}"
            elif recorded and recorded != method_code_version(method) and tags.get("git_commit"):
                commits.setdefault((recorded, method), set()).add(tags["git_commit"])
    for (version, method), found in commits.items():
        commit = next((c for c in sorted(found) if version_at(c, method) == method_code_version(method)), None)
        if commit is not None:
            vouched[(version, method)] = commit
    return vouched


def _recorded_version(tags: dict) -> str:
    return tags.get(METHOD_CODE_VERSION) or tags.get("code_version", "")


def parse_path(text: str) -> list[tuple[str, bool, str]]:
    """``KEY=VALUE[,KEY!=VALUE...]`` (a config's parameter names and string values) as ``(key, equal, value)``
    conditions, all of which a config must meet to be on the path; a one-line error names the form otherwise."""
    conditions = []
    for pair in text.split(","):
        key, equal, value = pair.partition("!=") if "!=" in pair else pair.partition("=")
        if not key or not equal:
            raise ConfigError(f"a path is KEY=VALUE or KEY!=VALUE pairs joined by commas, got {text!r}")
        conditions.append((key, equal == "=", value))
    return conditions


def on_path(config: dict[str, str], paths: Sequence[list[tuple[str, bool, str]]]) -> bool:
    """Whether a flattened config (MLflow's parameters) meets every condition of one of ``paths``
    (:func:`parse_path`); a key the config lacks is unequal to every value."""
    return any(all((config.get(key) == value) == equal for key, equal, value in path) for path in paths)


def retag_equivalent_runs(client, experiment_ids: list[str], vouched: dict[tuple[str, str], str],
                          stale_where: Sequence[list[tuple[str, bool, str]]] = ()) -> dict[str, str]:
    """Give every run of a ``(recorded version, method)`` in ``vouched`` (:func:`equivalent_versions`)
    today's method code version, keeping the recorded one (``code_version_recorded``) and the commit
    that vouches for it (``code_version_vouched_by``); returns ``run id -> recorded version`` of the runs
    changed. A run whose logged config matches one of ``stale_where`` (:func:`on_path`: a change's path, the runs
    whose numbers it changes) keeps its version, and so stays stale."""
    changed: dict[str, str] = {}
    for experiment_id in experiment_ids:
        for run in _search(client, experiment_id, "tags.method != ''"):
            key = (_recorded_version(run.data.tags), run.data.tags["method"])
            if key in vouched and not on_path(run.data.params, stale_where):
                client.set_tag(run.info.run_id, "code_version_recorded", key[0])
                client.set_tag(run.info.run_id, "code_version_vouched_by", vouched[key])
                client.set_tag(run.info.run_id, METHOD_CODE_VERSION, method_code_version(key[1]))
                changed[run.info.run_id] = key[0]
    return changed


def cell_state(versions: dict[str, set[str]], digest: str, current: str) -> str:
    """``done`` (recorded by this code), ``stale`` (recorded by other code only) or ``to_run``."""
    if digest not in versions:
        return "to_run"
    return "done" if current in versions[digest] else "stale"


def is_done(client, experiment_id: str, digest: str, method: str) -> bool:
    """Whether the config hash ``digest`` (a cell of ``method``) has a FINISHED run by this code of its
    method (a trial's own check before training; a stale cell reaches a trial only with ``--rerun-stale``)."""
    filter_string = (f"tags.config_hash = '{digest}' and tags.cell_status = '{DONE}' "
                     f"and tags.{METHOD_CODE_VERSION} = '{method_code_version(method)}' and attributes.status = 'FINISHED'")
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


def failed_cells(client, experiment_id: str) -> dict[str, str]:
    """``config_hash -> one-line reason`` of the cells whose last attempt failed (FAILED runs
    tagged ``cell_status=failed``; the newest wins)."""
    runs = _search(client, experiment_id, f"tags.cell_status = '{FAILED}' and attributes.status = 'FAILED'")
    runs.sort(key=lambda run: run.info.start_time or 0)
    return {run.data.tags["config_hash"]: run.data.tags.get(FAILURE_REASON, "") for run in runs
            if "config_hash" in run.data.tags}


def _claims(client, experiment_id: str, digest: str) -> list:
    runs = client.search_runs([experiment_id], f"tags.config_hash = '{digest}' and attributes.status = 'RUNNING'")
    return [run for run in runs if CLAIM_OWNER in run.data.tags]


def _fresh(run, timeout: float, now: float) -> bool:
    return now - float(run.data.tags.get(HEARTBEAT, 0)) < timeout


def live_claims(client, experiment_id: str, digest: str, timeout: float) -> list:
    """The RUNNING claims on ``digest`` whose heartbeat is younger than ``timeout`` seconds."""
    now = time.time()
    return [run for run in _claims(client, experiment_id, digest) if _fresh(run, timeout, now)]


def abandon_stale_claims(client, experiment_id: str, digest: str, timeout: float) -> list[str]:
    """Mark the claims on ``digest`` whose heartbeat is ``timeout`` seconds old (their driver died)
    ``abandoned`` and KILLED; returns their run ids. Two drivers doing this at once do the same."""
    now = time.time()
    stale = [run.info.run_id for run in _claims(client, experiment_id, digest) if not _fresh(run, timeout, now)]
    for run_id in stale:
        client.set_tag(run_id, "cell_status", ABANDONED)
        client.set_terminated(run_id, "KILLED")
    return stale


def claim_cell(client, experiment_id: str, digest: str, tags: dict[str, str], owner: str, timeout: float,
               attempts: int = 3) -> str | None:
    """Claim the cell ``digest``: its claim run's id, or None while another driver holds a live claim.

    Create, then search: the claim stands only if no other live claim is seen. Of two drivers that
    claim at once, at least the later one sees the earlier (a search sees every run created before
    it), so at most one keeps its claim; if both see each other both withdraw and try again after a
    random pause, up to ``attempts`` times."""
    for attempt in range(attempts):
        if live_claims(client, experiment_id, digest, timeout):
            return None
        abandon_stale_claims(client, experiment_id, digest, timeout)
        claim_tags = {**tags, "cell_status": CLAIMED, CLAIM_OWNER: owner, HEARTBEAT: f"{time.time():.3f}"}
        run_id = client.create_run(experiment_id, run_name=tags.get("cell"), tags=claim_tags).info.run_id
        if [run.info.run_id for run in live_claims(client, experiment_id, digest, timeout)] == [run_id]:
            return run_id
        client.delete_run(run_id)
        time.sleep(random.uniform(0.2, 2.0) * (attempt + 1))
    return None


def release_claim(client, run_id: str) -> None:
    """Withdraw a claim that trained nothing (the cell was finished elsewhere meanwhile)."""
    client.delete_run(run_id)


def record_failure(client, run_id: str, reason: str) -> None:
    """The claim ``run_id`` becomes the cell's failure record: ``cell_status=failed``, the one-line
    ``failure_reason``, FAILED."""
    client.set_tag(run_id, FAILURE_REASON, reason[:5000])
    client.set_tag(run_id, "cell_status", FAILED)
    client.set_terminated(run_id, "FAILED")


@contextmanager
def heartbeat(client, run_id: str, interval: float) -> Iterator[None]:
    """Refresh the claim's heartbeat every ``interval`` seconds while the block runs (a store that
    does not answer for a while only delays the next beat)."""
    def beat() -> None:
        try:
            client.set_tag(run_id, HEARTBEAT, f"{time.time():.3f}")
        except Exception:  # the store is away: the claim ages, and is taken over if it stays away
            pass

    with every(interval, beat, f"claim heartbeat {run_id}"):
        yield
