"""``dafl``: DAFL (Chen et al., ICCV 2019), non-private data-free KD, the harness's public anchor.

DAFL's MNIST recipe as its ``DAFL-train.py`` codes it (facts carried over, code written here): each
iteration draws ``batch_size`` latents z ~ N(0, I); the generator's images go through the teacher, whose
outputs train the generator with L_Total = ``onehot`` x CE(teacher logits, their own argmax) +
``entropy`` x sum(p_bar log p_bar) of the batch-mean softmax p_bar (log10 in the code) + ``activation`` x
(- mean |f|) of the teacher's features f before its linear layers; the student learns the teacher's softmax
on the same images (KL at temperature 1, batch mean), and both Adam steps are taken together
(``update_order=joint``). Networks (conf/method/dafl.yaml): LeNet-5 teacher, LeNet-5-half student, DAFL's
generator (tanh then an affine-free BatchNorm), all with PyTorch's default initialisation; the generator
stays in training mode (batch statistics), as in the code.

Where the paper and the code differ, the code is the default and the paper's reading a switch
(``method.update_order``, ``method.generator_loss.entropy_log``, ``method.generator_loss.activation_norm``).
Non-private: the teacher's raw outputs train both networks (eps = inf on both ledgers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor

from dpsd import losses
from dpsd.data import DataInfo
from dpsd.methods.base import Method, MethodConfig, RunContext, Trainer, register_method
from dpsd.models import build_classifier, generator_from_config, generator_trainable, penultimate_features
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import UnprotectedRelease

UpdateOrder = Enum("UpdateOrder", "joint sequential")
EntropyLog = Enum("EntropyLog", "log10 ln")
ActivationNorm = Enum("ActivationNorm", "l1_mean l1")


@dataclass
class DAFLLossConfig:
    """``method.generator_loss``: L_Total's weights and the code's forms of its terms."""

    onehot: float = MISSING
    entropy: float = MISSING
    activation: float = MISSING
    entropy_log: EntropyLog = MISSING
    activation_norm: ActivationNorm = MISSING


@dataclass
class DAFLConfig(MethodConfig):
    """``conf/method/dafl.yaml`` (its comments say what each setting is)."""

    iterations: int = MISSING
    iterations_per_epoch: int = MISSING
    batch_size: int = MISSING
    generator_lr: float = MISSING
    student_lr: float = MISSING
    update_order: UpdateOrder = MISSING
    generator_loss: DAFLLossConfig = field(default_factory=DAFLLossConfig)


def dafl_generator_loss(weights: DictConfig, logits: Tensor, features: Tensor) -> Tensor:
    """DAFL's L_Total = w_oh L_oh + w_ie L_ie + w_a L_a on the teacher's ``logits`` and ``features``.

    L_oh: cross-entropy against the teacher's argmax; L_ie: sum_j p_bar_j log p_bar_j of the batch-mean
    softmax (DPSD Eq. (8)'s terms, :mod:`dpsd.losses`), divided by ln 10 for DAFL-train.py's log10
    (``entropy_log=ln``: the natural log); L_a: -mean |f| over batch and features (``activation_norm=l1_mean``,
    the code) or -(1/n) sum_i ||f_i||_1 (``l1``, the paper's Eq. (4)).
    """
    entropy = losses.information_entropy_loss(logits, "batch_mean")
    magnitude = features.abs().flatten(1)
    activation = -(magnitude.mean() if weights.activation_norm == "l1_mean" else magnitude.sum(dim=1).mean())
    return (weights.onehot * losses.one_hot_loss(logits)
            + weights.entropy * entropy / (math.log(10) if weights.entropy_log == "log10" else 1.0)
            + weights.activation * activation)


def dafl_release(cfg: DictConfig, steps: int) -> UnprotectedRelease:
    return UnprotectedRelease(
        count=steps * int(cfg.method.batch_size),
        note="DAFL (non-private): the teacher's raw outputs on every generated batch train the generator and "
             "the student, no mechanism",
    )


class DAFLTrainer(Trainer):
    """One DAFL iteration (DAFL-train.py's inner loop body)."""

    checkpointed = ("student", "generator", "student_opt", "generator_opt")  # with a generator to train

    def __init__(self, ctx: RunContext) -> None:
        cfg, info, device = ctx.cfg, ctx.info, ctx.device
        self.ctx, self.cfg, self.rng = ctx, cfg, ctx.rng
        self.teacher = ctx.teachers[0].eval()
        self.teacher.requires_grad_(False)  # gradients reach the images, not the fixed teacher's weights
        self.student = build_classifier(cfg.model.student.arch, info.channels, info.image_size,
                                        info.num_classes).to(device)
        self.generator = generator_from_config(cfg.model.generator, info.channels, info.image_size,
                                               int(cfg.seed), info.space).to(device).train()
        # model/generator=gaussian_noise (DAFL Table 1's "normal distribution" row, the ladder's R2): no
        # generator to train, the student learns the teacher's answers on fresh N(0, 1) inputs
        self.trains_generator = generator_trainable(cfg)
        self.generator_opt = (torch.optim.Adam(self.generator.parameters(), lr=float(cfg.method.generator_lr))
                              if self.trains_generator else None)
        self.student_opt = torch.optim.Adam(self.student.parameters(), lr=float(cfg.method.student_lr))
        self.latent_shape = (int(cfg.method.batch_size), int(cfg.model.generator.latent_dim))
        self.device = device
        self.queries = 0

    def images(self) -> Tensor:
        return self.generator(torch.randn(self.latent_shape, generator=self.rng, device=self.device))

    def step(self) -> dict[str, Tensor]:
        """One iteration: the generator's step on L_Total (where there is a generator to train), the student's
        on KD (KL at temperature 1, batch mean: DAFL-train.py's ``kdloss``), jointly or in sequence."""
        method, metrics = self.cfg.method, {}
        images, logits = self.images(), None
        if self.trains_generator:
            features, logits = penultimate_features(self.teacher, images)
            generator_loss = dafl_generator_loss(method.generator_loss, logits, features)
            self.generator_opt.zero_grad(set_to_none=True)
            generator_loss.backward()
            metrics["generator_loss"] = generator_loss.detach()
            if method.update_order == "sequential":  # the generator first, then the student on its next batch
                self.generator_opt.step()
                self.answered(images)
                images, logits = self.images(), None
        images = images.detach()
        if logits is None:
            with torch.no_grad():
                logits = self.teacher(images)
        student_loss = losses.kd_loss(self.student(images), F.softmax(logits.detach(), dim=1)).mean()
        self.student_opt.zero_grad(set_to_none=True)
        student_loss.backward()
        if self.trains_generator and method.update_order == "joint":
            self.generator_opt.step()
        self.student_opt.step()
        self.answered(images)
        return {"student_loss": student_loss.detach(), **metrics}

    def answered(self, images: Tensor) -> None:
        """The teacher answered ``images``: one unprotected release of the batch."""
        self.ctx.ledger.record(dafl_release(self.cfg, 1))
        self.queries += len(images)

    def sample_grid(self) -> Tensor:
        with torch.no_grad():
            return self.images()[:64].cpu()


@register_method("dafl")
class DAFL(Method):
    """DAFL's loop: generator against the fixed teacher (L_Total), student by KD on its images."""

    config = DAFLConfig

    @staticmethod
    def resumable(cfg: DictConfig) -> bool:
        """With DAFL's generator: the networks and optimizers hold the state (``gaussian_noise``'s draws do not)."""
        return generator_trainable(cfg)

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(notes=["DAFL (Chen et al. 2019): non-private data-free KD, the harness's public anchor "
                               "(eps = inf); privacy settings are ignored"])
        queries_per_step = 2 if cfg.method.update_order == "sequential" and generator_trainable(cfg) else 1
        ledger.record(dafl_release(cfg, queries_per_step * DAFL.total_steps(cfg)))
        return ledger

    def make_trainer(self, ctx: RunContext) -> DAFLTrainer:
        return DAFLTrainer(ctx)
