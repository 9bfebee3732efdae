"""`dpsd report` for the ladder and the query-budget axis, from real tiny digits runs.

A tiny ladder spec (R0..R5 of DPSD label, plus the RRWithPrior variant's R5) and a tiny query-budget spec
(DPSD's R3 at 1 and 2 steps per iteration, R4 at 1) run through ``run_experiment``, tagged as sweep trials.
"""

from __future__ import annotations

import math

import mlflow
import pandas as pd
import pytest

from dpsd.cli import main
from dpsd.config import compose
from dpsd.experiment import run_experiment
from dpsd.report import ladder as ladder_report
from dpsd.report import render_report, tables
from dpsd.report.cells import cell_frame, group_frame
from dpsd.report.runs import load_runs
from dpsd.sweep.spec import Spec, expand_cells, load_spec

TINY = ["device=cpu", "++method.iterations=3", "++method.batch_size=16", "model.teacher.recipe.steps=30"]
LADDER = """
name: tiny_ladder
feeds: {kind: ladder, id: ladder, reference: none, title: "tiny ladder"}
base: []
cells:
  - [method=teacher, privacy=none]
  - [method=kd_data, privacy=none]
  - [method=dpsd, privacy=none, model/generator=gaussian_noise]
  - [method=dpsd, privacy=none]
  - [method=dpsd, privacy=label, privacy.noiseless=true]
  - [method=dpsd, privacy=label, privacy.epsilon=1]
  - [method=dpsd, privacy=label, privacy.epsilon=1, privacy.rr_prior=rr_with_prior]
smoke: [%s]
on_demand: true
""" % ", ".join(TINY)
QUERIES = """
name: tiny_queries
feeds: {kind: query_budget, id: query_budget, reference: none, title: "tiny queries", x: queries}
base: [method=dpsd, %s]
cells:
  - [privacy=none, method.steps_per_iteration=1]
  - [privacy=none, method.steps_per_iteration=2]
  - [privacy=label, privacy.noiseless=true, method.steps_per_iteration=1]
""" % ", ".join(TINY)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("ladder_report")
    (root / "sweeps").mkdir()
    (root / "sweeps" / "tiny_ladder.yaml").write_text(LADDER)
    (root / "sweeps" / "tiny_queries.yaml").write_text(QUERIES)
    (root / "papers.csv").write_text("paper,table,row,method,dataset,architecture,epsilon,delta,metric,value,source,note\n")
    overrides = [f"results_dir={root / 'results'}"]
    accuracy = {}
    for name in ("tiny_ladder", "tiny_queries"):
        for cell in expand_cells(load_spec(root / "sweeps" / f"{name}.yaml"), "smoke", overrides):
            summary = run_experiment(cell.compose(), show_progress=False)
            client = mlflow.MlflowClient(summary["tracking_uri"])
            for key, value in {"sweep": cell.spec, "cell": cell.label, "config_hash": cell.config_hash,
                               "cell_status": "done"}.items():
                client.set_tag(summary["run_id"], key, value)
            accuracy[cell.label] = 100 * summary["metrics"]["student_test_accuracy"]
    out = root / "reports"
    markdown = root / "results" / "what_reproduces.md"
    render_report(sorted((root / "sweeps").glob("*.yaml")), "smoke", overrides, root / "papers.csv", out, markdown)
    return {"root": root, "overrides": overrides, "accuracy": accuracy, "out": out, "markdown": markdown,
            "uri": summary["tracking_uri"]}


def groups_of(study, name):
    cells = expand_cells(load_spec(study["root"] / "sweeps" / f"{name}.yaml"), "smoke", study["overrides"])
    runs = load_runs(study["uri"], "dpsd")
    return group_frame(cell_frame(cells, [cell.compose() for cell in cells], runs))


def test_every_run_stands_on_the_rung_its_config_says(study):
    frame = ladder_report.annotate(groups_of(study, "tiny_ladder"))
    assert list(frame["rung"]) == ["R0", "R1", "R2", "R3", "R4", "R5", "R5"]
    assert list(frame["ladder"].fillna("")) == ["", "", "", "", "dpsd (label)", "dpsd (label)",
                                                "dpsd (label, rr_prior=rr_with_prior: not the paper's method)"]


def test_each_ladder_has_the_shared_rungs_its_own_rungs_and_the_drop_between_them(study):
    ladders = ladder_report.ladders(groups_of(study, "tiny_ladder"))
    assert set(ladders) == {"dpsd (label)", "dpsd (label, rr_prior=rr_with_prior: not the paper's method)"}
    rows = ladders["dpsd (label)"]
    table = ladder_report.ladder_table("dpsd (label)", rows)
    assert list(table["Rung"]) == ["R0", "R1", "R2", "R3", "R4", "R5"]
    accuracy = {r: float(a) for r, a in zip(table["Rung"], table["Accuracy (%)"])}
    label = "method=dpsd privacy=label privacy.epsilon=1"
    assert accuracy["R5"] == pytest.approx(study["accuracy"][f"{label} seed=0"], abs=0.005)
    assert float(table["Change (points)"].iloc[5]) == pytest.approx(accuracy["R5"] - accuracy["R4"], abs=0.011)
    r5 = table.iloc[5]
    assert r5["ε claimed"] == "1" and r5["ε rigorous"] not in ("∞", "—")  # both ledgers on a private rung
    assert table.iloc[4]["ε claimed"] == "∞" and table.iloc[4]["ε rigorous"] == "∞"  # R4: no noise
    assert table.iloc[1]["Queries"] == f"{3 * 16:,}"  # R1: iterations x batch teacher answers


def test_the_diagnosis_names_the_largest_drop_with_the_runs_numbers(study):
    rows = ladder_report.ladders(groups_of(study, "tiny_ladder"))["dpsd (label)"]
    best = {r: rows[rows["rung"] == r]["accuracy"].max() for r in ladder_report.RUNGS}
    path = [r for r in ladder_report.RUNGS if r != "R2" or best["R3"] <= best["R2"]]
    drops = {(upper, lower): best[upper] - best[lower] for upper, lower in zip(path, path[1:])}
    (upper, lower), drop = max(drops.items(), key=lambda item: item[1])
    sentence = ladder_report.diagnosis("dpsd (label)", rows)
    assert f"between {upper} and {lower}" in sentence and f"{drop:.2f} points" in sentence


def _rows(accuracy: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"rung": list(accuracy), "status": ladder_report.RUN, "accuracy": list(accuracy.values())})


def test_a_generator_that_beats_noise_takes_r2_off_the_path():
    """DP-DFD's shape: noise loses everything (R2), the generator recovers it (R3), the noise of
    the mechanism loses it again (R5): the sentence names R4 -> R5, not R1 -> R2."""
    rows = _rows({"R0": 99.2, "R1": 97.7, "R2": 9.7, "R3": 94.3, "R4": 85.4, "R5": 35.1})
    sentence = ladder_report.diagnosis("dp_dfd (label)", rows)
    assert "between R4 and R5" in sentence and "50.30 points" in sentence and ladder_report.LOSS["R5"] in sentence
    collapsed = _rows({"R0": 99.2, "R1": 97.7, "R2": 9.7, "R3": 9.7, "R4": 9.7, "R5": 9.7})
    assert "between R1 and R2" in ladder_report.diagnosis("dpdfd (data)", collapsed)  # R3 no better: R2 stays
    recovered = _rows({"R0": 99.2, "R1": 97.7, "R2": 9.7, "R3": 27.9, "R4": 27.0, "R5": 26.0})
    sentence = ladder_report.diagnosis("dpsd_t (label)", recovered)
    assert "between R1 and R3" in sentence and "R2 9.70%" in sentence


def test_two_drops_within_the_seeds_spread_are_named_about_equally_and_one_seed_makes_no_tie():
    """DP-DFD's shape at the papers' teacher: R1 -> R3 and R3 -> R4 lose 2.68 points each, with a sample std of
    0.44 on R4: the sentence names both, not the larger by a hundredth; with the drops farther apart than the spread,
    or no spread (one seed a rung), it names the largest alone."""
    accuracy = {"R0": 99.27, "R1": 97.86, "R2": 17.55, "R3": 95.18, "R4": 92.50}
    rows = _rows(accuracy).assign(accuracy_std=[0.07, 0.23, 6.71, 0.14, 0.44])
    sentence = ladder_report.diagnosis("dp_dfd (label)", rows)
    assert ("accuracy is lost about equally between R3 and R4 (95.18% → 92.50%, 2.68 points), i.e. to "
            f"{ladder_report.LOSS['R4']}") in sentence
    assert ", and between R1 and R3 (97.86% → 95.18%, 2.68 points), i.e. to the private data replaced by the " \
           "method's generator" in sentence
    assert "within the seeds' spread (a sample std up to 0.44)" in sentence and "mostly" not in sentence
    apart = _rows({**accuracy, "R4": 91.00}).assign(accuracy_std=[0.07, 0.23, 6.71, 0.14, 0.44])
    assert "accuracy is lost mostly between R3 and R4 (95.18% → 91.00%, 4.18 points)" in ladder_report.diagnosis(
        "dp_dfd (label)", apart)  # 1.50 points apart, over the spread
    one_seed = _rows(accuracy).assign(accuracy_std=math.nan)
    assert "lost mostly between" in ladder_report.diagnosis("dp_dfd (label)", one_seed)


def test_the_sentence_gives_the_noise_cost_at_each_epsilon():
    """DP-DFD's shape on the ladder: the best R5 (ε 10) is close to R4, the other ε is far below it; the
    clause names both against R4, or against R3 where R4 has not run, and is absent without an R5 run."""
    rows = _rows({"R0": 99.2, "R1": 97.9, "R2": 9.7, "R3": 93.4, "R4": 83.8, "R5": 26.8}).assign(setting="ε = 1")
    rows.loc[len(rows)] = {"rung": "R5", "status": ladder_report.RUN, "accuracy": 85.0, "setting": "ε = 10"}
    sentence = ladder_report.diagnosis("dp_dfd (label)", rows)
    assert "The noise, against R4 (83.80%): 57.00 points lost at ε = 1 (26.80%); 1.20 points gained at ε = 10" in sentence
    without_r4 = rows[rows["rung"] != "R4"]
    assert "against R3 (93.40%): 66.60 points lost at ε = 1" in ladder_report.diagnosis("dp_dfd (label)", without_r4)
    assert "The noise" not in ladder_report.diagnosis("dp_dfd (label)", rows[rows["rung"] != "R5"])


def test_an_ablation_run_stands_beside_r3_named_by_its_switches_and_splits_the_drop_it_explains():
    """DGD's R1 -> R3 drop taken apart: runs with the paper's ablation switches (held-out private images in
    place of the generator's; no VAE regulariser) are named by what they change, are not R3's run (R3 stays
    the method's loop, whatever they score), their Drop is against R3, and the sentence splits R1 -> R3."""
    swapped = compose(["method=dgd", "privacy=none", "method.vae_data=private"])
    both = compose(["method=dgd", "privacy=none", "method.vae_data=private", "method.vae_regulariser=false"])
    assert (ladder_report.rung(swapped), ladder_report.ablation(swapped)) == ("R3", "vae_data=private")
    assert ladder_report.ablation(both) == "vae_data=private vae_regulariser=false"
    assert ladder_report.ablation(compose(["method=dgd", "privacy=none"])) == ""
    assert ladder_report.ablation(compose(["method=dpsd", "privacy=none"])) == ""  # a method without the switches
    more = compose(["method=dgd", "privacy=none", "method.queries=2000"])  # the words carry the run's value
    assert (ladder_report.ablation(more), ladder_report.ablation_what(more)) == (
        "queries=2000", "2,000 labelled queries in place of the ladder's 400")
    rows = _rows({"R0": 99.2, "R1": 97.9, "R2": 9.7, "R3": 60.5, "R4": 37.5}).assign(ablation="", ablation_what="",
                                                                                  setting="")
    rows["what"] = rows["rung"].map(ladder_report.RUNGS)
    for accuracy, cfg in ((90.0, swapped), (70.0, both)):
        rows.loc[len(rows)] = {"rung": "R3", "status": ladder_report.RUN, "accuracy": accuracy,
                               "ablation": ladder_report.ablation(cfg), "ablation_what": ladder_report.ablation_what(cfg),
                               "setting": ladder_report.setting(cfg), "what": ""}
    sentence = ladder_report.diagnosis("dgd (label)", rows)
    assert "between R1 and R3 (97.90% → 60.50%, 37.40 points)" in sentence  # the ablations are not R3's run
    assert "R3 taken apart: held-out private images in place of the generator's: 90.00%; held-out private images in " \
           "place of the generator's + no VAE regulariser" in sentence
    assert "7.90 points remain with private images" in sentence and "29.50 are the generator's" in sentence
    table = ladder_report.ladder_table("dgd (label)", rows.assign(eps_claimed=float("inf"), eps_rigorous=float("inf"),
                                                                  seeds=1, planned_seeds=1))
    assert list(table["Change (points)"].iloc[-2:]) == ["+29.50", "+9.50"]  # against R3: the ablations gain
    assert table.iloc[4]["Change (points)"] == "-23.00"  # R4 still against the method's R3: a loss
    assert list(table["Setting"].iloc[-2:]) == ["vae_data=private", "vae_data=private vae_regulariser=false"]
    assert "R3 taken apart" not in ladder_report.diagnosis("dgd (label)", rows.iloc[:5])


def test_a_drop_over_rungs_not_run_is_named_between_the_finished_ones_and_not_attributed():
    """RRWithPrior's ladder on a store with R0, R4 and R5 only: the loss lies between R0 and R4."""
    sentence = ladder_report.diagnosis("dpsd (label, rr)", _rows({"R0": 99.2, "R4": 9.74, "R5": 9.74}))
    assert "between R0 and R4" in sentence and "89.46 points" in sentence and "not yet told apart" in sentence
    assert "R1, R2, R3" in sentence
    assert "fewer than two rungs" in ladder_report.diagnosis("dgd (label)", _rows({"R0": 99.2}))


def test_an_on_demand_spec_names_its_own_budget_instead_of_the_smoke_scale(study):
    """The ladder runs at its spec's own budget (its smoke list) under scale=smoke; its section and the page's
    scale line say so, while a spec without a budget of its own keeps the smoke scale's line."""
    markdown = study["markdown"].read_text()
    own = "its spec's own budget (tiny_ladder.yaml's smoke list, the same for every cell)"
    assert f"## tiny ladder ({own}, not the papers' hyper-parameters)" in markdown
    assert f"Scale: smoke — {own}, not the papers' hyper-parameters; smoke scale: not comparable" in markdown
    assert "## tiny queries (smoke scale: not comparable" in markdown


def test_a_page_of_several_specs_at_their_own_budget_names_them_in_one_line():
    ladder, queries, smoke, repair = (Spec(name=name, paper=None, feeds={}, base=(), grid={}, cells=(), seeds=(0,),
                                           smoke=("x=1",) if own else (), path=f"sweeps/{name}.yaml", on_demand=own)
                                      for name, own in (("ladder", True), ("query_budget", True), ("table", False),
                                                        ("repair", True)))
    line = tables.page_scale_line([ladder, queries, smoke], "smoke")
    assert line == ("each spec's own budget (the smoke lists of ladder.yaml and query_budget.yaml, the same for every "
                    f"cell of a spec), not the papers' hyper-parameters; {tables.SCALE_LINES['smoke']}")
    assert "(the smoke lists of ladder.yaml, query_budget.yaml and repair.yaml," in tables.page_scale_line(
        [ladder, queries, repair], "smoke")
    assert line.count("own budget") == 1
    assert tables.page_scale_line([ladder], "smoke") == tables.scale_line(ladder, "smoke")
    assert tables.page_scale_line([ladder, smoke], "laptop") == tables.SCALE_LINES["laptop"]


def test_the_query_axis_counts_the_teacher_queries_each_run_made(study):
    table = ladder_report.query_table(groups_of(study, "tiny_queries"))
    rows = sorted(zip(table["Rung"], table["Queries"], table["Method"]))
    # 3 iterations of 16, s steps each, two annotated batches a step (DPSD's default order, generator_first)
    # R3 has no mechanism, hence no ladder of its own: its row names the method (not "nan")
    assert rows == sorted([("R3", f"{3 * 2 * 16:,}", "dpsd"), ("R3", f"{3 * 2 * 2 * 16:,}", "dpsd"),
                           ("R4", f"{3 * 2 * 16:,}", "dpsd (label)")])


def test_the_report_writes_ladder_figures_and_the_markdown_readme_links(study):
    out, markdown = study["out"], study["markdown"].read_text()
    assert (out / "figures" / "tiny_ladder_smoke_dpsd_label.png").stat().st_size > 0
    assert (out / "figures" / "tiny_queries_smoke.png").stat().st_size > 0
    assert markdown.startswith("# tiny ladder; tiny queries\n") and "do not edit" in markdown
    assert "accuracy is lost" in markdown or "no rung loses" in markdown
    # the figure is copied beside the Markdown (reports/ is not tracked) and linked relative to it
    assert "](figures/tiny_ladder_smoke_dpsd_label.png)" in markdown
    copied = study["markdown"].parent / "figures" / "tiny_ladder_smoke_dpsd_label.png"
    assert copied.read_bytes() == (out / "figures" / "tiny_ladder_smoke_dpsd_label.png").read_bytes()
    assert "### dpsd (label)" in markdown and "| dpsd (label) | R5 |" in markdown


def test_a_markdown_page_inside_the_report_folder_links_the_figures_already_there(study):
    root = study["root"]
    page = study["out"] / "what.md"
    render_report([root / "sweeps" / "tiny_ladder.yaml"], "smoke", study["overrides"], root / "papers.csv", study["out"], page)
    assert "](figures/tiny_ladder_smoke_dpsd_label.png)" in page.read_text()
    assert (study["out"] / "figures" / "tiny_ladder_smoke_dpsd_label.png").stat().st_size > 0


def test_report_command_takes_markdown(study, tmp_path, capsys):
    target = tmp_path / "what.md"
    main(["report", "--no-archive", "--specs", str(study["root"] / "sweeps"), "--reference", str(study["root"] / "papers.csv"),
          "--out", str(tmp_path / "reports"), "--markdown", str(target), *study["overrides"]])
    text = target.read_text()
    assert text.startswith("# tiny ladder; tiny queries\n")  # its specs' titles
    assert "](figures/tiny_ladder_smoke_dpsd_label.png)" in text and (tmp_path / "figures" / "tiny_ladder_smoke_dpsd_label.png").is_file()
    assert (tmp_path / "reports" / "index.html").is_file()


@pytest.mark.parametrize(("overrides", "expected"), [
    (["method=dpsd"], ""),
    (["method=dpsd", "method.distillation_loss=dkd_as_printed"], "distillation_loss=dkd_as_printed"),
    (["method=dpsd", "method.latents=resample"], ""),  # a reading of DPSD, not a variant
    (["method=dpsd", "method.student_steps=5"], "student_steps=5"),  # a repair
    (["method=dfkd"], ""),  # DFAD-style KD's own three steps
    (["method=fed_dpsd"], ""),
    (["method=fed_dpsd", "method.latents=trainable"], "latents=trainable"),
    (["method=fed_dpsd", "privacy=data", "method.top_k_in_data_mode=true"], "top_k_in_data_mode=True"),
])
def test_kept_behaviours_are_labelled_variants_on_the_ladder(overrides, expected):
    cfg = compose(["dataset=digits", *overrides])
    assert ladder_report.variant(cfg) == expected
    assert ("not the paper's method" in ladder_report.ladder_name(cfg)) == bool(expected)


def test_a_run_at_a_faithful_reading_other_than_the_default_stands_on_a_ladder_of_its_own():
    """DP-DFD's ladder runs made before its readings search changed its defaults pin the former reading: they are
    named by it, R3 joins the ladder of its own reading, and the default's ladder keeps the plain name (the one the
    README's verdict links). A repair is a variant, not a reading; the teacher is neither."""
    former = ["method.keep_answer=onehot", "method.finetune_eq2=off"]
    cfgs = {(rung, reading): compose(["dataset=mnist", "method=dp_dfd", *privacy, *pinned])
            for rung, privacy in (("R3", ["privacy=none"]), ("R5", ["privacy=label", "privacy.epsilon=10"]))
            for reading, pinned in (("former", former), ("default", []))}
    assert ladder_report.ladder_name(cfgs["R5", "default"]) == "dp_dfd (label)"
    assert ladder_report.ladder_name(cfgs["R5", "former"]) == \
        "dp_dfd (label, reading keep_answer=onehot finetune_eq2=off: not the default)"
    assert ladder_report.ladder_name(compose(["dataset=mnist", "method=dpsd", "method.student_steps=5"])) == \
        "dpsd (label, student_steps=5: not the paper's method)"
    lenet5 = compose(["dataset=mnist", "method=dp_dfd", "model/teacher=lenet5", "model.teacher.arch=lenet5"])
    assert ladder_report.ladder_name(lenet5) == "dp_dfd (label)"
    accuracy = {("R3", "former"): 94.0, ("R3", "default"): 90.0, ("R5", "former"): 76.0, ("R5", "default"): 89.0}
    groups = pd.DataFrame([{"config": cfg, "status": ladder_report.RUN, "accuracy": accuracy[key], "order": i}
                           for i, (key, cfg) in enumerate(cfgs.items())])
    found = {name: list(rows["accuracy"]) for name, rows in ladder_report.ladders(groups).items()}
    assert found == {"dp_dfd (label, reading keep_answer=onehot finetune_eq2=off: not the default)": [94.0, 76.0],
                     "dp_dfd (label)": [90.0, 89.0]}


def test_a_rung_with_several_seeds_shows_their_mean_and_sample_std_and_an_old_codes_run_is_marked():
    from dpsd.version import method_code_version

    current = method_code_version("dpsd")
    rows = _rows({"R0": 99.2, "R1": 97.7, "R3": 10.0}).assign(
        accuracy_std=[float("nan"), float("nan"), 0.5], what="", setting="", eps_claimed=float("inf"),
        eps_rigorous=float("inf"), seeds=[1, 1, 3], planned_seeds=3,
        code_version=[current, f"{current} 0.1.0+dpsd.000000000000", "0.1.0+dpsd.000000000000"])
    table = ladder_report.ladder_table("dpsd (label)", rows)
    # R1's seeds mix this code and older code: one current version is enough, as on the headline's pages
    assert list(table["Accuracy (%)"]) == ["99.20", "97.70", "10.00 ± 0.50 (stale)"]
    assert list(table["Seeds"]) == ["1/3", "1/3", "3/3"]


def test_a_paper_methods_ladder_opens_with_its_verdict_and_a_variants_with_none():
    body = pd.DataFrame({"Rung": ["R3"], "Accuracy (%)": ["10.00"]})
    tables = {"dpsd (label)": body, "dpsd (label, student_steps=5: not the paper's method)": body}
    page = ladder_report.ladder_markdown("The ladder", tables, [], ["a.png", "b.png"],
                                         {"dpsd (label)": "does not reproduce under any of 5 faithful readings"})
    lines = page.splitlines()
    heading = lines.index("### dpsd (label)")
    assert lines[heading + 2] == ("**Verdict** (the README's, from the headline cells): does not reproduce under any of "
                                  "5 faithful readings.")
    assert page.count("**Verdict**") == 1  # the labelled variant is not the paper's method: no verdict of its own


DATA_STEPS = ("output step", "bound β", "M_k")
LABEL_STEPS = ("one-hot", "top-k rule", "label prior")


@pytest.mark.parametrize("method", ["dpsd", "dpsd_t", "fed_dpsd"])
def test_a_label_ladders_drop_to_r4_names_only_the_label_mechanisms_steps(method):
    """R3 -> R4 in label mode is lost to soft -> one-hot labels and Eq. (5)'s top-k rule with its prior, each with
    what isolates it; label mode has no output step, no bound, no M_k."""
    cfg = compose(["dataset=mnist", f"method={method}", "privacy=label", "privacy.noiseless=true"])
    rows = _rows({"R3": 70.8, "R4": 21.5}).assign(config=[cfg, cfg])
    sentence = ladder_report.diagnosis(f"{method} (label)", rows)
    assert "between R3 and R4" in sentence and ladder_report.structure(cfg) in sentence
    assert all(step in sentence for step in LABEL_STEPS) and "privacy.k = the number of classes" in sentence
    assert not any(step in sentence for step in DATA_STEPS)


@pytest.mark.parametrize("method, topk", [("dpsd", True), ("dpdfd", False), ("fed_dpsd", False)])
def test_a_data_ladders_drop_to_r4_names_only_the_data_mechanisms_steps(method, topk):
    """R3 -> R4 in data mode is lost to the output step and the bound (and M_k where the method applies it: DPSD's
    Eq. (3), not DPDFD's Eq. (4) nor FedDPSD's Alg. 2); no labels are made one-hot and no top-k rule picks them."""
    cfg = compose(["dataset=mnist", f"method={method}", "privacy=data", "privacy.noiseless=true"])
    words = ladder_report.structure(cfg)
    assert "output step" in words and "bound β" in words and ("M_k" in words) == topk
    assert not any(step in words for step in LABEL_STEPS)


def test_dp_dfds_drop_to_r4_names_its_selective_set_and_the_one_hot_step_only_where_its_reading_takes_it():
    soft = ladder_report.structure(compose(["dataset=mnist", "method=dp_dfd", "method.keep_answer=soft"]))
    onehot = ladder_report.structure(compose(["dataset=mnist", "method=dp_dfd", "method.keep_answer=onehot"]))
    assert "selective set I" in soft and "raw probability vector" in soft and "soft → one-hot" not in soft
    assert "selective set I" in onehot and "soft → one-hot" in onehot and "top-k rule" not in onehot
