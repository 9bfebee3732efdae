"""Privacy mechanisms as pure tensor functions, vectorised over the batch.

Every function takes its randomness from an explicit ``torch.Generator`` so that a run is
reproducible from its seed, and none of them loops over samples in Python. The accounting of what
they release lives in :mod:`dpsd.privacy.accounting`; these functions only transform tensors.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


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
    if over == "sample":
        norm = values.norm(dim=1, keepdim=True)
    elif over == "batch":
        norm = values.norm()
    else:
        raise ValueError(f"normalize_rows: over must be 'sample' or 'batch', got {over!r}")
    return bound * values / (norm + stability)


def gaussian_noise(like: Tensor, std: float, rng: torch.Generator) -> Tensor:
    """Isotropic N(0, std^2) noise shaped like ``like`` (DPSD Eq. (3): std = sigma * beta)."""
    return torch.randn(like.shape, generator=rng, device=like.device, dtype=like.dtype) * std


def randomized_response_keep_probability(epsilon: float, num_buckets: int) -> float:
    """DPSD Eq. (4): probability e^eps / (e^eps + c - 1) of answering the true bucket."""
    if num_buckets < 2:
        return 1.0
    # exp(eps) overflows for large eps; rewrite as 1 / (1 + (c-1) e^-eps).
    return 1.0 / (1.0 + (num_buckets - 1) * math.exp(-epsilon))


def randomized_response(truth: Tensor, num_buckets: int, epsilon: float, rng: torch.Generator) -> Tensor:
    """k-ary randomized response, DPSD Eq. (4), on bucket indices ``truth`` in [0, num_buckets).

    Keeps the truth with probability e^eps/(e^eps+c-1); otherwise answers one of the other c-1
    buckets uniformly, so each other bucket has probability 1/(e^eps+c-1).
    """
    keep_p = randomized_response_keep_probability(epsilon, num_buckets)
    keep = torch.rand(truth.shape, generator=rng, device=truth.device) < keep_p
    if num_buckets < 2:
        return truth.clone()
    other = torch.randint(0, num_buckets - 1, truth.shape, generator=rng, device=truth.device)
    other = other + (other >= truth).long()  # skip the true bucket
    return torch.where(keep, truth, other)


def topk_randomized_response(
    teacher_label: Tensor,
    prior_scores: Tensor,
    k: int,
    epsilon: float,
    rng: torch.Generator,
    domain: str = "topk",
) -> Tensor:
    """DPSD Eq. (5): randomized response with the student's top-k classes as prior.

    ``prior_scores`` (the student's outputs) give each row its index set I_i of the k most probable
    classes. If the teacher's label r is in I_i, answer randomized response; otherwise answer a
    class drawn uniformly from I_i. ``domain`` picks the randomized response's answer set when r is
    in I_i: ``"topk"`` answers within I_i (k buckets: the reading of the method description, "RR
    restricted to the student's top-k"); ``"all"`` answers R(r; c, eps) over all c classes, the
    literal Eq. (5).
    """
    index_set = prior_scores.topk(k, dim=1).indices  # (b, k)
    in_set = index_set == teacher_label.unsqueeze(1)  # (b, k), at most one True per row
    found = in_set.any(dim=1)
    uniform = index_set.gather(
        1, torch.randint(0, k, (len(teacher_label), 1), generator=rng, device=teacher_label.device)
    ).squeeze(1)
    if domain == "topk":
        position = in_set.long().argmax(dim=1)
        answered = index_set.gather(1, randomized_response(position, k, epsilon, rng).unsqueeze(1)).squeeze(1)
    elif domain == "all":
        answered = randomized_response(teacher_label, prior_scores.shape[1], epsilon, rng)
    else:
        raise ValueError(f"topk_randomized_response: domain must be 'topk' or 'all', got {domain!r}")
    return torch.where(found, answered, uniform)
