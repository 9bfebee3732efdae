"""Hyper-parameter studies: the search block's checks, the test split's two halves, the report's importance and best
configuration on a made-up study, a tiny study's trials in the runs archive and its committed page rendered from the
archive alone, and one small Optuna study on digits end to end."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import yaml

from dpsd.errors import ConfigError
from dpsd.report.pages import Page, render_pages
from dpsd.report.runs import load_history, read_archive
from dpsd.report.study import (agreement_sentence, best_configuration, first_by_each, importance_table, optuna_study,
                               sensitivity_markdown, study_markdown, study_runs)
from dpsd.sweep.spec import load_spec
from dpsd.sweep.study import (HELD_OUT, SELECTION, run_study, search_block, split_halves, study_overrides,
                              study_seeds)

TINY = ["device=cpu", "model.teacher.recipe.steps=30", "++method.iterations=2", "++method.batch_size=16"]


def write(folder, **fields):
    (folder / "common").mkdir(exist_ok=True)
    (folder / "common" / "check.yaml").write_text("{}\n")
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
                           smoke=["method.student_lr=0.5"], on_demand=True))
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
                     "method.student_lr": lr}, sort_keys=True), "seed": 0, SELECTION: accuracy, HELD_OUT: accuracy - 1,
                     "eps_rigorous": 12.5, "eps_claimed": 10.0, "source": "archive"})
    best = json.dumps({"method.output_step": 0.9, "method.student_lr": 1e-3}, sort_keys=True)
    rows += [{"run_id": f"x{s}", "phase": "repeat", "params": best, "seed": s, SELECTION: 88.0 + s, HELD_OUT: 86.0 + s,
              "eps_rigorous": 12.5, "eps_claimed": 10.0, "source": "store"} for s in (1, 2)]
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
    assert "`method.student_lr` first" in page  # the evaluators' agreement said beside the table
    # every trial in a table, and whose it is: the archive's, or this store's alone (the user's own runs)
    assert "2 trials are this store's alone (runs not in the runs archive: yours) and 8 the archive's" in page
    assert "| 9 | repeat | 1 | 0.9 | 0.001 | 89.00 | 87.00 | 10 | 12.5 | x1 | store |" in page
    assert (tmp_path / "figures" / "study_smoke_parallel.png").stat().st_size > 0  # named for the spec and the scale
    assert (tmp_path / "figures" / "study_smoke_pair.png").stat().st_size > 0
    for kind in ("history", "slice"):  # Optuna's optimisation history and slices, linked from the page
        assert (tmp_path / "figures" / f"study_smoke_{kind}.png").stat().st_size > 0
        assert f"](figures/study_smoke_{kind}.png)" in page
    assert "Across its range, `method.student_lr` moves the mean selection accuracy most" in page


def test_a_study_too_flat_to_rank_says_so_in_one_line_and_counts_its_trials_at_chance(tmp_path):
    """Every trial at chance (10% on digits): fANOVA finds zero total variance; the page and the sensitivity page say
    the study is too flat to rank instead of stopping in a traceback, and the share at chance is said plainly."""
    spec = load_spec(write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]},
                                             "method.output_step": {"uniform": [0.05, 1.0]}}))
    flat = made_up_runs().assign(**{SELECTION: 10.0, HELD_OUT: 10.0})
    page = study_markdown(spec, flat, tmp_path)
    assert "The study is too flat to rank: its 8 search trials' selection accuracies leave fANOVA no variance" in page
    assert "10 of the 10 trials (100%) score within 1 point of chance (10.00%, 10 classes)" in page
    assert "## Every trial" in page and "the study is flat: its contour and parallel coordinates" in page
    drawn = sorted(path.name for path in (tmp_path / "figures").iterdir())
    assert drawn == ["study_smoke_history.png", "study_smoke_slice.png"]  # a flat history and slices, no contour
    assert "No parameter moves the mean selection accuracy between its bins" in page
    assert "| too flat to rank | — |" in sensitivity_markdown([(spec, flat)])
    assert "No trial scores within 1 point of chance" in study_markdown(spec, made_up_runs(), tmp_path)


def test_the_sensitivity_page_ranks_each_studys_hyper_parameters(tmp_path):
    spec = load_spec(write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]},
                                             "method.output_step": {"uniform": [0.05, 1.0]}}))
    page = sensitivity_markdown([(spec, made_up_runs()), (spec, made_up_runs().iloc[:1])])
    rows = [line for line in page.splitlines() if line.startswith("| [study]")]
    assert len(rows) == 2 and "| dpsd | 8 |" in rows[0]
    assert rows[0].index("method.student_lr") < rows[0].index("method.output_step")  # the one that decides first
    ped_first = first_by_each(importance_table(optuna_study(spec, made_up_runs())))[1]
    assert rows[0].split("|")[-2].strip() == ped_first  # PED-ANOVA's first, beside fANOVA's order
    assert [cell.strip() for cell in rows[1].split("|")[-3:-1]] == ["—", "—"]  # one trial: no importance to read


@pytest.mark.parametrize("ped, words", [
    (["0.800", "0.200"], "fANOVA and PED-ANOVA both rank `method.stages` first (12 trials)."),
    (["0.200", "0.800"], "fANOVA ranks `method.stages` first and PED-ANOVA `method.student_lr`: the two evaluators "
                         "disagree over 12 trials, so the order is a hint, not a finding"),
])
def test_a_study_page_says_whether_its_two_evaluators_agree_on_what_matters_most(ped, words):
    importance = pd.DataFrame({"Hyper-parameter": ["method.stages", "method.student_lr"], "PED-ANOVA": ped,
                               "_mean": [0.7, 0.3]})  # fANOVA's order: most important first
    assert words in agreement_sentence(importance, 12)


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
    # the objectives a study may use: the accuracy and either ledger's epsilon
    assert set(reported[0]) == {SELECTION, "eps_rigorous", "eps_claimed", "run_id"}, reported
    assert 0 < reported[0]["eps_rigorous"] < float("inf") and reported[0]["eps_claimed"] == 10.0
    run = MlflowClient(f"sqlite:///{results / 'mlflow.db'}").get_run(reported[0]["run_id"])
    assert run.data.tags["study"] == "s" and run.data.tags["study_phase"] == "search"
    # a cell as a sweep's is, done once both halves are logged: the runs archive keeps it
    assert run.data.tags["cell_status"] == "done" and len(run.data.tags["config_hash"]) == 16
    assert run.data.tags["sweep"] == "s"
    assert run.data.tags["cell"] == "method.student_lr=0.003 method.latents=resample seed=0"
    assert json.loads(run.data.tags["study_params"]) == {"method.latents": "resample", "method.student_lr": 0.003}
    assert run.data.params["method.student_lr"] == "0.003" and run.data.params["seed"] == "0"
    assert run.data.metrics[SELECTION] == reported[0][SELECTION] and 0 <= run.data.metrics[HELD_OUT] <= 1
    study_trial({"point": {"method.student_lr": 0.003, "method.latents": "resample", "seed": 1}}, study)
    again = MlflowClient(f"sqlite:///{results / 'mlflow.db'}").get_run(reported[1]["run_id"])
    assert again.data.tags["study_phase"] == "repeat" and again.data.params["seed"] == "1"
    study_trial({"method.student_lr": "not a number"}, study)  # a failed trial is reported, not raised
    assert reported[2][SELECTION] == float("-inf") and "student_lr" in reported[2]["reason"]
    assert reported[2]["eps_rigorous"] == reported[2]["eps_claimed"] == float("inf")  # worst on every objective
    rows = load_history(f"sqlite:///{results / 'mlflow.db'}", "dpsd")
    assert sorted(zip(rows["study_phase"], rows["study_seed"])) == [("repeat", "1"), ("search", "0")]
    assert set(rows["run_id"]) == {reported[0]["run_id"], reported[1]["run_id"]}


STUDY_SPEC = {"name": "tiny_study", "feeds": {"kind": "study", "id": "tiny_study", "reference": "none",
                                              "title": "A tiny study", "trials": 5, "best": 1},
              "base": ["method=dpsd", "privacy=label", *TINY], "on_demand": True, "seeds": [0, 1],
              "search": {"method.student_lr": {"loguniform": [1e-4, 0.1]},
                         "method.latents": {"choice": ["trainable", "resample"]}}}


def study_specs(folder):
    """``folder/sweeps`` with the tiny study and a second study never run."""
    specs = folder / "sweeps"
    (specs / "common").mkdir(parents=True)
    (specs / "common" / "check.yaml").write_text("{}\n")
    (specs / "tiny_study.yaml").write_text(yaml.safe_dump(STUDY_SPEC))
    (specs / "other_study.yaml").write_text(yaml.safe_dump({**STUDY_SPEC, "name": "other_study",
                                                            "feeds": {**STUDY_SPEC["feeds"], "id": "other_study"}}))
    return specs


def study_pages(folder):
    """The tiny study's page and the sensitivity page of both studies, as results/pages.yaml lists them."""
    return [Page(folder / "pages" / "tiny_study.md", ("tiny_study",)),
            Page(folder / "pages" / "sensitivity.md", ("tiny_study", "other_study"))]


def test_a_studys_trials_land_in_the_archive_and_its_page_renders_from_the_archive_alone(tmp_path, monkeypatch):
    """Three search trials and one repeat of a tiny study, run in this process (Tune's report caught): `dpsd pages`
    writes them to the runs archive with what the study's page reads, and with the store removed (a fresh clone: the
    archive alone) renders the same pages and figures."""
    from ray import tune

    from dpsd.sweep.study import study_overrides, study_trial

    monkeypatch.setattr(tune, "report", lambda _: None)
    specs, results, archive = study_specs(tmp_path), tmp_path / "results", tmp_path / "runs.csv"
    study = {"name": "tiny_study", "base": [*study_overrides(load_spec(specs / "tiny_study.yaml"), "smoke", []),
                                           f"results_dir={results}"], "seed": 0, "threads": 1, "scale": "smoke"}
    tried = [{"method.student_lr": 0.003, "method.latents": "resample"},
             {"method.student_lr": 0.0003, "method.latents": "trainable"},
             {"method.student_lr": 0.03, "method.latents": "resample"}]
    for params in tried:
        study_trial(params, study)
    study_trial({"point": {**tried[0], "seed": 1}}, study)
    pages = study_pages(tmp_path)

    def render() -> dict:
        render_pages(pages, [f"results_dir={results}"], specs_dir=specs, archive=archive, log=lambda _: None)
        drawn = sorted((tmp_path / "pages" / "figures").glob("*.png"))
        return {**{page.markdown.name: page.markdown.read_text() for page in pages},
                **{path.name: path.read_bytes() for path in drawn}}

    from_store = render()
    rows = read_archive(archive)
    rows = rows[rows["study"] == "tiny_study"]
    assert sorted(rows["study_phase"]) == ["repeat", "search", "search", "search"]
    assert sorted(zip(rows["study_params"].map(json.loads).map(lambda p: p["method.student_lr"]), rows["study_seed"])) \
        == [(0.0003, "0"), (0.003, "0"), (0.003, "1"), (0.03, "0")]
    assert rows[[f"metrics.{SELECTION}", f"metrics.{HELD_OUT}"]].notna().all().all()
    assert (rows["cell_status"] == "done").all() and rows["config_hash"].nunique() == 4
    page = from_store["tiny_study.md"]
    assert page.startswith("# A tiny study\n") and "3 search trials (Optuna's TPE through Ray Tune), 1 repeats" in page
    assert "## Which hyper-parameters matter" in page and "(n = 2, seeds [0, 1]; runs" in page
    assert {"tiny_study_smoke_parallel.png", "tiny_study_smoke_pair.png"} <= set(from_store)
    sensitivity = from_store["sensitivity.md"]
    assert "| [tiny_study](tiny_study.md) | dpsd | 3 |" in sensitivity
    assert "| other_study | dpsd | 0 | not run yet: `dpsd sweep other_study --search optuna --trials 5 --best 1` |" \
        in sensitivity  # no page of its own in the manifest: named, not linked

    # the trials kept where Optuna's own tools open them, and left alone when the same runs are rendered again
    import optuna

    from dpsd.report.study import journal

    kept = tmp_path / "pages" / "optuna" / "tiny_study_smoke.log"
    assert "Optuna storage: `" in page and "optuna-dashboard " in page
    search = optuna.load_study(study_name="tiny_study", storage=journal(kept))
    assert len(search.trials) == 3 and {t.user_attrs["run_id"] for t in search.trials} == set(
        rows[rows["study_phase"] == "search"]["run_id"])
    assert len(optuna.load_study(study_name="tiny_study:repeats", storage=journal(kept)).trials) == 1
    journal_text = kept.read_bytes()
    (results / "mlflow.db").unlink()  # a fresh clone: no store, the archive alone
    shutil.rmtree(results / "mlartifacts")
    assert render() == from_store
    assert kept.read_bytes() == journal_text


def test_a_study_page_with_no_runs_says_how_to_run_it(tmp_path, capsys):
    specs = study_specs(tmp_path)
    pages = study_pages(tmp_path)
    render_pages(pages, [f"results_dir={tmp_path / 'results'}"], specs_dir=specs, archive=tmp_path / "runs.csv",
                 log=lambda _: None)
    page = pages[0].markdown.read_text()
    assert page.startswith("# A tiny study\n") and "## Which" not in page
    assert "Not run yet: run `dpsd sweep tiny_study --search optuna --trials 5 --best 1`, then `dpsd pages`" in page
    assert not (tmp_path / "pages" / "figures").exists()
    sensitivity = pages[1].markdown.read_text()
    assert sensitivity.count("| 0 | not run yet: `dpsd sweep ") == 2
    assert "warning: study tiny_study: no finished trial at scale smoke" in capsys.readouterr().err


def test_dpsd_sweep_searches_at_the_specs_own_budget_unless_told(tmp_path, monkeypatch, capsys):
    """`dpsd sweep SPEC --search optuna` takes the trials and best configurations its spec names (what its page's
    "not run yet" command says); --trials and --best win."""
    from dpsd import cli
    from dpsd.sweep import study as sweep_study

    asked = []
    monkeypatch.setattr(sweep_study, "run_study", lambda spec, trials, scale, overrides, best, **_: asked.append(
        (trials, best)) or {"study": "tiny_study", "trials": trials, "best": [{}] * best, "repeats": best})
    spec = str(study_specs(tmp_path) / "tiny_study.yaml")
    store = f"results_dir={tmp_path / 'results'}"  # the journal it keeps goes there, not into the checkout
    assert cli.main(["sweep", spec, "--search", "optuna", store]) == 0
    assert cli.main(["sweep", spec, "--search", "optuna", "--trials", "3", "--best", "0", store]) == 0
    assert asked == [(5, 1), (3, 0)]
    assert (tmp_path / "results" / "optuna" / "tiny_study_smoke.log").exists()  # its journal in the store it named
    assert "its page: dpsd pages" in capsys.readouterr().out


def test_a_dry_run_of_a_search_lists_its_trials_and_repeats_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """`dpsd sweep SPEC --search optuna --dry-run` prints the study's plan (each trial's cell and the ranges its
    values are drawn from, the repeats at --seeds N's seeds 1..N-1) and never reaches the search."""
    from dpsd import cli
    from dpsd.sweep import study as sweep_study

    def never(*_, **__):
        raise AssertionError("a dry run ran the study")

    monkeypatch.setattr(sweep_study, "run_study", never)
    spec = str(study_specs(tmp_path) / "tiny_study.yaml")
    assert cli.main(["sweep", spec, "--search", "optuna", "--trials", "4", "--best", "1", "--seeds", "3",
                     "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("study tiny_study at scale smoke (dry run: nothing run)\n")
    assert "  4 search trials, each one run of: method=dpsd privacy=label " in out and " seed=0\n" in out
    assert "    method.student_lr  loguniform [0.0001, 0.1]\n" in out
    assert "  then the best 1 configurations again at seeds [1, 2]: 2 runs\n  6 runs in all" in out


@pytest.mark.parametrize("seeds, expected", [(None, (0, [1])), (3, (0, [1, 2])), (1, (0, []))])
def test_seeds_n_runs_a_studys_best_configurations_at_seeds_1_to_n_minus_1(tmp_path, seeds, expected):
    """--seeds N means for a study what it means for a sweep, seeds 0..N-1 in all (the search at 0), in place of the
    spec's seeds: list (the tiny study's: [0, 1])."""
    spec = load_spec(study_specs(tmp_path) / "tiny_study.yaml")
    assert study_seeds(spec, seeds) == expected


@pytest.mark.slow  # Ray's start and a fresh worker's imports for each trial: minutes on 2 busy cores
def test_an_optuna_study_on_digits_records_every_trial_and_repeats_the_best(tmp_path):
    from mlflow.tracking import MlflowClient

    path = write(tmp_path, search={"method.student_lr": {"loguniform": [1e-4, 0.1]},
                                   "method.latents": {"choice": ["trainable", "resample"]}})
    overrides = [f"results_dir={tmp_path / 'results'}"]
    found = run_study(str(path), trials=3, overrides=overrides, best=1, seeds=2, cpus_per_trial=1)
    assert found["trials"] == 3 and found["repeats"] == 1 and set(found["best"][0]) == {"method.student_lr",
                                                                                       "method.latents"}
    runs = study_runs(load_history(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}", "dpsd"), "study")
    assert list(runs["phase"]).count("search") == 3 and list(runs["phase"]).count("repeat") == 1
    assert runs[[SELECTION, HELD_OUT]].notna().all().all()
