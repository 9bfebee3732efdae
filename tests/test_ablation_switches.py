"""The ablation switches act: KD vs DKD as L_t (DPSD Fig. 6) and each term of the generator loss
Eq. (8) on or off (Table VI), with a 0-weighted term not computed at all."""

import pytest
import torch
import torch.nn.functional as F

from dpsd import losses
from dpsd.config import compose
from dpsd.experiment import resolve_run
from dpsd.distill.annotators import PrivateAnnotator
from dpsd.distill.generator_losses import generator_loss
from dpsd.errors import ConfigError
from dpsd.models import build_classifier, build_generator
from dpsd.privacy.accounting import Ledger

TERMS = ("onehot", "entropy", "activation")


def annotator(*overrides):
    cfg = compose(["privacy=data", "privacy.k=10", "privacy.beta=1", "privacy.sigma=1e-6", *overrides])
    return PrivateAnnotator(cfg, 10, torch.Generator().manual_seed(0), Ledger())


def logits_pair():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 10, generator=g) * 3, torch.randn(8, 10, generator=g)


def test_kd_releases_the_normalised_kl_gradient_softmax_minus_teacher():
    teacher, student = logits_pair()
    released = annotator("method.distillation_loss=kd").private_gradient(teacher, student, noise=False)
    gradient = F.softmax(student, dim=1) - F.softmax(teacher, dim=1)  # d KL(p_t || p_s) / d z_s
    expected = gradient / (gradient.norm(dim=1, keepdim=True) + 1e-4)
    assert torch.allclose(released, expected, atol=1e-6)


def test_kd_and_dkd_give_different_annotations_for_the_same_inputs():
    teacher, student = logits_pair()
    kd = annotator("method.distillation_loss=kd")(teacher, student)
    dkd = annotator("method.distillation_loss=dkd")(teacher, student)
    assert torch.allclose(kd.sum(dim=1), torch.ones(8)) and torch.allclose(dkd.sum(dim=1), torch.ones(8))
    assert (kd - dkd).abs().max() > 1e-3
    # and each is the step along its own loss's normalised gradient (same seed, same tiny noise)
    for name, targets in (("kd", kd), ("dkd", dkd)):
        as_logits = student.clone().requires_grad_(True)
        loss = losses.distillation_loss(name, as_logits, F.softmax(teacher, dim=1), 8.0, 4.0).sum()
        (gradient,) = torch.autograd.grad(loss, as_logits)
        gradient = gradient / (gradient.norm(dim=1, keepdim=True) + 1e-4)
        assert torch.allclose(targets, F.softmax(student - 0.1 * gradient, dim=1), atol=1e-5)


def test_distillation_loss_does_not_touch_label_mode():
    """Label mode releases randomized-response labels of the teacher's argmax: no L_t is involved,
    so the KD/DKD switch (Fig. 6) only acts with privacy=data."""
    teacher, student = logits_pair()
    labels = [
        PrivateAnnotator(compose(["privacy=label", f"method.distillation_loss={name}"]), 10,
                         torch.Generator().manual_seed(0), Ledger())(teacher, student)
        for name in ("kd", "dkd")
    ]
    assert torch.equal(labels[0], labels[1])


def generator_setup():
    torch.manual_seed(0)
    student = build_classifier("datalens_cnn", 1, 8, 10)
    generator = build_generator(16, 1, 8, 8)
    latents = torch.randn(16, 16)
    return student, generator, latents


def loss_and_gradient(weights: dict):
    cfg = compose([f"method.generator_loss.{name}={value}" for name, value in weights.items()])
    student, generator, latents = generator_setup()
    loss = generator_loss(cfg, student, generator(latents))
    grads = torch.autograd.grad(loss, list(generator.parameters())) if loss.requires_grad else None
    return loss.detach(), grads


@pytest.mark.parametrize("term", TERMS)
def test_switching_a_term_off_changes_the_loss_and_the_generator_gradient(term):
    full_loss, full_grads = loss_and_gradient({})
    off_loss, off_grads = loss_and_gradient({term: 0})
    assert not torch.isclose(full_loss, off_loss)
    assert any(not torch.allclose(a, b) for a, b in zip(full_grads, off_grads))


@pytest.mark.parametrize("term", TERMS)
def test_the_loss_is_the_weighted_sum_of_the_terms_switched_on(term):
    """Only ``term`` on: the loss is its weight times the term, computed on the discriminator."""
    weights = {other: 0 for other in TERMS if other != term} | {term: 2.5}
    loss, _ = loss_and_gradient(weights)
    student, generator, latents = generator_setup()
    from dpsd.models import penultimate_features

    features, logits = penultimate_features(student, generator(latents))
    single = {"onehot": lambda: losses.one_hot_loss(logits),
              "entropy": lambda: losses.information_entropy_loss(logits, "batch_mean"),
              "activation": lambda: losses.activation_loss(features, "maximize")}[term]()
    assert loss.item() == pytest.approx(2.5 * single.item(), rel=1e-5)


@pytest.mark.parametrize("term", TERMS)
def test_a_zero_weighted_term_is_not_computed(term, monkeypatch):
    function = {"onehot": "one_hot_loss", "entropy": "information_entropy_loss", "activation": "activation_loss"}[term]

    def refuse(*args, **kwargs):
        raise AssertionError(f"{function} computed with weight 0")

    monkeypatch.setattr(losses, function, refuse)
    loss, grads = loss_and_gradient({term: 0})
    assert torch.isfinite(loss) and grads is not None


def test_every_term_off_runs_no_forward_pass():
    cfg = compose(["method.generator_loss.student_loss=off",
                   *(f"method.generator_loss.{term}=0" for term in TERMS)])

    class Refuses(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("discriminator queried with every term off")

    assert generator_loss(cfg, Refuses(), torch.zeros(2, 1, 8, 8)).item() == 0


@pytest.mark.parametrize("method", ["dpsd", "dpdfd", "fed_dpsd"])
def test_a_non_positive_dkd_temperature_is_refused_before_any_compute(method):
    with pytest.raises(ConfigError, match="method.dkd_temperature must be > 0"):
        resolve_run(compose([f"method={method}", "method.dkd_temperature=0"]))
