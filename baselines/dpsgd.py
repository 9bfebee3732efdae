"""``dpsgd``: the student trained directly on the private data with DP-SGD (Abadi et al. 2016),
through Opacus (Yousefpour et al. 2021) — the papers' implicit baseline.

Poisson sampling at ``method.sample_rate``, per-example clipping to ``method.max_grad_norm``,
Gaussian noise ``method.noise_multiplier * max_grad_norm``; with ``noise_multiplier: null`` the
multiplier is Opacus's ``get_noise_multiplier`` for ``privacy.epsilon`` at ``privacy.delta`` (what
``make_private_with_epsilon`` does). The run length is ``steps = ceil(epochs / sample_rate)``
optimiser steps, fixed in advance so the ledger can be planned without data; ``epochs`` counts expected
passes, so a fraction (the smoke scale's 0.1) runs fewer steps than one pass.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import torch
from omegaconf import MISSING, DictConfig
from opacus import GradSampleModule
from opacus.accountants import create_accountant
from opacus.accountants.utils import get_noise_multiplier
from opacus.data_loader import DPDataLoader
from opacus.optimizers import DPOptimizer
from opacus.validators import ModuleValidator
from torch import nn

from baselines.training import train_on_batches
from dpsd.data import DataInfo
from dpsd.distill.builders import make_optimizer
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, Optimizer, RunContext, RunResult, register_method
from dpsd.models import build_classifier, xavier_init_
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import SubsampledGaussianRelease


def dpsgd_steps(cfg: DictConfig) -> int:
    """Noisy optimiser steps: ``epochs`` expected passes over the data at Poisson rate ``q``."""
    return math.ceil(float(cfg.method.epochs) / float(cfg.method.sample_rate))


def per_sample_gradients(model: nn.Module, device: torch.device) -> GradSampleModule:
    """``model`` wrapped for Opacus's per-sample gradients, in NCHW layout on ``device``.

    NCHW, not the channels-last layout models are built in (:func:`dpsd.models.channels_last`): Opacus's
    conv grad sampler returns all-zero per-sample gradients for a channels-last conv weight with more
    than one input channel (opacus 1.6, torch 2.15), so that weight would never train and the clipping
    norm would leave it out (``tests/test_baselines.py`` compares with one example at a time)."""
    return GradSampleModule(model.to(device, memory_format=torch.contiguous_format))


def noise_multiplier(cfg: DictConfig) -> float:
    """``method.noise_multiplier``, or the smallest one Opacus's accountant finds for ``privacy.epsilon``."""
    method = cfg.method
    if method.noise_multiplier is not None:
        return float(method.noise_multiplier)
    if cfg.privacy.get("epsilon") is None:
        raise ConfigError("method dpsgd needs method.noise_multiplier, or privacy.epsilon (privacy=label) to calibrate it")
    return _calibrated_noise_multiplier(
        float(cfg.privacy.epsilon), float(cfg.privacy.delta), float(method.sample_rate), dpsgd_steps(cfg),
        str(method.accountant),
    )


@functools.lru_cache(maxsize=32)
def _calibrated_noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Opacus's binary search (seconds), done once for the plan and the run alike."""
    return get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant,
    )


def opacus_epsilon(accountant_name: str, sigma: float, sample_rate: float, steps: int, delta: float) -> float:
    """Opacus's own epsilon for ``steps`` steps of the sampled Gaussian mechanism."""
    accountant = create_accountant(accountant_name)
    accountant.history = [(sigma, sample_rate, steps)]
    return float(accountant.get_epsilon(delta=delta))


STEPS_NOTE = "DP-SGD steps: Poisson-sampled, clipped per-example gradients + Gaussian noise"
Accountant = Enum("Accountant", "rdp prv")


@dataclass
class DPSGDConfig(MethodConfig):
    """``conf/method/dpsgd.yaml`` (its comments say what each setting is)."""

    epochs: float = MISSING
    sample_rate: float = MISSING
    max_grad_norm: float = MISSING
    noise_multiplier: Optional[float] = MISSING
    accountant: Accountant = MISSING
    optimizer: Optimizer = MISSING
    lr: float = MISSING


@register_method("dpsgd")
class DPSGD(Method):
    """DP-SGD on the student with Opacus's per-sample gradients, noisy optimiser and accountant."""

    config = DPSGDConfig

    @staticmethod
    def noise_parameter(cfg: DictConfig) -> tuple[str, float, float]:
        """What ``privacy.calibrate`` solves for (dpsd.privacy_ops.calibrate): the noise multiplier."""
        return "method.noise_multiplier", 0.3, 100.0

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        method, delta = cfg.method, float(cfg.privacy.delta)
        sigma, steps = noise_multiplier(cfg), dpsgd_steps(cfg)
        eps = opacus_epsilon(method.accountant, sigma, float(method.sample_rate), steps, delta)
        ledger = Ledger(
            claim=Claim(eps, delta, "(eps, delta)-DP", f"Opacus {method.accountant} accountant"),
            notes=[f"DP-SGD, noise multiplier {sigma:.4g}, {steps} steps at sample rate {method.sample_rate}; "
                   "w.r.t. adding or removing one private record"],
        )
        ledger.record(DPSGD.release(cfg, sigma, steps))
        return ledger

    @staticmethod
    def release(cfg: DictConfig, sigma: float, steps: int) -> SubsampledGaussianRelease:
        return SubsampledGaussianRelease(
            noise_multiplier=sigma, sample_rate=float(cfg.method.sample_rate), count=steps,
            note=STEPS_NOTE,
        )

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return dpsgd_steps(cfg)

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, info, device, method = ctx.cfg, ctx.info, ctx.device, ctx.cfg.method
        sigma, steps, rate = noise_multiplier(cfg), dpsgd_steps(cfg), float(method.sample_rate)
        student = build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
        # Opacus needs per-sample gradients: BatchNorm becomes GroupNorm (the DataLens CNN has none).
        student = per_sample_gradients(xavier_init_(ModuleValidator.fix(student)), device)
        loader = DPDataLoader(ctx.data.train, sample_rate=rate,
                              generator=torch.Generator().manual_seed(int(cfg.seed)))
        optimizer = DPOptimizer(
            make_optimizer(method.optimizer, student.parameters(), float(method.lr)),
            noise_multiplier=sigma, max_grad_norm=float(method.max_grad_norm),
            expected_batch_size=max(1, round(rate * len(ctx.data.train))),
            generator=ctx.rng,
        )
        accountant = create_accountant(method.accountant)
        optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=rate))
        batches = itertools.islice((batch for _ in iter(int, 1) for batch in loader), steps)
        final_loss = train_on_batches(student, optimizer, batches, device, ctx.progress)
        # the realised steps, as Opacus's accountant hook saw them: (noise multiplier, rate, steps)
        for noise, sample_rate, taken in accountant.history:
            ctx.ledger.record(SubsampledGaussianRelease(noise_multiplier=float(noise), sample_rate=float(sample_rate),
                                                        count=int(taken), note=STEPS_NOTE))
        return RunResult(
            student=student._module.eval(), ledger=ctx.ledger,
            metrics={"final_student_loss": final_loss, "noise_multiplier": sigma, "dpsgd_steps": steps,
                     "eps_opacus": float(accountant.get_epsilon(delta=float(cfg.privacy.delta)))},
        )
