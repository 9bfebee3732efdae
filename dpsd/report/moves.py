"""Results that moved under a code change: a cell's current run beside the last run of the same config under the
method's code before, and the commits that changed that code between them.

A cell is one config hash, seed included, so two of its runs differ only in the code that ran them. The archive
keeps every run (:mod:`dpsd.report.runs`); a table shows each cell's current one. Where the last run of the cell
under another code version, started before it, is more than :data:`TOLERANCE` away, the page says so beside its
tables (:func:`moved_markdown`): the accuracy before and now, the two code versions and the commits between them
(:func:`dpsd.report.code_changes.changes_between`), so a reader sees why a number moved.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpsd.report.cells import RUN
from dpsd.report.code_changes import changes_between
from dpsd.report.tables import markdown_table
from dpsd.version import ROOT

TOLERANCE = 0.5
"""Accuracy points: a current run farther than this from the cell's run under the code before is listed."""
UNKNOWN = "commit unknown"
MOVED_COLUMNS = ("group", "seed", "config_hash", "before", "now", "version_before", "version_now", "start_before",
                 "start_now")


def moved_runs(frame: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """The cells of ``frame`` (:func:`dpsd.report.cells.cell_frame`: one row per cell and seed, its current run's
    figures) whose current run is more than :data:`TOLERANCE` points from the latest completed run of ``history``
    (:func:`dpsd.report.runs.load_history`) with the same config hash, another code version and an earlier start:
    one row each with :data:`MOVED_COLUMNS`, in the frame's order."""
    shown = frame[frame["status"] == RUN].drop_duplicates("config_hash") if len(frame) else frame
    if not len(shown) or not len(history):
        return pd.DataFrame([], columns=list(MOVED_COLUMNS))
    done = history[(history["status"] == "FINISHED") & (history["cell_status"] == "done")
                   & history["config_hash"].isin(set(shown["config_hash"]))]  # the history of the cells shown only
    started = dict(zip(done["run_id"], done["start_time"]))
    now = shown[["group", "seed", "config_hash", "run_id", "accuracy", "code_version"]].assign(
        start_now=shown["run_id"].map(started), position=range(len(shown))).dropna(subset=["start_now"])
    before = done[["config_hash", "run_id", "accuracy", "code_version", "start_time"]].rename(columns={
        "run_id": "run_before", "accuracy": "before", "code_version": "version_before", "start_time": "start_before"})
    pairs = now.merge(before, on="config_hash")
    pairs = pairs[(pairs["version_before"] != pairs["code_version"]) & (pairs["start_before"] < pairs["start_now"])]
    last = pairs.sort_values(["start_before", "run_before"]).groupby("config_hash", sort=False).tail(1)
    last = last.assign(before=last["before"].astype(float), now=last["accuracy"].astype(float),
                       seed=last["seed"].astype(int))
    moved = last[(last["now"] - last["before"]).abs() > TOLERANCE].sort_values("position")
    rows = moved.rename(columns={"code_version": "version_now"})[list(MOVED_COLUMNS)]
    return rows.reset_index(drop=True)


def moved_markdown(moved: pd.DataFrame, root: Path = ROOT) -> str:
    """The "Moved under a code change" part of a page's section for :func:`moved_runs`' rows, with the commits between
    each pair of versions in ``root``'s git history (or :data:`UNKNOWN`); ``""`` when none moved."""
    if moved.empty:
        return ""
    commits = [", ".join(changes_between(row.version_before, row.version_now, row.start_before, row.start_now, root))
               or UNKNOWN for row in moved.itertuples(index=False)]
    body = pd.DataFrame({
        "Cell": [group or "base" for group in moved["group"]],
        "Seed": moved["seed"],
        "Accuracy before → now (%)": [f"{b:.2f} → {n:.2f}" for b, n in zip(moved["before"], moved["now"])],
        "Code version before → now": [f"{b} → {n}" for b, n in zip(moved["version_before"], moved["version_now"])],
        "Method's code changed at": commits,
    })
    return "\n".join([
        "### Moved under a code change", "",
        f"Runs shown above that moved by more than {TOLERANCE} points from the last run of the same config (same "
        "config hash and seed: only the code differs) under the method's code before. The commits are those on the "
        "main line where the method's code version changed between the two (`git show COMMIT`); one of them, or "
        "several together, moved the number.", "",
        markdown_table(body), ""])
