"""``pate``: Private Aggregation of Teacher Ensembles (Papernot et al. 2017, ICLR; Papernot et al.
2018, ICLR "Scalable Private Learning with PATE").

``method.num_teachers`` teachers are trained on disjoint partitions of the private split; a held-out
part of the private split (``method.pool_fraction``, never seen by any teacher) stands in for the
public unlabelled data PATE assumes. ``method.queries`` pool samples are labelled by the noisy
argmax of the teachers' vote counts, and the student is trained on them. Aggregators:

* ``lnmax`` (2017, §2.1): counts + Laplace(1/gamma) each. Changing one private record changes one
  teacher's vote: two counts move by one (L1 sensitivity 2), so each answer is (2 gamma, 0)-DP.
* ``gnmax`` (2018, §4.1): counts + N(0, sigma^2) each; the vote histogram has L2 sensitivity
  sqrt(2), so each answer is (lambda, lambda / sigma^2)-RDP (2018, Prop. 8).

* Confident-GNMax (2018, Alg. 1), with ``method.confident_threshold`` T set (null: off): a query
  is answered only if max_j n_j + N(0, sigma1^2) >= T (``method.sigma1``), then by GNMax with
  ``method.sigma``; the student trains on the answered queries only. The threshold check is a
  Gaussian release of the top count (L2 sensitivity 1: one teacher's changed vote moves the
  maximum by at most one), composed for every query; GNMax is composed for the answered ones.
  The plan (``dpsd privacy-report``) cannot know how many will be answered and charges GNMax
  for every query: an upper bound on the run's ledger, which charges the answered ones.

The ledger uses the data-independent analyses. ``method.data_dependent=true`` (GNMax) also
computes the 2018 paper's data-dependent RDP bound (Thm. 6, :mod:`dpsd.privacy.pate_analysis`) of
the GNMax answers and reports it as the run metric ``eps_data_dependent``: it depends on the private
votes, so it may not be published before the smooth-sensitivity analysis (§4.2, not implemented).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import torch
from omegaconf import MISSING, DictConfig
from torch import Tensor
from torch.utils.data import Subset

from baselines.training import RelabelledSplit, train_student
from dpsd.data import DataInfo, images_of
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, RunContext, RunResult, register_method
from dpsd.privacy import pate_analysis
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.claims import Claim, pate_gnmax_data_independent
from dpsd.privacy.events import GaussianRelease, LaplaceRelease
from dpsd.privacy import mechanisms
from dpsd.ensembles import (load_or_train_members, member_predictions, vote_counts,
                            with_member_steps)
from dpsd.teachers import disjoint_partition

LNMAX_NOTE = "LNMax: vote counts + Laplace(1/gamma), argmax (Papernot et al. 2017)"
GNMAX_NOTE = "GNMax: vote counts + N(0, sigma^2), argmax (Papernot et al. 2018)"
THRESHOLD_NOTE = "Confident-GNMax threshold check: max vote + N(0, sigma1^2) >= T (Papernot et al. 2018, Alg. 1)"


def aggregator_release(cfg: DictConfig) -> GaussianRelease | LaplaceRelease:
    """One event for all ``method.queries`` noisy-argmax answers (the whole noisy histogram, of
    which the argmax is post-processing)."""
    method = cfg.method
    if method.aggregator == "lnmax":
        return LaplaceRelease(l1_sensitivity=2.0, scale=1 / float(method.gamma), count=int(method.queries), note=LNMAX_NOTE,
                              relation="teacher_partition")
    return GaussianRelease(l2_sensitivity=math.sqrt(2), noise_std=float(method.sigma), count=int(method.queries),
                           note=GNMAX_NOTE, relation="teacher_partition")


def confident(cfg: DictConfig) -> bool:
    """Whether Confident-GNMax's threshold check is on (``method.confident_threshold`` set)."""
    if cfg.method.get("confident_threshold") is None:
        return False
    if cfg.method.aggregator != "gnmax":
        raise ConfigError(f"method.confident_threshold needs method.aggregator=gnmax, got {cfg.method.aggregator!r}")
    return True


def threshold_release(cfg: DictConfig) -> GaussianRelease:
    """Confident-GNMax's check (2018, Alg. 1 line 1) for all ``method.queries``: the top vote count
    (L2 sensitivity 1) + N(0, sigma1^2), compared with T (post-processing)."""
    return GaussianRelease(l2_sensitivity=1.0, noise_std=float(cfg.method.sigma1), count=int(cfg.method.queries),
                           note=THRESHOLD_NOTE, relation="teacher_partition")


def releases(cfg: DictConfig) -> list[GaussianRelease | LaplaceRelease]:
    """The plan of a PATE run's releases: the aggregator's answer to every query and, with
    Confident-GNMax, the threshold check of every query (a run charges the answered ones only)."""
    answers = aggregator_release(cfg)
    return [threshold_release(cfg), answers] if confident(cfg) else [answers]


def data_independent_claim(cfg: DictConfig) -> Claim:
    """The papers' data-independent bounds for ``queries`` answers at ``privacy.delta``.

    LNMax (Papernot et al. 2017, §3 with Abadi et al. 2016's moments-accountant bound for a
    (2 gamma, 0)-DP mechanism): alpha(l) <= 2 gamma^2 l (l + 1) per answer and
    eps = min_l (Q alpha(l) + ln(1/delta)) / l. GNMax (Papernot et al. 2018, Prop. 8 and Thm. 5):
    eps = min_lambda Q lambda / sigma^2 + ln(1/delta) / (lambda - 1). Integer orders up to 256.
    """
    method, delta = cfg.method, float(cfg.privacy.delta)
    queries, log_inv_delta = int(method.queries), math.log(1 / delta)
    if method.aggregator == "lnmax":
        gamma = float(method.gamma)
        eps = min((queries * 2 * gamma**2 * order * (order + 1) + log_inv_delta) / order for order in range(1, 257))
        return Claim(eps, delta, "(eps, delta)-DP", "Papernot et al. 2017, data-independent moments accountant")
    if confident(cfg):
        # Alg. 1: the threshold check (sensitivity 1) adds lambda / (2 sigma1^2) per query to GNMax's
        # lambda / sigma^2, every query charged as answered (the plan cannot know which will be)
        per_query = 1 / float(method.sigma) ** 2 + 1 / (2 * float(method.sigma1) ** 2)
        eps = min(queries * order * per_query + log_inv_delta / (order - 1) for order in range(2, 257))
        return Claim(eps, delta, "(eps, delta)-DP", "Papernot et al. 2018, data-independent RDP (Prop. 8), "
                                                    "Confident-GNMax threshold check composed per query")
    eps = pate_gnmax_data_independent(queries, float(method.sigma), delta)
    return Claim(eps, delta, "(eps, delta)-DP", "Papernot et al. 2018, data-independent RDP (Prop. 8)")


def partition(cfg: DictConfig, size: int) -> tuple[list[list[int]], list[int]]:
    """Disjoint teacher partitions and the held-out pool, from a permutation seeded by ``seed``."""
    pool_size = int(size * float(cfg.method.pool_fraction))
    queries, teachers = int(cfg.method.queries), int(cfg.method.num_teachers)
    if not queries <= pool_size:
        raise ConfigError(f"method.queries={queries} exceeds the pool ({pool_size} held-out private samples)")
    return disjoint_partition(size, teachers, pool_size, int(cfg.seed))


def confident_mask(votes: Tensor, cfg: DictConfig, rng: torch.Generator) -> tuple[Tensor, GaussianRelease]:
    """Confident-GNMax's check (2018, Alg. 1): max_j n_j + N(0, sigma1^2) >= T, per query, and its
    event (the top count has L2 sensitivity 1: one teacher's changed vote moves it by at most one)."""
    top = votes.max(dim=1).values
    noisy, event = mechanisms.gaussian_mechanism(top, 1.0, float(cfg.method.sigma1), rng, note=THRESHOLD_NOTE,
                                                 relation="teacher_partition")
    return noisy >= float(cfg.method.confident_threshold), event


def noisy_votes(votes: Tensor, cfg: DictConfig, rng: torch.Generator) -> tuple[Tensor, GaussianRelease | LaplaceRelease]:
    """LNMax / GNMax: the vote totals plus the aggregator's noise, and its event (one release per query; one changed
    record moves one teacher's vote, or its probability vector: L1 sensitivity 2, L2 sqrt 2)."""
    method = cfg.method
    if method.aggregator == "lnmax":
        return mechanisms.laplace_mechanism(votes, 2.0, 1 / float(method.gamma), rng, note=LNMAX_NOTE,
                                            relation="teacher_partition")
    return mechanisms.gaussian_mechanism(votes, math.sqrt(2), float(method.sigma), rng, note=GNMAX_NOTE,
                                         relation="teacher_partition")


def noisy_argmax(votes: Tensor, cfg: DictConfig, rng: torch.Generator) -> tuple[Tensor, GaussianRelease | LaplaceRelease]:
    """The argmax of :func:`noisy_votes` (post-processing) and its event."""
    noisy, event = noisy_votes(votes, cfg, rng)
    return noisy.argmax(dim=1), event


Aggregator = Enum("Aggregator", "gnmax lnmax")


@dataclass
class PATEConfig(MethodConfig):
    """``conf/method/pate.yaml`` (its comments say what each setting is)."""

    batch_size: int = MISSING
    member_steps: Optional[int] = MISSING
    num_teachers: int = MISSING
    pool_fraction: float = MISSING
    queries: int = MISSING
    aggregator: Aggregator = MISSING
    sigma: float = MISSING
    gamma: float = MISSING
    epochs: int = MISSING
    lr: float = MISSING
    confident_threshold: Optional[float] = MISSING
    sigma1: float = MISSING
    data_dependent: bool = MISSING


def aggregator_noise(cfg: DictConfig, sigma_max: float) -> tuple[str, float, float]:
    """What ``privacy.calibrate`` solves for in a PATE-style method, and its bracket: GNMax's sigma (sigma1 kept) up
    to ``sigma_max`` (more teachers need more noise for one epsilon), or LNMax's gamma."""
    if cfg.method.aggregator == "lnmax":
        return "method.gamma", 1e-6, 1e3
    return "method.sigma", 1e-3, sigma_max


@register_method("pate")
class PATE(Method):
    """Teacher ensemble on disjoint partitions, noisy-argmax labels for pool samples, student on them."""

    config = PATEConfig

    @staticmethod
    def noise_parameter(cfg: DictConfig) -> tuple[str, float, float]:
        return aggregator_noise(cfg, sigma_max=1e6)

    @staticmethod
    def notes(cfg: DictConfig) -> list[str]:
        notes = [
            "privacy w.r.t. the teachers' partitions of the private split; the pool is a held-out part "
            f"of the private split ({cfg.method.pool_fraction:g}) standing in for PATE's public "
            "unlabelled data: its images train the student without protection",
        ]
        if cfg.method.data_dependent:
            if cfg.method.aggregator != "gnmax":
                raise ConfigError(f"method.data_dependent needs method.aggregator=gnmax, got {cfg.method.aggregator!r}")
            notes.append(f"metric eps_data_dependent: {pate_analysis.NOT_PUBLISHABLE}")
        if confident(cfg):
            notes.append("Confident-GNMax: the claim and the plan charge GNMax for every query (an upper "
                         "bound); a run's ledger charges the answered queries only")
        return notes

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(claim=data_independent_claim(cfg), notes=PATE.notes(cfg))
        for release in releases(cfg):
            ledger.record(release)
        return ledger

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return 0  # the number of student batches depends on the queries answered

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, data, device = ctx.cfg, ctx.data, ctx.device
        parts, pool = partition(cfg, len(data.train))
        queried = Subset(data.train, pool[: int(cfg.method.queries)])
        # the member key carries the split, so a cached teacher never saw the pool
        names = [f"{i}/{len(parts)}, pool {cfg.method.pool_fraction:g}" for i in range(len(parts))]
        members = load_or_train_members(with_member_steps(cfg, cfg.method.member_steps), data, device, parts, names,
                                        ctx.phase_log)
        query_images = images_of(data.train, pool[: int(cfg.method.queries)])
        votes = vote_counts(member_predictions(members, query_images, device,
                                               log=ctx.phase_log("member votes", len(members))), data.num_classes)
        answered = torch.ones(len(votes), dtype=torch.bool, device=device)
        if confident(cfg):
            answered, event = confident_mask(votes, cfg, ctx.rng)
            ctx.ledger.record(event)
        labels, event = noisy_argmax(votes[answered], cfg, ctx.rng)
        ctx.ledger.record(event)
        if not answered.any():
            raise ConfigError("pate: the confident threshold answered no query; lower method.confident_threshold")
        kept = Subset(queried, answered.nonzero().flatten().cpu().tolist())
        student, final_loss = train_student(ctx, RelabelledSplit(kept, labels.cpu()))
        consensus = float((labels == votes[answered].argmax(dim=1)).float().mean())
        metrics = {"final_student_loss": final_loss, "aggregate_agreement": consensus,
                   "answered_queries": int(answered.sum())}
        if cfg.method.data_dependent:
            metrics["eps_data_dependent"] = pate_analysis.gnmax_data_dependent_epsilon(
                votes[answered].cpu().numpy(), float(cfg.method.sigma), float(cfg.privacy.delta))
        return RunResult(student=student, ledger=ctx.ledger, metrics=metrics)
