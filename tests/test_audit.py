"""Mechanism audit (dpsd.privacy_ops.audit): valid lower bounds, and the claim they refute."""

import json
import math

import mlflow
import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from dpsd.cli import main
from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.privacy import mechanisms
from dpsd.privacy_ops.audit import (
    audit_mechanism,
    clopper_pearson,
    epsilon_lower_bound,
    gaussian_statistic,
    randomized_response_statistic,
)

# Alg. 1's order (one annotated batch an iteration, b x T releases); DPSD's default, generator_first, annotates two
PAPER = ["privacy=data", "privacy.beta=0.005", "method.batch_size=256", "method.iterations=200", "dataset=mnist",
         "method.update_order=student_first"]
TRIALS = 20_000


def test_the_audit_refutes_dpsd_theorem1_at_the_paper_setting():
    result = audit_mechanism(compose([*PAPER, "privacy.sigma=100"]), TRIALS, 0.95)
    assert result["releases"] == 256 * 200
    assert result["eps_claimed"] == pytest.approx(0.2614, abs=1e-4)
    assert result["eps_lower_bound"] > 10 * result["eps_claimed"]
    assert result["eps_lower_bound"] <= result["eps_rigorous"] == pytest.approx(28.84, rel=0.01)


@pytest.mark.parametrize("sigma", [50, 100, 200])
def test_the_lower_bound_stays_below_the_rigorous_gaussian_ledger(sigma):
    result = audit_mechanism(compose([*PAPER, f"privacy.sigma={sigma}"]), TRIALS, 0.95)
    assert 0 < result["eps_lower_bound"] <= result["eps_rigorous"]


@pytest.mark.parametrize("query_epsilon", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("batch,iterations", [(1, 1), (4, 2)])
def test_the_lower_bound_stays_below_the_rigorous_randomized_response_ledger(query_epsilon, batch, iterations):
    cfg = compose([f"privacy.query_epsilon={query_epsilon}", f"method.batch_size={batch}", f"method.iterations={iterations}"])
    result = audit_mechanism(cfg, TRIALS, 0.95)
    assert result["releases"] == 2 * batch * iterations  # DPSD's default order (generator_first) annotates twice a step
    assert 0 < result["eps_lower_bound"] <= result["eps_rigorous"]


def test_the_projected_statistic_matches_full_vectors_through_the_mechanism():
    """Eq. (3) on full vectors: per-sample gradients +-g u (any norm g) go through M_k, the
    normalisation to beta and N(0, (sigma beta)^2 I); the sum of projections onto u over all
    releases has the distribution the audit simulates directly."""
    releases, classes, k, beta, sigma, trials = 12, 10, 3, 0.005, 2.0, 4000
    rng = torch.Generator().manual_seed(0)
    u = torch.zeros(classes, dtype=torch.float64)
    u[:k] = torch.randn(k, generator=rng, dtype=torch.float64)
    u /= u.norm()
    for world in (1, -1):
        norms = torch.rand(trials * releases, 1, generator=rng, dtype=torch.float64) * 100 + 1
        gradients = world * norms * u
        rows = mechanisms.normalize_rows(mechanisms.keep_topk(gradients, k), beta, 1e-4)
        noisy = rows + mechanisms.gaussian_noise(rows, sigma * beta, rng)
        full = (noisy @ u).reshape(trials, releases).sum(dim=1).numpy()
        direct = gaussian_statistic(world, releases, 2 * beta, sigma * beta, trials, np.random.default_rng(1))
        assert ks_2samp(full, direct).pvalue > 0.01
        assert full.mean() == pytest.approx(world * releases * beta, abs=4 * sigma * beta * math.sqrt(releases / trials))


def test_randomized_response_statistic_has_the_mechanism_s_answer_probabilities():
    rng = np.random.default_rng(0)
    eps, k = 1.0, 4
    stat = randomized_response_statistic(1, 1, eps, k, 200_000, rng)
    keep = math.exp(eps) / (math.exp(eps) + k - 1)
    assert np.mean(stat == 1) == pytest.approx(keep, abs=0.005)
    assert np.mean(stat == -1) == pytest.approx(1 / (math.exp(eps) + k - 1), abs=0.005)


def test_clopper_pearson_handles_zero_and_full_counts():
    lower, upper = clopper_pearson(np.array([0, 10, 5]), 10, 0.95)
    assert lower[0] == 0 and upper[1] == 1
    assert upper[0] == pytest.approx(1 - 0.05 ** (1 / 10))  # the "rule of three" case, exactly
    assert lower[1] == pytest.approx(0.05 ** (1 / 10))
    assert lower[2] < 0.5 < upper[2]


def test_indistinguishable_worlds_give_no_bound():
    rng = np.random.default_rng(0)
    same = rng.normal(size=(2, 10_000))
    assert epsilon_lower_bound(same[0], same[1], 1e-5, 0.95)["eps_lower_bound"] < 0.1


def test_audit_command_prints_json_and_records_an_audit_run(tmp_path, capsys):
    args = ["audit", "mechanism", "privacy.query_epsilon=1", "method.batch_size=2", "method.iterations=1",
            f"results_dir={tmp_path}", "--trials", "2000", "--source", "event"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mechanism"] == "randomized_response" and result["trials"] == 2000
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = mlflow.search_runs(experiment_names=["dpsd"]).iloc[0]
    assert run["run_id"] == result["run_id"] and run["tags.kind"] == "audit"
    for metric in ("eps_lower_bound", "eps_claimed", "eps_rigorous", "trials", "confidence"):
        assert run[f"metrics.{metric}"] == pytest.approx(result[metric]), metric


def test_audit_of_an_unprotected_release_stops_with_one_line(capsys):
    assert main(["audit", "mechanism", "method=dpsd_t", "tracking=none", "--source", "event"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs exactly one Gaussian or randomized-response release kind" in err and "unprotected" in err
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------- the method's own code path


def code_audit(*overrides, releases=1):
    from dpsd.privacy_ops.audit import audit_code_path

    return audit_code_path(compose(list(overrides)), 20_000, 0.95, releases)


DATA = ["method=dpsd", "privacy=data", "privacy.sigma=4", "privacy.beta=0.5", "privacy.stability=0"]
LABEL = ["method=dpsd", "privacy=label", "privacy.query_epsilon=0.5", "privacy.k=3"]


@pytest.mark.parametrize("overrides", [DATA, LABEL, ["method=dp_dfd", "privacy=label", "privacy.query_epsilon=1"],
                                       ["method=dpdfd", "privacy=data", "privacy.sigma=4", "privacy.beta=0.5"]],
                         ids=["dpsd-data", "dpsd-label", "dp_dfd", "dpdfd"])
def test_the_code_path_audit_stays_below_the_events_the_annotator_recorded(overrides):
    result = code_audit(*overrides, releases=2)
    assert result["source"] == "code" and result["events_per_trial"][0]["count"] == 2
    assert result["eps_lower_bound"] <= result["eps_rigorous"]


def test_a_planted_noise_bug_in_the_code_makes_the_audit_exceed_the_ledger(monkeypatch):
    """The Gaussian noise quartered inside the mechanism (its event unchanged): the audit of the
    annotator training calls bounds epsilon from below above the ledger's eps_rigorous."""
    real = code_audit(*DATA)
    assert 0 <= real["eps_lower_bound"] <= real["eps_rigorous"]
    noise = mechanisms.gaussian_noise
    monkeypatch.setattr(mechanisms, "gaussian_noise", lambda like, std, rng: noise(like, std / 4, rng))
    bugged = code_audit(*DATA)
    assert bugged["eps_rigorous"] == real["eps_rigorous"]  # the ledger does not see the bug
    assert bugged["eps_lower_bound"] > bugged["eps_rigorous"]


def test_a_planted_randomized_response_bug_makes_the_audit_exceed_the_ledger(monkeypatch):
    """The keep probability computed at 4 eps (the event still says eps)."""
    real = code_audit(*LABEL)
    assert real["eps_lower_bound"] <= real["eps_rigorous"]
    keep = mechanisms.randomized_response_keep_probability
    monkeypatch.setattr(mechanisms, "randomized_response_keep_probability", lambda eps, k: keep(4 * eps, k))
    bugged = code_audit(*LABEL)
    assert bugged["eps_lower_bound"] > bugged["eps_rigorous"] == real["eps_rigorous"]


def test_the_code_path_audit_refuses_methods_without_an_annotator():
    with pytest.raises(ConfigError, match="no annotator"):
        code_audit("method=pate")
