"""The runs archive keeps every completed run once, flags the superseded ones, names each cell's overrides,
and counts as done for a sweep on a fresh checkout."""

from __future__ import annotations

import pandas as pd
import pytest

from dpsd.report.runs import RUN_COLUMNS, latest_per_cell, read_archive, write_archive
from dpsd.sweep.store import archived_figures, archived_versions, cell_state, merged_versions


def _run(run_id: str, digest: str, start: str, accuracy: float, version: str = "0.1.0+dpsd.abc") -> dict:
    row = {column: "" for column in RUN_COLUMNS}
    row.update(config_hash=digest, run_id=run_id, status="FINISHED", cell_status="done", cell="method=dpsd seed=0",
               start_time=pd.Timestamp(start, tz="UTC"), accuracy=accuracy, code_version=version)
    return row


def test_the_archive_keeps_older_runs_flagged_superseded_and_the_cells_overrides(tmp_path):
    runs = pd.DataFrame([_run("old", "h1", "2026-01-01", 91.12), _run("new", "h1", "2026-02-01", 80.0),
                         _run("only", "h2", "2026-01-05", 50.0)])
    path = write_archive(runs, tmp_path / "runs.csv", {"h1": "dataset=mnist method=dpsd seed=0"})
    raw = pd.read_csv(path, keep_default_na=False)
    assert dict(zip(raw["run_id"], raw["superseded"])) == {"old": True, "new": False, "only": False}
    assert dict(zip(raw["run_id"], raw["overrides"]))["old"] == "dataset=mnist method=dpsd seed=0"
    current = latest_per_cell(read_archive(path))
    assert current.loc["h1", "accuracy"] == 80.0 and len(current) == 2  # tables read only the current run
    # the machine a run recorded survives the archive; an archive written before the column reads as ""
    runs.loc[runs["run_id"] == "new", "hardware"] = "AMD EPYC, 2 logical cores, 1 torch threads, no GPU"
    assert latest_per_cell(read_archive(write_archive(runs, tmp_path / "machines.csv"))).loc["h1", "hardware"] \
        == "AMD EPYC, 2 logical cores, 1 torch threads, no GPU"
    older = tmp_path / "older.csv"
    pd.read_csv(path, keep_default_na=False).drop(columns=["hardware"]).to_csv(older, index=False)
    assert set(read_archive(older)["hardware"]) == {""}
    # rewriting without the overrides keeps those the archive held
    write_archive(read_archive(path), path)
    assert pd.read_csv(path, keep_default_na=False)["overrides"].tolist().count("dataset=mnist method=dpsd seed=0") == 2


def test_the_archive_names_no_machines_paths_so_a_clone_rendering_with_its_own_rewrites_nothing(tmp_path):
    """The cells' overrides are archived without where a machine keeps its data and store (data.root, results_dir):
    a clone whose pages are rendered with its own data path writes the archive it cloned, byte for byte."""
    runs = pd.DataFrame([_run("a", "h1", "2026-01-01", 91.0), _run("b", "h2", "2026-01-02", 50.0)])
    path = write_archive(runs, tmp_path / "runs.csv", {
        "h1": "dataset=mnist method=dpsd seed=0 data.root=../shared/data results_dir=results",
        "h2": "dataset=mnist method=dafl seed=0 ++data.root=~/mnist"})
    written = path.read_bytes()
    raw = pd.read_csv(path, keep_default_na=False)
    assert dict(zip(raw["run_id"], raw["overrides"])) == {
        "a": "dataset=mnist method=dpsd seed=0", "b": "dataset=mnist method=dafl seed=0"}
    write_archive(read_archive(path), path, {"h1": "dataset=mnist method=dpsd seed=0 data.root=/elsewhere/data",
                                             "h2": "dataset=mnist method=dafl seed=0 data.root=/elsewhere/data"})
    assert path.read_bytes() == written


def test_a_fresh_checkouts_sweep_counts_archived_cells_as_done_or_stale(tmp_path):
    path = write_archive(pd.DataFrame([_run("a", "h1", "2026-01-01", 90.0, "v1"), _run("b", "h2", "2026-01-01", 9.0, "v0")]),
                         tmp_path / "runs.csv")
    versions = merged_versions({}, archived_versions(path))
    assert cell_state(versions, "h1", "v1") == "done"
    assert cell_state(versions, "h2", "v1") == "stale"
    assert cell_state(versions, "h3", "v1") == "to_run"
    assert archived_versions(tmp_path / "absent.csv") == {} and archived_versions(None) == {}


def test_a_fresh_checkouts_dry_run_summarises_the_archived_cells_at_every_seed_the_archive_holds(tmp_path):
    """The summary's ``results`` read the archive's runs where the store has none: a fresh checkout's dry run of a
    spec states the n the pages state, not only the seeds its own store ran."""
    import yaml

    from dpsd.sweep.runner import run_sweeps

    spec = tmp_path / "two_seeds.yaml"
    spec.write_text(yaml.safe_dump({"name": "two_seeds", "paper": None, "seeds": [0, 1, 2],
                                    "base": ["method=dpsd", "privacy=label", "privacy.epsilon=1"]}))
    archive = tmp_path / "archive" / "runs.csv"

    def dry_run() -> dict:
        return run_sweeps([spec], "smoke", [f"results_dir={tmp_path / 'results'}"], dry_run=True, archive=archive)[0]

    cells = {cell["label"]: cell["config_hash"] for cell in dry_run()["cells"]}
    assert dry_run()["results"] == []
    older = {**_run("old", cells["seed=0"], "2026-01-01", 50.0), "eps_claimed": 1.0, "eps_rigorous": float("inf")}
    runs = [older, {**older, "run_id": "a", "start_time": pd.Timestamp("2026-02-01", tz="UTC"), "accuracy": 80.0},
            {**older, "run_id": "b", "config_hash": cells["seed=1"], "accuracy": 90.0}]
    write_archive(pd.DataFrame(runs), archive)
    assert dry_run()["results"][0]["eps_rigorous"] == float("inf")
    runs[1]["eps_rigorous"], runs[2]["eps_rigorous"] = 0.6, 0.5  # a data-dependent ledger: ε differs by seed
    write_archive(pd.DataFrame(runs), archive)
    assert archived_figures(archive)[cells["seed=0"]]["accuracy"] == pytest.approx(0.8)  # the latest run of a hash
    (row,) = dry_run()["results"]
    assert row["seeds"] == 2 and row["accuracy"] == pytest.approx(85.0) and row["accuracy_std"] == pytest.approx(7.0711, abs=1e-4)
    assert row["eps_claimed"] == 1.0 and row["eps_rigorous"] == pytest.approx(0.55)  # the pages' mean over the seeds
    assert archived_figures(tmp_path / "absent.csv") == {} and archived_figures(None) == {}


def test_a_cell_two_specs_share_is_named_by_the_spec_that_recorded_it():
    """A budget spec's first point is a confirmation spec's run (one config hash): the archive keeps the overrides of
    the spec whose sweep recorded the runs, whichever of the two a page renders last; a cell no run has yet gets the
    first spec's."""
    from dpsd.report.render import cell_overrides
    from dpsd.sweep.spec import Cell

    confirm = Cell("confirm", "seed=0", ("method=dpsd", "privacy=none", "seed=0"), "h1")
    budget = Cell("budget", "method.iterations=400 seed=0", ("method=dpsd", "method.iterations=400", "seed=0"), "h1")
    fresh = [Cell("budget", "seed=0", ("a=1",), "h2"), Cell("confirm", "seed=0", ("b=2",), "h2")]
    assert cell_overrides([confirm, budget], {"h1": "confirm"}) == ({"h1": "method=dpsd privacy=none seed=0"}, {})
    assert cell_overrides([budget, confirm], {"h1": "confirm"}) == ({"h1": "method=dpsd privacy=none seed=0"}, {})
    assert cell_overrides([confirm, budget], {"h1": "budget"})[0] == {"h1": "method=dpsd method.iterations=400 seed=0"}
    assert cell_overrides(fresh, {}) == ({}, {"h2": "a=1"})
    assert cell_overrides([budget], {"h1": "confirm"}) == ({}, {"h1": "method=dpsd method.iterations=400 seed=0"})


def test_a_page_without_the_spec_that_recorded_a_cell_never_renames_it_in_the_archive(tmp_path):
    """Pages are rendered one at a time, each rewriting the archive: a page whose specs share a cell (one config
    hash) with the spec that recorded it, but not that spec, gives its own name for the cell only where the archive
    has none, so the archive (and the ``superseded`` flags its names decide) is the same whichever page came last."""
    runs = pd.DataFrame([_run("a", "h1", "2026-01-01", 91.0), _run("b", "h2", "2026-01-02", 50.0)])
    path = write_archive(runs, tmp_path / "runs.csv", {"h1": "dataset=mnist method=dpsd seed=0"})
    written = path.read_bytes()
    write_archive(read_archive(path), path, {}, None, {"h1": "dataset=mnist method=dpsd method.loss=kd seed=0"})
    assert path.read_bytes() == written  # the recording spec's name stands
    write_archive(read_archive(path), path, {}, None, {"h2": "dataset=mnist method=dafl seed=0"})
    raw = pd.read_csv(path, keep_default_na=False)
    assert dict(zip(raw["run_id"], raw["overrides"])) == {"a": "dataset=mnist method=dpsd seed=0",
                                                          "b": "dataset=mnist method=dafl seed=0"}  # unnamed: named
    write_archive(read_archive(path), path, {"h1": "dataset=mnist method=dpsd privacy=none seed=0"})
    raw = pd.read_csv(path, keep_default_na=False)
    assert raw.set_index("run_id").loc["a", "overrides"] == "dataset=mnist method=dpsd privacy=none seed=0"


def test_the_set_ups_quickstart_runs_stay_in_the_store_and_out_of_the_archive(tmp_path):
    """The README's set-up runs ``dpsd quickstart`` to check a machine; archiving a sweep after it writes that sweep's
    runs and leaves the set-up's out, so the archive's plan does not read the quickstart cells as done."""
    from dpsd.quickstart import SPEC
    from dpsd.report.runs import SETUP_SWEEP

    assert SPEC == SETUP_SWEEP
    result, check = _run("result", "h1", "2026-01-01", 90.0), _run("check", "h2", "2026-01-02", 95.0)
    result["sweep"], check["sweep"] = "ladder", SETUP_SWEEP
    path = write_archive(pd.DataFrame([result, check]), tmp_path / "runs.csv")
    assert read_archive(path)["run_id"].tolist() == ["result"]
    assert set(archived_versions(path)) == {"h1"}
