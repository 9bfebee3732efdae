"""``template``: the smallest complete adapter; copy this file to start a baseline (baselines/README.md).

What it runs is a real, weak baseline: ``method.queries`` random images (N(0, 1) pixels, no private
data) are labelled by the full-data teacher, each answer passed through k-ary randomized response
with ``privacy.query_epsilon`` (DPSD Eq. (4); ``privacy=label``: the target ``privacy.epsilon``
itself, or what ``privacy.calibrate`` solves so that a ledger meets it), and the student is trained
on them. Every answer depends on the whole private split through the teacher, so each row is its
own release (``release="rows"``) and they compose over all queries: the claim is basic composition,
``queries * query_epsilon``-DP (Dwork & Roth 2014, Thm. 3.16), and the rigorous ledger accounts the
same ``queries`` randomized-response answers (tighter). To make ``privacy.epsilon`` the whole run's
epsilon, sweep it with ``privacy.calibrate=claimed`` (or ``rigorous``).

A mechanism applied to the private records' own labels is the other granularity: each record's label
answered once, records disjoint, ``release="once"`` (one event, parallel composition), and a student
trained on the private images records :class:`~dpsd.privacy.events.PrivateImagesRelease`, which puts
the ledger under the label relation (``baselines/lp1st.py``; baselines/README.md walks through both).

The four things every adapter has: ``plan_ledger`` (the releases the config predicts), ``fit``
recording the event each mechanism call returns as it makes it (the contract test checks that the
realised events equal the planned ones, and the run stops one that read the private images with no
release covering them), and (optionally) ``noise_parameter`` so ``privacy.calibrate`` can solve for a
target epsilon (the default, used here, is the privacy mode's ``privacy.query_epsilon``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING, DictConfig
from torch.utils.data import TensorDataset

from baselines.training import train_student
from dpsd.data import DataInfo
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, RunContext, RunResult, register_method
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import RandomizedResponseRelease


def answer_epsilon(cfg: DictConfig) -> float:
    """Each answer's epsilon: ``privacy.query_epsilon`` (``privacy=label``; calibrated from ``privacy.epsilon``)."""
    return float(cfg.privacy.query_epsilon)


def answers_release(cfg: DictConfig, info: DataInfo) -> RandomizedResponseRelease:
    """The one kind of private release: ``queries`` randomized-response answers of the teacher."""
    return RandomizedResponseRelease(
        epsilon=answer_epsilon(cfg), num_buckets=info.num_classes, count=int(cfg.method.queries),
        note="template: teacher labels of random images through k-ary randomized response",
    )


@dataclass
class TemplateConfig(MethodConfig):
    """``conf/method/template.yaml``: one field per setting (the YAML holds the values)."""

    batch_size: int = MISSING
    queries: int = MISSING
    epochs: int = MISSING
    lr: float = MISSING


@register_method("template")
class Template(Method):
    """Teacher labels of random images, privatised by randomized response; student trained on them."""

    config = TemplateConfig

    @staticmethod
    def check_config(cfg: DictConfig) -> None:
        if cfg.privacy.mode != "label":
            raise ConfigError(f"method template needs privacy=label (its privacy.query_epsilon), got privacy={cfg.privacy.mode}")

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        epsilon = int(cfg.method.queries) * answer_epsilon(cfg)
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
        # a mechanism returns its answers and the event it realised: record that event. Granularity:
        # every answer depends on every record (through the teacher), so each row is a release
        labels, event = mechanisms.randomized_response(truth, info.num_classes, answer_epsilon(cfg), ctx.rng,
                                                       release="rows")
        ctx.ledger.record(event)
        student, final_loss = train_student(ctx, TensorDataset(images.cpu(), labels.cpu()))
        return RunResult(student=student, ledger=ctx.ledger,
                         metrics={"final_student_loss": final_loss, "label_agreement": float((labels == truth).float().mean())})
