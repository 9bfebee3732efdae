"""PATE's data-dependent GNMax analysis (Papernot et al. 2018, Prop. 7 and Thm. 6)."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from dpsd.config import compose
from dpsd.privacy.pate_analysis import gnmax_data_dependent_epsilon, gnmax_data_dependent_rdp, gnmax_log_q

SIGMA = 2.0
UNANIMOUS = np.array([10.0] + [0.0] * 9)  # 10 teachers, 10 classes


def test_log_q_is_the_union_bound_of_pairwise_gaussian_tails():
    counts = np.array([7.0, 2.0, 1.0, 0.0])
    expected = sum(norm.sf(gap / (math.sqrt(2) * SIGMA)) for gap in (5.0, 6.0, 7.0))
    assert gnmax_log_q(counts, SIGMA) == pytest.approx(math.log(expected), rel=1e-12)
    assert gnmax_log_q(np.zeros(4), SIGMA) == pytest.approx(math.log(3 / 4))  # a tie: capped at 1 - 1/c


def test_theorem6_matches_its_closed_form_in_the_linear_domain():
    log_q = gnmax_log_q(UNANIMOUS, SIGMA)
    q = math.exp(log_q)
    mu2 = SIGMA * math.sqrt(-log_q)
    mu1 = mu2 + 1
    eps1, eps2 = mu1 / SIGMA**2, mu2 / SIGMA**2
    a = (1 - q) / (1 - (q * math.exp(eps2)) ** ((mu2 - 1) / mu2))
    b = math.exp(eps1) / q ** (1 / (mu1 - 1))
    orders = np.array([1.5, 2.0, 3.0, 4.0])
    expected = [math.log((1 - q) * a ** (lam - 1) + q * b ** (lam - 1)) / (lam - 1) for lam in orders]
    bound = gnmax_data_dependent_rdp(log_q, SIGMA, orders)
    assert bound == pytest.approx(np.minimum(expected, orders / SIGMA**2), rel=1e-9)
    assert np.all(bound < orders / SIGMA**2)  # strong agreement: strictly better than data-independent


def test_weak_agreement_falls_back_to_the_data_independent_bound():
    orders = np.array([2.0, 8.0, 32.0])
    tie = gnmax_log_q(np.array([5.0, 5.0, 0.0]), SIGMA)
    assert gnmax_data_dependent_rdp(tie, SIGMA, orders) == pytest.approx(orders / SIGMA**2)
    assert np.all(gnmax_data_dependent_rdp(-math.inf, SIGMA, orders) == 0)


def test_data_dependent_epsilon_is_below_the_data_independent_one_for_confident_votes():
    delta, queries = 1e-5, 100
    votes = np.tile(UNANIMOUS, (queries, 1))
    orders = np.arange(2, 257, dtype=float)
    independent = float(np.min(queries * orders / SIGMA**2 + math.log(1 / delta) / (orders - 1)))
    dependent = gnmax_data_dependent_epsilon(votes, SIGMA, delta, orders)
    assert 0 < dependent < independent / 2


def test_data_dependent_needs_gnmax():
    from dpsd.config import validate
    from dpsd.errors import ConfigError
    from dpsd.experiment import privacy_report

    cfg = compose(["method=pate", "method.aggregator=lnmax", "method.data_dependent=true"])
    validate(cfg)
    with pytest.raises(ConfigError, match="needs method.aggregator=gnmax"):
        privacy_report(cfg)


def test_a_pate_run_reports_the_data_dependent_bound_as_a_metric_only(tmp_path, run_as_planned):
    base = ["method=pate", "method.num_teachers=3", "method.queries=100", "method.epochs=1", "method.sigma=2.0",
            "model.teacher.recipe.steps=30", "device=cpu", "tracking=none", f"results_dir={tmp_path}"]
    metrics, ledger = run_as_planned(compose([*base, "method.data_dependent=true"]))
    _, plain = run_as_planned(compose(base))
    assert ledger["eps_rigorous"] == plain["eps_rigorous"] and ledger["eps_claimed"] == plain["eps_claimed"]
    assert 0 < metrics["eps_data_dependent"] <= ledger["eps_claimed"]  # never above the data-independent bound
    assert any("smooth-sensitivity" in note for note in ledger["notes"])
