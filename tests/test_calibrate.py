"""Noise calibration (dpsd.privacy_ops.calibrate): round trips through both ledgers, and its errors."""

import json
import math

import mlflow
import pytest

from dpsd.cli import main, untargeted_epsilon_note
from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.experiment import privacy_report, resolve_run, run_experiment
from dpsd.privacy_ops.calibrate import TOLERANCE, calibrate

# Alg. 1's order: one annotated batch an iteration, b x T releases (DPSD's default, generator_first, annotates two)
PAPER = ["privacy=data", "privacy.beta=0.005", "method.batch_size=256", "method.iterations=200", "dataset=mnist",
         "method.update_order=student_first"]
LABEL = ["privacy=label", "method.batch_size=64", "method.iterations=50"]


def calibrated(cfg):
    """:func:`calibrate` ``cfg`` for the method and data it names, as a run resolves them."""
    setup = resolve_run(cfg)
    return calibrate(cfg, setup.method, setup.info)


@pytest.mark.parametrize(
    "overrides,ledger,target",
    [
        (PAPER, "claimed", 1.0),
        (PAPER, "rigorous", 1.0),
        (PAPER, "rigorous", 8.0),
        (LABEL, "rigorous", 1.0),
        (LABEL, "rigorous", 10.0),
    ],
)
def test_the_solved_noise_accounts_back_to_the_target(overrides, ledger, target):
    solved = calibrated(compose([*overrides, f"privacy.calibrate={ledger}", f"privacy.epsilon={target}"]))
    key = "sigma" if solved.privacy.mode == "data" else "query_epsilon"
    # Account the solved value afresh, with calibration off.
    report = privacy_report(compose([*overrides, f"privacy.{key}={solved.privacy[key]!r}"]))
    eps = report["eps_claimed"] if ledger == "claimed" else report["eps_rigorous"]
    assert target * (1 - TOLERANCE) <= eps <= target


TARGETS = [round(0.05 * 1.9**i, 4) for i in range(12)]  # 0.05 ... 58


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("overrides,ledger", [(LABEL, "rigorous"), (PAPER, "rigorous"), (PAPER, "claimed")],
                         ids=["label-rigorous", "data-rigorous", "data-claimed"])
def test_calibration_is_one_sided_over_many_targets(overrides, ledger, target):
    """In the spirit of Opacus's get_noise_multiplier tests: for every target the solved noise
    meets it from below (never above it, never more than TOLERANCE below it)."""
    cfg = compose([*overrides, f"privacy.calibrate={ledger}", f"privacy.epsilon={target}"])
    try:
        solved = calibrated(cfg)
    except ConfigError as err:  # a target outside the searched range must say so, not be missed
        assert "out of reach" in str(err)
        return
    report = privacy_report(solved.copy())
    eps = report["eps_claimed"] if ledger == "claimed" else report["eps_rigorous"]
    assert target * (1 - TOLERANCE) <= eps <= target, (target, eps)


def test_claimed_calibration_of_label_mode_is_the_identity():
    cfg = compose(["privacy.calibrate=claimed", "privacy.epsilon=2"])
    assert calibrated(cfg).privacy.query_epsilon == 2.0


def test_calibration_off_leaves_the_config_alone():
    cfg = compose(["privacy=data"])
    assert calibrated(cfg) is cfg


def test_rigorous_calibration_of_data_mode_keeps_beta_and_raises_sigma_far_above_the_claimed_one():
    claimed = calibrated(compose([*PAPER, "privacy.calibrate=claimed", "privacy.epsilon=1"])).privacy
    rigorous = calibrated(compose([*PAPER, "privacy.calibrate=rigorous", "privacy.epsilon=1"])).privacy
    assert claimed.beta == rigorous.beta == 0.005
    assert rigorous.sigma > 10 * claimed.sigma


def test_privacy_report_says_what_it_calibrated():
    report = privacy_report(compose([*LABEL, "privacy.calibrate=rigorous", "privacy.epsilon=1"]))
    assert report["calibration"]["parameter"] == "privacy.query_epsilon"
    assert report["calibration"]["ledger"] == "rigorous"
    assert report["eps_claimed"] == pytest.approx(report["calibration"]["value"])  # Theorem 2: the per-query eps
    assert report["eps_rigorous"] == pytest.approx(1.0, rel=0.005)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        # DPSD-T's generator is unprotected: the rigorous ledger is inf whatever the noise.
        (["method=dpsd_t", "privacy.calibrate=rigorous"], "out of reach; the rigorous ledger spans [inf, inf] (floor inf)"),
        (["privacy=data", "privacy.calibrate=rigorous"], "privacy.calibrate=rigorous needs a target privacy.epsilon"),
        (["privacy=none", "privacy.calibrate=claimed"], "needs a private mode"),
        (["privacy.calibrate=exact"], "privacy.calibrate must be one of claimed, rigorous, off"),
    ],
)
def test_unusable_calibrations_stop_with_one_line(overrides, expected, capsys):
    assert main(["privacy-report", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err
    assert len(err.splitlines()) == 1


def test_a_target_beyond_the_search_range_names_the_reachable_span():
    # 3,200 answers at the largest per-query epsilon searched (1e3) cannot reach 1e9.
    with pytest.raises(ConfigError, match=r"spans \[[0-9.e+-]+, [0-9.e+-]+\] \(floor [0-9.e+-]+\) for privacy.query_epsilon in \[1e-06, 1000\]"):
        calibrated(compose([*LABEL, "privacy.calibrate=rigorous", "privacy.epsilon=1e9"]))


def test_a_calibrated_run_logs_the_solved_noise(tmp_path):
    cfg = compose([
        "method.iterations=2", "method.batch_size=16", "model.teacher.recipe.steps=30", f"results_dir={tmp_path}",
        "privacy.calibrate=rigorous", "privacy.epsilon=2",
    ])
    summary = run_experiment(cfg, show_progress=False)
    assert summary["privacy"]["eps_rigorous"] == pytest.approx(2.0, rel=0.005)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = mlflow.search_runs(experiment_names=["dpsd"]).iloc[0]
    assert float(run["params.privacy.query_epsilon"]) == pytest.approx(summary["privacy"]["eps_claimed"])
    assert not math.isclose(float(run["params.privacy.query_epsilon"]), 2.0)


def test_privacy_report_vary_prints_a_grid_as_an_aligned_table(capsys):
    args = ["privacy-report", *PAPER, "--vary", "privacy.sigma=50,100", "--vary", "privacy.beta=0.001,0.005"]
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    header = lines[0].split()
    assert header == ["privacy.sigma", "privacy.beta", "neighbouring", "eps_claimed", "eps_rigorous_rdp",
                      "eps_rigorous_pld", "eps_rigorous", "queries"]
    assert len(lines) == 1 + 4 and len({len(line) for line in lines}) == 1  # right-aligned columns
    rows = {(row[0], row[1]): row for row in (line.split() for line in lines[1:])}
    assert set(rows) == {("50", "0.001"), ("50", "0.005"), ("100", "0.001"), ("100", "0.005")}
    assert rows[("100", "0.005")][2:] == ["replace_record", "0.2614", "30.6", "28.84", "28.84", "51200"]


def test_privacy_report_vary_over_targets_shows_the_solved_noise(capsys):
    assert main(["privacy-report", *LABEL, "privacy.calibrate=rigorous", "--vary", "privacy.epsilon=1,4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:2] == ["privacy.epsilon", "privacy.query_epsilon"]
    assert [float(line.split()[6]) for line in lines[1:]] == pytest.approx([1, 4], rel=0.005)


def test_privacy_report_json_keeps_both_rigorous_accountants(capsys):
    assert main(["privacy-report", *PAPER, "privacy.sigma=100"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"eps_claimed", "eps_rigorous", "eps_rigorous_rdp", "eps_rigorous_pld", "queries"} <= report.keys()
    assert "calibration" not in report


# Methods naming their own noise parameter (Method.noise_parameter): DP-SGD's noise multiplier,
# PATE's GNMax sigma and LNMax gamma. Small runs: 20 DP-SGD steps, 100 PATE answers.
DPSGD = ["method=dpsgd", "method.epochs=1", "method.sample_rate=0.05"]
PATE = ["method=pate", "method.queries=100"]


@pytest.mark.parametrize(
    "overrides,key,ledger,target",
    [
        # each step of the solve builds a subsampled-Gaussian PLD (seconds): slow on a loaded CPU
        pytest.param(DPSGD, "method.noise_multiplier", "rigorous", 2.0, marks=pytest.mark.slow),
        (DPSGD, "method.noise_multiplier", "claimed", 2.0),  # Opacus's own accountant is the claim
        ([*PATE, "method.aggregator=gnmax"], "method.sigma", "rigorous", 1.0),
        ([*PATE, "method.aggregator=gnmax"], "method.sigma", "claimed", 10.0),
        ([*PATE, "method.aggregator=lnmax"], "method.gamma", "rigorous", 1.0),
    ],
)
def test_a_method_calibrates_the_noise_parameter_it_names(overrides, key, ledger, target):
    report = privacy_report(compose([*overrides, f"privacy.calibrate={ledger}", f"privacy.epsilon={target}"]))
    assert report["calibration"]["parameter"] == key
    solved = report["calibration"]["value"]
    # Account the solved value afresh, with calibration off.
    fresh = privacy_report(compose([*overrides, f"{key}={solved!r}"]))
    assert fresh["eps_claimed" if ledger == "claimed" else "eps_rigorous"] == pytest.approx(target, rel=0.01)
    assert fresh["eps_rigorous"] == pytest.approx(report["eps_rigorous"])


def test_privacy_report_prints_both_rigorous_accountants_for_every_registered_method(capsys):
    from test_contract import CASES, TINY

    for name, privacy in CASES:  # nothing trains: each method's own sizes (a key it lacks is refused, as in run)
        chosen = [] if privacy is None else [f"privacy={privacy}"]
        assert main(["privacy-report", f"method={name}", *chosen, *TINY.get(name, [])]) == 0, name
        report = json.loads(capsys.readouterr().out)
        assert report["method"] == name
        for key in ("eps_claimed", "eps_rigorous", "eps_rigorous_rdp", "eps_rigorous_pld"):
            value = report[key]
            assert value == "inf" or (isinstance(value, float) and value >= 0), (name, key, value)
        # the reported figure is the tighter of the two valid bounds
        numbers = [math.inf if report[k] == "inf" else report[k] for k in ("eps_rigorous_rdp", "eps_rigorous_pld")]
        assert (math.inf if report["eps_rigorous"] == "inf" else report["eps_rigorous"]) == min(numbers), name


def test_a_run_told_an_epsilon_it_will_not_spend_says_so_before_it_computes():
    """Calibration off: PATE's fixed sigma and DGD's per-query epsilon plan far from the target, and the note names
    the plan's spend and the switch that meets the target; where the plan meets it (DPSD's label mode, whose
    per-query epsilon is the target), where the run calibrates, or where it is not private, there is no note."""
    pate = ["method=pate", "privacy=label", "privacy.epsilon=1"]
    note = untargeted_epsilon_note(compose(pate))
    planned = privacy_report(compose(pate))["eps_claimed"]
    assert note is not None and f"{planned:.2f}" in note and "privacy.calibrate=claimed" in note, note
    assert untargeted_epsilon_note(compose(["method=dgd", "privacy=label", "privacy.epsilon=1"])) is not None
    for quiet in (["method=dpsd", "privacy=label", "privacy.epsilon=1"],
                  [*pate, "privacy.calibrate=claimed"],
                  ["method=dpsd", "privacy=none"]):
        assert untargeted_epsilon_note(compose(quiet)) is None, quiet
