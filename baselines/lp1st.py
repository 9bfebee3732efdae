"""``lp1st``: LP-1ST of Ghazi et al. 2021 ("Deep Learning with Label Differential Privacy",
NeurIPS 2021, Alg. 1 with a uniform prior), a label-DP baseline.

Each private training label goes once through k-ary randomized response over all classes
(RR-with-prior with a uniform prior is plain RR); the student is trained on the private images with
those noisy labels. The images are used as they are (a :class:`PrivateImagesRelease`), so the
releases put the ledger under the label relation: eps_rigorous is the randomized response's epsilon
w.r.t. one changed label, and infinite w.r.t. a replaced record.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING, DictConfig

from baselines.training import RelabelledSplit, train_student
from dpsd.data import DataInfo, sealed_labels
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, RunContext, RunResult, register_method
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import PrivateImagesRelease, RandomizedResponseRelease


def label_epsilon(cfg: DictConfig) -> float:
    """The randomized response's epsilon: ``privacy.query_epsilon`` of ``privacy=label`` (the target
    ``privacy.epsilon`` itself unless ``privacy.calibrate`` solved it)."""
    if cfg.privacy.get("query_epsilon") is None:
        raise ConfigError("method lp1st needs privacy=label (its privacy.query_epsilon sets the randomized response)")
    return float(cfg.privacy.query_epsilon)


def noisy_labels_release(cfg: DictConfig, info: DataInfo) -> RandomizedResponseRelease:
    """Every record's label is released once and records are disjoint, so by parallel composition
    the whole release is as private as one answer: one event, count 1 (not one per record)."""
    return RandomizedResponseRelease(
        epsilon=label_epsilon(cfg), num_buckets=info.num_classes, count=1,
        note="each private label once, k-ary randomized response (parallel composition over records)",
    )


IMAGES = PrivateImagesRelease(note="the student trains on the private images as they are (label-DP covers the labels only)")
"""The other release: the raw images, which put the ledger under the label relation."""


@dataclass
class LP1STConfig(MethodConfig):
    """``conf/method/lp1st.yaml``."""

    batch_size: int = MISSING
    epochs: int = MISSING
    lr: float = MISSING


@register_method("lp1st")
class LP1ST(Method):
    """Randomized response on the labels once, then ordinary training (Ghazi et al. 2021)."""

    config = LP1STConfig

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(
            claim=Claim(label_epsilon(cfg), 0.0, "eps-label-DP", "Ghazi et al. 2021 (LP-1ST)"),
            notes=["label-DP: the private images are used without noise; only the labels are protected"],
        )
        ledger.record(noisy_labels_release(cfg, info))
        ledger.record(IMAGES)
        return ledger

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return 0  # the number of batches depends on the private split's size

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, info = ctx.cfg, ctx.info
        train = ctx.data.train
        # each record's own label, once: the records are disjoint, so the answers compose in parallel
        noisy, event = mechanisms.randomized_response(sealed_labels(train, ctx.device), info.num_classes, label_epsilon(cfg),
                                                      ctx.rng, release="once")
        ctx.ledger.record(event)
        ctx.ledger.record(IMAGES)
        student, final_loss = train_student(ctx, RelabelledSplit(train, noisy.cpu()))
        return RunResult(student=student, ledger=ctx.ledger, metrics={"final_student_loss": final_loss})
