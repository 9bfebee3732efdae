"""Privacy mechanisms as pure tensor functions, vectorised over the batch.

Every function takes its randomness from an explicit ``torch.Generator`` so that a run is
reproducible from its seed, and none of them loops over samples in Python. A mechanism returns what
it released *and* the privacy event it just realised (:mod:`dpsd.privacy.events`), built from the
very parameters that drew the noise and from the number of releases actually made, so a method
records the event of the noise it added, never a second reading of its config (the plan-equals-run
contract test compares these realised events with ``plan_ledger``'s). The accounting of events
lives in :mod:`dpsd.privacy.accounting`.

``release`` says what one release is: ``"rows"``, every row of the input (each answer depends on
the whole private set, so the rows compose: count = rows); ``"once"``, the whole input (a matrix
bounded as a whole, or rows about disjoint records, which compose in parallel: count 1, covering each row's answer: ``answers`` = rows).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dpsd.privacy.events import GaussianRelease, LaplaceRelease, RandomizedResponseRelease, UnprotectedRelease

RELEASES = ("rows", "once")


def _count(values: Tensor, release: str, caller: str) -> int:
    """How many releases ``values`` is under ``release`` (see the module docstring)."""
    if release == "rows":
        return int(values.shape[0])
    if release == "once":
        return 1
    raise ValueError(f"{caller}: release must be one of {', '.join(RELEASES)}, got {release!r}")


def _answers(values: Tensor, release: str) -> int:
    """How many answers each release of ``values`` privatises: one a row, or every row of a matrix released at once."""
    return int(values.shape[0]) if release == "once" and values.dim() > 1 else 1


def keep_topk(values: Tensor, k: int, by: str = "magnitude") -> Tensor:
    """DPSD's operator M_k (§III-B.2): keep the k largest entries of each row, zero the rest.

    ``by="value"`` ranks entries by signed value (the paper's literal wording, "the top-k largest
    elements of a vector"); ``by="magnitude"`` ranks by absolute value, the reading that keeps the
    strongest gradient components whatever their sign.
    """
    if by not in ("value", "magnitude"):
        raise ValueError(f"keep_topk: by must be 'value' or 'magnitude', got {by!r}")
    score = values.abs() if by == "magnitude" else values
    index = score.topk(k, dim=1).indices
    mask = torch.zeros_like(values, dtype=torch.bool).scatter_(1, index, True)
    return values * mask


def normalize_rows(values: Tensor, bound: float, stability: float, over: str = "sample") -> Tensor:
    """DPSD Eq. (3) / DPDFD Eq. (3): ``bound * g / (||g||_2 + h)``.

    ``over="sample"`` normalises each row on its own (each released row then has L2 norm below
    ``bound``); ``over="batch"`` divides the whole batch by its Frobenius norm, the literal reading
    of ``||M_k(dL_t/dPhi_s)||_2`` as the norm of the batch's gradient matrix (the whole release then
    has norm below ``bound``).
    """
    return bound * values / (_norms(values, over, "normalize_rows") + stability)


def clip_rows(values: Tensor, bound: float, over: str = "sample") -> Tensor:
    """Clipping (Abadi et al. 2016; DPDFD Fig. 2, '-C'): ``g * min(1, bound / ||g||_2)``.

    Rows already inside the ball are left as they are, so only the norm bound is common to all
    rows, not their length; ``over`` as in :func:`normalize_rows`.
    """
    return values * (bound / _norms(values, over, "clip_rows").clamp_min(1e-12)).clamp(max=1.0)


def _norms(values: Tensor, over: str, caller: str) -> Tensor:
    """L2 norm of each row (``over="sample"``, shape (b, 1)) or of the whole batch (``"batch"``)."""
    if over == "sample":
        return values.norm(dim=1, keepdim=True)
    if over == "batch":
        return values.norm()
    raise ValueError(f"{caller}: over must be 'sample' or 'batch', got {over!r}")


def bound_rows(values: Tensor, bound: float, stability: float, how: str = "normalize", over: str = "sample") -> Tensor:
    """DPDFD's choice of norm bound (Fig. 2 ablation): ``how="normalize"`` (Eq. (4), every row scaled
    to norm ~ ``bound``, :func:`normalize_rows`) or ``"clip"`` (:func:`clip_rows`). Either way each
    row (``over="sample"``) or the batch (``"batch"``) ends with L2 norm <= ``bound``."""
    if how == "normalize":
        return normalize_rows(values, bound, stability, over=over)
    if how == "clip":
        return clip_rows(values, bound, over=over)
    raise ValueError(f"bound_rows: how must be 'normalize' or 'clip', got {how!r}")


def gaussian_noise(like: Tensor, std: float, rng: torch.Generator) -> Tensor:
    """Isotropic N(0, std^2) noise shaped like ``like`` (DPSD Eq. (3): std = sigma * beta)."""
    return torch.randn(like.shape, generator=rng, device=like.device, dtype=like.dtype) * std


def gaussian_mechanism(values: Tensor, l2_sensitivity: float, noise_std: float, rng: torch.Generator,
                       release: str = "rows", note: str = "",
                       relation: str = "replace_record") -> tuple[Tensor, GaussianRelease]:
    """``values`` + N(0, noise_std^2 I) (the Gaussian mechanism, DPSD Theorem 5; PATE's GNMax and
    DGD+'s aggregation on vote counts) and its event: ``l2_sensitivity`` is that of one release
    (a row, or the whole input with ``release="once"``) under ``relation`` (``teacher_partition``
    for votes: one changed record moves one teacher's vote)."""
    count, answers = _count(values, release, "gaussian_mechanism"), _answers(values, release)
    event = GaussianRelease(l2_sensitivity=l2_sensitivity, noise_std=noise_std, count=count, note=note,
                            relation=relation, answers=answers)
    return values + gaussian_noise(values, noise_std, rng), event


def noisy_mean(rows: Tensor, sum_sensitivity: float, noise_std: float, rng: torch.Generator,
               note: str = "") -> tuple[Tensor, GaussianRelease]:
    """DPDFD Alg. 1 line 9 / Eq. (4) as printed: one noisy mean ``(1/b) (sum_i rows_i + N(0, std^2 I))``
    of the batch, given to every row; one Gaussian release of the sum (``sum_sensitivity``, ``noise_std``),
    of which the division by b is post-processing."""
    event = GaussianRelease(l2_sensitivity=sum_sensitivity, noise_std=noise_std, count=1, note=note,
                            answers=int(rows.shape[0]))
    mean = (rows.sum(dim=0, keepdim=True) + gaussian_noise(rows[:1], noise_std, rng)) / rows.shape[0]
    return mean.expand_as(rows), event


def laplace_noise(like: Tensor, scale: float, rng: torch.Generator) -> Tensor:
    """I.i.d. Laplace(0, ``scale``) noise shaped like ``like``, by inverse CDF of one uniform draw in
    [-1/2, 1/2) per entry."""
    if scale == 0:  # no noise (privacy.noiseless); the inverse CDF below would give 0 * inf at u = -1/2
        return torch.zeros_like(like)
    uniform = torch.rand(like.shape, generator=rng, device=like.device) - 0.5
    return (-torch.sign(uniform) * torch.log1p(-2 * uniform.abs()) * scale).to(like.dtype)


def laplace_mechanism(values: Tensor, l1_sensitivity: float, scale: float, rng: torch.Generator,
                      release: str = "rows", note: str = "",
                      relation: str = "replace_record") -> tuple[Tensor, LaplaceRelease]:
    """``values`` + Laplace(``scale``) noise and its event (PATE's LNMax, scale 1/gamma; DGD Eq. (3),
    scale 2/eps_0; DGD's latent codes, scale 2c/eps_1, ``release="once"``), its sensitivity stated
    under ``relation`` (as for :func:`gaussian_mechanism`)."""
    count, answers = _count(values, release, "laplace_mechanism"), _answers(values, release)
    event = LaplaceRelease(l1_sensitivity=l1_sensitivity, scale=scale, count=count, note=note, relation=relation,
                           answers=answers)
    return values + laplace_noise(values, scale, rng), event


def randomized_response_keep_probability(epsilon: float, num_buckets: int) -> float:
    """DPSD Eq. (4): probability e^eps / (e^eps + c - 1) of answering the true bucket."""
    if num_buckets < 2:
        return 1.0
    # exp(eps) overflows for large eps; rewrite as 1 / (1 + (c-1) e^-eps).
    return 1.0 / (1.0 + (num_buckets - 1) * math.exp(-epsilon))


def _randomized_response(truth: Tensor, num_buckets: int, epsilon: float, rng: torch.Generator) -> Tensor:
    """The answers of :func:`randomized_response` (no event: the callers here build their own)."""
    keep_p = randomized_response_keep_probability(epsilon, num_buckets)
    keep = torch.rand(truth.shape, generator=rng, device=truth.device) < keep_p
    if num_buckets < 2:
        return truth.clone()
    other = torch.randint(0, num_buckets - 1, truth.shape, generator=rng, device=truth.device)
    other = other + (other >= truth).long()  # skip the true bucket
    return torch.where(keep, truth, other)


def randomized_response(truth: Tensor, num_buckets: int, epsilon: float, rng: torch.Generator,
                        release: str = "rows", note: str = "") -> tuple[Tensor, RandomizedResponseRelease]:
    """k-ary randomized response, DPSD Eq. (4), on bucket indices ``truth`` in [0, num_buckets), and its event.

    Keeps the truth with probability e^eps/(e^eps+c-1); otherwise answers one of the other c-1
    buckets uniformly, so each other bucket has probability 1/(e^eps+c-1). ``truth`` may be the private labels
    sealed by the boundary (:meth:`dpsd.data.WatchedSplit.sealed_labels`): the release consumes them, its event
    the one the ledger must then hold.
    """
    count = _count(truth, release, "randomized_response")
    event = RandomizedResponseRelease(epsilon=epsilon, num_buckets=num_buckets, count=count, note=note)
    if hasattr(truth, "consume"):  # the private labels, sealed by the runner's boundary: this release consumes them
        truth = truth.consume(event)
    return _randomized_response(truth, num_buckets, epsilon, rng), event


def topk_randomized_response(
    teacher_label: Tensor,
    prior_scores: Tensor,
    k: int,
    epsilon: float,
    rng: torch.Generator,
    domain: str = "topk",
    note: str = "",
) -> tuple[Tensor, RandomizedResponseRelease | UnprotectedRelease]:
    """DPSD Eq. (5): randomized response with the student's top-k classes as prior.

    ``prior_scores`` (the student's outputs) give each row its index set I_i of the k most probable
    classes. If the teacher's label r is in I_i, answer randomized response; otherwise answer a
    class drawn uniformly from I_i. ``domain`` picks the randomized response's answer set when r is
    in I_i: ``"topk"`` answers within I_i (k buckets: the reading of the method description, "RR
    restricted to the student's top-k"); ``"all"`` answers R(r; c, eps) over all c classes, the
    literal Eq. (5): an answer outside the top-k then happens only when the teacher's class is inside
    it, an unbounded privacy loss, so its event is an :class:`UnprotectedRelease` of every answer.
    """
    index_set = prior_scores.topk(k, dim=1).indices  # (b, k)
    in_set = index_set == teacher_label.unsqueeze(1)  # (b, k), at most one True per row
    found = in_set.any(dim=1)
    uniform = index_set.gather(
        1, torch.randint(0, k, (len(teacher_label), 1), generator=rng, device=teacher_label.device)
    ).squeeze(1)
    if domain == "topk":
        position = in_set.long().argmax(dim=1)
        answers, event = randomized_response(position, k, epsilon, rng, note=note)
        answered = index_set.gather(1, answers.unsqueeze(1)).squeeze(1)
    elif domain == "all":
        answered = _randomized_response(teacher_label, prior_scores.shape[1], epsilon, rng)
        event = UnprotectedRelease(count=len(teacher_label), note=note)
    else:
        raise ValueError(f"topk_randomized_response: domain must be 'topk' or 'all', got {domain!r}")
    return torch.where(found, answered, uniform), event


def selective_index_set(prior_probs: Tensor, threshold: float, min_size: int = 2) -> Tensor:
    """DP-DFD Alg. 1 lines 5-7: the boolean mask of I = {i : y_s^i > t}, per row.

    A row with fewer than ``min_size`` (2) members is replaced by the indices of its ``min_size``
    largest entries ("if |I| = 0 or |I| = 1 then I = [index of top two largest elements in y_s]").
    """
    mask = prior_probs > threshold
    top = torch.zeros_like(mask).scatter_(1, prior_probs.topk(min_size, dim=1).indices, True)
    too_small = mask.sum(dim=1, keepdim=True) < min_size
    return torch.where(too_small, top, mask)


def _uniform_member(mask: Tensor, rng: torch.Generator) -> Tensor:
    """One index per row drawn uniformly from the row's True entries (every row needs one)."""
    scores = torch.rand(mask.shape, generator=rng, device=mask.device)
    return scores.masked_fill(~mask, -1.0).argmax(dim=1)


def selective_randomized_response(
    teacher_label: Tensor, prior_probs: Tensor, threshold: float, epsilon: float, rng: torch.Generator,
    note: str = "",
) -> tuple[Tensor, RandomizedResponseRelease]:
    """DP-DFD's selective randomized response R(y_s, y_t, t), Alg. 1 lines 4-11, on class indices.

    ``prior_probs`` are the student's output probabilities y_s; I is :func:`selective_index_set`
    and k = |I| (per row). If the teacher's class r = argmax y_t is in I, answer r with probability
    e^eps / (e^eps + k - 1) and each other member of I with probability 1 / (e^eps + k - 1)
    (RR_eps(I, y_t)); otherwise answer each member of I with probability 1 / k (Uniform(I)).
    An answer equals r exactly when the truth was kept.

    Its event is binary randomized response at ``epsilon``, one per row: w.r.t. one changed record
    (which may change r), every pair of answer distributions is eps-DP and the hockey-stick
    divergence of each is largest at k = 2, so binary RR_eps dominates every answer whatever k the
    student's prior gives (the argument is spelt out at ``dpsd.methods.dp_dfd.label_release``).
    """
    mask = selective_index_set(prior_probs, threshold)
    size = mask.sum(dim=1)
    truth = torch.zeros_like(mask).scatter_(1, teacher_label.unsqueeze(1), True)
    found = (mask & truth).any(dim=1)
    # 1 / (1 + (k-1) e^-eps): the keep probability without overflowing e^eps (k >= 2 here).
    keep_p = 1.0 / (1.0 + (size - 1).to(prior_probs.dtype) * math.exp(-epsilon))
    keep = torch.rand(size.shape, generator=rng, device=size.device) < keep_p
    other = _uniform_member(mask & ~truth, rng)  # a member of I other than r (k >= 2 leaves one)
    uniform = _uniform_member(mask, rng)
    event = RandomizedResponseRelease(epsilon=epsilon, num_buckets=2, count=len(teacher_label), note=note)
    return torch.where(found, torch.where(keep, teacher_label, other), uniform), event


def rr_with_prior_k(prior_probs: Tensor, epsilon: float) -> Tensor:
    """RRWithPrior's k per row (Ghazi et al., NeurIPS 2021, "Deep Learning with Label Differential
    Privacy", Alg. 2): the k in [1, c] maximising ``w_k = (mass of the prior's top-k) * e^eps /
    (e^eps + k - 1)``, the probability that RR over the prior's top-k answers the true label when the
    label is drawn from the prior. Written ``mass_k / (1 + (k-1) e^-eps)`` (no overflow; at eps = inf
    the smallest k holding the prior's whole mass). A flat prior gives k = c: plain c-ary RR."""
    mass = prior_probs.sort(dim=1, descending=True).values.cumsum(dim=1)  # (b, c): top-k mass
    k = torch.arange(1, prior_probs.shape[1] + 1, device=prior_probs.device, dtype=prior_probs.dtype)
    gain = mass / (1 + (k - 1) * math.exp(-epsilon))
    # the first maximiser (ties: the smaller set), robust to float noise in a flat prior's cumsum
    best = gain.max(dim=1, keepdim=True).values
    return (gain >= best * (1 - 1e-6)).long().argmax(dim=1) + 1


def rr_with_prior(teacher_label: Tensor, prior_probs: Tensor, epsilon: float, rng: torch.Generator,
                  note: str = "") -> tuple[Tensor, RandomizedResponseRelease]:
    """RRWithPrior (Ghazi et al. 2021, Alg. 2) on class indices: per row, k = :func:`rr_with_prior_k`
    and Y_k the prior's k most probable classes; if the true class r is in Y_k answer r with
    probability e^eps / (e^eps + k - 1) and each other member of Y_k with 1 / (e^eps + k - 1)
    (RR_eps over Y_k); otherwise answer a member of Y_k uniformly. Y_k depends on the prior only, so
    each answer is eps-label-DP (the same pairs as DPSD's Eq. (5) top-k RR, with a per-row k). Its
    event is binary RR_eps per row, which dominates k-ary RR_eps over a prior-chosen set for every
    k >= 2 (as :func:`selective_randomized_response`'s); k = 1 leaks nothing."""
    k = rr_with_prior_k(prior_probs, epsilon)
    order = prior_probs.argsort(dim=1, descending=True)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(prior_probs.shape[1], device=order.device).expand_as(order))
    mask = rank < k.unsqueeze(1)  # Y_k
    truth = torch.zeros_like(mask).scatter_(1, teacher_label.unsqueeze(1), True)
    found = (mask & truth).any(dim=1)
    keep_p = 1.0 / (1.0 + (k - 1).to(prior_probs.dtype) * math.exp(-epsilon))
    keep = torch.rand(k.shape, generator=rng, device=k.device) < keep_p
    others = mask & ~truth
    other = _uniform_member(torch.where(others.any(dim=1, keepdim=True), others, mask), rng)  # k = 1: keep_p = 1
    uniform = _uniform_member(mask, rng)
    event = RandomizedResponseRelease(epsilon=epsilon, num_buckets=2, count=len(teacher_label), note=note)
    return torch.where(found, torch.where(keep, teacher_label, other), uniform), event
