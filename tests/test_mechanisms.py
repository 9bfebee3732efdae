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


@pytest.mark.parametrize("epsilon,buckets", [(0.5, 10), (1.0, 10), (2.0, 3), (10.0, 10), (1.0, 2), (0.3, 2)])
def test_randomized_response_frequencies_match_eq4(epsilon, buckets):
    truth = torch.full((N,), min(2, buckets - 1), dtype=torch.long)
    answers, event = mechanisms.randomized_response(truth, buckets, epsilon, rng())
    assert (event.epsilon, event.num_buckets, event.count) == (epsilon, buckets, len(truth))
    frequencies = torch.bincount(answers, minlength=buckets).double() / N
    keep = math.exp(epsilon) / (math.exp(epsilon) + buckets - 1)
    other = 1 / (math.exp(epsilon) + buckets - 1)
    for bucket in range(buckets):
        expected = keep if bucket == truth[0] else other
        assert abs(frequencies[bucket].item() - expected) < binomial_tolerance(expected, N), bucket


def test_randomized_response_keep_probability_is_stable_for_large_epsilon():
    assert mechanisms.randomized_response_keep_probability(1000.0, 10) == pytest.approx(1.0)
    assert mechanisms.randomized_response_keep_probability(0.0, 4) == pytest.approx(0.25)
    assert mechanisms.randomized_response_keep_probability(math.log(3), 2) == pytest.approx(0.75)
    assert mechanisms.randomized_response_keep_probability(math.log(3), 3) == pytest.approx(0.6)


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


@pytest.mark.parametrize("over", ["sample", "batch"])
def test_clipping_keeps_rows_inside_the_ball_and_shrinks_the_others_onto_it(over):
    """Abadi et al. 2016 clipping, g min(1, C / ||g||): per row (or the whole batch) norm <= C, rows
    (the batch) already inside the ball unchanged, the others scaled to norm exactly C."""
    values = torch.randn(256, 10, generator=rng(11)) * torch.logspace(-3, 2, 256).unsqueeze(1)
    bound = 1.5
    clipped = mechanisms.bound_rows(values, bound, 1e-4, how="clip", over=over)
    if over == "sample":
        norms = values.norm(dim=1)
        inside = norms <= bound
        assert torch.equal(clipped[inside], values[inside])
        assert torch.allclose(clipped[~inside].norm(dim=1), torch.full((int((~inside).sum()),), bound), rtol=1e-5)
        assert torch.allclose(clipped[~inside], values[~inside] * (bound / norms[~inside]).unsqueeze(1), rtol=1e-5)
    else:
        assert clipped.norm().item() == pytest.approx(bound, rel=1e-5)
        assert torch.allclose(clipped, values * bound / values.norm(), rtol=1e-5)
        small = values[:8] / values[:8].norm() * (bound / 2)
        assert torch.equal(mechanisms.clip_rows(small, bound, over="batch"), small)
    assert torch.equal(mechanisms.bound_rows(values, bound, 1e-4, how="normalize", over=over),
                       mechanisms.normalize_rows(values, bound, 1e-4, over=over))
    for kwargs in ({"how": "scale"}, {"over": "row"}):
        with pytest.raises(ValueError):
            mechanisms.bound_rows(values, bound, 1e-4, **kwargs)


def test_normalising_divides_by_the_norm_plus_h():
    """Eq. (3): beta g / (||g|| + h), exactly (h matters for small rows)."""
    values = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.03, 0.04]])
    out = mechanisms.normalize_rows(values, 2.0, 0.05, over="sample")
    assert torch.allclose(out, torch.tensor([[6 / 5.05, 8 / 5.05], [0.0, 0.0], [0.06 / 0.1, 0.08 / 0.1]]))
    out = mechanisms.normalize_rows(values, 2.0, 0.05, over="batch")
    assert torch.allclose(out, 2.0 * values / (values.norm() + 0.05))


def test_noisy_mean_is_one_gaussian_release_of_the_sum_divided_by_the_batch():
    """DPDFD Eq. (4): (sum_i g_i + N(0, s^2 I)) / b, the same vector for every row, one release."""
    b, std = 4, 3.0
    rows = torch.arange(b * 2, dtype=torch.float64).reshape(b, 2)
    draws = torch.stack([mechanisms.noisy_mean(rows, 2.0, std, rng(seed), note="x")[0] for seed in range(20_000)])
    _, event = mechanisms.noisy_mean(rows, 2.0, std, rng(), note="x")
    assert (event.l2_sensitivity, event.noise_std, event.count, event.note) == (2.0, std, 1, "x")
    assert torch.equal(draws[0][0], draws[0][-1])  # every row gets the same mean
    assert torch.allclose(draws.mean(dim=0)[0], rows.mean(dim=0), atol=5 * std / b / math.sqrt(20_000))
    assert draws[:, 0, 0].std().item() == pytest.approx(std / b, rel=0.03)


def test_laplace_noise_has_the_stated_scale_and_none_at_scale_zero():
    """Laplace(b): E|x| = b, Var x = 2 b^2, symmetric; scale 0 adds nothing (privacy.noiseless)."""
    scale = 0.7
    noise = mechanisms.laplace_noise(torch.zeros(N, 2, dtype=torch.float64), scale, rng(12)).flatten()
    n = noise.numel()
    assert abs(noise.abs().mean().item() - scale) < 5 * scale / math.sqrt(n)
    assert noise.var().item() == pytest.approx(2 * scale**2, rel=0.02)
    assert abs(noise.mean().item()) < 5 * math.sqrt(2) * scale / math.sqrt(n)
    assert abs((noise > 0).double().mean().item() - 0.5) < binomial_tolerance(0.5, n)
    assert noise.dtype == torch.float64
    assert torch.equal(mechanisms.laplace_noise(torch.ones(5), 0.0, rng()), torch.zeros(5))
    noisy, event = mechanisms.laplace_mechanism(torch.ones(3, 2), 2.0, scale, rng(), release="once", note="y")
    assert (event.l1_sensitivity, event.scale, event.count, event.note) == (2.0, scale, 1, "y")


def test_selective_index_set_is_the_thresholded_set_or_the_top_two():
    """DP-DFD Alg. 1 lines 5-7: I = {i : y_s^i > t}; |I| < 2 falls back to the two largest."""
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05],   # t = 0.1: {0, 1, 2}
                          [0.9, 0.05, 0.03, 0.02],  # one above t: top two {0, 1}
                          [0.25, 0.25, 0.25, 0.25],  # all above t
                          [0.1, 0.1, 0.05, 0.75]])  # exactly t is not above: {3} -> top two {3, 0 or 1}
    mask = mechanisms.selective_index_set(probs, 0.1)
    assert mask[:3].tolist() == [[True, True, True, False], [True, True, False, False], [True] * 4]
    assert mask[3].sum().item() == 2 and mask[3, 3].item() and not mask[3, 2].item()
    assert mechanisms.selective_index_set(probs, 0.1, min_size=3)[1].tolist() == [True, True, True, False]


def test_selective_randomized_response_answers_uniformly_when_the_truth_is_outside_and_rr_inside():
    """Alg. 1 lines 8-11 with k = |I| = 3: truth inside, e^eps/(e^eps+2) and 1/(e^eps+2) on the
    others of I; truth outside, 1/3 each member of I; never a class outside I."""
    prior = torch.tensor([[0.4, 0.3, 0.25, 0.05]]).expand(N, -1)
    epsilon = 1.0
    inside, event = mechanisms.selective_randomized_response(torch.full((N,), 1), prior, 0.1, epsilon, rng(13), note="z")
    assert (event.epsilon, event.num_buckets, event.count, event.note) == (epsilon, 2, N, "z")
    outside, _ = mechanisms.selective_randomized_response(torch.full((N,), 3), prior, 0.1, epsilon, rng(14))
    keep = math.exp(epsilon) / (math.exp(epsilon) + 2)
    for answers, expected in ((inside, [(1 - keep) / 2, keep, (1 - keep) / 2, 0.0]), (outside, [1 / 3] * 3 + [0.0])):
        frequencies = torch.bincount(answers, minlength=4).double() / N
        for cls in range(4):
            assert abs(frequencies[cls].item() - expected[cls]) < binomial_tolerance(expected[cls], N), cls


def test_randomized_response_with_one_bucket_is_the_truth():
    truth = torch.zeros(100, dtype=torch.long)
    answers, event = mechanisms.randomized_response(truth, 1, 1.0, rng(), release="once")
    assert torch.equal(answers, truth) and event.count == 1
    assert mechanisms.randomized_response_keep_probability(3.0, 1) == 1.0
    with pytest.raises(ValueError):
        mechanisms.randomized_response(truth, 3, 1.0, rng(), release="all")


def test_laplace_noise_at_scale_one_is_laplace():
    noise = mechanisms.laplace_noise(torch.zeros(N, dtype=torch.float64), 1.0, rng(15))
    assert abs(noise.abs().mean().item() - 1.0) < 5 / math.sqrt(N)
    assert noise.var().item() == pytest.approx(2.0, rel=0.03)


def test_clipping_below_unit_norm_uses_the_rows_own_norm():
    """Rows of norm in (C, 1) with C < 1 are scaled by C / ||g||, not C / 1."""
    values = torch.tensor([[0.6, 0.0], [0.0, 0.2], [3.0, 4.0]])
    clipped = mechanisms.clip_rows(values, 0.3)
    assert torch.allclose(clipped, torch.tensor([[0.3, 0.0], [0.0, 0.2], [0.18, 0.24]]))
    assert torch.equal(mechanisms.clip_rows(torch.zeros(2, 3), 0.3), torch.zeros(2, 3))


def test_label_mechanisms_treat_each_row_on_its_own():
    """A batch mixing rows whose teacher label is inside the student's candidate set with rows whose
    label is outside: each row answers by its own case (RR inside, uniform outside)."""
    n, classes = N // 2, 6
    prior = torch.tensor([0.5, 0.3, 0.15, 0.02, 0.02, 0.01]).expand(2 * n, -1)
    truth = torch.cat([torch.full((n,), 0), torch.full((n,), 5)])
    cases = {
        "topk": lambda: mechanisms.topk_randomized_response(truth, prior, 2, 1.0, rng(16))[0],
        "selective": lambda: mechanisms.selective_randomized_response(truth, prior, 0.1, 1.0, rng(17))[0],
        "rr_with_prior": lambda: mechanisms.rr_with_prior(truth, prior, 1.0, rng(18))[0],
    }
    keep2 = math.exp(1.0) / (math.exp(1.0) + 1)
    keep3 = math.exp(1.0) / (math.exp(1.0) + 2)
    expected = {  # per case: the inside half's and the outside half's answer frequencies
        "topk": ([keep2, 1 - keep2, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0, 0]),
        "selective": ([keep3, (1 - keep3) / 2, (1 - keep3) / 2, 0, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0, 0, 0]),
        "rr_with_prior": ([keep2, 1 - keep2, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0, 0]),
    }
    assert mechanisms.rr_with_prior_k(prior[:1], 1.0).item() == 2
    for name, draw in cases.items():
        answers = draw()
        for half, frequencies in zip((answers[:n], answers[n:]), expected[name]):
            observed = torch.bincount(half, minlength=classes).double() / n
            for cls, p in enumerate(frequencies):
                assert abs(observed[cls].item() - p) < binomial_tolerance(p, n), (name, cls)


def test_rr_with_prior_k_maximises_the_probability_of_a_correct_answer():
    """Ghazi et al. 2021 Alg. 2's k for random priors and epsilons, against its definition (the
    smallest maximiser of top-k mass times e^eps / (e^eps + k - 1)); priors drawn in any order."""
    generator = rng(19)
    priors = torch.softmax(torch.randn(400, 7, generator=generator, dtype=torch.float64) * 2, dim=1)
    for epsilon in (0.1, 0.7, 2.0, 5.0):
        got = mechanisms.rr_with_prior_k(priors, epsilon)
        for row, k in zip(priors.tolist(), got.tolist()):
            mass = sorted(row, reverse=True)
            gains = [sum(mass[:j]) * math.exp(epsilon) / (math.exp(epsilon) + j - 1) for j in range(1, 8)]
            assert k == gains.index(max(gains)) + 1 or gains[k - 1] >= max(gains) * (1 - 1e-6)


ALL_MECHANISMS = {
    "gaussian": lambda g: mechanisms.gaussian_mechanism(torch.zeros(64, 4), 1.0, 1.0, g)[0],
    "noisy_mean": lambda g: mechanisms.noisy_mean(torch.zeros(64, 4), 1.0, 1.0, g)[0],
    "laplace": lambda g: mechanisms.laplace_mechanism(torch.zeros(64, 4), 1.0, 1.0, g)[0],
    "rr": lambda g: mechanisms.randomized_response(torch.zeros(256, dtype=torch.long), 5, 0.5, g)[0],
    "topk": lambda g: mechanisms.topk_randomized_response(
        torch.arange(256) % 6, torch.arange(6.0).expand(256, -1), 3, 0.5, g)[0],
    "topk_all": lambda g: mechanisms.topk_randomized_response(
        torch.arange(256) % 6, torch.arange(6.0).expand(256, -1), 3, 0.5, g, domain="all")[0],
    "selective": lambda g: mechanisms.selective_randomized_response(
        torch.arange(256) % 6, torch.softmax(torch.arange(6.0), 0).expand(256, -1), 0.01, 0.5, g)[0],
    "rr_with_prior": lambda g: mechanisms.rr_with_prior(
        torch.arange(256) % 6, torch.full((256, 6), 1 / 6), 0.5, g)[0],
}


@pytest.mark.parametrize("name", sorted(ALL_MECHANISMS))
def test_every_mechanism_draws_only_from_its_generator(name):
    """Reproducible from the seed alone: the same generator state gives the same output whatever
    torch's global generator does, and another seed another output."""
    draw = ALL_MECHANISMS[name]
    torch.manual_seed(1)
    first = draw(rng(20))
    torch.manual_seed(2)
    torch.rand(7)
    assert torch.equal(draw(rng(20)), first)
    assert not torch.equal(draw(rng(21)), first)
