"""Hyper-parameter studies: the search block's checks, the test split's two halves, the report's importance and best
configuration on a made-up study, and one small Optuna study on digits end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from dpsd.errors import ConfigError
from dpsd.report.study import (best_configuration, importance_table, optuna_study, sensitivity_markdown, study_markdown,
                               study_runs)
from dpsd.sweep.spec import load_spec
from dpsd.sweep.study import HELD_OUT, SELECTION, run_study, search_block, split_halves, study_overrides

TINY = ["device=cpu", "model.teacher.recipe.steps=30", "++method.iterations=2", "++method.batch_size=16"]


def write(folder, **fields):
    (folder / "common").mkdir(exist_ok=True)
    (folder / "common" / "smoke.yaml").write_text("{}\n")
    spec = {"name": "study", "feeds": {"kind": "sensitivity", "id": "study"},
            "base": ["method=dpsd", "privacy=label", *TINY], **fields}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("block, words", [
    (None, "a study needs a search: block"),
    ({"method.student_lr": {"logarithmic": [1e-4, 0.1]}}, "must be one of loguniform, uniform, int, choice"),
    ({"method.student_lr": {"loguniform": [0, 0.1]}}, "(both > 0)"),
    ({"method.student_lr": {"uniform": [0.5, 0.1]}}, "low < high"),
    ({"method.iterations": {"int": [1.5, 4]}}, "(integers)"),
    ({"method.latents": {"choice": []}}, "choice takes a non-empty list"),
])
def test_a_bad_search_block_is_one_line_naming_what_is_accepted(tmp_path, block, words):
    spec = load_spec(write(tmp_path, **({"search": block} if block else {})))
    with pytest.raises(ConfigError, match="search") as err:
        search_block(spec)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_study_searches_around_one_cell_without_its_seed_or_searched_keys(tmp_path):
    spec = load_spec(write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]}},
                           smoke=["method.student_lr=0.5"]))
    base = study_overrides(spec, "smoke", [])
    assert "method=dpsd" in base and not any(o.startswith(("seed=", "method.student_lr")) for o in base)
    grid = load_spec(write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]}},
                           grid={"privacy.epsilon": [1, 10]}))
    with pytest.raises(ConfigError, match="searches around one cell, the spec has 2"):
        study_overrides(grid, "smoke", [])


def test_the_test_split_halves_are_disjoint_cover_it_and_do_not_move():
    selection, held_out = split_halves(101)
    assert len(selection) == 50 and len(held_out) == 51 and not set(selection) & set(held_out)
    assert sorted(selection + held_out) == list(range(101)) and split_halves(101) == (selection, held_out)
    assert selection != list(range(50))  # a permutation, not the first half (the test split is ordered by class)


def made_up_runs() -> pd.DataFrame:
    """A study where the learning rate decides the accuracy and the output step does not."""
    rows = []
    for i, (lr, step) in enumerate([(1e-4, 0.1), (1e-3, 0.9), (1e-2, 0.5), (3e-2, 0.2), (1e-1, 0.7), (3e-4, 0.3),
                                    (3e-3, 0.6), (5e-2, 0.8)]):
        accuracy = 90 - 20 * abs(__import__("math").log10(lr) + 3)
        rows.append({"run_id": f"r{i}", "phase": "search", "params": json.dumps({"method.output_step": step,
                     "method.student_lr": lr}, sort_keys=True), "seed": 0, SELECTION: accuracy, HELD_OUT: accuracy - 1})
    best = json.dumps({"method.output_step": 0.9, "method.student_lr": 1e-3}, sort_keys=True)
    rows += [{"run_id": f"x{s}", "phase": "repeat", "params": best, "seed": s, SELECTION: 88.0 + s, HELD_OUT: 86.0 + s}
             for s in (1, 2)]
    return pd.DataFrame(rows)


def test_importance_names_the_hyper_parameter_that_decides_and_the_best_configuration_its_held_out_accuracy(tmp_path):
    spec = load_spec(write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]},
                                             "method.output_step": {"uniform": [0.05, 1.0]}}))
    runs = made_up_runs()
    importance = importance_table(optuna_study(spec, runs))
    assert importance["Hyper-parameter"][0] == "method.student_lr"
    best = best_configuration(runs)
    assert best["params"] == {"method.output_step": 0.9, "method.student_lr": 1e-3}
    assert best["n"] == 3 and best["held_out"] == "88.00 ± 1.00"  # 89, 87, 88: the held-out half, not selection's
    page = study_markdown(spec, runs, tmp_path)
    assert "## Which hyper-parameters matter" in page and "held-out accuracy 88.00 ± 1.00% (n = 3" in page
    assert (tmp_path / "figures" / "study_study_parallel.png").stat().st_size > 0
    assert (tmp_path / "figures" / "study_study_pair.png").stat().st_size > 0


def test_the_sensitivity_page_ranks_each_studys_hyper_parameters(tmp_path):
    spec = load_spec(write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]},
                                             "method.output_step": {"uniform": [0.05, 1.0]}}))
    page = sensitivity_markdown([(spec, made_up_runs()), (spec, made_up_runs().iloc[:1])])
    rows = [line for line in page.splitlines() if line.startswith("| [study]")]
    assert len(rows) == 2 and "| dpsd | 8 |" in rows[0]
    assert rows[0].index("method.student_lr") < rows[0].index("method.output_step")  # the one that decides first
    assert rows[1].split("|")[-2].strip() == "—"  # one trial: no importance to read


def test_a_trial_records_its_run_scored_on_both_halves_and_reports_the_selection_half(tmp_path, monkeypatch):
    """One trial in this process (Tune's report caught): the run is recorded with the study's tags and both halves'
    accuracies, and the search is told the selection half's."""
    from mlflow.tracking import MlflowClient
    from ray import tune

    from dpsd.sweep.study import study_trial

    reported = []
    monkeypatch.setattr(tune, "report", reported.append)
    results = tmp_path / "results"
    study = {"name": "s", "base": ["method=dpsd", "privacy=label", *TINY, f"results_dir={results}"], "seed": 0,
             "threads": 1, "scale": "smoke"}
    study_trial({"method.student_lr": 0.003, "method.latents": "resample"}, study)
    assert set(reported[0]) == {SELECTION, "run_id"}, reported
    run = MlflowClient(f"sqlite:///{results / 'mlflow.db'}").get_run(reported[0]["run_id"])
    assert run.data.tags["study"] == "s" and run.data.tags["study_phase"] == "search"
    assert json.loads(run.data.tags["study_params"]) == {"method.latents": "resample", "method.student_lr": 0.003}
    assert run.data.params["method.student_lr"] == "0.003" and run.data.params["seed"] == "0"
    assert run.data.metrics[SELECTION] == reported[0][SELECTION] and 0 <= run.data.metrics[HELD_OUT] <= 1
    study_trial({"point": {"method.student_lr": 0.003, "method.latents": "resample", "seed": 1}}, study)
    again = MlflowClient(f"sqlite:///{results / 'mlflow.db'}").get_run(reported[1]["run_id"])
    assert again.data.tags["study_phase"] == "repeat" and again.data.params["seed"] == "1"
    study_trial({"method.student_lr": "not a number"}, study)  # a failed trial is reported, not raised
    assert reported[2][SELECTION] == float("-inf") and "student_lr" in reported[2]["reason"]


@pytest.mark.slow  # Ray's start and a fresh worker's imports for each trial: minutes on 2 busy cores
def test_an_optuna_study_on_digits_records_every_trial_and_repeats_the_best(tmp_path):
    from mlflow.tracking import MlflowClient

    path = write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]},
                                   "method.latents": {"choice": ["trainable", "resample"]}})
    overrides = [f"results_dir={tmp_path / 'results'}"]
    found = run_study(str(path), trials=3, overrides=overrides, best=1, repeat_seeds=2, cpus_per_trial=1)
    assert found["trials"] == 3 and found["repeats"] == 1 and set(found["best"][0]) == {"method.student_lr",
                                                                                       "method.latents"}
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    runs = study_runs(client, [client.get_experiment_by_name("dpsd").experiment_id], "study")
    assert list(runs["phase"]).count("search") == 3 and list(runs["phase"]).count("repeat") == 1
    assert runs[[SELECTION, HELD_OUT]].notna().all().all()
