"""`dpsd run`, `dpsd teacher` and `dpsd privacy-report` end to end on the embedded digits."""

import json
import math

import mlflow
import pytest

from dpsd.cli import main
from dpsd.config import compose
from dpsd.experiment import privacy_report, run_experiment

TINY = ["method.iterations=4", "method.batch_size=32", "model.teacher.recipe.steps=30"]


def tiny_cfg(tmp_path, *overrides):
    return compose([*TINY, f"results_dir={tmp_path}", *overrides])


def test_run_records_one_mlflow_run_with_metrics_both_ledgers_and_releasable_artifacts(tmp_path, capsys):
    assert main(["run", *TINY, f"results_dir={tmp_path}", "--json", str(tmp_path / "out" / "run.json")]) == 0
    printed = capsys.readouterr().out
    assert "eps_claimed" in printed and "eps_rigorous" in printed and "MLflow run" in printed
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["dpsd"])
    assert len(runs) == 1
    run = runs.iloc[0]
    for metric in ("student_test_accuracy", "teacher_test_accuracy", "eps_claimed", "eps_rigorous", "queries",
                   "time_train_s", "time_total_s"):
        assert not math.isnan(run[f"metrics.{metric}"]), metric
    assert 0 < run["metrics.time_train_s"] <= run["metrics.time_total_s"]
    # the MLflow run spans the run (data, teacher, training, evaluation, recording), not its recording alone
    assert (run["end_time"] - run["start_time"]).total_seconds() >= run["metrics.time_total_s"] - 0.01
    written = json.loads((tmp_path / "out" / "run.json").read_text())  # --json: the same summary, for scripts
    assert written["run_id"] == run["run_id"]
    assert written["metrics"]["student_test_accuracy"] == pytest.approx(run["metrics.student_test_accuracy"])
    assert written["privacy"]["claimed_source"] and written["metrics"]["time_total_s"] > 0
    assert run["metrics.eps_claimed"] == pytest.approx(10.0)
    assert run["metrics.eps_rigorous"] > run["metrics.eps_claimed"]
    assert run["metrics.queries"] == 4 * 2 * 32  # DPSD's default order (generator_first) annotates twice a step
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run["run_id"])}
    assert artifacts == {"config.yaml", "ledger.json", "samples.png", "student.pt", "generator.pt"}
    assert (tmp_path / "teachers").is_dir()  # the teacher stays in the cache, outside the artifacts


def test_second_run_reuses_the_cached_teacher(tmp_path):
    cfg = tiny_cfg(tmp_path, "tracking=none")
    first = run_experiment(cfg, show_progress=False)
    second = run_experiment(cfg, show_progress=False)
    assert first["teacher"]["cached"] is False
    assert second["teacher"]["cached"] is True


def test_same_seed_gives_the_same_metrics_on_cpu(tmp_path):
    cfg = tiny_cfg(tmp_path, "tracking=none", "device=cpu")
    first = run_experiment(cfg, show_progress=False)["metrics"]
    second = run_experiment(cfg, show_progress=False)["metrics"]

    def trained(metrics):  # wall times differ between two runs; nothing else may
        return {key: value for key, value in metrics.items() if not key.startswith("time_")}

    assert trained(first) == trained(second) and first.keys() == second.keys()
    other_seed = run_experiment(tiny_cfg(tmp_path, "tracking=none", "device=cpu", "seed=1"), show_progress=False)
    assert other_seed["metrics"]["final_student_loss"] != first["final_student_loss"]


@pytest.mark.parametrize("mode", ["label", "data", "none"])
def test_the_ledger_a_run_fills_is_the_ledger_privacy_report_plans(tmp_path, mode):
    cfg = tiny_cfg(tmp_path, "tracking=none", f"privacy={mode}")
    ran = run_experiment(cfg, show_progress=False)["privacy"]
    planned = privacy_report(cfg)
    for key in ("eps_claimed", "eps_rigorous", "queries", "delta"):
        assert ran[key] == planned[key], key
    if mode == "none":
        assert ran["eps_claimed"] == math.inf and ran["eps_rigorous"] == math.inf


def test_privacy_report_pins_dpsd_theorem1_and_the_rigorous_epsilon(capsys):
    overrides = [
        "method=dpsd", "privacy=data", "privacy.sigma=100", "privacy.beta=0.005",
        "method.batch_size=256", "method.iterations=200", "dataset=mnist",
        "method.update_order=student_first",  # Alg. 1: one annotated batch an iteration (the default annotates two)
    ]
    assert main(["privacy-report", *overrides]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"eps_claimed", "eps_rigorous", "delta", "queries", "accountant"} <= report.keys()
    assert report["delta"] == 1e-5
    assert report["queries"] == 256 * 200
    # Theorem 1 as published keeps beta^2: 2 beta^2 c b T q / sigma^2 + log((q-1)/q) - (log delta + log q)/(q-1)
    assert report["eps_claimed"] == pytest.approx(0.261442, abs=1e-5)
    # The mechanism as implemented: b*T Gaussian releases, sensitivity 2 beta, noise sigma beta.
    assert report["eps_rigorous"] == pytest.approx(28.84, rel=0.01)
    assert report["eps_rigorous"] > 100 * report["eps_claimed"]


def test_literal_eq5_randomized_response_has_unbounded_rigorous_epsilon():
    report = privacy_report(compose(["privacy.rr_domain=all"]))
    assert report["eps_claimed"] == 10.0
    assert report["eps_rigorous"] == math.inf
    assert any("rr_domain=all" in note for note in report["notes"])


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["dataset=mnsit"], "unknown dataset 'mnsit'; known: celeba_gender"),
        (["method=nope"], "unknown method 'nope'; known:"),
        (["privacy.epsilon=0"], "privacy.epsilon must be > 0"),
        (["privacy.epsilon=-1"], "privacy.epsilon must be > 0"),
        (["privacy.k=11"], "privacy.k must lie in [2, 10] for digits (10 classes), got 11"),
        (["privacy=data", "privacy.sigma=0"], "privacy.sigma must be > 0"),
        (["privacy.epsilon=abc"], "privacy.epsilon"),
    ],
)
def test_bad_overrides_stop_with_one_line(overrides, expected, capsys):
    assert main(["run", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("overrides", [["+method.epochz=3"], ["++method.epochz=3"], ["++method.stages=3"]])
def test_a_method_key_the_method_does_not_have_is_refused_with_or_without_plus(overrides, capsys):
    """`dpsd run` (one run): an added key the chosen method does not declare would be ignored; it is refused,
    whether no method has it (a typo) or another method does (DP-DFD's stages on DPSD)."""
    assert main(["run", "method=dpsd", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "method 'dpsd' has no such setting" in err


@pytest.mark.parametrize("command", [["privacy-report"], ["privacy-report", "--vary", "privacy.epsilon=1,2"],
                                     ["teacher"], ["audit", "mechanism"], ["run"]])
@pytest.mark.parametrize("override, words", [
    ("+privacy.epsilonn=5", "privacy.epsilonn: privacy has no such setting, so the override would be ignored; its "
                            "settings: beta, bound,"),
    ("++tracking.experimentt=x", "tracking.experimentt: tracking has no such setting"),
    ("+epsilon=1", "epsilon: the config has no such setting"),
    ("++method.stages=3", "method.stages: method 'dpsd' has no such setting"),  # another method's key: one run's too
])
def test_every_command_of_one_run_refuses_a_key_the_config_does_not_define(command, override, words, capsys):
    """A key added with + or ++ that nothing reads is refused in one line, by every command that composes one run,
    before anything trains or is reported."""
    assert main([*command, "method=dpsd", override, "tracking=none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_a_key_added_under_a_free_form_node_is_accepted():
    cfg = compose(["+tracking.tags.team=a", "+dataset.options.extra=1"])
    assert cfg.tracking.tags.team == "a" and cfg.dataset.options.extra == 1


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    import dpsd.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "run", interrupted)
    assert main(["run"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpsd run: interrupted; nothing recorded") and len(err.splitlines()) == 1


def test_a_data_root_without_data_names_the_files_expected(tmp_path, capsys):
    assert main(["run", "dataset=mnist", f"data.root={tmp_path}", f"results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "train-images-idx3-ubyte" in err and str(tmp_path) in err


def test_teacher_command_trains_once_then_reads_the_cache(tmp_path, capsys):
    args = ["teacher", "model.teacher.recipe.steps=30", f"results_dir={tmp_path}"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["cached"] is False and second["cached"] is True
    assert first["path"] == second["path"] and first["test_accuracy"] == second["test_accuracy"]


def test_dpsd_t_reports_an_unbounded_rigorous_epsilon_and_says_why():
    report = privacy_report(compose(["method=dpsd_t"]))
    assert report["eps_claimed"] == 10.0
    assert report["eps_rigorous"] == math.inf
    assert any("DPSD-T" in note for note in report["notes"])


def test_the_summary_says_when_no_privacy_is_claimed(capsys):
    from dpsd.cli import print_summary

    privacy = {"eps_claimed": math.inf, "claimed_notion": None, "claimed_source": None, "eps_rigorous": math.inf,
               "accountant": "pld", "delta": 1e-5, "queries": 400, "notes": [], "neighbouring": "replace_record",
               "uncovered": ["the teacher's weights"]}
    print_summary({"metrics": {"teacher_test_accuracy": 0.99, "student_test_accuracy": 0.96}, "privacy": privacy})
    out = capsys.readouterr().out
    assert "eps_claimed             inf  (no privacy claimed)" in out and "None" not in out
    assert "neighbouring = replace_record" in out and "uncovered: the teacher's weights" in out


def test_the_summary_prints_each_kind_of_unprotected_release_once_with_its_count(capsys):
    """A ledger's uncovered releases, one line per kind with its count, however they were recorded (one a step,
    or a checkpoint's totals and the steps after it)."""
    from dpsd.cli import print_summary
    from dpsd.privacy import Ledger, UnprotectedRelease

    per_step, resumed = Ledger(), Ledger()
    per_step.record(UnprotectedRelease(note="pre-training on the teacher"))
    resumed.record(UnprotectedRelease(note="pre-training on the teacher"))
    resumed.record(UnprotectedRelease(count=25, note="fine-tuning step on the teacher"))
    for step in range(40):
        per_step.record(UnprotectedRelease(note="fine-tuning step on the teacher"))
        if step >= 25:
            resumed.record(UnprotectedRelease(note="fine-tuning step on the teacher"))
    assert per_step.uncovered() == resumed.uncovered()
    privacy = {"eps_claimed": 10.0, "claimed_notion": "eps-label-DP", "claimed_source": "DP-DFD", "eps_rigorous": math.inf,
               "accountant": "pld", "delta": 1e-5, "queries": 400, "notes": [], "neighbouring": "replace_record",
               "uncovered": per_step.uncovered()}
    print_summary({"metrics": {"teacher_test_accuracy": 0.99, "student_test_accuracy": 0.8}, "privacy": privacy})
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("uncovered:")]
    assert lines == ["uncovered: pre-training on the teacher",
                     "uncovered: fine-tuning step on the teacher (40 releases)"]


def test_the_quickstart_table_says_non_private_where_runs_recorded_none_tags():
    """Runs record an absent claim as the tag ``"None"``; the quickstart table must not print it."""
    from dpsd.quickstart import claim_text

    unclaimed = {"claimed_notion": "None", "claimed_source": "None"}
    assert claim_text(unclaimed, private=False) == "non-private"
    assert claim_text(unclaimed, private=True) == "no privacy claimed"
    claimed = {"claimed_notion": "eps-label-DP per query", "claimed_source": "DPSD Theorem 2"}
    assert claim_text(claimed, private=True) == "eps-label-DP per query, DPSD Theorem 2"
