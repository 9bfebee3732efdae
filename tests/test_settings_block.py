"""The "setting vs paper" block: the paper's stated settings with their sources beside our cells' configs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpsd.config import compose
from dpsd.report.settings import load_settings, ours, settings_block

REPO = Path(__file__).resolve().parents[1]


def test_the_block_quotes_the_paper_with_its_source_and_reads_ours_from_the_config():
    dpsd = compose(["dataset=mnist", "method=dpsd", "privacy=data", "++method.stages=20"])
    dp_dfd = compose(["dataset=mnist", "method=dp_dfd", "privacy=label"])
    groups = pd.DataFrame([{"method": "dpsd", "dataset": "mnist", "config": dpsd, "status": "run", "wall_s": 120.0,
                            "hardware": "AMD EPYC, 2 logical cores, 1 torch threads, no GPU | NVIDIA H100"},
                           {"method": "dp_dfd", "dataset": "mnist", "config": dp_dfd, "status": "run", "wall_s": 60.0},
                           {"method": "dpsd", "dataset": "digits", "config": compose(["method=dpsd"]), "status": "run",
                            "wall_s": 600.0}])
    settings = pd.DataFrame([{"paper": "dpsd", "method": "dpsd", "dataset": "mnist", "key": "batch_size",
                              "value": "b=256", "source": 'paper.txt:155 "batch size b=256"'}])
    block = settings_block(groups, settings)
    assert f"| batch size | b=256 [1] | {dpsd.method.batch_size} |" in block
    assert "| teacher | not stated | small_cnn |" in block
    assert f"| iterations | not stated | {dpsd.method.iterations} iterations |" in block
    assert "20 stages" not in block  # a spec-wide ++method.stages does not make DPSD a staged method
    assert '[1] `paper.txt:155 "batch size b=256"`' in block
    assert "| wall minutes a cell | — | 2.0 (mean of 1 cell group's runs) |" in block  # the digits cell is not MNIST
    assert "| hardware | not stated | AMD EPYC, 2 logical cores, 1 torch threads, no GPU / NVIDIA H100 |" in block
    assert "dp_dfd" not in block  # the settings file names no DP-DFD row here: no block for it
    assert ours(dp_dfd, "iterations") == f"{dp_dfd.method.stages} stages"


def test_the_wall_minutes_say_how_busy_the_machine_was_where_runs_recorded_it():
    dpsd = compose(["dataset=mnist", "method=dpsd"])
    settings = pd.DataFrame([{"paper": "dpsd", "method": "dpsd", "dataset": "mnist", "key": "batch_size",
                              "value": "b=256", "source": 'paper.txt:155 "batch size b=256"'}])
    groups = pd.DataFrame([{"method": "dpsd", "dataset": "mnist", "config": dpsd, "status": "run", "wall_s": 60.0 * m,
                            "metrics.load_per_core": load} for m, load in ((1, 0.5), (2, 1.1), (3, None))])
    assert ("| wall minutes a cell | — | 2.0 (mean of 3 cell groups' runs; machine load per core as they ended: "
            "median 0.80 of 2 cell groups, 1 = every core busy) |") in settings_block(groups, settings)
    one = groups.iloc[:1]
    assert ("| wall minutes a cell | — | 1.0 (mean of 1 cell group's runs; machine load per core as they ended: "
            "median 0.50 of 1 cell group, 1 = every core busy) |") in settings_block(one, settings)


def test_a_recorded_run_carries_the_machine_load_per_core(tmp_path):
    from dpsd.experiment import run_experiment
    from dpsd.tracking import LOAD_METRIC, load_per_core

    import mlflow
    summary = run_experiment(compose(["method=dpsd", "device=cpu", "method.iterations=2", "model.teacher.recipe.steps=5",
                                      f"results_dir={tmp_path}"]), show_progress=False)
    recorded = mlflow.MlflowClient(summary["tracking_uri"]).get_run(summary["run_id"]).data.metrics[LOAD_METRIC]
    assert 0 < recorded and abs(recorded - load_per_core()) < 1  # the 15-minute average moves slowly


def test_every_settings_row_names_a_known_key_and_a_quoted_source():
    settings = load_settings(REPO / "results" / "reference" / "settings.csv")
    from dpsd.report.settings import KEYS

    assert len(settings) > 50 and set(settings["key"]) <= set(KEYS)
    assert settings["source"].str.contains(r':\S+ "').all()  # file:line (or key path) "quote"


def test_the_hardware_row_counts_the_cell_groups_that_recorded_no_machine():
    from dpsd.report.settings import hardware

    groups = pd.DataFrame({"hardware": ["NVIDIA H200", None, ""]})
    assert hardware(groups).startswith("NVIDIA H200 / 2 of 3 cell groups not recorded by these runs")
    assert hardware(pd.DataFrame({"hardware": ["NVIDIA H200"]})) == "NVIDIA H200"
    assert hardware(pd.DataFrame({"other": [1]})).startswith("not recorded by these runs")
