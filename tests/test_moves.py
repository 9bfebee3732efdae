"""A page names the cells whose current run moved under a code change: the accuracy before and now, the two code
versions and the commits between them (dpsd/report/moves.py, dpsd/report/code_changes.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from dpsd.report.cells import cell_frame
from dpsd.report.code_changes import changes_between
from dpsd.report.moves import TOLERANCE, UNKNOWN, moved_markdown, moved_runs
from dpsd.report.runs import RUN_COLUMNS, latest_per_cell
from dpsd.sweep.spec import Cell
from dpsd.version import method_code_version_at


def _run(run_id: str, digest: str, start: str, accuracy: float, version: str) -> dict:
    row = {column: "" for column in RUN_COLUMNS}
    row.update(config_hash=digest, run_id=run_id, status="FINISHED", cell_status="done",
               start_time=pd.Timestamp(start, tz="UTC"), accuracy=accuracy, code_version=version)
    return row


def _frame(history: pd.DataFrame, cells: dict[str, str]) -> pd.DataFrame:
    """A page's cells (config hash -> label, seed 0) joined to their current runs, as the report joins them."""
    listed = [Cell("ladder", label, tuple(label.split()), digest) for digest, label in cells.items()]
    configs = [OmegaConf.create({"privacy": {"mode": "none"}, "method": {"name": "dpsd"}, "dataset": {"name": "mnist"},
                                 "seed": 0})] * len(listed)
    return cell_frame(listed, configs, latest_per_cell(history))


def test_a_cell_whose_run_moved_under_a_code_change_is_listed_and_one_within_tolerance_or_of_one_version_is_not():
    before, now = "0.1.0+dpsd.aaaaaaaaaaaa", "0.1.0+dpsd.bbbbbbbbbbbb"
    history = pd.DataFrame([
        _run("m1", "moved", "2026-01-01", 10.52, before), _run("m2", "moved", "2026-01-02", 25.34, now),
        _run("k1", "kept", "2026-01-01", 50.0, before), _run("k2", "kept", "2026-01-02", 50.0 + TOLERANCE / 2, now),
        # one code version: two runs of it differ (another machine), which no code change explains
        _run("o1", "one", "2026-01-01", 40.0, now), _run("o2", "one", "2026-01-02", 60.0, now),
        # compared with the last run under the code before, not an older one
        _run("l0", "last", "2025-12-01", 30.0, "0.1.0+dpsd.000000000000"),
        _run("l1", "last", "2026-01-01", 71.0, before),
        _run("l2", "last", "2026-01-02", 71.2, now),
    ])
    frame = _frame(history, {"moved": "privacy=none seed=0", "kept": "privacy=label seed=0",
                             "one": "privacy=data seed=0", "last": "privacy=label privacy.epsilon=1 seed=0"})
    moved = moved_runs(frame, history)
    assert list(moved["config_hash"]) == ["moved"]
    row = moved.iloc[0]
    assert (row["group"], row["seed"], row["before"], row["now"]) == ("privacy=none", 0, 10.52, 25.34)
    assert (row["version_before"], row["version_now"]) == (before, now)


def test_the_page_says_before_now_versions_and_commit_unknown_without_git(tmp_path):
    history = pd.DataFrame([_run("a", "h", "2026-01-01", 72.65, "0.1.0+dpsd.aaaaaaaaaaaa"),
                            _run("b", "h", "2026-01-02", 59.47, "0.1.0+dpsd.bbbbbbbbbbbb")])
    text = moved_markdown(moved_runs(_frame(history, {"h": "privacy=none seed=2"}), history), root=tmp_path)
    assert "### Moved under a code change" in text
    assert ("| privacy=none | 0 | 72.65 → 59.47 | 0.1.0+dpsd.aaaaaaaaaaaa → 0.1.0+dpsd.bbbbbbbbbbbb | "
            f"{UNKNOWN} |") in text
    assert moved_markdown(moved_runs(_frame(history.iloc[1:], {"h": "privacy=none"}), history.iloc[1:])) == ""


def _commit(root: Path, when: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", when], cwd=root, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_the_commits_between_two_versions_are_those_where_the_methods_code_changed(tmp_path):
    repo, plain = tmp_path / "repo", tmp_path / "plain"
    repo.mkdir()
    plain.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    toy = 'from dpsd.methods.base import register_method\n\n@register_method("toy")\ndef toy():\n    return {}\n'
    first = _commit(repo, "2026-01-01T00:00:00+00:00", {
        "pyproject.toml": '[project]\nname = "toy"\n', "dpsd/experiment.py": "import dpsd.methods.toy\n",
        "dpsd/methods/base.py": "def register_method(name):\n    return lambda f: f\n", "dpsd/methods/toy.py": toy})
    second = _commit(repo, "2026-01-02T00:00:00+00:00", {"dpsd/methods/toy.py": toy.replace("{}", "{1: 2}")})
    _commit(repo, "2026-01-03T00:00:00+00:00", {"README.md": "words only\n"})
    fourth = _commit(repo, "2026-01-04T00:00:00+00:00", {"dpsd/methods/toy.py": toy.replace("{}", "{1: 3}")})
    v1, v2, v4 = (method_code_version_at(c, "toy", repo) for c in (first, second, fourth))
    assert len({v1, v2, v4}) == 3

    def start(day: str) -> pd.Timestamp:
        return pd.Timestamp(day, tz="UTC")

    assert changes_between(v1, v4, start("2026-01-01T12:00"), start("2026-01-05"), repo) == (second[:12], fourth[:12])
    assert changes_between(v2, v4, start("2026-01-02T12:00"), start("2026-01-05"), repo) == (fourth[:12],)
    # the later run started before the fourth commit: its code was the second's
    assert changes_between(v1, v2, start("2026-01-01T12:00"), start("2026-01-03T12:00"), repo) == (second[:12],)
    # a version no commit computes, another method's, or no git: nothing found, nothing raised
    assert changes_between("0.1.0+toy.000000000000", v4, start("2026-01-01"), start("2026-01-05"), repo) == ()
    assert changes_between("0.1.0+other.000000000000", v4, start("2026-01-01"), start("2026-01-05"), repo) == ()
    assert changes_between(v1, v4, start("2026-01-01"), start("2026-01-05"), plain) == ()
