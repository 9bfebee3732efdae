"""Distillation and generator losses against their definitions."""

import math

import pytest
import torch
import torch.nn.functional as F

from dpsd import losses


def random_pairs(n=4000, scale=3.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, 10, generator=g, dtype=dtype) * scale, torch.randn(n, 10, generator=g, dtype=dtype) * scale)


def test_kd_and_dkd_vanish_when_student_matches_teacher():
    logits = torch.randn(16, 10, generator=torch.Generator().manual_seed(0))
    probs = F.softmax(logits, dim=1)
    for name in ("kd", "dkd"):
        assert losses.distillation_loss(name, logits, probs, 8.0, 4.0).abs().max() < 1e-4
    assert (losses.kd_loss(torch.zeros_like(logits), probs) > 0).all()


@pytest.mark.parametrize("temperature", [1.0, 4.0])
def test_dkd_is_a_divergence_nonnegative_on_random_logits(temperature):
    student, teacher = random_pairs()
    one_hot = F.one_hot(teacher.argmax(dim=1), 10).float()
    for target in (F.softmax(teacher, dim=1), one_hot):
        values = losses.dkd_loss(student, target, 8.0, temperature)
        assert torch.isfinite(values).all() and values.min() >= -1e-5


@pytest.mark.parametrize("temperature", [1.0, 4.0])
def test_dkd_is_zero_with_a_zero_gradient_where_the_student_matches_the_teacher(temperature):
    """In float64, to separate the loss's definition from float32 rounding."""
    _, teacher = random_pairs(dtype=torch.float64)
    student = teacher.clone().requires_grad_(True)
    values = losses.dkd_loss(student, F.softmax(teacher, dim=1), 8.0, temperature)
    (gradient,) = torch.autograd.grad(values.sum(), student)
    assert values.abs().max() < 1e-6
    assert gradient.abs().max() < 1e-6


def test_dkd_as_printed_keeps_the_misprint_s_defect():
    """Eq. (2)'s l_nc as printed (each class over its own 1 - p_j) is not a divergence: negative on some random
    pairs, and at student = teacher its value is 0 but its gradient is not (for teacher logits (4, 2, 1, 0, ...)
    +1.64 on the target logit: a descent step lowers the teacher's class). The switch selects it, not DKD."""
    student, teacher = random_pairs()
    printed = losses.distillation_loss("dkd_as_printed", student, F.softmax(teacher, dim=1), 8.0, 4.0)
    assert torch.equal(printed, losses.dkd_as_printed_loss(student, F.softmax(teacher, dim=1), 8.0))
    assert (printed < 0).any()
    logits = torch.tensor([[4.0, 2.0, 1.0] + [0.0] * 7], dtype=torch.float64)
    for name, target_gradient in (("dkd_as_printed", 1.64), ("dkd", 0.0)):
        at_teacher = logits.clone().requires_grad_(True)
        value = losses.distillation_loss(name, at_teacher, F.softmax(logits, dim=1), 8.0, 4.0)
        (gradient,) = torch.autograd.grad(value.sum(), at_teacher)
        assert value.item() == pytest.approx(0.0, abs=1e-5)
        assert gradient[0, 0].item() == pytest.approx(target_gradient, abs=0.01)


def test_dkd_as_printed_matches_eq2_on_a_hand_computed_case():
    teacher = torch.tensor([[0.7, 0.2, 0.1]])
    student_probs = torch.tensor([[0.5, 0.3, 0.2]])
    tc = 0.7 * math.log(0.7 / 0.5) + 0.3 * math.log(0.3 / 0.5)
    nc = sum(pt / (1 - pt) * math.log(pt * (1 - ps) / (ps * (1 - pt))) for pt, ps in ((0.2, 0.3), (0.1, 0.2)))
    got = losses.dkd_as_printed_loss(torch.log(student_probs), teacher, lam=8.0)
    assert got.item() == pytest.approx(tc + 8.0 * nc, rel=1e-5)


def test_dkd_matches_zhao_et_al_on_a_hand_computed_case():
    """TCKD: KL of (p_r, 1 - p_r); NCKD: KL of the non-target distributions normalised by 1 - p_r (T = 1)."""
    teacher = torch.tensor([[0.7, 0.2, 0.1]])
    student_probs = torch.tensor([[0.5, 0.3, 0.2]])
    tc = 0.7 * math.log(0.7 / 0.5) + 0.3 * math.log(0.3 / 0.5)
    nc = sum(qt * math.log(qt / qs) for qt, qs in ((0.2 / 0.3, 0.3 / 0.5), (0.1 / 0.3, 0.2 / 0.5)))
    got = losses.dkd_loss(torch.log(student_probs), teacher, lam=8.0, temperature=1.0)
    assert got.item() == pytest.approx(tc + 8.0 * nc, rel=1e-5)


def test_dkd_temperature_softens_both_sides_and_keeps_the_t_squared_factor():
    """At T, DKD is T^2 times DKD at T = 1 of the student's logits / T against softmax(teacher logits / T): the
    teacher's probabilities are tempered as p^(1/T) renormalised, which is softmax(z / T) for a softmax teacher."""
    student, teacher = random_pairs(n=64)
    at_four = losses.dkd_loss(student, F.softmax(teacher, dim=1), 8.0, 4.0)
    by_hand = 16 * losses.dkd_loss(student / 4, F.softmax(teacher / 4, dim=1), 8.0, 1.0)
    assert torch.allclose(at_four, by_hand, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(at_four, losses.dkd_loss(student, F.softmax(teacher, dim=1), 8.0, 1.0), rtol=1e-2)


def test_dkd_on_a_one_hot_teacher_is_the_tempered_cross_entropy_without_nan():
    """A one-hot teacher (DPDFD's argmax target) has no non-target mass: l_nc is 0, l_tc is -log p_s,r,
    the teacher stays one-hot at any T, and neither the loss nor its gradient is NaN."""
    student, teacher = random_pairs(n=64)
    labels = teacher.argmax(dim=1)
    student = student.requires_grad_(True)
    values = losses.dkd_loss(student, F.one_hot(labels, 10).float(), 8.0, 4.0)
    (gradient,) = torch.autograd.grad(values.sum(), student)
    assert torch.allclose(values, 16 * F.cross_entropy(student / 4, labels, reduction="none"), atol=1e-5)
    assert torch.isfinite(gradient).all()


def test_an_unknown_distillation_loss_names_the_known_ones():
    with pytest.raises(ValueError, match="dkd, dkd_as_printed, kd"):
        losses.distillation_loss("dkd2", torch.zeros(1, 3), torch.full((1, 3), 1 / 3), 8.0, 4.0)


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
