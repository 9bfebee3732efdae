"""What a study page tells a team beyond importance: the accuracy across each parameter's range, the studies of
several methods on the parameters they share (normalised over each search range), and the privacy–accuracy
trade-off as a study with two objectives (its directions checked, its Pareto front, its page beside the frontier's
points)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from dpsd.errors import ConfigError
from dpsd.report.parameter_ranges import binned, normalise, shared_parameters, shared_points, spread
from dpsd.report.pareto import front_trials
from dpsd.report.study import optuna_study, sensitivity_markdown, study_markdown
from dpsd.sweep.objectives import SINGLE, pareto_front, study_directions
from dpsd.sweep.spec import load_spec
from dpsd.sweep.study import HELD_OUT, SELECTION, format_plan, plan_study

TRADE_OFF = {"selection_accuracy": "maximize", "eps_rigorous": "minimize"}


def spec_file(folder, name="study", method="dpsd", **fields):
    (folder / "common").mkdir(exist_ok=True)
    (folder / "common" / "check.yaml").write_text("{}\n")
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "feeds": {"kind": "study", "id": name, "reference": "none"},
                                    "base": [f"method={method}", "privacy=label"], **fields}, sort_keys=False))
    return path


def trials(points, phase="search", claimed=None) -> pd.DataFrame:
    """Made-up study runs: ``points`` are (sampled values, selection accuracy, eps rigorous); eps claimed is
    ``claimed``'s at the same place, or eps rigorous where it is not given."""
    claimed = claimed or [eps for _, _, eps in points]
    return pd.DataFrame([{"run_id": f"r{i}", "phase": phase, "params": json.dumps(params, sort_keys=True), "seed": 0,
                          SELECTION: accuracy, HELD_OUT: accuracy, "eps_rigorous": eps, "eps_claimed": claim,
                          "source": "archive"}
                         for i, ((params, accuracy, eps), claim) in enumerate(zip(points, claimed))])


def test_normalise_maps_a_search_range_onto_0_1_on_a_log_scale_where_the_search_is_log_uniform():
    assert normalise(1e-3, "loguniform", [1e-4, 1e-2]) == pytest.approx(0.5)  # the middle decade's edge
    assert normalise(0.55, "uniform", [0.1, 1.0]) == pytest.approx(0.5)
    assert normalise(4, "int", [1, 7]) == pytest.approx(0.5)
    assert normalise(1e-4, "loguniform", [1e-4, 1e-2]) == 0 and normalise(1e-2, "loguniform", [1e-4, 1e-2]) == 1
    with pytest.raises(ValueError, match="no order"):
        normalise("a", "choice", ["a", "b"])


def test_the_range_table_bins_each_parameter_and_names_the_one_that_moves_accuracy(tmp_path):
    """The learning rate decides (high in its middle third) and the choice does not: the spread of bin means ranks
    the learning rate first, each bin carries its min, max and mean, and the repeats are not counted."""
    spec = load_spec(spec_file(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 1e-1]},
                                                 "method.latents": {"choice": ["trainable", "resample"]}}))
    runs = trials([({"method.student_lr": 2e-4, "method.latents": "trainable"}, 20.0, 1.0),
                   ({"method.student_lr": 3e-3, "method.latents": "resample"}, 80.0, 1.0),
                   ({"method.student_lr": 2e-3, "method.latents": "trainable"}, 70.0, 1.0),
                   ({"method.student_lr": 5e-2, "method.latents": "resample"}, 30.0, 1.0)])
    runs = pd.concat([runs, trials([({"method.student_lr": 3e-3, "method.latents": "resample"}, 0.0, 1.0)],
                                   phase="repeat")], ignore_index=True)
    bins = binned(spec, runs)
    lr = bins[bins["parameter"] == "method.student_lr"]
    assert list(lr["trials"]) == [1, 2, 1] and list(lr["min"]) == [20.0, 70.0, 30.0]
    assert list(lr["max"]) == [20.0, 80.0, 30.0] and list(lr["mean"]) == [20.0, 75.0, 30.0]
    assert lr["bin"].iloc[0] == "[0.0001, 0.001)" and lr["bin"].iloc[-1] == "[0.01, 0.1]"
    latents = bins[bins["parameter"] == "method.latents"]
    assert list(latents["bin"]) == ["trainable", "resample"] and list(latents["mean"]) == [45.0, 55.0]
    order = spread(bins)
    assert list(order["parameter"]) == ["method.student_lr", "method.latents"] and order["spread"][0] == 55.0
    page = study_markdown(spec, runs, tmp_path)
    assert "## Accuracy across each parameter's range" in page
    assert "| `method.student_lr` | [0.001, 0.01) | 2 | 70.00 | 80.00 | 10.00 | 75.00 |" in page


def test_the_sensitivity_page_compares_studies_on_the_parameters_they_share_normalised(tmp_path):
    """Two methods search the student's learning rate over different ranges: each trial lands where it sits in its
    own range; a study without it is left out of that comparison; studies sharing nothing say so in one line."""
    one = load_spec(spec_file(tmp_path, "one", search={"method.student_lr": {"loguniform": [1e-4, 1e-2]},
                                                      "method.output_step": {"uniform": [0.0, 1.0]}}))
    two = load_spec(spec_file(tmp_path, "two", method="dpsd_t",
                              search={"method.student_lr": {"loguniform": [1e-3, 1e-1]},
                                      "method.latents": {"choice": ["trainable", "resample"]}}))
    other = load_spec(spec_file(tmp_path, "other", method="dpsgd",
                                search={"method.lr": {"loguniform": [1e-3, 1e-1]}}))
    runs_one = trials([({"method.student_lr": 1e-3, "method.output_step": 0.5}, 60.0, 1.0)])
    runs_two = trials([({"method.student_lr": 1e-2, "method.latents": "resample"}, 40.0, 1.0),
                       ({"method.student_lr": 1e-3, "method.latents": "trainable"}, 20.0, 1.0)])
    studies = [(one, runs_one), (two, runs_two), (other, trials([({"method.lr": 1e-2}, 50.0, 1.0)]))]
    assert shared_parameters(studies) == {"method.student_lr": ["one", "two"]}
    points = shared_points(studies)
    assert list(points["study"]) == ["one", "two", "two"]
    assert list(points["normalised"]) == pytest.approx([0.5, 0.5, 0.0])  # 1e-3 in [1e-4, 1e-2]; 1e-2 in [1e-3, 1e-1]
    page = sensitivity_markdown(studies, out=tmp_path)
    assert "## On a shared parameter space" in page and "`method.student_lr` (one, two)" in page
    assert "| `method.student_lr` | two | dpsd_t | 2 | 20.00 | 40.00 | — | 20.00 |" in page
    assert (tmp_path / "figures" / "sensitivity_smoke_shared.png").stat().st_size > 0
    alone = sensitivity_markdown([(one, runs_one), (other, trials([({"method.lr": 1e-2}, 50.0, 1.0)]))])
    assert "The studies share no numeric parameter: their accuracies cannot be set on one parameter space." in alone


@pytest.mark.parametrize("raw, words", [
    ("maximize", "directions must map objectives"),
    ({"selection_accuracy": "maximize", "wall_seconds": "minimize"}, "unknown objective 'wall_seconds'; accepted: "
                                                                      "selection_accuracy, eps_rigorous, eps_claimed"),
    ({"selection_accuracy": "maximise", "eps_rigorous": "minimize"}, "must be maximize or minimize, got 'maximise'"),
    ({"eps_rigorous": "minimize"}, "directions must include selection_accuracy"),
    ({"selection_accuracy": "maximize", "eps_rigorous": "minimize", "eps_claimed": "minimize"},
     "may name one ledger's epsilon (eps_rigorous or eps_claimed), got eps_rigorous, eps_claimed"),
])
def test_a_bad_directions_block_is_refused_in_one_line(tmp_path, raw, words):
    spec = load_spec(spec_file(tmp_path, directions=raw, search={"method.student_lr": {"loguniform": [1e-4, 0.1]}}))
    with pytest.raises(ConfigError, match="directions") as err:
        plan_study(spec.path, trials=2)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_study_without_directions_maximises_accuracy_and_a_trade_off_plan_says_both_objectives(tmp_path):
    assert study_directions("s", None) == SINGLE
    path = spec_file(tmp_path, directions=TRADE_OFF, search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}})
    plan = format_plan(plan_study(str(path), trials=4, best=1))
    assert "multi-objective TPE" in plan and "to maximize selection_accuracy, minimize eps_rigorous" in plan
    assert "the best 1 configurations on the Pareto front again" in plan


def test_the_pareto_front_keeps_the_points_no_other_beats_on_both_objectives():
    directions = tuple(TRADE_OFF.items())
    points = [[50.0, 1.0], [60.0, 2.0], [55.0, 2.0], [60.0, 3.0], [40.0, 0.5], [50.0, 1.0]]
    # (55, 2) is beaten by (60, 2); (60, 3) by (60, 2); the two equal (50, 1) are both kept
    assert pareto_front(points, directions) == [0, 1, 4, 5]
    assert pareto_front([[50.0], [60.0], [60.0]], SINGLE) == [1, 2]
    assert pareto_front([], directions) == []


def test_a_trade_off_study_page_draws_its_front_beside_the_frontier_and_keeps_both_objectives(tmp_path):
    spec = load_spec(spec_file(tmp_path, directions=TRADE_OFF, search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}}))
    runs = trials([({"privacy.epsilon": 0.2}, 30.0, 0.2), ({"privacy.epsilon": 1.0}, 60.0, 1.0),
                   ({"privacy.epsilon": 2.0}, 50.0, 2.0), ({"privacy.epsilon": 8.0}, 80.0, 8.0)])
    assert list(front_trials(spec, runs)["front"]) == [True, True, False, True]  # ordered by eps
    study = optuna_study(spec, runs)  # what the journal keeps: both objectives, Optuna's own Pareto front
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert sorted(t.values[1] for t in study.best_trials) == [0.2, 1.0, 8.0]
    page = study_markdown(spec, runs, tmp_path, title="Trade-off")
    assert "This is" in page and "at smoke budgets" in page and "3 of its trials are on the Pareto front" in page
    assert "## The Pareto front" in page and "![study_smoke_pareto](figures/study_smoke_pareto.png)" in page
    assert (tmp_path / "figures" / "study_smoke_pareto.png").stat().st_size > 0
    assert "## Which hyper-parameters matter" not in page and math.isfinite(runs["eps_rigorous"].sum())
    # beside it: the frontier page of results/pages.yaml (not the headline, which shares feeds.frontier)
    assert "Beside it, the frontier page (results/frontier.md: mnist at laptop sizes): no point of dpsd" in page


def test_a_trade_off_on_the_claimed_ledger_ranks_by_eps_claimed_and_says_eps_rigorous_is_infinite(tmp_path):
    """A method whose eps rigorous is infinite at every setting is drawn on the paper's ledger: the front is ranked by
    eps claimed (not by the all-infinite rigorous column), the journal keeps eps claimed as the second objective, and
    the page says which ledger and at how many trials eps rigorous is infinite."""
    spec = load_spec(spec_file(tmp_path, directions={"selection_accuracy": "maximize", "eps_claimed": "minimize"},
                               search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}}))
    runs = trials([({"privacy.epsilon": 0.5}, 40.0, math.inf), ({"privacy.epsilon": 2.0}, 30.0, math.inf),
                   ({"privacy.epsilon": 8.0}, 70.0, math.inf)], claimed=[0.5, 2.0, 8.0])
    assert list(front_trials(spec, runs)["front"]) == [True, False, True]
    assert sorted(t.values[1] for t in optuna_study(spec, runs).best_trials) == [0.5, 8.0]
    page = study_markdown(spec, runs, tmp_path, title="Trade-off")
    assert "lower in ε claimed" in page and "This trade-off is on the paper's ledger (ε claimed)" in page
    assert "is infinite at 3 of its 3 search trials" in page
    assert "| ε claimed | ε rigorous |" in page and "| 8 | ∞ | 70.00 |" in page


def test_a_trade_off_on_the_rigorous_ledger_whose_every_trial_is_infinite_says_there_is_none(tmp_path):
    spec = load_spec(spec_file(tmp_path, directions=TRADE_OFF, search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}}))
    runs = trials([({"privacy.epsilon": 0.5}, 40.0, math.inf), ({"privacy.epsilon": 8.0}, 70.0, math.inf)])
    page = study_markdown(spec, runs, tmp_path, title="Trade-off")
    assert "Every one of its 2 search trials is at ε rigorous ∞" in page and "paper's ledger" not in page
    finite = study_markdown(spec, trials([({"privacy.epsilon": 0.5}, 40.0, 0.5)]), tmp_path, title="Trade-off")
    assert "ε rigorous ∞" not in finite and "paper's ledger" not in finite


def test_the_trade_offs_page_sets_every_front_side_by_side_each_on_its_own_ledger(tmp_path):
    """Two trade-off studies, one on eps rigorous and one on eps claimed (its eps rigorous infinite), and one not run:
    a row each with its ledger, its count at eps rigorous infinity and its front lowest eps first; the unrun one says
    how to run it; the figure draws each front in its ledger's panel."""
    from dpsd.report.pareto import trade_offs_lines

    rigorous = load_spec(spec_file(tmp_path, "rig", method="dpsgd", directions=TRADE_OFF,
                                   search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}}))
    claimed = load_spec(spec_file(tmp_path, "claim", method="dp_dfd",
                                  directions={"selection_accuracy": "maximize", "eps_claimed": "minimize"},
                                  search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}}))
    unrun = load_spec(spec_file(tmp_path, "later", method="pate", directions=TRADE_OFF,
                                search={"privacy.epsilon": {"loguniform": [0.1, 10.0]}}))
    runs_rigorous = trials([({"privacy.epsilon": 0.5}, 40.0, 0.5), ({"privacy.epsilon": 4.0}, 80.0, 4.0),
                            ({"privacy.epsilon": 6.0}, 70.0, 6.0)])
    runs_claimed = trials([({"privacy.epsilon": 1.0}, 90.0, math.inf), ({"privacy.epsilon": 9.0}, 85.0, math.inf)],
                          claimed=[1.0, 9.0])
    studies = [(rigorous, runs_rigorous), (claimed, runs_claimed), (unrun, trials([])[:0])]
    page = "\n".join(trade_offs_lines(studies, {"rig": "pareto_rig.md"}, "smoke", tmp_path, "tradeoffs"))
    assert "| [rig](pareto_rig.md) | dpsgd | ε rigorous | 3 | 0 | 40.00 at 0.5; 80.00 at 4 |" in page
    assert "| claim | dp_dfd | ε claimed | 2 | 2 | 90.00 at 1 |" in page
    assert "| later | pate | ε rigorous | 0 | — | not run yet: `dpsd sweep later --search optuna" in page
    assert (tmp_path / "figures" / "tradeoffs_smoke_fronts.png").stat().st_size > 0
