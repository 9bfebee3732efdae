"""A spec's cells joined to their runs: one row per cell (per seed), then one row per cell group.

A cell is identified by its config hash (sweeps/README.md), so the report shows exactly what the sweep
counts as done. Seeds of the same cell form a group, whose figures are the mean ± std over the seeds
that finished. A cell with no run is "not run"; one whose data files were absent is "data absent".
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from dpsd.distill import survival
from dpsd.report.reference import parse_epsilon
from dpsd.sweep.spec import group_label

NOT_RUN, DATA_ABSENT, RUN = "not run", "data absent", "run"
ENSEMBLE = "metrics.ensemble_test_accuracy"  # the teacher ensemble's clean-vote test accuracy (0-1), where a run logs it
SURVIVAL = f"metrics.{survival.SURVIVAL}"  # the share of Eq. (5)'s answers whose teacher class was in the top-k (0-1)
FIGURES = ("accuracy", "teacher_accuracy", "eps_claimed", "eps_rigorous", "delta")
WORDS = ("neighbouring", "code_version", "hardware")
"""A run's words a report shows beside its figures."""
SEPARATORS = {"hardware": " | "}  # between a group's distinct values (a machine's words hold spaces); else a space


def override_map(overrides: Sequence[str]) -> dict[str, str]:
    """``["a=1", "+b.c=x", "a=2"]`` -> ``{"a": "2", "b.c": "x"}`` (later overrides win, as in Hydra)."""
    pairs = (o.split("=", 1) for o in overrides if "=" in o)
    return {key.lstrip("+~"): value for key, value in pairs}


def cell_values(cfg: DictConfig, x: str | None, series: str | None) -> dict[str, Any]:
    """What a report keys a cell on, read from its resolved config (never from the run)."""
    epsilon = None if cfg.privacy.mode == "none" else parse_epsilon(cfg.privacy.get("epsilon"))
    values = {"method": str(cfg.method.name), "dataset": str(cfg.dataset.name), "epsilon": epsilon,
              "seed": int(cfg.seed), "x": None, "series": str(cfg.method.name)}
    if x:
        values["x"] = OmegaConf.select(cfg, x.lstrip("+~"))
    if series:
        chosen = OmegaConf.select(cfg, series.lstrip("+~"))
        # a config group (``series: method``) is labelled by its name, not by its whole node
        values["series"] = str(chosen.get("name", chosen) if isinstance(chosen, DictConfig) else chosen)
    return values


def cell_frame(cells: Sequence[Any], configs: Sequence[DictConfig], runs: pd.DataFrame,
               x: str | None = None, series: str | None = None) -> pd.DataFrame:
    """One row per cell: its keys, status and (if run) the run's figures."""
    rows = []
    for order, (cell, cfg) in enumerate(zip(cells, configs)):
        row = {"order": order, "group": group_label(cell.label), "config_hash": cell.config_hash,
               "overrides": override_map(cell.overrides), "config": cfg, **cell_values(cfg, x, series), "status": NOT_RUN, "run_id": None, "artifact_uri": None,
               **{name: math.nan for name in FIGURES}, **{name: "" for name in WORDS}}
        if cell.config_hash in runs.index:
            run = runs.loc[cell.config_hash]
            row["status"] = DATA_ABSENT if run["cell_status"] == "data_absent" else RUN
            row.update(run_id=run["run_id"], artifact_uri=run["artifact_uri"])
            if row["status"] == RUN:
                row.update({k: run[k] for k in runs.columns if k in FIGURES or k in WORDS or k.startswith("metrics.")})
                row["wall_s"] = wall_seconds(run)
        rows.append(row)
    return pd.DataFrame(rows)


def wall_seconds(run: pd.Series) -> float:
    """A run's wall seconds, the whole run's: ``time_total_s``, which counts the training before a resume where the
    run says so (``time_since_resume_s``, :func:`dpsd.tracking.whole_run_wall`); a resumed run recorded before it did
    gets that training (``train_s_before_resume``) added here."""
    total = float(run.get("metrics.time_total_s", math.nan))
    before, since = run.get("metrics.train_s_before_resume", math.nan), run.get("metrics.time_since_resume_s", math.nan)
    return total + (0.0 if pd.isna(before) or not pd.isna(since) else float(before))


def _group_figures(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``values`` (a group's finished seeds, one row each; NaN where a seed logged none): the mean
    and the sample std (ddof = 1) over its non-missing values, NaN where there are none (the std: fewer than two).
    One numpy pass over every column: a page's groups summarise about a hundred thousand columns."""
    present = ~np.isnan(values)
    count = present.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(present, values, 0.0).sum(axis=0) / count
        deviation = np.where(present, values - mean, 0.0)
        std = np.sqrt((deviation * deviation).sum(axis=0) / (count - 1))
    return np.where(count > 0, mean, math.nan), np.where(count > 1, std, math.nan)


def group_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per cell group (a cell over its seeds): mean and sample std (ddof = 1) over the seeds
    that finished (``accuracy_std``, and ``<metric>_std`` for each ``metrics.*`` column); status ``run`` if any seed
    finished, else ``data absent`` if any was absent."""
    figures = [c for c in frame.columns if c in FIGURES or c == "wall_s" or c.startswith("metrics.")]
    numbers = np.column_stack([frame[c].to_numpy(dtype=float, na_value=math.nan) for c in figures]) \
        if figures else np.empty((len(frame), 0))
    finished = (frame["status"] == RUN).to_numpy() if len(frame) else np.empty(0, bool)
    groups = []
    for _, cells in frame.groupby("group", sort=False):
        positions = frame.index.get_indexer(cells.index)
        done = cells[finished[positions]]
        first = cells.iloc[0]
        status = RUN if len(done) else (DATA_ABSENT if (cells["status"] == DATA_ABSENT).any() else NOT_RUN)
        row = {k: first[k] for k in ("order", "group", "overrides", "config", "method", "dataset", "epsilon", "x", "series")}
        row.update(status=status, seeds=len(done), planned_seeds=len(cells),
                   run_ids=list(done["run_id"]), artifact_uris=list(done["artifact_uri"]))
        mean, std = _group_figures(numbers[positions[finished[positions]]])
        row.update(zip(figures, mean.tolist()))
        stds = dict(zip(figures, std.tolist()))
        row["accuracy_std"] = stds.get("accuracy", math.nan)
        row.update((f"{name}_std", stds[name]) for name in figures if name.startswith("metrics."))
        for name in WORDS:  # the seeds' distinct values, e.g. two code versions
            row[name] = SEPARATORS.get(name, " ").join(sorted({str(v) for v in done.get(name, []) if v})) if len(done) else ""
        groups.append(row)
    return pd.DataFrame(groups).sort_values("order").reset_index(drop=True) if groups else pd.DataFrame()
