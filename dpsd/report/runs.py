"""The runs a report reads: MLflow ``search_runs`` into pandas, one row per sweep cell.

A report never recomputes a number; every reproduced figure comes from a run found here. Only sweep
trial runs (those tagged ``config_hash``) are read, found by that hash and not by their ``sweep`` tag
(a cell shared by two specs runs once). For each hash the latest FINISHED run tagged
``cell_status=done`` wins; a ``cell_status=data_absent`` marker counts only when there is none.
"""

from __future__ import annotations

import math

import mlflow
import pandas as pd

RUN_COLUMNS = ("config_hash", "run_id", "status", "cell_status", "sweep", "cell", "scale", "start_time",
               "artifact_uri", "accuracy", "teacher_accuracy", "eps_claimed", "eps_rigorous", "delta",
               "neighbouring", "code_version")


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
    """``search_runs`` columns -> one row per config hash with the figures a report shows.

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
        "code_version": _column(runs, "tags.code_version").fillna(""),
    })
    for name in runs.columns:
        if name.startswith("metrics."):
            out[name] = runs[name]
    completed = (out["status"] == "FINISHED") & (out["cell_status"] == "done")
    absent = out["cell_status"] == "data_absent"
    out = out[completed | absent].assign(_rank=completed.astype(int))
    out = out.sort_values(["config_hash", "_rank", "start_time", "run_id"])
    return out.drop_duplicates("config_hash", keep="last").drop(columns="_rank").set_index("config_hash")


def load_runs(tracking_uri: str, experiment: str) -> pd.DataFrame:
    """Every sweep cell's run in the experiment, indexed by config hash (empty if none)."""
    client = mlflow.MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return normalise(pd.DataFrame())
    mlflow.set_tracking_uri(tracking_uri)
    raw = mlflow.search_runs(experiment_ids=[found.experiment_id], output_format="pandas")
    return normalise(raw)
