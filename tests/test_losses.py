"""Distillation and generator losses against their definitions."""

import math

import pytest
import torch
import torch.nn.functional as F

from dpsd import losses


def test_kd_and_dkd_vanish_when_student_matches_teacher():
    logits = torch.randn(16, 10, generator=torch.Generator().manual_seed(0))
    probs = F.softmax(logits, dim=1)
    for name in ("kd", "dkd"):
        assert losses.distillation_loss(name, logits, probs, 8.0).abs().max() < 1e-4
    assert (losses.kd_loss(torch.zeros_like(logits), probs) > 0).all()


def test_dkd_as_printed_is_not_a_divergence():
    """Eq. (2)'s l_nc weights log-odds ratios by p_t/(1-p_t): unlike Zhao et al.'s normalised KL it
    can be negative, so L_t can be below its value at a perfect match. Kept as printed; noted here."""
    logits = torch.randn(16, 10, generator=torch.Generator().manual_seed(0))
    values = losses.dkd_loss(torch.zeros_like(logits), F.softmax(logits, dim=1), 8.0)
    assert (values < 0).any()


def test_dkd_target_term_matches_eq2_on_a_hand_computed_case():
    teacher = torch.tensor([[0.7, 0.2, 0.1]])
    student_probs = torch.tensor([[0.5, 0.3, 0.2]])
    tc = 0.7 * math.log(0.7 / 0.5) + 0.3 * math.log(0.3 / 0.5)
    nc = sum(pt / (1 - pt) * math.log(pt * (1 - ps) / (ps * (1 - pt))) for pt, ps in ((0.2, 0.3), (0.1, 0.2)))
    got = losses.dkd_loss(torch.log(student_probs), teacher, balance=8.0)
    assert got.item() == pytest.approx(tc + 8.0 * nc, rel=1e-5)


def test_soft_cross_entropy_equals_cross_entropy_on_one_hot_targets():
    logits = torch.randn(8, 5, generator=torch.Generator().manual_seed(1))
    labels = torch.arange(8) % 5
    expected = F.cross_entropy(logits, labels, reduction="none")
    assert torch.allclose(losses.soft_cross_entropy(logits, F.one_hot(labels, 5).float()), expected)


def test_entropy_forms_reward_what_they_say():
    balanced = torch.eye(4) * 10  # each sample confident, classes balanced over the batch
    collapsed = torch.zeros(4, 4)
    collapsed[:, 0] = 10  # every sample confident in class 0
    # batch_mean (DAFL): a class-balanced batch has lower (better) loss than a collapsed one
    assert losses.information_entropy_loss(balanced, "batch_mean") < losses.information_entropy_loss(collapsed, "batch_mean")
    # per_sample (literal Eq. (8)): confident samples have higher loss than uniform ones
    assert losses.information_entropy_loss(balanced, "per_sample") > losses.information_entropy_loss(torch.zeros(4, 4), "per_sample")


def test_activation_loss_sign():
    features = torch.ones(2, 4)
    assert losses.activation_loss(features, "maximize").item() == pytest.approx(-2.0)
    assert losses.activation_loss(features, "minimize").item() == pytest.approx(2.0)


def test_batchnorm_statistics_loss_is_zero_at_the_running_statistics():
    layer = torch.nn.BatchNorm2d(3)
    x = torch.randn(64, 3, 4, 4, generator=torch.Generator().manual_seed(2)) * 2 + 1
    layer.running_mean.copy_(x.mean(dim=(0, 2, 3)))
    layer.running_var.copy_(x.var(dim=(0, 2, 3), unbiased=False))
    model = torch.nn.Sequential(layer).eval()  # a frozen teacher: running statistics stay put
    with losses.BatchNormStatistics(model) as bn:
        model(x)
    assert bn.loss().item() == pytest.approx(0.0, abs=1e-5)
    with losses.BatchNormStatistics(model) as bn:
        model(x + 1)
    assert bn.loss().item() == pytest.approx(math.sqrt(3), rel=1e-4)  # every channel mean off by 1
    with pytest.raises(ValueError, match="no BatchNorm2d"):
        losses.BatchNormStatistics(torch.nn.Linear(2, 2))
