"""The mechanisms against their equations: exact probabilities, norms, noise scale, top-k."""

import math

import pytest
import torch

from dpsd.privacy import mechanisms

N = 200_000


def rng(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def binomial_tolerance(p: float, n: int) -> float:
    """Five standard errors: a false failure has probability below 1e-6 per check."""
    return 5 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("epsilon,buckets", [(0.5, 10), (1.0, 10), (2.0, 3), (10.0, 10)])
def test_randomized_response_frequencies_match_eq4(epsilon, buckets):
    truth = torch.full((N,), 2, dtype=torch.long)
    answers, event = mechanisms.randomized_response(truth, buckets, epsilon, rng())
    assert (event.epsilon, event.num_buckets, event.count) == (epsilon, buckets, len(truth))
    frequencies = torch.bincount(answers, minlength=buckets).double() / N
    keep = math.exp(epsilon) / (math.exp(epsilon) + buckets - 1)
    other = 1 / (math.exp(epsilon) + buckets - 1)
    for bucket in range(buckets):
        expected = keep if bucket == 2 else other
        assert abs(frequencies[bucket].item() - expected) < binomial_tolerance(expected, N), bucket


def test_randomized_response_keep_probability_is_stable_for_large_epsilon():
    assert mechanisms.randomized_response_keep_probability(1000.0, 10) == pytest.approx(1.0)
    assert mechanisms.randomized_response_keep_probability(0.0, 4) == pytest.approx(0.25)


def test_topk_randomized_response_matches_eq5_inside_and_outside_the_top_k():
    classes, k, epsilon = 10, 3, 1.0
    scores = torch.zeros(N, classes)
    scores[:, [4, 7, 1]] = torch.tensor([3.0, 2.0, 1.0])  # the student's top-3: {4, 7, 1}
    inside, event = mechanisms.topk_randomized_response(torch.full((N,), 7), scores, k, epsilon, rng(1))
    assert (event.epsilon, event.num_buckets, event.count) == (epsilon, k, N)
    outside, _ = mechanisms.topk_randomized_response(torch.full((N,), 0), scores, k, epsilon, rng(2))
    keep = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
    inside_freq = torch.bincount(inside, minlength=classes).double() / N
    outside_freq = torch.bincount(outside, minlength=classes).double() / N
    for cls in range(classes):
        expected_inside = keep if cls == 7 else ((1 - keep) / 2 if cls in (4, 1) else 0.0)
        expected_outside = 1 / 3 if cls in (4, 7, 1) else 0.0
        assert abs(inside_freq[cls].item() - expected_inside) < binomial_tolerance(expected_inside, N)
        assert abs(outside_freq[cls].item() - expected_outside) < binomial_tolerance(expected_outside, N)


def test_topk_randomized_response_domain_all_is_literal_rr_over_all_classes():
    classes, epsilon = 10, 1.0
    scores = torch.zeros(N, classes)
    scores[:, [4, 7, 1]] = torch.tensor([3.0, 2.0, 1.0])
    answers, event = mechanisms.topk_randomized_response(torch.full((N,), 7), scores, 3, epsilon, rng(3), domain="all")
    assert event.kind == "unprotected" and event.count == N
    frequencies = torch.bincount(answers, minlength=classes).double() / N
    keep = math.exp(epsilon) / (math.exp(epsilon) + classes - 1)
    assert abs(frequencies[7].item() - keep) < binomial_tolerance(keep, N)
    assert frequencies[0].item() > 0  # answers may leave the top-k


def test_keep_topk_keeps_exactly_k_entries_per_row():
    values = torch.randn(64, 10, generator=rng(4))
    for by in ("value", "magnitude"):
        assert ((mechanisms.keep_topk(values, 3, by=by) != 0).sum(dim=1) == 3).all()
    for by, score in (("value", values), ("magnitude", values.abs())):
        kept = mechanisms.keep_topk(values, 3, by=by)
        expected = torch.zeros_like(values).scatter_(1, score.topk(3, dim=1).indices, 1.0).bool()
        assert torch.equal(kept != 0, expected)
        assert torch.equal(kept[expected], values[expected])


def test_normalised_rows_have_norm_at_most_beta():
    values = torch.randn(256, 10, generator=rng(5)) * torch.logspace(-6, 3, 256).unsqueeze(1)
    beta, h = 0.005, 1e-4
    per_sample = mechanisms.normalize_rows(values, beta, h, over="sample")
    assert (per_sample.norm(dim=1) <= beta * (1 + 1e-6)).all()  # float32 rounding
    big = values.norm(dim=1) > 1  # h is negligible for large rows: they reach beta
    assert torch.allclose(per_sample[big].norm(dim=1), torch.full((int(big.sum()),), beta), rtol=1e-3)
    per_batch = mechanisms.normalize_rows(values, beta, h, over="batch")
    assert per_batch.norm() <= beta * (1 + 1e-6)


def test_gaussian_noise_has_the_stated_std():
    sigma, beta = 100.0, 0.005
    noise = mechanisms.gaussian_noise(torch.zeros(N, 10), sigma * beta, rng(6))
    assert noise.mean().abs() < 5 * sigma * beta / math.sqrt(noise.numel())
    # the sample std of n normals has standard error ~ std / sqrt(2n)
    assert abs(noise.std().item() - sigma * beta) < 5 * sigma * beta / math.sqrt(2 * noise.numel())


def test_mechanisms_are_reproducible_from_the_generator():
    truth = torch.randint(0, 10, (1000,), generator=rng(7))
    first, _ = mechanisms.randomized_response(truth, 10, 1.0, rng(8))
    second, _ = mechanisms.randomized_response(truth, 10, 1.0, rng(8))
    assert torch.equal(first, second)


def rr_with_prior_expected(prior: list[float], truth: int, epsilon: float) -> list[float]:
    """Ghazi et al. 2021 Alg. 2 written out from its definition, for one prior and one label."""
    order = sorted(range(len(prior)), key=lambda c: -prior[c])
    gains = [sum(prior[c] for c in order[:k]) * math.exp(epsilon) / (math.exp(epsilon) + k - 1)
             for k in range(1, len(prior) + 1)]
    k = gains.index(max(gains)) + 1
    top = order[:k]
    if truth not in top:
        return [1 / k if c in top else 0.0 for c in range(len(prior))]
    denominator = math.exp(epsilon) + k - 1
    return [(math.exp(epsilon) if c == truth else 1.0) / denominator if c in top else 0.0 for c in range(len(prior))]


@pytest.mark.parametrize("prior,epsilon,k", [
    ([0.5, 0.3, 0.1, 0.05, 0.05], 1.0, 2),   # a peaked prior: a small set
    ([0.5, 0.3, 0.1, 0.05, 0.05], 2.0, 3),   # a larger eps affords a larger set
    ([0.2] * 5, 1.0, 5),                      # flat: plain 5-ary RR
    ([0.96, 0.01, 0.01, 0.01, 0.01], 0.5, 1),  # a confident prior at a small eps: answer its top-1
])
def test_rr_with_prior_frequencies_match_its_definition(prior, epsilon, k):
    probs = torch.tensor(prior).expand(N, -1)
    assert torch.equal(mechanisms.rr_with_prior_k(probs[:1], epsilon), torch.tensor([k]))
    for truth, seed in ((1, 4), (4, 5)):  # the label inside and (for k < 4) outside the prior's top-k
        answers, event = mechanisms.rr_with_prior(torch.full((N,), truth), probs, epsilon, rng(seed))
        assert (event.epsilon, event.num_buckets, event.count) == (epsilon, 2, N)
        frequencies = torch.bincount(answers, minlength=len(prior)).double() / N
        for cls, expected in enumerate(rr_with_prior_expected(prior, truth, epsilon)):
            assert abs(frequencies[cls].item() - expected) < binomial_tolerance(expected, N), (truth, cls)


def test_rr_with_prior_is_plain_rr_with_a_flat_prior_and_exact_without_noise():
    flat = torch.full((8, 10), 0.1)
    assert (mechanisms.rr_with_prior_k(flat, 0.3) == 10).all()
    peaked = torch.softmax(torch.randn(500, 10, generator=rng(6)) * 3, dim=1)
    truth = torch.randint(0, 10, (500,), generator=rng(7))
    answers, _ = mechanisms.rr_with_prior(truth, peaked, math.inf, rng(8))  # eps = inf: k covers all the prior's mass
    assert torch.equal(answers, truth)
