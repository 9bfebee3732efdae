"""One current run set per cell: no two un-superseded run sets of the archive share a cell's overrides (less where
the data and results lie) and code version; the later set supersedes the earlier when the archive is written. And
the archive names no machine's path: artifact locations are relative to results_dir."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dpsd.report.runs import (RUN_COLUMNS, absolute_artifact_uri, duplicate_sets, read_archive,
                              relative_artifact_uri, write_archive)

ARCHIVE = Path(__file__).resolve().parents[1] / "results" / "runs.csv"
CELL = "dataset=mnist method=dp_dfd privacy=label privacy.epsilon=10 seed={seed} scale=laptop"


def assert_one_current_set_per_cell(frame: pd.DataFrame) -> None:
    found = duplicate_sets(frame)
    assert not found, "cells with two or more current run sets:\n" + "\n".join(found)


def _run(run_id: str, digest: str, start: str, accuracy: float, seed: int, place: str) -> dict:
    row = {column: "" for column in RUN_COLUMNS}
    row.update(config_hash=digest, run_id=run_id, status="FINISHED", cell_status="done", scale="laptop",
               cell=f"method=dp_dfd seed={seed}", start_time=pd.Timestamp(start, tz="UTC"), accuracy=accuracy,
               code_version="0.1.0+dp_dfd.abc", artifact_uri=f"file:///somewhere/results/mlartifacts/{run_id}/artifacts")
    return row, {digest: f"{CELL.format(seed=seed)} {place}"}


def planted() -> tuple[pd.DataFrame, dict[str, str]]:
    """Two three-seed sets of one cell: the same overrides but where the data lie, the same code version, other
    config hashes (the method's YAML changed between them)."""
    rows, overrides = [], {}
    for seed, (early, late) in enumerate([(76.31, 89.57), (84.03, 96.19), (66.88, 82.34)]):
        for row, named in (_run(f"early{seed}", f"e{seed}", "2026-11-26T16:10", early, seed,
                                "data.root=../shared/data results_dir=results"),
                           _run(f"late{seed}", f"l{seed}", "2026-11-27T02:00", late, seed,
                                "data.root=/srv/datasets results_dir=/srv/dpsd-results")):
            rows.append(row)
            overrides.update(named)
    return pd.DataFrame(rows), overrides


def test_the_committed_archive_has_one_current_run_set_per_cell():
    assert_one_current_set_per_cell(pd.read_csv(ARCHIVE, dtype=str, keep_default_na=False))


def test_a_planted_duplicate_set_is_found():
    runs, overrides = planted()
    frame = runs.assign(superseded=False, overrides=runs["config_hash"].map(overrides))
    found = duplicate_sets(frame)
    assert len(found) == 1 and "2 current sets" in found[0] and "mean 75.74%" in found[0] and "mean 89.37%" in found[0]
    try:
        assert_one_current_set_per_cell(frame)
    except AssertionError as error:
        assert "e0, e1, e2" in str(error) and "l0, l1, l2" in str(error)
    else:
        raise AssertionError("the planted duplicate set passed the check")


def test_writing_the_archive_lets_the_later_set_supersede_the_earlier(tmp_path):
    runs, overrides = planted()
    path = write_archive(runs, tmp_path / "runs.csv", overrides)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert_one_current_set_per_cell(raw)
    assert dict(zip(raw["run_id"], raw["superseded"])) == {**{f"early{s}": "True" for s in range(3)},
                                                          **{f"late{s}": "False" for s in range(3)}}
    # another seed count, or another code version, is another cell: nothing superseded
    other = runs.assign(code_version=[f"0.1.0+dp_dfd.{'abc' if r.startswith('late') else 'old'}" for r in runs["run_id"]])
    raw = pd.read_csv(write_archive(other, tmp_path / "other.csv", overrides), dtype=str, keep_default_na=False)
    assert set(raw["superseded"]) == {"False"}


def test_artifact_locations_are_written_relative_to_results_dir(tmp_path):
    results = tmp_path / "results"
    inside = (results / "mlartifacts" / "r1" / "artifacts").as_uri()
    assert relative_artifact_uri(inside, results) == "mlartifacts/r1/artifacts"
    assert relative_artifact_uri("file:///other/machine/results/mlartifacts/r2/artifacts", results) \
        == "mlartifacts/r2/artifacts"
    assert relative_artifact_uri("s3://bucket/r3", results) == "s3://bucket/r3"
    assert absolute_artifact_uri("mlartifacts/r1/artifacts", results) == inside
    assert absolute_artifact_uri("s3://bucket/r3", results) == "s3://bucket/r3"
    runs, overrides = planted()
    path = write_archive(runs, results / "runs.csv", overrides)
    assert set(read_archive(path)["artifact_uri"]) == {f"mlartifacts/{r}/artifacts" for r in runs["run_id"]}


def test_no_committed_page_or_archive_row_names_a_machine_path():
    root = ARCHIVE.parents[1]
    archive = pd.read_csv(ARCHIVE, dtype=str, keep_default_na=False)
    assert not archive["artifact_uri"].str.startswith("file:").any()
    for page in [root / "README.md", *sorted((root / "results").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        assert "sqlite:////" not in text and "file:///" not in text, page


def test_no_tracked_file_names_a_machine_path():
    """Logs, summaries, the archive and the docs name places as a reader's checkout has them (``results/``,
    ``../shared/data``, ``<data.root>``), never as the machine that wrote them did (its ``/work`` or ``/tmp``)."""
    root = ARCHIVE.parents[1]
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    machine_path = re.compile(r"(^|[^A-Za-z0-9_.<>~-])/(work|home|root|tmp|Users)/")
    named = []
    for name in filter(None, listed.stdout.split("\0")):
        path = root / name
        if path.suffix in {".png", ".pt", ".db", ".pdf"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if machine_path.search(line):
                named.append(f"{name}:{number}")
    assert not named, f"machine paths in tracked files: {named[:10]}"
