"""DPDFD: differentially private data-free distillation (Liu et al., IJCAI 2023,
../shared/papers/dpdfd-ijcai2023.md).

Alg. 1 is DPSD's data-sensitive iteration with DPDFD's losses, so it runs on
:class:`~dpsd.methods.dpsd.DPSDTrainer`: (1) fresh latents z give a synthetic batch (lines 2-3);
(2) L_T, DKD (§4.2, "same as [Zhao et al., 2022]") against the teacher's softmax (``method.teacher_target=soft``,
the readings search's choice, results/readings.md) or its argmax label (§4.2's words, ``argmax``), is
differentiated w.r.t. the student's outputs, each row normalised to norm C (line 7) and noised with
N(0, sigma^2 C^2) (line 9): the mechanism A_{C,sigma} of Eq. (4); (3) the student descends the
cross-entropy to y_s = Phi_s - gamma * g~ (lines 10-12, Eq. (3)); (4) the generator descends
L_S + L_G (Eq. (5), alpha = beta = 1) with the student as fixed discriminator (lines 13-14).

C is ``privacy.beta`` (DPSD's normalisation bound, the same quantity) and sigma ``privacy.sigma``;
``privacy=data`` is required. Switches (defaults first):

* ``privacy.bound``: ``normalize`` (Eq. (4)) | ``clip`` (Fig. 2's "-C" ablation);
* ``privacy.noise_over``: ``sample`` (§4.4's per-sample g~_i: each row its own noise; default, the
  reading under which y_s_i is a per-sample output as Eq. (3) needs) | ``batch`` (Alg. 1 line 9 /
  Eq. (4) as printed: one noisy batch mean (1/B)(sum_i g_i + N), the same step for every sample);
* ``method.teachers``: n > 1 teachers on disjoint partitions, gradients averaged before the noise
  (§4.4, multi-model ensemble);
* ``method.train_on``: ``synthetic`` (Alg. 1) | ``private`` (§4.4 "Direct Training on Private Data",
  Table 4: the mechanism on a classifier trained on the private split, no generator;
  ``method=dpdfd_direct``);
* ``method.generator_loss.{onehot,entropy,activation}``: Eq. (5)'s three terms, 0 switches one off
  (Table 6).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum
from typing import Iterator

import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor, nn
from torch.utils.data import DataLoader

from dpsd import losses
from dpsd.data import DataInfo
from dpsd.distill.annotators import BOUNDS, NOISE_OVER, PrivateAnnotator, gradient_sensitivity, output_gradient_release
from dpsd.distill.builders import make_optimizer
from dpsd.errors import ConfigError
from dpsd.methods.base import RunContext, Trainer, register_method
from dpsd.methods.dpsd import (DPSD, DPSDConfig, DPSDTrainer, annotated_batches, check_dpsd_config, output_step_note,
                               steps_note, update_order_note)
from dpsd.models import build_classifier, xavier_init_
from dpsd.privacy import claims
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import GaussianRelease, PrivacyEvent, UnprotectedRelease
from dpsd.ensembles import load_or_train_members
from dpsd.teachers import disjoint_partition

TrainOn = Enum("TrainOn", "synthetic private")
TeacherTarget = Enum("TeacherTarget", "argmax soft")
Theorem3N = Enum("Theorem3N", "teachers classes")


@dataclass
class DPDFDConfig(DPSDConfig):
    """``conf/method/dpdfd.yaml``: DPSD's settings and DPDFD's own."""

    train_on: TrainOn = MISSING
    teachers: int = MISSING
    teacher_target: TeacherTarget = MISSING
    theorem3_n: Theorem3N = MISSING


def check_config(cfg: DictConfig) -> None:
    """DPDFD's own settings, checked before anything runs (one line naming the accepted values)."""
    check_dpsd_config(cfg)
    method = cfg.method
    if cfg.privacy.mode == "label":
        raise ConfigError(f"method={method.name} privatises output gradients: use privacy=data (or privacy=none), got privacy=label")
    for key, accepted in (("bound", BOUNDS), ("noise_over", NOISE_OVER)):
        if cfg.privacy[key] not in accepted:
            raise ConfigError(f"privacy.{key} must be one of {', '.join(accepted)}, got {cfg.privacy[key]!r}")
    if not int(method.teachers) >= 1:
        raise ConfigError(f"method.teachers must be >= 1, got {method.teachers}")
    if method.train_on == "private" and (int(method.teachers) != 1 or method.teacher_target != "argmax"):
        raise ConfigError("method.train_on=private trains on the private labels: needs method.teachers=1 and "
                          "method.teacher_target=argmax")


def direct_releases(cfg: DictConfig, iterations: int) -> list[PrivacyEvent]:
    """What ``iterations`` steps of direct training (§4.4, Table 4) release.

    W.r.t. one private record (x, y): its own output-gradient row passes A_{C,sigma} whenever its
    batch comes up; the rows of a batch are different records, so they compose in parallel: one
    Gaussian release per step of sensitivity :func:`gradient_sensitivity` (``disjoint_rows``) and
    noise sigma C (the noisy batch sum, noise_over=batch, the same). It is counted once per step
    (an upper bound that needs no dataset size: a record is in one batch per pass). But the
    student's update differentiates Phi(x) at the private x itself (the Jacobian, and Phi(x)
    inside the cross-entropy), which no noise covers: every step is also an unprotected release.
    """
    privacy = cfg.privacy
    if privacy.mode != "data":  # no mechanism: the student's training on the private inputs is all there is
        return direct_unprotected_release(iterations)
    beta, batch = float(privacy.beta), int(cfg.method.batch_size)
    return [
        GaussianRelease(
            l2_sensitivity=gradient_sensitivity(cfg, 1, batch, disjoint_rows=True),
            noise_std=float(privacy.sigma) * beta, count=iterations, answers=batch,
            note=f"{privacy.bound}d output gradient of a private record's CE loss + N(0, sigma^2 C^2), "
                 "counted once per step (label-DP view)",
        ),
        *direct_unprotected_release(iterations),
    ]


def direct_unprotected_release(iterations: int) -> list[UnprotectedRelease]:
    """Direct training's student update at the private inputs, which no noise covers."""
    return [UnprotectedRelease(
        count=iterations,
        note="direct training (§4.4): the student's update uses its Jacobian and outputs at the private "
             "inputs, which the output-gradient noise does not cover; at most the labels are protected",
    )]


def dpdfd_releases(cfg: DictConfig, info: DataInfo, iterations: int) -> list[PrivacyEvent]:
    """What ``iterations`` iterations of Alg. 1 release (``output_gradient_release`` with n teachers)."""
    if cfg.privacy.mode != "data":
        return []
    return [output_gradient_release(cfg, iterations, teachers=int(cfg.method.teachers))]


def plan_dpdfd_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
    """The whole run's releases, Theorem 3's claim and the caveats."""
    method, privacy = cfg.method, cfg.privacy
    ledger = Ledger()
    iterations, steps = int(method.iterations), DPDFD.total_steps(cfg)
    if method.train_on == "private":
        events = direct_releases(cfg, steps)
    else:
        events = dpdfd_releases(cfg, info, annotated_batches(cfg, steps))
    for event in events:
        ledger.record(event)
    steps_note(cfg, ledger)
    update_order_note(cfg, ledger)
    output_step_note(cfg, ledger)
    if privacy.mode != "data":
        return ledger
    n = int(method.teachers) if method.theorem3_n == "teachers" else info.num_classes
    ledger.claim = claims.dpdfd_theorem3(
        norm_bound=float(privacy.beta), teachers=n, batch_size=int(method.batch_size),
        iterations=iterations, sigma=float(privacy.sigma), delta=float(privacy.delta),
    )
    ledger.notes.append(
        "DPDFD Theorem 3 as published keeps C^2 in the numerator although the noise std is sigma*C (a "
        "standard accountant cancels C), counts the B*T answers as if one changed record moved each by "
        "the normalised bound only, and leaves n undefined (read here: method.theorem3_n="
        f"{method.theorem3_n}, n = {n})"
    )
    if privacy.noise_over == "batch":
        ledger.notes.append("noise_over=batch (Alg. 1 line 9): every sample's target moves by the same noisy "
                            "batch-mean gradient; Theorem 3 is stated for the same B*T count either way")
    if method.train_on == "private":
        ledger.notes.append(
            "direct training on private data (§4.4, Table 4): the guarantee covers at most the labels; the "
            "inputs reach the model through unnoised Jacobians, so eps_rigorous = inf"
        )
    return ledger


class DPDFDAnnotator(PrivateAnnotator):
    """A_{C,sigma} of Eq. (4) on DPDFD's L_T: no top-k operator, the teacher's targets of ``method.teacher_target``."""

    def __call__(self, teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
        if self.privacy.mode == "none":  # the ladder's R3: no mechanism, the members' mean soft output
            return F.softmax(teacher_logits.reshape(-1, *student_logits.shape), dim=-1).mean(dim=0)
        return super().__call__(teacher_logits, student_logits)

    def teacher_targets(self, teacher_logits: Tensor) -> Tensor:
        """§4.2: "we treat argmax(phi_t(D)) as the target labels" (``method.teacher_target=argmax``)."""
        if self.method.teacher_target == "soft":
            return F.softmax(teacher_logits, dim=-1)
        return F.one_hot(teacher_logits.argmax(dim=-1), teacher_logits.shape[-1]).to(teacher_logits.dtype)

    def output_topk(self) -> int:
        return self.num_classes  # Eq. (4) normalises the whole output gradient: M_k is the identity


class TeacherEnsemble(nn.Module):
    """n teachers answering together: logits stacked to (n, b, c) (§4.4)."""

    def __init__(self, members: list[nn.Module]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, x: Tensor) -> Tensor:
        return torch.stack([member(x) for member in self.members])


def ensemble_members(ctx: RunContext, n: int) -> list[nn.Module]:
    """n teachers on disjoint partitions of the private split (via the teacher cache)."""
    parts, _ = disjoint_partition(len(ctx.data.train), n, 0, int(ctx.cfg.seed))
    return load_or_train_members(ctx.cfg, ctx.data, ctx.device, parts, [f"{i}/{n}, pool 0" for i in range(n)],
                                 ctx.phase_log)


class DPDFDTrainer(DPSDTrainer):
    """Alg. 1: DPSD's iteration with DPDFD's annotator, ledger and (optionally) a teacher ensemble."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.annotate = DPDFDAnnotator(ctx.cfg, ctx.info.num_classes, ctx.rng, ctx.ledger)
        n = int(ctx.cfg.method.teachers)
        if n > 1:
            self.teacher = TeacherEnsemble(ensemble_members(ctx, n))


def private_batches(ctx: RunContext) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless shuffled passes over the private split, full batches only (seeded by ``seed``)."""
    shuffle = torch.Generator().manual_seed(int(ctx.cfg.seed))
    loader = DataLoader(ctx.data.train, batch_size=int(ctx.cfg.method.batch_size), shuffle=True,
                        drop_last=True, generator=shuffle)
    return itertools.chain.from_iterable(itertools.repeat(loader))


class DirectTrainer(Trainer):
    """§4.4 "Direct Training on Private Data" (Table 4): Alg. 1 lines 5-12 on private batches.

    The output gradient of the cross-entropy L(phi(x), y) goes through the same A_{C,sigma} (the
    label plays the teacher's argmax), the model descends the CE to y_s; there is no generator.
    """

    queries = 0  # the labels are the private data's own: no teacher query

    def __init__(self, ctx: RunContext) -> None:
        cfg, info = ctx.cfg, ctx.info
        self.ctx, self.cfg, self.num_classes = ctx, cfg, info.num_classes
        self.student = xavier_init_(
            build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
        ).to(ctx.device)
        self.optimizer = make_optimizer(cfg.method.optimizer, self.student.parameters(), cfg.method.student_lr)
        self.annotate = DPDFDAnnotator(cfg, info.num_classes, ctx.rng, ctx.ledger, disjoint_rows=True)
        if len(ctx.data.train) < int(cfg.method.batch_size):
            raise ConfigError(f"method.batch_size={cfg.method.batch_size} exceeds the private split ({len(ctx.data.train)} records)")
        self.batches = private_batches(ctx)

    def step(self) -> dict[str, float]:
        x, y = next(self.batches)
        x, y = x.to(self.ctx.device), y.to(self.ctx.device)
        logits = self.student(x)
        with torch.no_grad():  # the label as a one-hot score: its argmax is the CE's target class
            targets = self.annotate(F.one_hot(y, self.num_classes).to(logits.dtype), logits)
        for release in direct_unprotected_release(1):  # beside the annotator's Gaussian release in data mode
            self.ctx.ledger.record(release)
        loss = losses.soft_cross_entropy(logits, targets).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"student_loss": loss.detach()}


@register_method("dpdfd")
@register_method("dpdfd_direct")
class DPDFD(DPSD):
    """Alg. 1 (``method=dpdfd``) and direct training on private data (``method=dpdfd_direct``)."""

    config = DPDFDConfig
    check_config = staticmethod(check_config)
    plan_ledger = staticmethod(plan_dpdfd_ledger)
    annotator_class = DPDFDAnnotator

    def make_trainer(self, ctx: RunContext) -> DPDFDTrainer | DirectTrainer:
        if ctx.cfg.method.train_on == "private":
            return DirectTrainer(ctx)
        return DPDFDTrainer(ctx)
