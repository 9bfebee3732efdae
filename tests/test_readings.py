"""The readings tables: effects read off a factorial design, how much of the faithful space a search ran, the
default rule."""

import math

import pandas as pd
import pytest

from dpsd.config import compose
from dpsd.report import readings, readings_design
from dpsd.report.readings import ABLATION, DPDFD_SWITCHES, DPSD_SWITCHES, FAITHFUL, REPAIR, SWITCH_SETS
from dpsd.report.readings_design import (chosen_defaults, coverage, faithful_space, main_effects, run_table,
                                         searched, seed_rows, switches_of, varied)
from dpsd.report.readings_page import coverage_sentence
from dpsd.sweep.spec import REPO_SWEEPS, expand_configs, load_spec
from dpsd.version import method_code_version

DEFAULTS = {"latents": "trainable", "student steps": "1", "L_s in the generator's loss": "minimize",
            "learning rates": "student 0.001", "update order": "student_first", "generator output": "tanh",
            "teacher": "small_cnn, [-1, 1]"}


def rows(runs, method="dpsd"):
    """``runs``: (switch values changed from DEFAULTS, accuracies over seeds)."""
    out = []
    for i, (changed, accuracies) in enumerate(runs):
        for seed, accuracy in enumerate(accuracies):
            out.append({"method": method, "group": f"{method} run{i}", "seed": seed, "accuracy": accuracy,
                        **DEFAULTS, **changed})
    return pd.DataFrame(out)


def test_every_switch_value_is_classified_and_quotes_the_paper_or_says_why_not():
    keys = {}
    for entry in SWITCH_SETS.values():
        for switch in entry.switches:
            assert sum(r.literal for r in switch.readings) <= 1, switch.name
            for reading in switch.readings:
                assert reading.kind in (FAITHFUL, REPAIR, ABLATION, readings.SUBSTITUTE) and reading.words
            # a name is one column of seed_rows: two papers' switches of one name must read one config key
            assert keys.setdefault(switch.name, switch.key) == switch.key, switch.name
    assert set(readings_design.DISCRIMINATOR_METHODS) <= set(SWITCH_SETS)


def test_each_method_is_judged_by_its_own_papers_switches():
    """DPDFD's rows are read with DPDFD's switches: a DPSD-only switch never shows, and the default rule judges
    DPDFD's runs by DPDFD's readings (its all-literal run wins a tie)."""
    base = {**DEFAULTS, "latents": "resample", "teacher target": "argmax", "activation sign": "minimize",
            "entropy form": "per_sample"}
    frame = pd.DataFrame([{"method": "dpdfd", "group": f"run{i}", "seed": seed, "accuracy": accuracy, **base, **changed}
                          for i, (changed, accuracy) in enumerate([({}, 10.0), ({"activation sign": "maximize"}, 11.0),
                                                                   ({"learning rates": "paper"}, 50.0)])
                          for seed in (0, 1)])
    assert switches_of(frame) is DPDFD_SWITCHES and switches_of(frame.assign(method="dpsd_t")) is DPSD_SWITCHES
    assert [s.name for s in varied(frame)] == ["activation sign"]  # learning rates: not a DPDFD switch
    assert chosen_defaults(frame, DEFAULTS["teacher"])["activation sign"] == "minimize"  # a tie: the literal run


def test_the_effect_is_the_difference_of_the_level_means_and_the_table_keeps_the_seeds():
    frame = rows([({}, [10.0, 12.0]), ({"latents": "resample"}, [30.0, 34.0]),
                  ({"student steps": "5"}, [10.0, 10.0]), ({"latents": "resample", "student steps": "5"}, [50.0, 54.0])])
    effects = main_effects(frame).set_index(["Switch", "Value"])
    assert effects.loc[("latents", "resample"), "Effect (points)"] == "+31.50"  # (32 + 52) / 2 - (11 + 10) / 2
    assert effects.loc[("latents", "trainable"), "R3 (%)"].startswith("10.50 ± ")
    assert effects.loc[("student steps", "5"), "Reading"] == REPAIR
    assert set(effects.index.get_level_values(0)) == {"latents", "student steps"}  # only what varies
    runs = run_table(frame)
    assert list(runs["R3 (%)"])[0] == "52.00 ± 2.83" and list(runs["Seeds"]) == [2, 2, 2, 2]
    assert dict(zip(runs["R3 (%)"], runs["All faithful"]))["52.00 ± 2.83"] == "no"


def test_the_default_is_the_best_faithful_run_at_the_default_teacher_and_ties_go_to_the_more_literal_run():
    teacher = DEFAULTS["teacher"]
    frame = rows([({}, [10.0, 10.0]),
                  ({"latents": "resample", "student steps": "5"}, [60.0, 60.0]),  # a repair: never chosen
                  ({"latents": "resample", "update order": "generator_first"}, [30.0, 30.0]),
                  ({"update order": "generator_first", "teacher": "lenet5, mean/std"}, [80.0, 80.0])])  # another teacher
    chosen = chosen_defaults(frame, teacher)
    assert chosen == {"latents": "resample", "student steps": "1", "update order": "generator_first"}
    # main effects would pick resample (45 against 10) with 5 student steps' help; the rule takes a run as a whole
    tie = rows([({}, [20.0, 20.0]), ({"update order": "generator_first"}, [21.5, 21.5])])
    assert chosen_defaults(tie, teacher)["update order"] == "student_first"  # within 2 points: the more literal run
    # equally literal runs that tie: the current defaults stay; a run better by more than a tie still wins
    level = rows([({}, [10.0, 10.0]), ({"learning rates": "paper", "generator output": "tanh_batchnorm"}, [11.5, 11.5])])
    assert chosen_defaults(level, teacher)["learning rates"] == "paper"  # no current defaults given: the best mean
    assert chosen_defaults(level, teacher, DEFAULTS)["learning rates"] == "student 0.001"
    better = rows([({}, [10.0, 10.0]), ({"learning rates": "paper", "generator output": "tanh_batchnorm"}, [12.5, 12.5])])
    assert chosen_defaults(better, teacher, DEFAULTS)["learning rates"] == "paper"
    assert chosen_defaults(rows([({"student steps": "5"}, [50.0]), ({"student steps": "5", "latents": "resample"},
                                                                    [40.0])]), teacher) == {}  # no faithful run


def test_seed_rows_read_each_switch_from_the_resolved_config():
    configs = [compose(["method=dpsd", "dataset=digits", "method.latents=trainable", "method.update_order=student_first"]),
               compose(["method=dpsd", "dataset=digits", "method.latents=resample", "method.student_lr=0.1",
                        "model/teacher=lenet5", "model.generator.output=tanh_batchnorm"])]
    frame = pd.DataFrame([{"status": "run", "method": "dpsd", "group": str(i), "seed": 0, "accuracy": 10.0 + i,
                           "config": cfg} for i, cfg in enumerate(configs)])
    out = seed_rows(frame)
    assert dict(out.iloc[0][list(DEFAULTS)]) == DEFAULTS
    assert out.iloc[1]["latents"] == "resample" and out.iloc[1]["learning rates"] == "paper"
    assert out.iloc[1]["teacher"] == "lenet5, mean/std" and out.iloc[1]["generator output"] == "tanh_batchnorm"
    assert DPSD_SWITCHES[3].reading("paper").kind == FAITHFUL and not math.isnan(out["accuracy"].sum())


def test_one_switch_at_a_time_reads_each_flip_against_the_centre_over_the_seeds_both_ran():
    frame = rows([({"latents": "resample"}, [80.0, 84.0]), ({"latents": "resample", "student steps": "5"}, [90.0]),
                  ({}, [10.0, 12.0, 14.0])])
    table = readings_design.centre_table(frame).set_index("Flipped")
    assert table.loc["none (the centre)", "R3 (%)"] == "82.00 ± 2.83"
    assert table.loc["student steps", "Value"] == "5" and table.loc["student steps", "Reading"] == REPAIR
    assert table.loc["student steps", "Change (points)"] == "+10.00"  # seed 0 only: 90 - 80
    assert table.loc["latents", "Change (points)"] == "-71.00"  # seeds 0-1: 11 - 82


def test_a_design_run_at_another_rung_names_it_in_its_tables_and_in_the_verdict_words():
    """DP-DFD's readings ran at R5: its columns and its verdict clause say so, where DPSD's say R3."""
    cfg = compose(["method=dp_dfd", "dataset=digits", "privacy=label", "method.keep_answer=soft"])
    frame = pd.DataFrame([{"status": "run", "method": "dp_dfd", "group": "0", "seed": seed, "accuracy": 70.0 + seed,
                           "config": cfg} for seed in (0, 1)])
    at_r5 = seed_rows(frame, "R5, ε claimed 10")
    assert at_r5.iloc[0]["kept answer"] == "soft" and switches_of(at_r5) is readings.DP_DFD_SWITCHES
    assert "R5, ε claimed 10 (%)" in run_table(at_r5).columns
    assert searched(at_r5)["dp_dfd"]["where"] == "at R5, ε claimed 10"
    assert searched(at_r5)["dp_dfd"]["best"] == "70.50 ± 0.71% (n = 2)"
    assert searched(seed_rows(frame))["dp_dfd"]["where"] == "without privacy (R3)"
    # a reading with one seed above it (a twin computing the same run at seed 0) is not the best: the confirmed is
    onehot = compose(["method=dp_dfd", "dataset=digits", "privacy=label", "method.keep_answer=onehot"])
    twin = pd.DataFrame([{"status": "run", "method": "dp_dfd", "group": "1", "seed": 0, "accuracy": 90.0,
                          "config": onehot}])
    assert searched(seed_rows(pd.concat([frame, twin]), "R5, ε claimed 10"))["dp_dfd"]["best"] == "70.50 ± 0.71% (n = 2)"
    # a run recorded by other code of its method is marked and is not the best current one, however high
    stale = twin.assign(group="2", seed=[0, 1][:1], accuracy=99.0, code_version="0.0.1+dp_dfd.000000000000")
    stale = pd.concat([stale, stale.assign(seed=1)])
    rows = seed_rows(pd.concat([frame.assign(code_version=method_code_version("dp_dfd")), stale]), "R5, ε claimed 10")
    found = searched(rows)["dp_dfd"]
    assert found["best"] == "70.50 ± 0.71% (n = 2)" and found["stale"] == 1
    assert run_table(rows)["R5, ε claimed 10 (%)"].tolist()[0] == "99.00 ± 0.00 (stale)"


def test_dgds_switches_read_its_generator_loss_and_output_and_name_a_run_off_its_defaults():
    """DGD's readings (sweeps/readings_dgd_r3.yaml): the BN-statistics term read as on/off from its weight, whatever
    number spells it, and a run away from DGD's defaults named by the switches it sets."""
    default = compose(["method=dgd", "privacy=none"])
    both = compose(["method=dgd", "privacy=none", "method.generator_loss.bn_statistics=0",
                    "model.generator.output=tanh_batchnorm"])
    assert readings.switch_values(default)["BN-statistics term"] == "on" and readings.off_default(default) == ""
    assert readings.switch_values(both)["BN-statistics term"] == "off"
    assert readings.off_default(both) == "bn_statistics=off output=tanh_batchnorm"
    assert switches_of(pd.DataFrame({"method": ["dgd"]})) is readings.DGD_SWITCHES
    assert readings.switch_values(compose(["method=dafl", "privacy=none"]))["BN-statistics term"] == readings.DASH  # no such loss


def test_fed_dpsds_switches_are_what_alg_2_leaves_open_and_its_old_spec_a_half_fraction_of_four():
    """FedDPSD is read with the subset of DPSD's switches that its Alg. 2 leaves open: the latents (fresh each
    iteration, line 3, and whether §III-B's "as well as its inputs" trains them), L_s's sign, the learning rates and
    the generator's output; not the student steps or the update order, which Alg. 2 writes out (line 16, then 18).
    sweeps/readings_fed_dpsd_r3.yaml, a screening fraction from before the latents became a switch, ran the half
    fraction I = CDFG of the other three and the teacher, at FedDPSD's default latents: eight distinct runs, each
    value in four, every run's product of the four +-1 codes the same (no main effect aliased with a two-factor
    interaction), the first run at FedDPSD's defaults before its full search (the plain tanh output) and so the
    ladder's pinned R3 cell."""
    names = [switch.name for switch in readings.FED_DPSD_SWITCHES]
    assert switches_of(pd.DataFrame({"method": ["fed_dpsd"]})) is readings.FED_DPSD_SWITCHES
    assert set(names) < {switch.name for switch in DPSD_SWITCHES}
    assert "latents" in names and not {"student steps", "update order"} & set(names)
    latents = readings.FED_DPSD_SWITCHES[names.index("latents")]
    assert [r.value for r in latents.readings if r.kind == FAITHFUL] == ["resample", "resample_trained"]
    assert readings.off_default(compose(["method=fed_dpsd", "privacy=none"])) == ""
    maximize = compose(["method=fed_dpsd", "privacy=none", "method.generator_loss.student_loss=maximize"])
    assert readings.off_default(maximize) == "student_loss=maximize"
    trained = compose(["method=fed_dpsd", "privacy=none", "method.latents=resample_trained"])
    assert readings.off_default(trained) == "latents=resample_trained"

    pairs = expand_configs(REPO_SWEEPS / "readings_fed_dpsd_r3.yaml", "smoke", ["data.root=/nowhere"])
    runs = {cell.config_hash: readings.switch_values(cfg) for cell, cfg in pairs if int(cfg.seed) == 0}
    first = readings.switch_values(compose(["method=fed_dpsd", "dataset=mnist", "model.generator.output=tanh"]))
    assert {values["latents"] for values in runs.values()} == {first["latents"]}  # not varied: the default
    varied = [name for name in names if name != "latents"]
    codes = [[1 if values[name] == first[name] else -1 for name in varied] for values in runs.values()]
    assert len(runs) == 8 and len({tuple(c) for c in codes}) == 8
    assert all(sum(c[i] for c in codes) == 0 for i in range(len(varied)))  # each value in half the runs
    assert {math.prod(c) for c in codes} == {1}  # I = CDFG, the all-default run included
    ladder = {cell.label: cell.config_hash for cell, _ in expand_configs(REPO_SWEEPS / "ladder.yaml", "smoke",
                                                                        ["data.root=/nowhere"])}
    assert next(iter(runs)) == ladder["method=fed_dpsd privacy=none model.generator.output=tanh seed=0"]


def test_an_ablation_is_not_a_reading_of_the_method():
    """DPSD's L_s off is Table VI's ablation of the loss terms, not a reading of Alg. 1: a run with it is not all
    faithful, the default rule never picks it, it is outside the faithful space and no ladder names it a reading."""
    l_s = next(s for s in DPSD_SWITCHES if s.name == "L_s in the generator's loss")
    assert l_s.reading("off").kind == ABLATION
    frame = rows([({}, [10.0, 10.0]), ({"L_s in the generator's loss": "off"}, [60.0, 60.0])])
    assert dict(zip(run_table(frame)["R3 (%)"], run_table(frame)["All faithful"]))["60.00 ± 0.00"] == "no"
    assert chosen_defaults(frame, DEFAULTS["teacher"]) == {"L_s in the generator's loss": "minimize"}
    assert coverage(frame)["combinations"] == 1
    assert readings.off_default(compose(["method=dpsd", "method.generator_loss.student_loss=off"])) == ""


def test_the_faithful_space_is_the_product_of_each_switchs_faithful_values_but_the_teachers():
    """DPSD: latents at three faithful values, student steps at one (five is a repair), L_s at two (off is an
    ablation), learning rates, update order and generator output at two; the teacher, a substitute, is no factor."""
    assert faithful_space(DPSD_SWITCHES) == 3 * 1 * 2 * 2 * 2 * 2
    assert faithful_space(readings.FED_DPSD_SWITCHES) == 2 ** 4
    assert faithful_space(DPDFD_SWITCHES) == 2 ** 5 and faithful_space(readings.DP_DFD_SWITCHES) == 2 ** 4


def test_a_table_says_how_many_faithful_combinations_ran_at_the_searchs_teacher():
    """N counts distinct faithful combinations at the teacher with the most of them (a run at another teacher, a
    repeat, or a repair adds none); only N = M is called the full factorial."""
    lenet = {"teacher": "lenet5, mean/std"}
    frame = rows([({}, [10.0]), ({"student steps": "5"}, [50.0]), ({"update order": "generator_first"}, [20.0]),
                  ({**lenet, "latents": "resample"}, [30.0]), ({**lenet, "latents": "resample_trained"}, [30.0]),
                  ({**lenet, "latents": "resample", "generator output": "tanh_batchnorm"}, [30.0]),
                  ({**lenet, "latents": "resample"}, [31.0])])
    space = faithful_space(DPSD_SWITCHES)
    assert coverage(frame) == {"combinations": 3, "space": space, "teacher": "lenet5, mean/std"}
    assert coverage_sentence(frame) == (f"3 of {space} faithful combinations run at teacher lenet5, mean/std "
                                                 "(a fraction: the maximum is not established).")
    dgd = pd.DataFrame([{"method": "dgd", "group": f"{bn} {out}", "seed": 0, "accuracy": 10.0,
                         "BN-statistics term": bn, "generator output": out, "teacher": DEFAULTS["teacher"]}
                        for bn in ("on", "off") for out in ("tanh", "tanh_batchnorm")])
    assert coverage_sentence(dgd).startswith("4 of 4 faithful combinations run at teacher small_cnn")
    assert coverage_sentence(dgd).endswith("(full factorial: no effect aliased).")
    assert searched(dgd)["dgd"]["combinations"] == searched(dgd)["dgd"]["space"] == 4


FULL_SPECS = sorted(REPO_SWEEPS.glob("readings_*_full.yaml"))


@pytest.mark.parametrize("path", FULL_SPECS, ids=[p.stem for p in FULL_SPECS])
def test_a_full_readings_spec_runs_every_faithful_combination_once_at_one_teacher(path):
    """Each ``readings_*_full.yaml`` is the full factorial of its methods' faithful switches: per method, every one of
    the :func:`faithful_space` combinations once, each value of each a faithful reading (no repair, no ablation),
    all at one teacher, and its design text states that number."""
    pairs = expand_configs(path, "smoke", ["data.root=/nowhere"])
    frame = pd.DataFrame([{"method": str(cfg.method.name), "group": cell.label, **readings.switch_values(cfg)}
                          for cell, cfg in pairs if int(cfg.seed) == 0])
    design = str(load_spec(path).feeds["design"])
    for method, at in frame.groupby("method"):
        space = faithful_space(SWITCH_SETS[method].switches)
        assert at["teacher"].nunique() == 1, method
        assert len(at) == space and coverage(at) == {"combinations": space, "space": space,
                                                     "teacher": at["teacher"].iloc[0]}, method
        assert f"{space} combinations" in design, method


def test_a_budget_spec_reads_one_row_per_method_and_budget_in_the_axis_order():
    """A spec whose feeds name an ``axis`` runs one reading over a budget: its table keeps each budget apart (two
    budgets of one reading are not pooled as one run) and orders each method's by the axis's value."""
    frame = pd.DataFrame([{"status": "run", "method": method, "group": f"{method} {steps}", "seed": seed,
                           "accuracy": accuracy + seed,
                           "config": compose([f"method={method}", "dataset=digits", f"method.iterations={steps}"])}
                          for method, steps, accuracy in (("dpsd", 3000, 80.0), ("dpsd", 400, 60.0),
                                                          ("dpsd_t", 1200, 70.0)) for seed in (0, 1)])
    rows = seed_rows(frame, axis="method.iterations")
    table = readings_design.budget_table(rows, "method.iterations")
    assert table[["Method", "method.iterations"]].values.tolist() == [["dpsd", 400], ["dpsd", 3000], ["dpsd_t", 1200]]
    assert table["R3 (%)"].tolist() == ["60.50 ± 0.71", "80.50 ± 0.71", "70.50 ± 0.71"]
    assert table["Per seed"].tolist()[0] == "60.00, 61.00" and set(table["Seeds"]) == {2}
