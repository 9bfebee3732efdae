"""``kd_data``: the ladder's rung R1 (DESIGN.md "The ladder") — knowledge distillation on
the private data itself.

The same student as the data-free methods learns the teacher's soft outputs (Hinton et al. 2015, at
temperature 1: the cross-entropy of DPSD Eq. (7) against softmax(teacher(x))) on batches of the
private training split, for the same budget: ``method.iterations`` x ``method.steps_per_iteration``
steps of ``method.batch_size`` images. It is what this student can learn from this teacher at this
budget when the inputs are real: the capacity bound every data-free method is read against.
Non-private (the private images are the inputs): eps = inf on both ledgers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig

from dpsd import losses
from dpsd.errors import ConfigError
from dpsd.data import DataInfo
from dpsd.methods.base import Method, MethodConfig, Optimizer, RunContext, Trainer, register_method
from dpsd.methods.dpdfd import private_batches
from dpsd.distill.builders import make_optimizer
from dpsd.models import build_classifier, xavier_init_
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import UnprotectedRelease


def kd_release(cfg: DictConfig, steps: int) -> UnprotectedRelease:
    """``steps`` batches of private images, each answered by the teacher and learned from as they are."""
    return UnprotectedRelease(
        count=steps * int(cfg.method.batch_size),
        note="kd_data (ladder R1): the student learns the teacher's soft outputs on private training images, "
             "no mechanism",
    )


class KDDataTrainer(Trainer):
    """One step: a private batch, the teacher's softmax on it, one student update (Eq. (7) loss)."""

    def __init__(self, ctx: RunContext) -> None:
        cfg, info = ctx.cfg, ctx.info
        if len(ctx.data.train) < int(cfg.method.batch_size):
            raise ConfigError(f"method.batch_size={cfg.method.batch_size} exceeds the private split ({len(ctx.data.train)} records)")
        self.ctx, self.cfg = ctx, cfg
        self.teacher = ctx.teachers[0].eval()
        self.student = xavier_init_(
            build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
        ).to(ctx.device)
        self.optimizer = make_optimizer(cfg.method.optimizer, self.student.parameters(), cfg.method.student_lr)
        self.batches = private_batches(ctx)
        self.queries = 0

    def step(self) -> dict[str, float]:
        x, _ = next(self.batches)  # the private label is not used: the teacher's answer is the target
        x = x.to(self.ctx.device)
        with torch.no_grad():
            targets = F.softmax(self.teacher(x), dim=1)
        self.queries += len(x)
        self.ctx.ledger.record(kd_release(self.cfg, 1))
        loss = losses.soft_cross_entropy(self.student(x), targets).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"student_loss": loss.detach()}


@dataclass
class KDDataConfig(MethodConfig):
    """``conf/method/kd_data.yaml``."""

    iterations: int = MISSING
    batch_size: int = MISSING
    steps_per_iteration: int = MISSING
    optimizer: Optimizer = MISSING
    student_lr: float = MISSING


@register_method("kd_data")
class KDData(Method):
    """R1: the student distilled from the teacher on the private training split (non-private)."""

    config = KDDataConfig

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(notes=["ladder R1 (kd_data): the student distilled from the teacher on the private "
                               "training split; non-private reference (eps = inf)"])
        ledger.record(kd_release(cfg, KDData.total_steps(cfg)))
        return ledger

    def make_trainer(self, ctx: RunContext) -> KDDataTrainer:
        return KDDataTrainer(ctx)
