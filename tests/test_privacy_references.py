"""Independent references for every accountant path, and each mechanism's output tested against the
event it returns (a planted bug in the noise, epsilon, sensitivity, sampling
rate or count must fail a test).

References are computed here from closed forms or by dp-accounting's own accountants called
directly; the statistical tests draw many releases and compare their frequencies / moments with
the parameters of the event the mechanism call returned (never with the config), within several
standard errors.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import norm

from dpsd.config import compose
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger, pld_epsilon, rdp_curve, rdp_epsilon
from dpsd.privacy.events import GaussianRelease, LaplaceRelease, RandomizedResponseRelease, SubsampledGaussianRelease

DELTA = 1e-5


def rng(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- accountants against references


def laplace_rdp(order: float, b: float) -> float:
    """Mironov 2017, Prop. 6: the order-alpha Renyi divergence of Lap(0, b) and Lap(1, b)."""
    a = order
    terms = [math.log(a / (2 * a - 1)) + (a - 1) / b, math.log((a - 1) / (2 * a - 1)) - a / b]
    return float(np.logaddexp(*terms)) / (a - 1)


@pytest.mark.parametrize("sensitivity,scale,count", [(1.0, 1.0, 1), (2.0, 40.0, 400), (32.0, 3200.0, 1)])
def test_laplace_rdp_is_mironov_prop6_at_the_events_own_noise_multiplier(sensitivity, scale, count):
    orders, rdp = rdp_curve([LaplaceRelease(sensitivity, scale, count=count)])
    b = scale / sensitivity  # a noise multiplier of 2/eps instead of 1/eps halves the curve: caught here
    expected = [count * laplace_rdp(order, b) for order in orders]
    assert rdp == pytest.approx(expected, rel=1e-6)


def test_dpsgd_pld_agrees_with_dp_accountings_own_pld_accountant():
    """The issue's check (DPSGD sigma 1.1, q 0.01, 500 steps -> PLD 1.0826, RDP 1.3209), against
    dp-accounting's PLDAccountant and RdpAccountant fed the same Poisson-subsampled Gaussian."""
    event = SubsampledGaussianRelease(noise_multiplier=1.1, sample_rate=0.01, count=500)
    library_event = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 500)
    pld = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    reference_pld = pld.compose(library_event).get_epsilon(DELTA)
    reference_rdp = rdp.compose(library_event).get_epsilon(DELTA)
    assert pld_epsilon([event], DELTA) == pytest.approx(reference_pld, rel=2e-3)
    assert pld_epsilon([event], DELTA) == pytest.approx(1.0826, abs=2e-3)
    assert rdp_epsilon([event], DELTA) == pytest.approx(reference_rdp, rel=2e-2)  # library orders differ
    assert rdp_epsilon([event], DELTA) == pytest.approx(1.3209, abs=5e-3)


def test_laplace_pld_agrees_with_dp_accountings_own_pld_accountant():
    event = LaplaceRelease(2.0, 40.0, count=400)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    reference = pld.compose(dp_event.LaplaceDpEvent(20.0), 400).get_epsilon(DELTA)
    assert pld_epsilon([event], DELTA) == pytest.approx(reference, rel=5e-3)


def test_gaussian_counts_and_sensitivities_enter_the_accountant():
    one = rdp_epsilon([GaussianRelease(2.0, 10.0, count=100)], DELTA)
    assert rdp_epsilon([GaussianRelease(2.0, 10.0, count=400)], DELTA) > 1.5 * one  # the count composes
    assert rdp_epsilon([GaussianRelease(4.0, 10.0, count=100)], DELTA) > 1.5 * one  # the sensitivity counts
    reference = rdp_privacy_accountant.RdpAccountant().compose(dp_event.GaussianDpEvent(5.0), 100).get_epsilon(DELTA)
    assert one == pytest.approx(reference, rel=2e-2)


# ---------------------------------------------------------------- mechanisms against their own events


def test_randomized_response_answers_match_the_epsilon_of_its_event():
    truth = torch.full((200_000,), 3)
    answers, event = mechanisms.randomized_response(truth, 10, 1.5, rng(1))
    keep = math.exp(event.epsilon) / (math.exp(event.epsilon) + event.num_buckets - 1)
    observed = (answers == 3).double().mean().item()
    assert observed == pytest.approx(keep, abs=5 * math.sqrt(keep * (1 - keep) / len(truth)))
    assert event.count == len(truth)


def test_the_dpsd_annotator_answers_a_counting_teacher_at_the_epsilon_it_records():
    """The annotator training calls (PrivateAnnotator.label_sensitive): a teacher whose class is
    always 2, a student prior whose top-3 holds it; the frequency of class 2 must be the keep
    probability of the event the annotator recorded (a 4x eps_0 bug records, or answers, 4x)."""
    cfg = compose(["method=dpsd", "privacy=label", "privacy.k=3", "privacy.query_epsilon=0.5"])
    from dpsd.distill.annotators import PrivateAnnotator

    ledger = Ledger()
    n = 100_000
    teacher = torch.zeros(n, 10)
    teacher[:, 2] = 5.0
    student = torch.zeros(n, 10)
    student[:, [2, 5, 7]] = torch.tensor([3.0, 2.0, 1.0])
    answers = PrivateAnnotator(cfg, 10, rng(2), ledger).label_sensitive(teacher, student).argmax(dim=1)
    (event,) = ledger.events
    assert (event.epsilon, event.num_buckets, event.count) == (0.5, 3, n)
    keep = math.exp(0.5) / (math.exp(0.5) + 2)
    assert (answers == 2).double().mean().item() == pytest.approx(keep, abs=5 * math.sqrt(keep * (1 - keep) / n))
    assert set(answers.unique().tolist()) <= {2, 5, 7}


def test_the_data_mode_annotator_adds_the_noise_its_event_states():
    """PrivateAnnotator.private_gradient: the bounded gradient plus noise whose std is the event's
    noise_std and whose rows are each bounded by half the event's sensitivity."""
    from dpsd.distill.annotators import PrivateAnnotator

    cfg = compose(["method=dpsd", "privacy=data", "privacy.sigma=3", "privacy.beta=0.5"])
    ledger = Ledger()
    annotator = PrivateAnnotator(cfg, 10, rng(3), ledger)
    teacher, student = torch.randn(4000, 10, generator=rng(4)), torch.randn(4000, 10, generator=rng(5))
    clean = annotator.private_gradient(teacher, student, noise=False)
    noisy = annotator.private_gradient(teacher, student)
    (event,) = ledger.events
    assert clean.norm(dim=1).max().item() <= event.l2_sensitivity / 2 + 1e-6
    assert (noisy - clean).std().item() == pytest.approx(event.noise_std, rel=0.02)
    assert (event.noise_std, event.l2_sensitivity, event.count) == pytest.approx((1.5, 1.0, 4000))


def test_selective_randomized_response_keeps_the_truth_at_its_events_epsilon_with_two_candidates():
    n = 100_000
    prior = torch.tensor([[0.6, 0.4, 0.0, 0.0]]).repeat(n, 1)  # I = {0, 1}: k = 2, binary RR exactly
    answers, event = mechanisms.selective_randomized_response(torch.zeros(n, dtype=torch.long), prior, 0.1, 0.7, rng(6))
    keep = math.exp(event.epsilon) / (math.exp(event.epsilon) + 1)
    assert event.num_buckets == 2 and event.count == n
    assert (answers == 0).double().mean().item() == pytest.approx(keep, abs=5 * math.sqrt(keep * (1 - keep) / n))


@pytest.mark.parametrize("aggregator,override", [("lnmax", "method.gamma=0.5"), ("gnmax", "method.sigma=2.0")])
def test_pate_noisy_argmax_flips_at_the_rate_its_event_implies(aggregator, override):
    """A vote margin d between two classes flips with probability P(noise_1 - noise_0 > d): for
    Gaussian noise of std s, Phi(-d / (s sqrt 2)); for Laplace of scale b, e^(-d/b) (1 + d/(2b)) / 2."""
    from baselines.pate import noisy_argmax

    cfg = compose(["method=pate", f"method.aggregator={aggregator}", override])
    n, margin = 200_000, 2.0
    votes = torch.tensor([[margin, 0.0]]).repeat(n, 1)
    labels, event = noisy_argmax(votes, cfg, rng(7))
    if aggregator == "gnmax":
        flip = norm.cdf(-margin / (event.noise_std * math.sqrt(2)))
    else:
        b = event.scale
        flip = math.exp(-margin / b) * (1 + margin / (2 * b)) / 2
    assert (labels == 1).double().mean().item() == pytest.approx(flip, abs=5 * math.sqrt(flip * (1 - flip) / n))
    assert event.count == n


def test_dgd_latent_codes_get_the_laplace_noise_of_their_event():
    """dgd.private_codes (the function the run calls): noisy minus clean codes is Laplace with the
    event's scale 2c/eps_1 (mean |x| = b, variance 2 b^2), one release (parallel over images)."""
    from dpsd.methods.dgd import private_codes
    from dpsd.models import ConvVAE, normalize_code

    cfg = compose(["method=dgd", "method.latent_dim=4", "method.latent_epsilon=40", "method.code_projection=none"])
    vae = ConvVAE(4, 1, 28, 8).eval()
    images = torch.rand(20_000, 1, 28, 28, generator=rng(8)) * 2 - 1
    ledger = Ledger()
    ctx = SimpleNamespace(cfg=cfg, device=torch.device("cpu"), rng=rng(9), ledger=ledger)
    noisy = private_codes(ctx, vae, images)
    with torch.no_grad():
        clean = torch.cat([normalize_code(vae.encode(x)[0]) for x in images.split(512)])
    (event,) = ledger.events
    noise = (noisy - clean).double()
    assert event.scale == pytest.approx(2 * 4 / 40) and event.count == 1 and event.l1_sensitivity == 8
    assert noise.abs().mean().item() == pytest.approx(event.scale, rel=0.02)
    assert noise.var().item() == pytest.approx(2 * event.scale**2, rel=0.04)


def test_gaussian_and_laplace_mechanisms_count_rows_or_once():
    values = torch.zeros(50, 3)
    assert mechanisms.gaussian_mechanism(values, 1.0, 2.0, rng())[1].count == 50
    assert mechanisms.gaussian_mechanism(values, 1.0, 2.0, rng(), release="once")[1].count == 1
    assert mechanisms.laplace_mechanism(values, 1.0, 2.0, rng())[1].count == 50
    noisy, event = mechanisms.laplace_mechanism(torch.zeros(100_000), 1.0, 2.0, rng(10))
    assert noisy.abs().mean().item() == pytest.approx(event.scale, rel=0.02)
    assert np.isclose(event.epsilon, 0.5)
