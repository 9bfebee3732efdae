"""DAFL (baselines/dafl.py): its networks, its loss in its code's form, its update, and its noise rung."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from baselines.dafl import DAFL, dafl_generator_loss
from dpsd.config import compose, resolve_paths
from dpsd.experiment import resolve_run
from dpsd.data import load_data
from dpsd.errors import ConfigError
from dpsd.methods.base import RunContext
from dpsd.models import build_classifier, penultimate_features
from dpsd.privacy.accounting import Ledger


def test_the_lenets_have_the_sizes_dafl_table_1_prints():
    """DAFL Table 1: LeNet-5 ~62K parameters, LeNet-5-half ~16K."""
    counts = {arch: sum(p.numel() for p in build_classifier(arch, 1, 32, 10).parameters())
              for arch in ("lenet5", "lenet5_half")}
    assert counts == {"lenet5": 61_706, "lenet5_half": 15_738}
    assert round(counts["lenet5"], -3) == 62_000 and round(counts["lenet5_half"], -3) == 16_000


def test_a_lenet_takes_32_pixels_only_and_says_so():
    with pytest.raises(ConfigError, match="32x32 images, got 28.*image_size=32"):
        build_classifier("lenet5", 1, 28, 10)


def test_the_activation_features_are_the_120_conv_features_before_the_linear_layers():
    teacher = build_classifier("lenet5", 1, 32, 10).eval()
    x = torch.randn(4, 1, 32, 32)
    features, logits = penultimate_features(teacher, x)
    assert features.shape == (4, 120)
    torch.testing.assert_close(features, teacher.features(x))
    torch.testing.assert_close(logits, teacher(x))


def test_the_generator_loss_is_dafl_s_code_form():
    """L_Total as DAFL-train.py writes it, computed here term by term from its lines."""
    torch.manual_seed(0)
    logits, features = torch.randn(32, 10) * 3, torch.randn(32, 120)
    weights = OmegaConf.create({"onehot": 1.0, "entropy": 5.0, "activation": 0.1,
                                "entropy_log": "log10", "activation_norm": "l1_mean"})
    pred = logits.max(1)[1]
    softmax_mean = F.softmax(logits, dim=1).mean(dim=0)
    expected = (F.cross_entropy(logits, pred) * 1 + (softmax_mean * torch.log10(softmax_mean)).sum() * 5
                + (-features.abs().mean()) * 0.1)
    torch.testing.assert_close(dafl_generator_loss(weights, logits, features), expected)
    weights.activation_norm, weights.entropy_log = "l1", "ln"
    paper = (F.cross_entropy(logits, pred) + 5 * (softmax_mean * torch.log(softmax_mean)).sum()
             - 0.1 * features.abs().sum(dim=1).mean())
    torch.testing.assert_close(dafl_generator_loss(weights, logits, features), paper)


def _trainer(overrides):
    cfg = resolve_paths(compose(["method=dafl", "tracking=none", "method.batch_size=16", *overrides]))
    resolve_run(cfg)
    data = load_data(cfg)
    torch.manual_seed(0)
    teacher = build_classifier("lenet5", 1, 32, 10).eval()
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=DAFL.plan_ledger(cfg, None).planned())
    return cfg, ctx, teacher, DAFL().make_trainer(ctx)


@pytest.mark.parametrize("update", ["joint", "sequential"])
def test_one_step_moves_generator_and_student_and_never_the_teacher(update):
    cfg, ctx, teacher, trainer = _trainer([f"method.update_order={update}"])
    before = {name: [p.detach().clone() for p in getattr(trainer, name).parameters()]
              for name in ("generator", "student")}
    fixed = [p.detach().clone() for p in teacher.parameters()]
    trainer.step()
    for name, params in before.items():
        assert any(not torch.equal(a, b) for a, b in zip(params, getattr(trainer, name).parameters())), name
    assert all(torch.equal(a, b) and b.grad is None for a, b in zip(fixed, teacher.parameters()))
    per_step = 2 if update == "sequential" else 1
    assert trainer.queries == per_step * 16
    planned = DAFL.plan_ledger(OmegaConf.merge(cfg, {"method": {"iterations": 1}}), None)
    assert sum(e.count for e in ctx.ledger.events) == sum(e.count for e in planned.events) == per_step * 16


def test_the_noise_rung_trains_only_the_student_on_fresh_noise():
    _, ctx, teacher, trainer = _trainer(["model/generator=gaussian_noise"])
    assert trainer.generator_opt is None
    first, second = trainer.images(), trainer.images()
    assert first.shape == (16, 1, 32, 32) and not torch.equal(first, second)
    metrics = trainer.step()
    assert set(metrics) == {"student_loss"} and math.isfinite(float(metrics["student_loss"]))
    assert trainer.queries == 16 and sum(e.count for e in ctx.ledger.events) == 16
