"""What trains a data-free generator: DPSD Eq. (8)'s L_g on a discriminator, and Alg. 1 line 6's L_s."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
from omegaconf import MISSING, DictConfig
from torch import Tensor, nn

from dpsd import losses
from dpsd.models import penultimate_features
EntropyForm = Enum("EntropyForm", "batch_mean per_sample")
ActivationSign = Enum("ActivationSign", "maximize minimize")
StudentLoss = Enum("StudentLoss", "minimize maximize off")


@dataclass
class GeneratorLossConfig:
    """``method.generator_loss``: Eq. (8)'s weights (0 switches a term off) and its readings."""

    onehot: float = MISSING
    entropy: float = MISSING
    activation: float = MISSING
    bn_statistics: float = MISSING
    entropy_form: EntropyForm = MISSING
    activation_sign: ActivationSign = MISSING
    student_loss: StudentLoss = MISSING


def generator_loss(cfg: DictConfig, discriminator: nn.Module, samples: Tensor) -> Tensor:
    """DPSD Eq. (8): one-hot CE + information entropy + activation norm on the discriminator.

    ``bn_statistics`` (0 in DPSD, whose student has no BatchNorm) adds DP-DFD's BN-statistics term
    for a discriminator with BatchNorm layers (the teacher, in DPSD-T).
    """
    weights = cfg.method.generator_loss
    loss = torch.zeros((), device=samples.device)
    # A 0 weight switches its term off (Table VI): it is not computed, so it adds no gradient at all
    # (0 * a non-finite term would still poison the sum) and, with every term off, no forward pass.
    if not any(weights[term] for term in ("onehot", "entropy", "activation", "bn_statistics")):
        return loss
    if weights.bn_statistics:
        with losses.BatchNormStatistics(discriminator) as bn:
            features, logits = penultimate_features(discriminator, samples)
        loss = loss + weights.bn_statistics * bn.loss()
    else:
        features, logits = penultimate_features(discriminator, samples)
    if weights.onehot:
        loss = loss + weights.onehot * losses.one_hot_loss(logits)
    if weights.entropy:
        loss = loss + weights.entropy * losses.information_entropy_loss(logits, weights.entropy_form)
    if weights.activation:
        loss = loss + weights.activation * losses.activation_loss(features, weights.activation_sign)
    return loss


def student_loss_for_generator(cfg: DictConfig, student: nn.Module, samples: Tensor, targets: Tensor) -> Tensor:
    """The L_s part of the generator's objective (Alg. 1 line 6), per ``generator_loss.student_loss``.

    ``minimize``: Alg. 1 line 6 as printed, the generator descends L_s + L_g. ``maximize``: the
    "adversarial learning" of §III-B.4's title, the generator ascends L_s (seeks samples where the
    student still disagrees with the private annotations, as DFAD does). ``off``: L_g alone. The
    targets are the mechanism's outputs, so every choice is post-processing of the private release.
    """
    mode = cfg.method.generator_loss.student_loss
    if mode == "off":
        return torch.zeros((), device=samples.device)
    loss = losses.soft_cross_entropy(student(samples), targets).mean()
    return loss if mode == "minimize" else -loss
