"""PATE's data-dependent GNMax analysis (Papernot et al. 2018, Prop. 7 and Thm. 6)."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from dpsd.config import compose
from dpsd.errors import ConfigError
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
    from dpsd.experiment import resolve_run
    from dpsd.errors import ConfigError
    from dpsd.experiment import privacy_report

    cfg = compose(["method=pate", "method.aggregator=lnmax", "method.data_dependent=true"])
    resolve_run(cfg)
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


def test_log1mexp_is_log_of_one_minus_exp_to_full_precision():
    """log(1 - e^x) against a 50-digit decimal reference, on both sides of the -ln 2 switch."""
    from decimal import Decimal, getcontext

    from dpsd.privacy.pate_analysis import _log1mexp

    getcontext().prec = 50
    for x in (-1e-12, -1e-3, -0.5, -0.69, -0.7, -3.0, -50.0):
        expected = float((1 - Decimal(x).exp()).ln())
        assert _log1mexp(x) == pytest.approx(expected, rel=1e-12), x
    assert _log1mexp(0.0) == -math.inf
    for x in (1e-9, 1.0):
        with pytest.raises(ValueError):
            _log1mexp(x)


def papernot_rdp_gaussian(logq: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """Papernot et al.'s own implementation of Thm. 6 with Prop. 10's orders (tensorflow/privacy,
    research/pate_2018/core.py, ``rdp_gaussian``), transcribed as an independent reference."""
    if np.isneginf(logq):
        return np.zeros_like(orders)
    variance = sigma**2
    mu_hi2 = math.sqrt(variance * -logq)
    mu_hi1 = mu_hi2 + 1
    ret = orders / variance
    mask = np.logical_and(mu_hi1 > orders, mu_hi2 > 1)
    rdp_hi1, rdp_hi2 = mu_hi1 / variance, mu_hi2 / variance
    log_a2 = (mu_hi2 - 1) * rdp_hi2
    if (np.any(mask) and logq <= log_a2 - mu_hi2 * (math.log(1 + 1 / (mu_hi1 - 1)) + math.log(1 + 1 / (mu_hi2 - 1)))
            and -logq > rdp_hi2):
        log1q = math.log(-math.expm1(logq)) if logq > -math.log(2) else math.log1p(-math.exp(logq))
        inner = (logq + rdp_hi2) * (1 - 1 / mu_hi2)
        log_a = (orders - 1) * (log1q - (math.log(-math.expm1(inner)) if inner > -math.log(2) else math.log1p(-math.exp(inner))))
        log_b = (orders - 1) * (rdp_hi1 - logq / (mu_hi1 - 1))
        log_s = np.logaddexp(log1q + log_a, logq + log_b)
        ret[mask] = np.minimum(ret, log_s / (orders - 1))[mask]
    return ret


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 4.0, 10.0, 40.0])
def test_theorem6_agrees_with_the_authors_implementation_over_q_and_sigma(sigma):
    """Both sides of each of Thm. 6's conditions (mu_2 > 1, lambda < mu_1, q in the increasing range,
    -log q > eps_2) are crossed by this grid of q and orders."""
    orders = np.concatenate([np.linspace(1.01, 3, 12), np.arange(3, 60, 1.5), [100.0, 400.0]])
    for log_q in [-1e-3, -0.05, -0.3, -1.0, -2.0, -5.0, -10.0, -30.0, -100.0, -1000.0, -math.inf]:
        ours = gnmax_data_dependent_rdp(log_q, sigma, orders)
        assert ours == pytest.approx(papernot_rdp_gaussian(log_q, sigma, orders.copy()), rel=1e-9, abs=1e-300), log_q
    for bad in ((0.1, sigma, orders), (-1.0, 0.0, orders), (-1.0, sigma, np.array([1.0, 2.0]))):
        with pytest.raises(ConfigError):
            gnmax_data_dependent_rdp(*bad)


def test_data_dependent_epsilon_composes_rdp_and_converts_with_the_2018_formula():
    """eps = min over orders of (sum over queries of RDP) + log(1/delta)/(lambda - 1)."""
    votes = np.array([[9.0, 1.0, 0.0], [6.0, 3.0, 1.0], [4.0, 4.0, 2.0]])
    orders = np.array([1.5, 2.0, 5.0, 20.0, 80.0])
    total = sum(papernot_rdp_gaussian(gnmax_log_q(row, 1.5), 1.5, orders.copy()) for row in votes)
    for delta in (1e-5, 0.1):
        expected = float(np.min(total + math.log(1 / delta) / (orders - 1)))
        assert gnmax_data_dependent_epsilon(votes, 1.5, delta, orders) == pytest.approx(expected, rel=1e-12)


def test_log_q_reads_the_plurality_class_of_any_vote_vector():
    """Prop. 7 for votes whose plurality is not the first class, given as ints (counts as floats)."""
    counts = [1, 0, 7, 2]
    expected = sum(norm.sf(gap / (math.sqrt(2) * SIGMA)) for gap in (6.0, 7.0, 5.0))
    assert gnmax_log_q(counts, SIGMA) == pytest.approx(math.log(expected), rel=1e-12)
    tie = 0.5 + norm.sf(3 / (math.sqrt(2) * 0.5))  # a tie: the other top class wins half the time
    assert gnmax_log_q(np.array([3, 3, 0]), 0.5) == pytest.approx(math.log(tie), rel=1e-12)
