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

Only the data-independent analyses are implemented (no data-dependent bound, no Confident-GNMax).
"""

from __future__ import annotations

import math

import torch
from omegaconf import DictConfig
from torch import Tensor
from torch.utils.data import DataLoader, Subset

from baselines.training import RelabelledSplit, train_student
from dpsd.errors import ConfigError
from dpsd.methods.base import DataInfo, Method, RunContext, RunResult, register_method
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import GaussianRelease, LaplaceRelease
from dpsd.teachers import load_or_train_teacher

AGGREGATORS = ("lnmax", "gnmax")


def aggregator_release(cfg: DictConfig) -> GaussianRelease | LaplaceRelease:
    """One event for all ``method.queries`` noisy-argmax answers (the whole noisy histogram, of
    which the argmax is post-processing)."""
    method = cfg.method
    if method.aggregator == "lnmax":
        return LaplaceRelease(l1_sensitivity=2.0, scale=1 / float(method.gamma), count=int(method.queries),
                              note="LNMax: vote counts + Laplace(1/gamma), argmax (Papernot et al. 2017)")
    if method.aggregator == "gnmax":
        return GaussianRelease(l2_sensitivity=math.sqrt(2), noise_std=float(method.sigma), count=int(method.queries),
                               note="GNMax: vote counts + N(0, sigma^2), argmax (Papernot et al. 2018)")
    raise ConfigError(f"method.aggregator must be one of {', '.join(AGGREGATORS)}, got {method.aggregator!r}")


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
    sigma = float(method.sigma)
    eps = min(queries * order / sigma**2 + log_inv_delta / (order - 1) for order in range(2, 257))
    return Claim(eps, delta, "(eps, delta)-DP", "Papernot et al. 2018, data-independent RDP (Prop. 8)")


def partition(cfg: DictConfig, size: int) -> tuple[list[list[int]], list[int]]:
    """Disjoint teacher partitions and the held-out pool, from a permutation seeded by ``seed``."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(int(cfg.seed))).tolist()
    pool_size = int(size * float(cfg.method.pool_fraction))
    queries, teachers = int(cfg.method.queries), int(cfg.method.num_teachers)
    if not queries <= pool_size:
        raise ConfigError(f"method.queries={queries} exceeds the pool ({pool_size} held-out private samples)")
    private = order[pool_size:]
    return [private[i::teachers] for i in range(teachers)], order[:pool_size]


def noisy_argmax(votes: Tensor, cfg: DictConfig, rng: torch.Generator) -> Tensor:
    """LNMax / GNMax: the argmax of the vote counts plus the aggregator's noise."""
    method = cfg.method
    if method.aggregator == "lnmax":
        # Laplace(b) by inverse CDF from one uniform draw in (-1/2, 1/2)
        uniform = torch.rand(votes.shape, generator=rng, device=votes.device) - 0.5
        noise = -torch.sign(uniform) * torch.log1p(-2 * uniform.abs()) / float(method.gamma)
    else:
        noise = torch.randn(votes.shape, generator=rng, device=votes.device) * float(method.sigma)
    return (votes + noise).argmax(dim=1)


@register_method("pate")
class PATE(Method):
    """Teacher ensemble on disjoint partitions, noisy-argmax labels for pool samples, student on them."""

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(claim=data_independent_claim(cfg), notes=[
            "privacy w.r.t. the teachers' partitions of the private split; the pool is a held-out part "
            f"of the private split ({cfg.method.pool_fraction:g}) standing in for PATE's public "
            "unlabelled data: its images train the student without protection",
        ])
        ledger.record(aggregator_release(cfg))
        return ledger

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return 0  # the number of student batches depends on the queries answered

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, data, device = ctx.cfg, ctx.data, ctx.device
        parts, pool = partition(cfg, len(data.train))
        queried = Subset(data.train, pool[: int(cfg.method.queries)])
        votes = torch.zeros(len(queried), data.num_classes, device=device)
        for i, part in enumerate(parts):
            # the member key carries the split, so a cached teacher never saw the pool
            member = f"{i}/{len(parts)}, pool {cfg.method.pool_fraction:g}"
            teacher, _ = load_or_train_teacher(cfg, data, device, member=member, subset=part)
            with torch.no_grad():
                predictions = torch.cat([teacher(x.to(device)).argmax(dim=1) for x, _ in DataLoader(queried, batch_size=512)])
            votes[torch.arange(len(queried)), predictions] += 1
        labels = noisy_argmax(votes, cfg, ctx.rng)
        ctx.ledger.record(aggregator_release(cfg))
        student, final_loss = train_student(ctx, RelabelledSplit(queried, labels.cpu()))
        consensus = float((labels == votes.argmax(dim=1)).float().mean())
        return RunResult(student=student, ledger=ctx.ledger,
                         metrics={"final_student_loss": final_loss, "aggregate_agreement": consensus})
