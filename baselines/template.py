"""``template``: the smallest complete adapter; copy this file to start a baseline (baselines/README.md).

What it runs is a real, weak baseline: ``method.queries`` random images (N(0, 1) pixels, no private
data) are labelled by the full-data teacher, each answer passed through k-ary randomized response
with ``method.query_epsilon`` (DPSD Eq. (4)), and the student is trained on them. Every answer
depends on the whole private split through the teacher, so the releases compose over all queries:
the claim is basic composition, ``queries * query_epsilon``-DP (Dwork & Roth 2014, Thm. 3.16), and
the rigorous ledger accounts the same ``queries`` randomized-response answers (tighter).

The four things every adapter has: ``plan_ledger`` (the releases the config predicts), ``fit``
recording the event each mechanism call returns as it makes it (the contract test checks that the
realised events equal the planned ones), and (optionally) ``noise_parameter`` so
``privacy.calibrate`` can solve for a target epsilon.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING, DictConfig
from torch.utils.data import TensorDataset

from baselines.training import train_student
from dpsd.data import DataInfo
from dpsd.methods.base import Method, MethodConfig, RunContext, RunResult, register_method
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import RandomizedResponseRelease


def answers_release(cfg: DictConfig, info: DataInfo) -> RandomizedResponseRelease:
    """The one kind of private release: ``queries`` randomized-response answers of the teacher."""
    return RandomizedResponseRelease(
        epsilon=float(cfg.method.query_epsilon), num_buckets=info.num_classes, count=int(cfg.method.queries),
        note="template: teacher labels of random images through k-ary randomized response",
    )


@dataclass
class TemplateConfig(MethodConfig):
    """``conf/method/template.yaml``: one field per setting (the YAML holds the values)."""

    batch_size: int = MISSING
    queries: int = MISSING
    query_epsilon: float = MISSING
    epochs: int = MISSING
    lr: float = MISSING


@register_method("template")
class Template(Method):
    """Teacher labels of random images, privatised by randomized response; student trained on them."""

    config = TemplateConfig

    @staticmethod
    def noise_parameter(cfg: DictConfig) -> tuple[str, float, float]:
        return "method.query_epsilon", 1e-6, 1e3  # the key privacy.calibrate solves, its search range

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        epsilon = int(cfg.method.queries) * float(cfg.method.query_epsilon)
        ledger = Ledger(claim=Claim(epsilon, 0.0, "eps-DP", "basic composition (Dwork & Roth 2014, Thm. 3.16)"),
                        notes=["template adapter: random inputs, so the student sees no private image"])
        ledger.record(answers_release(cfg, info))
        return ledger

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return 0  # progress is reported per student batch; the count is not needed up front

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, info, device = ctx.cfg, ctx.info, ctx.device
        shape = (int(cfg.method.queries), info.channels, info.image_size, info.image_size)
        images = torch.randn(shape, generator=ctx.rng, device=device)
        with torch.no_grad():
            truth = ctx.teachers[0](images).argmax(dim=1)
        # a mechanism returns its answers and the event it realised: record that event
        labels, event = mechanisms.randomized_response(truth, info.num_classes, float(cfg.method.query_epsilon), ctx.rng)
        ctx.ledger.record(event)
        student, final_loss = train_student(ctx, TensorDataset(images.cpu(), labels.cpu()))
        return RunResult(student=student, ledger=ctx.ledger,
                         metrics={"final_student_loss": final_loss, "label_agreement": float((labels == truth).float().mean())})
