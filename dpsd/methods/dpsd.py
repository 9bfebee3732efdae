"""DPSD: differentially private synthetic distillation (Alg. 1 of dpsd-model-transcription.txt).

Each iteration: (1) the generator turns latent vectors into a batch of synthetic samples; (2) the
teacher annotates them through a private mechanism — data-sensitive (top-k, normalised,
Gaussian-noised output gradients, Eq. (2)-(3)) or label-sensitive (top-k randomized response with
the student as prior, Eq. (4)-(5)); (3) the student learns from the noisy annotations (Eq. (7));
(4) the generator and its latents learn with the student as discriminator (L_s + L_g, Eq. (8)).
``method.discriminator=teacher`` gives DPSD-T (§IV-F.3), whose generator is not covered by DP.
Readings where the paper is ambiguous are config switches; see ``conf/method/dpsd.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

import torch
from omegaconf import MISSING, DictConfig
from torch import Tensor

from dpsd import losses
from dpsd.data import DataInfo
from dpsd.distill.annotators import LABEL_NOTE, PrivateAnnotator, output_gradient_release
from dpsd.distill.builders import build_student_and_generator, make_optimizer
from dpsd.distill.generator_losses import GeneratorLossConfig, generator_loss, student_loss_for_generator
from dpsd.distill.survival import SURVIVAL, survival_metrics
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, Optimizer, RunContext, RunResult, Trainer, register_method
from dpsd.models import GaussianNoise, generator_trainable
from dpsd.privacy import claims
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import PrivacyEvent, RandomizedResponseRelease, UnprotectedRelease

Outputs = Enum("Outputs", "logits probabilities")
OutputStepScale = Enum("OutputStepScale", "paper inverse_bound")  # inverse_bound: a labelled repair
DistillationLoss = Enum("DistillationLoss", " ".join(losses.DISTILLATION_LOSSES))
# trainable: one batch Z trained with the generator (Alg. 1 lines 1, 6) | resample: fresh z each iteration, untrained
# (§III-B.1) | resample_trained: fresh z each iteration that the generator's step also updates within it (§III-B.1's
# b vectors "involved for updating", §III-B's last paragraph "the generator as well as its inputs")
Latents = Enum("Latents", "trainable resample resample_trained")
TRAINED_LATENTS = ("trainable", "resample_trained")
Discriminator = Enum("Discriminator", "student teacher")
UpdateOrder = Enum("UpdateOrder", "student_first generator_first")


@dataclass
class DPSDConfig(MethodConfig):
    """``conf/method/dpsd.yaml`` (its comments say what each setting is)."""

    iterations: int = MISSING
    batch_size: int = MISSING
    steps_per_iteration: int = MISSING
    optimizer: Optimizer = MISSING
    student_lr: float = MISSING
    generator_lr: float = MISSING
    output_step: float = MISSING
    output_step_scale: OutputStepScale = MISSING
    warm_start_steps: int = MISSING
    student_steps: int = MISSING
    outputs: Outputs = MISSING
    distillation_loss: DistillationLoss = MISSING
    dkd_lambda: float = MISSING
    dkd_temperature: float = MISSING
    latents: Latents = MISSING
    discriminator: Discriminator = MISSING
    update_order: UpdateOrder = MISSING
    generator_loss: GeneratorLossConfig = field(default_factory=GeneratorLossConfig)


def check_dpsd_config(cfg: DictConfig) -> None:
    """DPSD's rules beyond types (one line each), shared by the methods built on its loop."""
    if not float(cfg.method.dkd_temperature) > 0:
        raise ConfigError(f"method.dkd_temperature must be > 0 (DKD's T), got {cfg.method.dkd_temperature}")


def annotated_batches(cfg: DictConfig, steps: int) -> int:
    """Batches the teacher annotates in ``steps`` steps: one a step (Alg. 1 line 4), two a step that
    updates the generator first (``method.update_order=generator_first``, §III-B's last paragraph: the
    student then learns on data sampled anew from the trained inputs, which the teacher annotates again)."""
    if cfg.method.update_order != "generator_first" or not generator_trainable(cfg):
        return steps
    return steps + max(0, steps - int(cfg.method.warm_start_steps))


def update_order_note(cfg: DictConfig, ledger: Ledger) -> None:
    """Marks ``method.update_order=generator_first``: the rigorous ledger counts its second annotation of
    every iteration; the paper's formula (the claim) keeps its T iterations."""
    if cfg.method.update_order == "generator_first" and generator_trainable(cfg):
        ledger.notes.append(
            "method.update_order=generator_first (§III-B, last paragraph): each iteration updates the generator "
            "and its inputs first, then the student on samples drawn anew from them, which the teacher annotates "
            "again; eps_rigorous counts both annotations, eps_claimed keeps the paper's T iterations")


def dpsd_releases(cfg: DictConfig, info: DataInfo, iterations: int) -> list[PrivacyEvent]:
    """What ``iterations`` iterations of Alg. 1 release about the private data.

    Rigorous view: a teacher is an arbitrary function of its private data, so one changed record
    may change every answer; each of the b answers per iteration is one mechanism release.
    """
    privacy, batch = cfg.privacy, int(cfg.method.batch_size)
    answered = annotated_batches(cfg, iterations)
    releases: list[PrivacyEvent] = []
    if privacy.mode == "label" and privacy.rr_domain == "all":
        releases.append(UnprotectedRelease(
            count=answered * batch,
            # An answer outside the student's top-k happens only when the teacher's class is
            # inside it, which an answer for a class outside the top-k never produces.
            note="teacher label of each synthetic sample, literal Eq. (5) (rr_domain=all): "
                 "an answer outside the student's top-k has an unbounded privacy loss",
        ))
    elif privacy.mode == "label" and privacy.rr_prior == "rr_with_prior":
        # k varies per answer (chosen from the student prior alone); binary RR_eps dominates k-ary
        # RR_eps over a prior-chosen set for every k >= 2 (see dp_dfd.label_release), and k = 1 leaks nothing
        releases.append(RandomizedResponseRelease(
            epsilon=float(privacy.query_epsilon), num_buckets=2, count=answered * batch,
            note="teacher label of each synthetic sample, RRWithPrior (Ghazi et al. 2021 Alg. 2; variant), "
                 "accounted as binary RR_eps, which dominates it for every per-sample k",
        ))
    elif privacy.mode == "label":
        releases.append(RandomizedResponseRelease(
            epsilon=float(privacy.query_epsilon), num_buckets=int(privacy.k), count=answered * batch, note=LABEL_NOTE,
        ))
    elif privacy.mode == "data":
        releases.append(output_gradient_release(cfg, answered))
    if cfg.method.discriminator == "teacher" and generator_trainable(cfg):  # no update while warming up
        releases.append(dpsd_t_generator_release(max(0, iterations - int(cfg.method.warm_start_steps))))
    return releases


def dpsd_t_generator_release(iterations: int) -> UnprotectedRelease:
    """DPSD-T (§IV-F.3): ``iterations`` generator updates computed from the teacher's raw outputs."""
    return UnprotectedRelease(
        count=iterations,
        note="DPSD-T generator update from the teacher's raw outputs: the generator, its "
             "samples and hence the student are not covered by any guarantee",
    )


def plan_dpsd_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
    """The whole run's releases (b * T teacher answers), the paper's claim and the caveats."""
    privacy, method = cfg.privacy, cfg.method
    ledger = Ledger()
    for release in dpsd_releases(cfg, info, DPSD.total_steps(cfg)):
        ledger.record(release)
    steps_note(cfg, ledger)
    update_order_note(cfg, ledger)
    output_step_note(cfg, ledger)
    if privacy.mode == "label" and privacy.rr_prior == "rr_with_prior":
        ledger.claim = claims.rr_with_prior_label_dp(float(privacy.query_epsilon))
        ledger.notes.append("privacy.rr_prior=rr_with_prior: RRWithPrior (Ghazi et al. 2021) replaces Eq. (5)'s "
                            "top-k RR; a labelled variant, not the paper's method")
    elif privacy.mode == "label":
        ledger.claim = claims.dpsd_theorem2(float(privacy.query_epsilon))
        if privacy.rr_domain == "all":
            ledger.notes.append(
                "rr_domain=all: when the teacher's class is outside the student's top-k the answer "
                "is confined to the top-k, otherwise it may fall anywhere, so an answer outside the "
                "top-k reveals the class is inside it; the per-query eps-DP of Theorem 2 does not hold"
            )
    elif privacy.mode == "data":
        ledger.claim = claims.dpsd_theorem1(
            beta=float(privacy.beta), num_classes=info.num_classes, batch_size=int(method.batch_size),
            iterations=int(method.iterations), sigma=float(privacy.sigma), delta=float(privacy.delta),
        )
    if method.discriminator == "teacher" and generator_trainable(cfg):
        ledger.notes.append(
            "DPSD-T (§IV-F.3): the generator learns from the teacher's raw outputs, so it carries no "
            "DP guarantee; the synthetic samples the student learns from come from it, so the "
            "rigorous ledger covers neither (eps_rigorous = inf); the claim is the paper's, for the labels"
        )
    return ledger


def output_step_note(cfg: DictConfig, ledger: Ledger) -> None:
    """Marks the repair ``method.output_step_scale=inverse_bound`` in the ledger:
    post-processing of the same release, so both ledgers are unchanged."""
    if cfg.method.output_step_scale == "inverse_bound" and cfg.privacy.mode == "data":
        ledger.notes.append("method.output_step_scale=inverse_bound: Eq. (3)'s step taken as gamma_s / beta on the "
                            "released gradient (post-processing, same ledgers); a labelled repair, not the paper's method")


def steps_note(cfg: DictConfig, ledger: Ledger) -> None:
    """With ``method.steps_per_iteration`` s > 1 the rigorous ledger counts all T * s steps' queries,
    while the paper's formula (the claim) keeps its T iterations."""
    steps, warm = int(cfg.method.steps_per_iteration), int(cfg.method.warm_start_steps)
    if not 0 <= warm <= int(cfg.method.iterations) * steps:
        raise ConfigError(f"method.warm_start_steps must lie in [0, {int(cfg.method.iterations) * steps}] "
                          f"(the run's steps), got {warm}")
    if warm:
        ledger.notes.append(
            f"method.warm_start_steps={warm}: the first {warm} steps annotate fresh N(0, 1) images instead of "
            "generator samples, through the same mechanism (counted like every step), and leave the generator "
            "as it is; a labelled repair, not the paper's method")
    if steps > 1:
        ledger.notes.append(
            f"method.steps_per_iteration={steps}: an iteration is {steps} steps, each querying the teacher; "
            f"eps_rigorous counts every query of the {int(cfg.method.iterations) * steps} steps, eps_claimed "
            f"keeps the paper's formula at T = {int(cfg.method.iterations)} iterations"
        )


class DPSDTrainer(Trainer):
    """The state of one DPSD run (student, generator, latents, optimisers) and its Alg. 1 iteration."""

    def __init__(self, ctx: RunContext, query: Callable[[Tensor, Tensor], Tensor] | None = None) -> None:
        """``query(samples, student_logits) -> targets`` replaces Alg. 1 line 4's teacher query
        (FedDPSD, Alg. 2 lines 6-14: the average of the clients' privatised answers)."""
        cfg, info, device, rng = ctx.cfg, ctx.info, ctx.device, ctx.rng
        method = cfg.method
        self.ctx, self.cfg, self.info, self.rng = ctx, cfg, info, rng
        self.teacher = ctx.teachers[0].eval()
        self.student, self.generator = build_student_and_generator(cfg, info, device)
        # gaussian_noise has no parameters and ignores its latents: no generator update at all
        self.trains_generator = generator_trainable(cfg)
        self.latents = torch.randn(
            int(method.batch_size), int(cfg.model.generator.latent_dim), generator=rng, device=device
        ).requires_grad_(method.latents in TRAINED_LATENTS and self.trains_generator)
        self.student_opt = make_optimizer(method.optimizer, self.student.parameters(), method.student_lr)
        if self.trains_generator:
            generator_params = list(self.generator.parameters()) + ([self.latents] if self.latents.requires_grad else [])
            self.generator_opt = make_optimizer(method.optimizer, generator_params, method.generator_lr)
        self.queries = 0  # teacher queries made (samples annotated)
        # method.warm_start_steps (a labelled repair): the first steps' samples are N(0, 1) images (R2's)
        self.warm_start = GaussianNoise(info.channels, info.image_size, int(cfg.seed))
        self.steps_done = 0
        self.annotate = PrivateAnnotator(cfg, info.num_classes, rng, ctx.ledger)
        self.query = query or self.query_teacher
        self.discriminator = self.teacher if method.discriminator == "teacher" else self.student
        self.survival_seen = 0  # annotations whose top-k survival share a step has reported

    def step(self) -> dict[str, float]:
        """One iteration of Alg. 1 (lines 3-6); returns its losses and, where Eq. (5) answered, the share of this
        step's answers in which the teacher's class survived the top-k rule (``topk_survival``, the progress log's).
        ``method.update_order=generator_first`` (§III-B, last paragraph) updates the generator and its inputs first,
        then the student on samples drawn anew from the trained inputs (annotated again)."""
        method = self.cfg.method
        if method.latents in ("resample", "resample_trained"):
            self.draw_latents()
        # (1) synthetic data. The generator does not change before line 6 of Alg. 1 uses the same x
        # again, so one forward pass (with its graph) serves both.
        warming = self.steps_done < int(method.warm_start_steps)
        samples = (self.warm_start if warming else self.generator)(self.latents)
        self.steps_done += 1
        targets = self.annotated(samples)
        updates_generator = self.trains_generator and not warming
        losses_now: dict[str, Tensor] = {}
        if updates_generator and method.update_order == "generator_first":
            losses_now["generator_loss"] = self.update_generator(samples, targets)
            samples = self.generator(self.latents).detach()  # "sample data with the trained inputs"
            targets = self.annotated(samples)
        losses_now["student_loss"] = self.update_student(samples, targets)
        if updates_generator and method.update_order == "student_first":
            losses_now["generator_loss"] = self.update_generator(samples, targets)  # on the updated student
        shares = self.survival_shares(self.survival_seen)
        if shares:
            losses_now[SURVIVAL] = torch.stack(shares).mean()
            self.survival_seen += len(shares)
        return losses_now

    def survival_shares(self, start: int = 0) -> list[Tensor]:
        """Each Eq. (5) annotation's top-k survival share from the ``start``-th on (:mod:`dpsd.distill.survival`)."""
        return self.annotate.survival[start:]

    def draw_latents(self) -> None:
        """Fresh z for this iteration (§III-B.1: "samples b Gaussian noise vectors"). Under ``resample_trained``
        the vectors are redrawn in place, so the generator's optimiser updates them within the iteration, its
        moments for them started afresh (a previous iteration's vectors say nothing of these)."""
        fresh = torch.randn(self.latents.shape, generator=self.rng, device=self.latents.device)
        if not self.latents.requires_grad:
            self.latents = fresh
            return
        with torch.no_grad():
            self.latents.copy_(fresh)
        self.generator_opt.state.pop(self.latents, None)

    def annotated(self, samples: Tensor) -> Tensor:
        """(2) Alg. 1 line 4, private annotation: the only place the teacher is queried; the mechanism's
        event is recorded by the annotator that ran it."""
        with torch.no_grad():
            targets = self.query(samples, self.student(samples))
        self.queries += len(samples)
        return targets

    def update_student(self, samples: Tensor, targets: Tensor) -> Tensor:
        """(3) Alg. 1 line 5: ``method.student_steps`` student updates with Eq. (7) on one annotated batch."""
        for _ in range(int(self.cfg.method.student_steps)):
            student_loss = losses.soft_cross_entropy(self.student(samples.detach()), targets).mean()
            self.student_opt.zero_grad(set_to_none=True)
            student_loss.backward()
            self.student_opt.step()
        return student_loss.detach()

    def update_generator(self, samples: Tensor, targets: Tensor) -> Tensor:
        """(4) Alg. 1 line 6: the generator and its latents descend L_s + L_g (Eq. (8)) through ``samples``."""
        cfg = self.cfg
        gen_loss = generator_loss(cfg, self.discriminator, samples)
        gen_loss = gen_loss + student_loss_for_generator(cfg, self.student, samples, targets)
        self.generator_opt.zero_grad(set_to_none=True)
        if self.discriminator is self.teacher:
            self.ctx.ledger.record(dpsd_t_generator_release(1))  # the teacher's raw outputs, unprotected
        if gen_loss.requires_grad:  # every term switched off: the generator stays as it is
            gen_loss.backward()
            self.generator_opt.step()
        return gen_loss.detach()

    def query_teacher(self, samples: Tensor, student_logits: Tensor) -> Tensor:
        """Alg. 1 line 4: the teacher's answers for ``samples`` through the private mechanism."""
        return self.annotate(self.teacher(samples), student_logits)

    def sample_grid(self) -> Tensor:
        with torch.no_grad():
            return self.generator(self.latents[:64].detach()).cpu()


@register_method("dpsd")
@register_method("dpsd_t")
class DPSD(Method):
    """Alg. 1; ``method=dpsd_t`` is the same algorithm with the teacher as discriminator."""

    config = DPSDConfig
    check_config = staticmethod(check_dpsd_config)
    plan_ledger = staticmethod(plan_dpsd_ledger)
    annotator_class = PrivateAnnotator
    # Eq. (4)-(5) with eps = inf keeps the truth inside the student's top-k; Eq. (3) with sigma = 0
    noise_off = {"privacy.query_epsilon": math.inf, "privacy.sigma": 0.0}

    def make_trainer(self, ctx: RunContext) -> DPSDTrainer:
        return DPSDTrainer(ctx)

    def result(self, ctx: RunContext, trainer: Trainer, metrics: dict[str, float]) -> RunResult:
        """The base result, with the top-k survival shares over the run and its tenths where Eq. (5) answered (the
        annotator's: Alg. 1's, or DPDFD's direct training's, whose trainer has no generator loop)."""
        result = super().result(ctx, trainer, metrics)
        result.metrics.update(survival_metrics(trainer.annotate.survival))
        return result
