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
    answers = mechanisms.randomized_response(truth, buckets, epsilon, rng())
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
    inside = mechanisms.topk_randomized_response(torch.full((N,), 7), scores, k, epsilon, rng(1))
    outside = mechanisms.topk_randomized_response(torch.full((N,), 0), scores, k, epsilon, rng(2))
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
    answers = mechanisms.topk_randomized_response(torch.full((N,), 7), scores, 3, epsilon, rng(3), domain="all")
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
    first = mechanisms.randomized_response(truth, 10, 1.0, rng(8))
    second = mechanisms.randomized_response(truth, 10, 1.0, rng(8))
    assert torch.equal(first, second)
