"""The runs a report reads: MLflow ``search_runs`` into pandas, one row per sweep cell.

A report never recomputes a number; every reproduced figure comes from a run found here. Only sweep
trial runs (those tagged ``config_hash``) are read, found by that hash and not by their ``sweep`` tag
(a cell shared by two specs runs once); a hyper-parameter study's trials are tagged so too (:mod:`dpsd.sweep.study`),
and keep what the study's page reads in :data:`STUDY_COLUMNS`. For each hash the latest FINISHED run tagged
``cell_status=done`` wins; a ``cell_status=data_absent`` marker counts only when there is none.

An MLflow store is a file beside the checkout, and a lost machine loses it. The *runs archive* (a CSV
tracked in git, ``results/runs.csv``, read by default when it exists) keeps every completed run a report
read, current or not: :func:`load_history` merges it with the store, :func:`load_runs` keeps one current
run per cell under the rule above, and :func:`write_archive` writes the history back with a
``superseded`` flag on every run that is not its cell's current one (never silently mixed: a table reads
only current rows) and the cell's ``overrides`` (less where this machine keeps its data and store) where a
rendered spec names the cell.

One current run per cell *as a reader names it*, too: two config hashes can share a cell's overrides and code
version when something outside both (a method's YAML defaults) changed between their runs, and the archive then held
two current run sets for what reads as one cell (DP-DFD at ε 10: the sets before and after its YAML's readings
changed). The rule (:func:`superseded_by_later`): among current runs of one scale with the same overrides, less where
the data and results lie (:data:`PLACE_KEYS`), and the same code version, the latest run supersedes the others;
:func:`duplicate_sets` finds what the rule has not yet resolved (the archive test runs it on ``results/runs.csv``).
Artifact locations are written relative to ``results_dir`` (:func:`relative_artifact_uri`), so the archive names no
machine's path. The set-up's own runs (:data:`SETUP_SWEEP`) are never written to it: they check a machine, and a
reader's archive holds results.
Accuracies in the archive and every table are percent; the runs' own metrics and ``--json`` summaries
keep MLflow's fractions (``metrics.student_test_accuracy``), as docs/reproducing.md says.
"""

from __future__ import annotations

import math
from pathlib import Path

import mlflow
import pandas as pd

RUN_COLUMNS = ("config_hash", "run_id", "status", "cell_status", "sweep", "cell", "scale", "start_time",
               "artifact_uri", "accuracy", "teacher_accuracy", "eps_claimed", "eps_rigorous", "delta",
               "neighbouring", "code_version")
FLOAT_COLUMNS = ("accuracy", "teacher_accuracy", "eps_claimed", "eps_rigorous", "delta")
HISTORY_COLUMNS = ("superseded", "overrides")  # written by write_archive; absent from archives written before
STUDY_COLUMNS = ("study", "study_phase", "study_params", "study_seed")
"""A study trial's (:mod:`dpsd.sweep.study`): the study's name, its phase (search or repeat), the sampled values
(JSON) and the seed; "" on every other run. With the run's ``metrics.selection_accuracy`` and
``metrics.held_out_accuracy`` they are all a study's page reads (:mod:`dpsd.report.study`)."""
OPTIONAL_COLUMNS = ("hardware", *STUDY_COLUMNS)  # hardware: the run's machine (dpsd.tracking.hardware_text); "" for
# runs recorded before either


def _float(value: object) -> float:
    """A tag or metric as a float: ``"inf"`` stays infinite, missing becomes NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return math.nan
    return float(value)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series([None] * len(frame), index=frame.index, dtype=object)


def _epsilon(frame: pd.DataFrame, key: str) -> pd.Series:
    """Tags keep infinite epsilons (metrics cannot); the metric is the fallback."""
    tags, metrics = _column(frame, f"tags.{key}"), _column(frame, f"metrics.{key}")
    values = [_float(m) if t is None or (isinstance(t, float) and math.isnan(t)) or t == "" else _float(t)
              for t, m in zip(tags, metrics)]
    return pd.Series(values, index=frame.index, dtype=float)


def normalise(raw: pd.DataFrame) -> pd.DataFrame:
    """``search_runs`` columns -> one row per completed run (or data-absent marker) with the figures a report shows.

    ``accuracy`` and ``teacher_accuracy`` are percentages (the runs log fractions); the ``metrics.*``
    columns are kept for reference rows whose metric is not accuracy.
    """
    if raw.empty or "tags.config_hash" not in raw.columns:
        return pd.DataFrame(columns=RUN_COLUMNS)
    runs = raw[raw["tags.config_hash"].notna() & (raw["tags.config_hash"] != "")].copy()
    out = pd.DataFrame({
        "config_hash": runs["tags.config_hash"],
        "run_id": runs["run_id"],
        "status": runs["status"],
        "cell_status": _column(runs, "tags.cell_status").fillna(""),
        "sweep": _column(runs, "tags.sweep"),
        "cell": _column(runs, "tags.cell"),
        "scale": _column(runs, "tags.scale"),
        "start_time": runs["start_time"],
        "artifact_uri": runs["artifact_uri"],
        "accuracy": 100.0 * _column(runs, "metrics.student_test_accuracy").astype(float),
        "teacher_accuracy": 100.0 * _column(runs, "metrics.teacher_test_accuracy").astype(float),
        "eps_claimed": _epsilon(runs, "eps_claimed"),
        "eps_rigorous": _epsilon(runs, "eps_rigorous"),
        "delta": _column(runs, "metrics.delta").astype(float),
        # the relation eps_rigorous is stated under, and the code that recorded the run ("" before tags)
        "neighbouring": _column(runs, "tags.neighbouring").fillna(""),
        # the method's code version (dpsd.version.method_code_version); a run recorded before that tag
        # shows the whole tree's, never current
        "code_version": _column(runs, "tags.method_code_version").fillna(_column(runs, "tags.code_version")).fillna(""),
        "hardware": _column(runs, "tags.hardware").fillna(""),
        **_study_columns(runs),
    })
    for name in runs.columns:
        if name.startswith("metrics."):
            out[name] = runs[name]
    return _kept(out)


def _study_columns(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """:data:`STUDY_COLUMNS` from a study trial's tags and seed parameter ("" on a run of no study)."""
    study = _column(runs, "tags.study").fillna("")
    seed = _column(runs, "params.seed").fillna("").astype(str).where(study != "", "")
    return {"study": study, "study_phase": _column(runs, "tags.study_phase").fillna("").where(study != "", ""),
            "study_params": _column(runs, "tags.study_params").fillna("").where(study != "", ""), "study_seed": seed}


def _kept(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows a report can read: completed runs and ``data_absent`` markers (claims, failures and
    runs still going are the sweep's business)."""
    completed = (runs["status"] == "FINISHED") & (runs["cell_status"] == "done")
    return runs[completed | (runs["cell_status"] == "data_absent")]


def latest_per_cell(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows with a ``config_hash`` column -> one per hash, indexed by it: the latest completed run, else
    the latest ``data_absent`` marker; every other row is dropped."""
    completed = (runs["status"] == "FINISHED") & (runs["cell_status"] == "done")
    out = _kept(runs).assign(_rank=completed.astype(int))
    out = out.sort_values(["config_hash", "_rank", "start_time", "run_id"])
    return out.drop_duplicates("config_hash", keep="last").drop(columns="_rank").set_index("config_hash")


PLACE_KEYS = ("data.root", "results_dir")
SETUP_SWEEP = "quickstart"
"""The sweep the README's set-up runs (``dpsd quickstart``) to check a machine: its runs stay in that machine's store
and :func:`write_archive` leaves them out, so an archive written after a set-up holds the results it held, and a
fresh checkout's plan does not read the quickstart cells as done."""
"""Override keys that say where a machine keeps the data and the results, not what a run trains (config_hash leaves
them out too)."""


def cell_identity(overrides: str) -> str:
    """A cell's overrides as a reader names the cell: the archive's ``overrides`` text less :data:`PLACE_KEYS`."""
    return " ".join(o for o in str(overrides).split() if o.split("=", 1)[0].lstrip("+~") not in PLACE_KEYS)


def _current_named(frame: pd.DataFrame) -> pd.DataFrame:
    """The completed runs that are their hash's latest (:func:`latest_per_cell`) and whose cell's overrides are known,
    with their identity (:func:`cell_identity`) in ``_identity``."""
    completed = frame[(frame["status"] == "FINISHED") & (frame["cell_status"] == "done")]
    current = completed[completed["run_id"].isin(set(latest_per_cell(completed)["run_id"]))] if len(completed) \
        else completed
    current = current.assign(_identity=current["overrides"].fillna("").map(cell_identity))
    return current[current["_identity"] != ""]


def superseded_by_later(frame: pd.DataFrame) -> set[str]:
    """Run ids superseded by a later run of another config hash with the same scale, overrides (less
    :data:`PLACE_KEYS`) and code version: the rule that leaves one current run set per cell as a reader names it.
    ``frame``: archive rows with their ``overrides``."""
    current = _current_named(frame).sort_values(["start_time", "run_id"])
    latest = current.groupby(["scale", "_identity", "code_version"], sort=False)["config_hash"].transform("last")
    return set(current.loc[latest.notna() & (current["config_hash"] != latest), "run_id"])


def duplicate_sets(frame: pd.DataFrame) -> list[str]:
    """One line per cell (overrides less seed and :data:`PLACE_KEYS`, scale, code version) that holds two or more
    current run sets, ``frame`` being archive rows with their ``superseded`` and ``overrides`` columns: each set's
    config hashes, first start and mean accuracy (a seed's latest run is in the latest set, its one before in the set
    before, ...). Empty when every cell has one current set."""
    rows = frame[~frame["superseded"].map(lambda v: str(v).lower() == "true")]
    current = _current_named(rows)
    current = current.assign(_cell=current["_identity"].map(
        lambda text: " ".join(o for o in text.split() if not o.startswith("seed="))))
    lines = []
    for (scale, cell, version), same in current.groupby(["scale", "_cell", "code_version"], sort=True):
        if same.groupby("_identity")["config_hash"].nunique().max() < 2:
            continue
        same = same.assign(_start=pd.to_datetime(same["start_time"], utc=True))
        same = same.assign(_set=same.groupby("_identity")["_start"].rank(method="first", ascending=False))
        sets = []
        for _, at in sorted(same.groupby("_set"), key=lambda item: -item[0]):
            accuracy = pd.to_numeric(at["accuracy"], errors="coerce")
            sets.append(f"{len(at)} run(s) from {at['_start'].min():%Y-%m-%d %H:%M} (hashes "
                        f"{', '.join(sorted(set(at['config_hash'])))}; mean {accuracy.mean():.2f}%)")
        lines.append(f"{scale} {cell} ({version}): {len(sets)} current sets: {'; '.join(sets)}")
    return lines


def relative_artifact_uri(uri: object, results_dir: Path) -> str:
    """A run's artifact location relative to ``results_dir``: a ``file:`` location under it, or under any
    ``<results_dir>/mlartifacts`` (the harness's layout, ``dpsd.tracking``: runs recorded on another machine or
    checkout), from there on; any other location (a tracking server's) as it is."""
    text = "" if uri is None or (isinstance(uri, float) and math.isnan(uri)) else str(uri)
    if not text.startswith("file:"):
        return text
    path = Path(text.removeprefix("file://").removeprefix("file:"))
    try:
        return path.relative_to(Path(results_dir).resolve()).as_posix()
    except ValueError:
        pass
    parts = path.parts
    return Path(*parts[parts.index("mlartifacts"):]).as_posix() if "mlartifacts" in parts else text


def absolute_artifact_uri(uri: object, results_dir: Path) -> str:
    """The location :func:`relative_artifact_uri` wrote, as a ``file:`` URI MLflow reads (one with a scheme as it is)."""
    text = "" if uri is None or (isinstance(uri, float) and math.isnan(uri)) else str(uri)
    if not text or ":" in text.split("/", 1)[0]:
        return text
    return (Path(results_dir).resolve() / text).as_uri()


def store_words(uri: str, results_dir: Path, shown: str) -> str:
    """How a page names the MLflow store: a SQLite file under ``results_dir`` as ``shown`` (the results_dir as the
    command line gave it) joined to its path there, so no page carries a machine's path; any other URI as it is."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        try:
            return (Path(shown) / path.relative_to(Path(results_dir).resolve())).as_posix()
        except ValueError:
            return path.name
    return uri


def read_archive(path: Path) -> pd.DataFrame:
    """The runs archive at ``path`` as :func:`normalise` rows (empty when there is no file)."""
    if not path.exists():
        return pd.DataFrame(columns=RUN_COLUMNS)
    frame = pd.read_csv(path, dtype={c: str for c in (*RUN_COLUMNS, *OPTIONAL_COLUMNS) if c not in FLOAT_COLUMNS},
                        keep_default_na=False, na_values={c: [""] for c in FLOAT_COLUMNS})
    missing = [c for c in RUN_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a runs archive (no column {', '.join(missing)}); dpsd report --archive writes one")
    frame["start_time"] = pd.to_datetime(frame["start_time"], utc=True, format="ISO8601")
    frame = frame.drop(columns=[c for c in HISTORY_COLUMNS if c in frame.columns])  # recomputed on every write
    for name in OPTIONAL_COLUMNS:
        frame[name] = frame[name] if name in frame.columns else ""
    for name in [*FLOAT_COLUMNS, *(c for c in frame.columns if c.startswith("metrics."))]:
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    return frame


def write_archive(runs: pd.DataFrame, path: Path, overrides: dict[str, str] | None = None,
                  results_dir: Path | None = None, fallback: dict[str, str] | None = None) -> Path:
    """Write runs (:func:`load_history`'s, or one per cell) to ``path`` as CSV in hash then time order
    (stable diffs): every run once, ``superseded`` true on each that is not its cell's current run
    (:func:`latest_per_cell`) or that a later run of the same cell supersedes (:func:`superseded_by_later`),
    ``overrides``, the cell's overrides by config hash, where given (else what the archive held, else ``fallback``'s:
    the text of a spec that did not record the cell, which never replaces what the archive held), less the places
    (:data:`PLACE_KEYS`: where this machine keeps its data and store, which no cell's identity holds, so a clone
    rendering with its own ``data.root`` rewrites nothing), and each ``artifact_uri`` relative to ``results_dir``
    (default: the archive's folder; :func:`relative_artifact_uri`). The set-up's runs (:data:`SETUP_SWEEP`) are left out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = runs.reset_index() if "config_hash" not in runs.columns else runs.copy()
    frame = frame.drop_duplicates("run_id", keep="last")
    frame = frame[frame["sweep"] != SETUP_SWEEP]
    previous = _previous_overrides(path)
    known = {**(fallback or {}), **previous, **(overrides or {})}
    frame = frame.assign(overrides=frame["config_hash"].map(lambda h: cell_identity(known.get(h, ""))),
                         artifact_uri=frame["artifact_uri"].map(
                             lambda u: relative_artifact_uri(u, results_dir if results_dir is not None else path.parent)))
    current = set(latest_per_cell(frame)["run_id"]) - superseded_by_later(frame) if len(frame) else set()
    frame = frame.assign(superseded=~frame["run_id"].isin(current))
    frame = frame.sort_values(["config_hash", "start_time", "run_id"])
    frame = frame.assign(**{name: frame[name] if name in frame.columns else "" for name in OPTIONAL_COLUMNS})
    frame = frame[[*RUN_COLUMNS, *OPTIONAL_COLUMNS, *HISTORY_COLUMNS,
                   *sorted(c for c in frame.columns if c.startswith("metrics."))]]
    frame.assign(start_time=frame["start_time"].map(lambda t: t.isoformat())).to_csv(path, index=False)
    return path


def _previous_overrides(path: Path) -> dict[str, str]:
    """The ``overrides`` an archive already holds, by config hash (cells no spec renders keep theirs)."""
    if not path.exists():
        return {}
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "overrides" not in frame.columns:
        return {}
    return {h: o for h, o in zip(frame["config_hash"], frame["overrides"]) if o}


def load_history(tracking_uri: str, experiment: str, archive: Path | None = None) -> pd.DataFrame:
    """Every completed run (and data-absent marker) of the experiment and of the runs ``archive`` (if
    given), each run once (the store's copy wins), not indexed."""
    client = mlflow.MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    raw = pd.DataFrame()
    if found is not None:
        mlflow.set_tracking_uri(tracking_uri)
        raw = mlflow.search_runs(experiment_ids=[found.experiment_id], output_format="pandas")
    stored = normalise(raw).reset_index(drop=True)
    archived = read_archive(archive) if archive is not None else pd.DataFrame(columns=RUN_COLUMNS)
    frames = [frame for frame in (_kept(archived), stored) if not frame.empty]
    if not frames:
        return stored
    return pd.concat(frames, ignore_index=True).drop_duplicates("run_id", keep="last").reset_index(drop=True)


def load_runs(tracking_uri: str, experiment: str, archive: Path | None = None) -> pd.DataFrame:
    """Every sweep cell's current run in the experiment and in the runs ``archive`` (if given), indexed by
    config hash (empty if none); for a hash in both, the later completed run wins."""
    history = load_history(tracking_uri, experiment, archive)
    return latest_per_cell(history) if len(history) else history.set_index("config_hash")
