"""DP-DFD: differentially private data-free distillation with selective randomized response.

Alg. 1 of ``../shared/papers/dp-dfd-selective-randomized-response.md`` (Liu et al.):

* line 1 — pre-train a generator with the teacher as a fixed discriminator, Eq. (2): one-hot CE
  + alpha * information entropy + beta * BN-statistics norm (DPSD's :func:`generator_loss` with the
  teacher as discriminator; ``method.generator_loss`` weights, 0 switches a term off, Table III);
* line 2, for each of T stages — (a) generate a synthetic set D^(i); (b) compute y_t (teacher) and
  y_s (the previous student's probabilities) on it; (c) label it *once* with selective randomized
  response R(y_s, y_t, t) (:func:`dpsd.privacy.mechanisms.selective_randomized_response`);
  (d) train the student with the KL loss of Eq. (3) on the labelled set and fine-tune the generator.

``DpDfdTrainer.step()`` is one student minibatch update (plus one generator fine-tuning update)
within a stage; the step that opens a stage generates and labels its set. Readings where the paper
is ambiguous are config switches, see ``conf/method/dp_dfd.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor

from dpsd import losses
from dpsd.data import DataInfo, data_info
from dpsd.distill.builders import build_student_and_generator, make_optimizer
from dpsd.distill.generator_losses import GeneratorLossConfig, generator_loss, student_loss_for_generator
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, Optimizer, RunContext, Trainer, register_method
from dpsd.models import build_classifier, generator_trainable
from dpsd.privacy import claims, mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import PrivacyEvent, RandomizedResponseRelease, UnprotectedRelease

PRIVACY_MODES = ("label", "none")
KeepAnswer = Enum("KeepAnswer", "onehot soft")
FinetuneEq2 = Enum("FinetuneEq2", "teacher off")


@dataclass
class DpDfdConfig(MethodConfig):
    """``conf/method/dp_dfd.yaml`` (its comments say what each setting is)."""

    batch_size: int = MISSING
    stages: int = MISSING
    samples_per_stage: int = MISSING
    student_epochs: int = MISSING
    steps_per_iteration: int = MISSING
    pretrain_iterations: int = MISSING
    optimizer: Optimizer = MISSING
    student_lr: float = MISSING
    generator_lr: float = MISSING
    threshold: Any = MISSING  # "paper" or a number in [0, 1)
    keep_answer: KeepAnswer = MISSING
    finetune_eq2: FinetuneEq2 = MISSING
    generator_loss: GeneratorLossConfig = field(default_factory=GeneratorLossConfig)


def check_config(cfg: DictConfig) -> None:
    """Reject DP-DFD settings no run could honour, with one line naming the accepted values."""
    method = cfg.method
    if cfg.privacy.mode not in PRIVACY_MODES:
        raise ConfigError(f"method dp_dfd needs privacy=label or privacy=none, got privacy.mode={cfg.privacy.mode!r}")
    if cfg.privacy.rr_prior != "topk":
        raise ConfigError(f"method dp_dfd answers by selective randomized response: privacy.rr_prior must be topk, got {cfg.privacy.rr_prior!r}")
    for key in ("stages", "samples_per_stage", "student_epochs", "batch_size"):
        if int(method[key]) < 1:
            raise ConfigError(f"method.{key} must be >= 1, got {method[key]}")
    if int(method.pretrain_iterations) < 0:
        raise ConfigError(f"method.pretrain_iterations must be >= 0, got {method.pretrain_iterations}")
    every, stage = int(cfg.checkpoint.every_steps), steps_per_stage(cfg)
    if every % stage:
        raise ConfigError(f"checkpoint.every_steps={every}: a DP-DFD run saves between stages only (a stage's "
                          f"labelled set is not saved), so it must be a multiple of a stage's {stage} steps "
                          "(method.student_epochs x the stage's batches)")
    check_teacher_batchnorm(cfg)


def check_teacher_batchnorm(cfg: DictConfig) -> None:
    """Eq. (2)'s third term (``generator_loss.bn_statistics``) reads the teacher's BatchNorm statistics: a
    teacher without BatchNorm (DAFL's LeNet-5) is refused before any compute."""
    if not float(cfg.method.generator_loss.bn_statistics) or not generator_trainable(cfg):
        return
    info = data_info(cfg)
    try:
        losses.BatchNormStatistics(build_classifier(cfg.model.teacher.arch, info.channels, info.image_size,
                                                    info.num_classes))
    except ValueError:  # it has no BatchNorm layer
        raise ConfigError(f"method dp_dfd: Eq. (2)'s BN-statistics term (method.generator_loss.bn_statistics="
                          f"{cfg.method.generator_loss.bn_statistics}) reads the teacher's BatchNorm layers and "
                          f"model.teacher.arch={cfg.model.teacher.arch} has none: use a teacher with BatchNorm "
                          "(model/teacher=resnet34, the paper's, or small_cnn) or method.generator_loss.bn_statistics=0"
                          ) from None


def selection_threshold(cfg: DictConfig, num_classes: int) -> float:
    """t of Alg. 1: ``paper`` is §III-A's 1 / (2 * nc); a number is used as it is."""
    value = cfg.method.threshold
    if value == "paper":
        return 1.0 / (2 * num_classes)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1:
        return float(value)
    raise ConfigError(f"method.threshold must be 'paper' (1/(2*classes)) or a number in [0, 1), got {value!r}")


def stages(cfg: DictConfig) -> int:
    """Stages a run makes: ``method.stages`` T times ``method.steps_per_iteration`` (a stage is DP-DFD's
    iteration; the claim, eps-label-DP per answer, does not depend on the count)."""
    return int(cfg.method.stages) * int(cfg.method.steps_per_iteration)


def pretrain_iterations(cfg: DictConfig) -> int:
    """Generator pre-training steps (Alg. 1 line 1); none when the generator has no parameters
    (``model/generator=gaussian_noise``)."""
    return int(cfg.method.pretrain_iterations) if generator_trainable(cfg) else 0


def finetunes_generator(cfg: DictConfig) -> bool:
    """Whether line 2(d) fine-tunes the generator (on the teacher or with the student's loss)."""
    method = cfg.method
    return generator_trainable(cfg) and not (method.finetune_eq2 == "off" and method.generator_loss.student_loss == "off")


def steps_per_stage(cfg: DictConfig) -> int:
    """Student updates per stage: ``student_epochs`` passes over the stage's set in minibatches."""
    method = cfg.method
    return int(method.student_epochs) * math.ceil(int(method.samples_per_stage) / int(method.batch_size))


def label_release(cfg: DictConfig, count: int) -> PrivacyEvent:
    """The teacher labels of ``count`` synthetic samples through selective randomized response.

    Rigorous view (per answer, w.r.t. one changed private record, which may change the teacher's
    class r): I is fixed by the history (the student), k = |I| >= 2. Two classes inside I give the
    pair of k-ary RR_eps; one inside and one outside give RR_eps(I) against Uniform(I), whose
    likelihood ratios k e^eps / (e^eps + k - 1) and k / (e^eps + k - 1) lie inside [e^-eps, e^eps];
    two outside give equal distributions. Every pair is eps-DP, and the hockey-stick divergence of
    each, (e^eps - e^eps') / (e^eps + k - 1) for k-ary RR and less for the mixed pairs, is largest
    at k = 2: binary RR_eps dominates every answer whatever k the student's prior gives, so the
    ledger records ``num_buckets = 2`` (the smallest set, not the largest, is the worst case).
    ``keep_answer=soft`` returns the teacher's raw y_t when it keeps the truth: unprotected.
    """
    if cfg.method.keep_answer == "soft":
        return soft_answer_release(count)
    return RandomizedResponseRelease(epsilon=float(cfg.privacy.query_epsilon), num_buckets=2, count=count,
                                     note=SELECTIVE_NOTE)


SELECTIVE_NOTE = ("teacher label of each synthetic sample, selective randomized response (DP-DFD Alg. 1 "
                  "lines 4-11), accounted as binary RR_eps, which dominates it for every |I| >= 2")


def soft_answer_release(count: int) -> UnprotectedRelease:
    """``keep_answer=soft``: ``count`` answers that return the teacher's raw y_t when the truth is kept."""
    return UnprotectedRelease(
        count=count,
        note="DP-DFD Alg. 1 line 9 read literally (keep_answer=soft): the teacher's raw probability "
             "vector y_t is returned when the truth is kept, which randomized response does not cover",
    )


def pretrain_release(cfg: DictConfig) -> list[PrivacyEvent]:
    """Alg. 1 line 1: the generator learns from the teacher's raw outputs, no mechanism."""
    iterations = pretrain_iterations(cfg)
    if not iterations:
        return []
    return [UnprotectedRelease(
        count=iterations,
        note="generator pre-training with the teacher as fixed discriminator (DP-DFD Alg. 1 line 1, "
             "Eq. (2)): raw teacher outputs and BN statistics of the private data, no DP mechanism",
    )]


def finetune_release(cfg: DictConfig, count: int) -> list[PrivacyEvent]:
    """Alg. 1 line 2(d) with ``finetune_eq2=teacher``: each fine-tuning step reads the teacher raw."""
    if cfg.method.finetune_eq2 != "teacher" or not count or not generator_trainable(cfg):
        return []
    return [UnprotectedRelease(
        count=count,
        note="generator fine-tuning step with Eq. (2) on the teacher (finetune_eq2=teacher): no DP mechanism",
    )]


def plan_dp_dfd_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
    """Every release of a DP-DFD run: pre-training, T * samples_per_stage labels, fine-tuning."""
    method = cfg.method
    ledger = Ledger()
    for event in pretrain_release(cfg):
        ledger.record(event)
    if cfg.privacy.mode == "label":
        ledger.record(label_release(cfg, stages(cfg) * int(method.samples_per_stage)))
        ledger.claim = claims.dp_dfd_label_dp(float(cfg.privacy.query_epsilon))
        ledger.notes.append(
            "DP-DFD claims eps-label-DP for the labels alone (queried once per sample and reused)"
            + (": the generator pre-training with the teacher (Alg. 1 line 1) is not covered by the "
               "stated guarantee; the paper argues only informally that the synthetic data leak nothing"
               if pretrain_iterations(cfg) else "")
        )
    for event in finetune_release(cfg, stages(cfg) * steps_per_stage(cfg)):
        ledger.record(event)
    if finetune_release(cfg, 1) or pretrain_iterations(cfg):
        ledger.notes.append(
            "eps_rigorous = inf: the generator learns from the teacher's raw outputs (pre-training"
            + (" and fine-tuning" if method.finetune_eq2 == "teacher" else "")
            + "), so the synthetic samples, the student's prior y_s and the student carry no DP "
              "guarantee w.r.t. the private data"
        )
    if cfg.privacy.mode == "label" and method.keep_answer == "soft":
        ledger.notes.append(
            "keep_answer=soft: a kept answer is the teacher's raw y_t, so no label answer is covered "
            "by randomized response; the claim is the paper's, for the one-hot reading"
        )
    return ledger


class SelectiveAnnotator:
    """Alg. 1 line 2(c): the stage's labels from y_t and the student's prior y_s."""

    def __init__(self, cfg: DictConfig, num_classes: int, rng: torch.Generator, ledger: Ledger) -> None:
        """``ledger`` receives the event of every answer this annotator gives."""
        self.cfg, self.num_classes, self.rng, self.ledger = cfg, num_classes, rng, ledger
        self.threshold = selection_threshold(cfg, num_classes)

    def __call__(self, teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
        """Targets for Eq. (3): one-hot answers of R(y_s, y_t, t), or the teacher's soft outputs
        under ``privacy=none`` (the non-private reference)."""
        teacher_probs = F.softmax(teacher_logits, dim=1)
        if self.cfg.privacy.mode == "none":
            return teacher_probs
        labels, event = mechanisms.selective_randomized_response(
            teacher_logits.argmax(dim=1), F.softmax(student_logits, dim=1), self.threshold,
            float(self.cfg.privacy.query_epsilon), self.rng, note=SELECTIVE_NOTE,
        )
        answers = F.one_hot(labels, self.num_classes).to(teacher_probs.dtype)
        if self.cfg.method.keep_answer == "soft":  # line 9 literally: return y_t itself when kept
            self.ledger.record(soft_answer_release(len(labels)))  # the raw y_t: no mechanism covers it
            kept = (labels == teacher_logits.argmax(dim=1)).unsqueeze(1)
            return torch.where(kept, teacher_probs, answers)
        self.ledger.record(event)
        return answers


class DpDfdTrainer(Trainer):
    """The state of one DP-DFD run; ``step()`` is one student (and generator) update of a stage. Between stages the
    networks, their optimizers, the query count and the run's random generators are all the next stage depends on
    (each stage draws and labels a fresh set), so a run checkpointed at stage boundaries resumes as if unbroken; the
    generator's pre-training (Alg. 1 line 1) runs at the first step, so a resumed run does not repeat it."""

    def __init__(self, ctx: RunContext) -> None:
        cfg, info, device, rng = ctx.cfg, ctx.info, ctx.device, ctx.rng
        method = cfg.method
        self.ctx, self.cfg, self.info, self.rng, self.device = ctx, cfg, info, rng, device
        self.batch_size = int(method.batch_size)
        self.teacher = ctx.teachers[0].eval()
        self.student, self.generator = build_student_and_generator(cfg, info, device)
        self.student_opt = make_optimizer(method.optimizer, self.student.parameters(), method.student_lr)
        if generator_trainable(cfg):
            self.generator_opt = make_optimizer(method.optimizer, self.generator.parameters(), method.generator_lr)
        self.queries = 0  # teacher queries made (samples labelled)
        self.annotate = SelectiveAnnotator(cfg, info.num_classes, rng, ctx.ledger)
        self.steps_per_stage = steps_per_stage(cfg)
        self.position = 0  # steps taken in the current stage
        self.order = torch.empty(0, dtype=torch.long, device=device)
        self.latents = self._latents(self.batch_size)
        self.checkpointed = ("student", "generator", "student_opt",
                             *(("generator_opt",) if generator_trainable(cfg) else ()))

    def _latents(self, count: int) -> Tensor:
        return torch.randn(count, int(self.cfg.model.generator.latent_dim), generator=self.rng, device=self.device)

    def _generator_step(self, loss: Tensor) -> None:
        self.generator_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.generator_opt.step()

    def pretrain(self) -> None:
        """Alg. 1 line 1: minimise Eq. (2) with the teacher as fixed discriminator, fresh z each step."""
        for _ in range(pretrain_iterations(self.cfg)):
            self._generator_step(generator_loss(self.cfg, self.teacher, self.generator(self._latents(self.batch_size))))
        for event in pretrain_release(self.cfg):
            self.ctx.ledger.record(event)

    @torch.no_grad()
    def begin_stage(self) -> None:
        """Alg. 1 line 2(a)-(c): generate D^(i), compute y_t and y_s, label it once."""
        count = int(self.cfg.method.samples_per_stage)
        self.latents = self._latents(count)
        samples, targets = [], []
        for chunk in self.latents.split(self.batch_size):  # batches of the training size (generator BN)
            x = self.generator(chunk)
            samples.append(x)
            targets.append(self.annotate(self.teacher(x), self.student(x)))
        self.samples, self.targets = torch.cat(samples), torch.cat(targets)
        self.queries += count  # the annotator recorded each answer's event

    def _next_batch(self) -> Tensor:
        """Indices of the next minibatch: a fresh permutation of the stage's set each epoch."""
        if not len(self.order):
            count = len(self.samples)
            self.order = torch.randperm(count, generator=self.rng, device=self.rng.device).to(self.device)
        index, self.order = self.order[: self.batch_size], self.order[self.batch_size:]
        return index

    def step(self) -> dict[str, float]:
        """One student update on the stage's labelled set (Eq. (3)) and one generator fine-tuning
        update (Alg. 1 line 2(d)); the first step of a stage generates and labels its set."""
        cfg = self.cfg
        if self.position == 0:
            if self.queries == 0:  # the first step of the run, not of a resumed one
                self.pretrain()
            self.order = self.order[:0]
            self.begin_stage()
        index = self._next_batch()
        student_loss = losses.kd_loss(self.student(self.samples[index]), self.targets[index]).mean()
        self.student_opt.zero_grad(set_to_none=True)
        student_loss.backward()
        self.student_opt.step()
        metrics = {"student_loss": student_loss.detach()}
        gen_loss = self.finetune_loss(index)
        if gen_loss is not None:
            self._generator_step(gen_loss)
            metrics["generator_loss"] = gen_loss.detach()
        for event in finetune_release(cfg, 1):
            self.ctx.ledger.record(event)
        self.position = (self.position + 1) % self.steps_per_stage
        return metrics

    def finetune_loss(self, index: Tensor) -> Tensor | None:
        """Generator fine-tuning on D^(i) (Alg. 1 line 2(d)): the stage's latents regenerated by the
        current generator; Eq. (2) on the teacher (``finetune_eq2``) plus the student's loss on the
        private labels (``generator_loss.student_loss``, DPSD's L_s term). None when both are off."""
        cfg = self.cfg
        if not finetunes_generator(cfg):
            return None
        samples = self.generator(self.latents[index])
        loss = student_loss_for_generator(cfg, self.student, samples, self.targets[index])
        if cfg.method.finetune_eq2 == "teacher":
            loss = loss + generator_loss(cfg, self.teacher, samples)
        return loss

    def sample_grid(self) -> Tensor:
        with torch.no_grad():
            return self.generator(self.latents[:64]).cpu()


@register_method("dp_dfd")
class DpDfd(Method):
    """DP-DFD, Alg. 1: teacher-pretrained generator, T stages of once-labelled synthetic sets."""

    config = DpDfdConfig
    check_config = staticmethod(check_config)
    plan_ledger = staticmethod(plan_dp_dfd_ledger)
    annotator_class = SelectiveAnnotator
    noise_off = {"privacy.query_epsilon": math.inf}  # selective RR keeps the truth whenever it is in I

    @staticmethod
    def resumable(cfg: DictConfig) -> bool:
        """Resumable between stages (:class:`DpDfdTrainer`; :func:`check_config` asks checkpoints there)."""
        return True

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return stages(cfg) * steps_per_stage(cfg)

    def make_trainer(self, ctx: RunContext) -> DpDfdTrainer:
        return DpDfdTrainer(ctx)
