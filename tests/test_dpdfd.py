"""DPDFD (IJCAI 2023): its switches, its ledger, Theorem 3, and tiny end-to-end runs of every switch."""

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from dpsd.config import compose
from dpsd.data import data_info
from dpsd.errors import ConfigError
from dpsd.experiment import privacy_report, run_experiment
from dpsd.methods.dpdfd import DPDFDAnnotator, plan_dpdfd_ledger
from dpsd.privacy import claims, mechanisms
from dpsd.privacy.accounting import Ledger

TINY = ["model.teacher.recipe.steps=30", "device=cpu", "method.iterations=3", "method.batch_size=32", "tracking=none"]


def rng(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def dpdfd_cfg(*overrides, method="dpdfd"):
    return compose([f"method={method}", "privacy=data", "dataset=digits", *overrides])


# ---------------------------------------------------------------------------------------------
# mechanisms: normalize vs clip (Fig. 2), per-sample vs per-batch noise (§4.4 vs Alg. 1 line 9)


def test_normalize_scales_every_row_to_the_bound_but_clip_only_shrinks_long_rows():
    rows = torch.tensor([[3.0, 4.0], [0.003, 0.004], [0.0006, 0.0008]])  # norms 5, 5e-3, 1e-3
    bound = 2e-3
    normalized = mechanisms.bound_rows(rows, bound, 1e-12, how="normalize")
    clipped = mechanisms.bound_rows(rows, bound, 1e-12, how="clip")
    assert torch.allclose(normalized.norm(dim=1), torch.full((3,), bound), rtol=1e-6)
    assert torch.allclose(clipped.norm(dim=1), torch.tensor([bound, bound, 1e-3]), rtol=1e-6)
    assert torch.equal(clipped[2], rows[2])  # inside the ball: untouched
    # both keep each row's direction
    assert torch.allclose(normalized[0] / bound, torch.tensor([0.6, 0.8]), atol=1e-6)
    assert torch.allclose(clipped[0] / bound, torch.tensor([0.6, 0.8]), atol=1e-6)
    # normalize with a stability constant e: C g / (||g|| + e)
    assert torch.allclose(mechanisms.bound_rows(rows[:1], 1.0, 5.0, how="normalize"), rows[:1] / 10)
    with pytest.raises(ValueError, match="normalize' or 'clip"):
        mechanisms.bound_rows(rows, bound, 0.0, how="truncate")


def test_clip_over_batch_bounds_the_frobenius_norm():
    rows = torch.randn(8, 5, generator=rng())
    clipped = mechanisms.clip_rows(rows, 0.5, over="batch")
    assert clipped.norm().item() == pytest.approx(0.5, rel=1e-6)
    assert torch.allclose(clipped / clipped.norm(), rows / rows.norm())


def test_per_sample_noise_is_independent_per_row_with_the_given_std():
    rows = torch.zeros(20_000, 10)
    noisy, event = mechanisms.gaussian_mechanism(rows, 0.2, 0.3, rng())
    assert noisy.std().item() == pytest.approx(0.3, rel=0.02)
    assert not torch.equal(noisy[0], noisy[1])
    assert (event.l2_sensitivity, event.noise_std, event.count) == (0.2, 0.3, 20_000)
    with pytest.raises(ValueError):
        mechanisms.gaussian_mechanism(rows, 0.2, 0.3, rng(), release="row")


def test_per_batch_noise_is_one_noisy_mean_for_the_whole_batch():
    rows = torch.randn(64, 10, generator=rng(1))
    noisy, event = mechanisms.noisy_mean(rows, 0.2 * 64, 0.3, rng(2))
    expected = (rows.sum(dim=0) + torch.randn(1, 10, generator=rng(2)) * 0.3) / 64  # Alg. 1 line 9
    assert torch.allclose(noisy, expected.expand(64, 10), atol=1e-6)
    assert (event.l2_sensitivity, event.noise_std, event.count) == (0.2 * 64, 0.3, 1)
    draws = torch.stack([mechanisms.noisy_mean(torch.zeros(64, 10), 1.0, 0.3, rng(s))[0][0] for s in range(2000)])
    assert draws.std().item() == pytest.approx(0.3 / 64, rel=0.03)


# ---------------------------------------------------------------------------------------------
# the annotator: argmax targets, no top-k, ensemble averaged before noise


def annotator(*overrides):
    cfg = dpdfd_cfg("privacy.sigma=50", "privacy.beta=0.01", "privacy.stability=0", *overrides)
    return DPDFDAnnotator(cfg, 10, rng(3), Ledger())


def test_teacher_target_is_the_argmax_one_hot_and_every_class_is_kept():
    logits = torch.randn(16, 10, generator=rng(4))
    ann = annotator("method.teacher_target=argmax")
    targets = ann.teacher_targets(logits)
    assert torch.equal(targets, torch.nn.functional.one_hot(logits.argmax(1), 10).float())
    # the default (the readings search's choice, conf/method/dpdfd.yaml) distils the teacher's softmax
    assert torch.allclose(annotator().teacher_targets(logits), torch.softmax(logits, dim=1))
    gradient = ann.private_gradient(logits, torch.randn(16, 10, generator=rng(5)), noise=False)
    assert (gradient != 0).all()  # Eq. (4) has no M_k: no entry zeroed
    assert torch.allclose(gradient.norm(dim=1), torch.full((16,), 0.01), rtol=1e-5)


def test_ensemble_gradients_are_averaged_before_noise_with_std_sigma_c_over_n():
    n, b = 4, 5000
    members = torch.randn(n, b, 10, generator=rng(6))
    student = torch.randn(b, 10, generator=rng(7))
    ann = annotator()
    clean = ann.private_gradient(members, student, noise=False)
    singles = torch.stack([ann.private_gradient(m, student, noise=False) for m in members])
    assert torch.allclose(clean, singles.mean(dim=0), atol=1e-7)
    assert (clean.norm(dim=1) <= 0.01 + 1e-7).all()
    noise = ann.private_gradient(members, student) - clean
    assert noise.std().item() == pytest.approx(50 * 0.01 / n, rel=0.02)


def test_per_batch_noise_gives_every_sample_the_same_step():
    ann = annotator("privacy.noise_over=batch")
    noisy = ann.private_gradient(torch.randn(32, 10, generator=rng(8)), torch.randn(32, 10, generator=rng(9)))
    assert torch.allclose(noisy, noisy[:1].expand_as(noisy))


# ---------------------------------------------------------------------------------------------
# the ledger: counts and sensitivities per switch; Theorem 3


def gaussian_events(cfg):
    return [e for e in plan_dpdfd_ledger(cfg, data_info(cfg)).events if e.kind == "gaussian"]


def test_ledger_per_sample_vs_per_batch_vs_ensemble():
    base = ["method.iterations=10", "method.batch_size=32", "privacy.sigma=20", "privacy.beta=0.002"]
    (sample,) = gaussian_events(dpdfd_cfg(*base))
    assert (sample.l2_sensitivity, sample.noise_std, sample.count) == pytest.approx((0.004, 0.04, 320))
    (batch,) = gaussian_events(dpdfd_cfg(*base, "privacy.noise_over=batch"))
    # the batch sum (the mean is post-processing): all 32 rows may change (32 * 2C), noise sigma C,
    # one release per iteration: noise multiplier sigma / (2B), as the mean's (sigma C / B) / 2C
    assert (batch.l2_sensitivity, batch.noise_std, batch.count) == pytest.approx((0.004 * 32, 0.04, 10))
    assert batch.noise_multiplier == pytest.approx(20 / (2 * 32))
    (ensemble,) = gaussian_events(dpdfd_cfg(*base, "method.teachers=5"))
    # one record changes one of 5 members: the average moves by 2C/5; noise sigma C / 5
    assert (ensemble.l2_sensitivity, ensemble.noise_std, ensemble.count) == pytest.approx((0.004 / 5, 0.04 / 5, 320))
    (clip,) = gaussian_events(dpdfd_cfg(*base, "privacy.bound=clip"))
    assert clip.l2_sensitivity == sample.l2_sensitivity and clip.count == sample.count


def test_per_batch_noise_costs_more_rigorously_and_the_same_claim():
    base = ["method.iterations=10", "method.batch_size=32", "privacy.sigma=20"]
    sample, batch = (privacy_report(dpdfd_cfg(*base, f"privacy.noise_over={o}")) for o in ("sample", "batch"))
    assert sample["eps_claimed"] == batch["eps_claimed"]
    assert batch["eps_rigorous"] > sample["eps_rigorous"]  # noise multiplier sigma/(2B) instead of sigma/2
    assert (sample["queries"], batch["queries"]) == (320, 10)


def test_direct_training_is_unprotected_rigorously_but_keeps_theorem3():
    report = privacy_report(dpdfd_cfg("method.iterations=10", "method.batch_size=32", method="dpdfd_direct"))
    assert report["eps_rigorous"] == math.inf
    assert report["claimed_source"] == "DPDFD Theorem 3" and math.isfinite(report["eps_claimed"])
    assert any("Jacobian" in e["note"] for e in report["events"])


def theorem3_by_hand(c, n, b, t, sigma, delta):
    lam = np.linspace(1.0001, 400, 4_000_000)
    values = 2 * c**2 * n * b * t * lam / sigma**2 + np.log((lam - 1) / lam) - (np.log(delta) + np.log(lam)) / (lam - 1)
    return values.min()


@pytest.mark.parametrize("c,n,b,t,sigma", [(0.005, 1, 128, 400, 100.0), (0.001, 1, 256, 200, 2.0), (0.01, 5, 64, 50, 30.0)])
def test_theorem3_matches_a_hand_computation(c, n, b, t, sigma):
    claim = claims.dpdfd_theorem3(c, n, b, t, sigma, 1e-5)
    assert claim.epsilon == pytest.approx(theorem3_by_hand(c, n, b, t, sigma, 1e-5), rel=1e-6, abs=1e-9)
    assert claim.source == "DPDFD Theorem 3" and claim.delta == 1e-5


def test_theorem3_n_reading_and_c_squared_in_the_numerator():
    cfg = dpdfd_cfg("method.iterations=10", "method.batch_size=32", "privacy.sigma=20", "privacy.beta=0.002")
    claim = plan_dpdfd_ledger(cfg, data_info(cfg)).claim
    assert claim.epsilon == claims.dpdfd_theorem3(0.002, 1, 32, 10, 20.0, 1e-5).epsilon
    classes = OmegaConf.merge(cfg, {"method": {"theorem3_n": "classes"}})
    assert plan_dpdfd_ledger(classes, data_info(cfg)).claim.epsilon == claims.dpdfd_theorem3(0.002, 10, 32, 10, 20.0, 1e-5).epsilon
    # as published: scaling C and sigma together changes the claim (a standard accountant would not)
    assert claims.dpdfd_theorem3(0.004, 1, 32, 10, 40.0, 1e-5).epsilon == pytest.approx(claim.epsilon)
    assert claims.dpdfd_theorem3(0.004, 1, 32, 10, 20.0, 1e-5).epsilon > claim.epsilon


def test_bad_settings_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="use privacy=data"):
        privacy_report(compose(["method=dpdfd", "privacy=label"]))
    with pytest.raises(ConfigError, match="privacy.noise_over must be one of sample, batch"):
        privacy_report(dpdfd_cfg("privacy.noise_over=row"))
    with pytest.raises(ConfigError, match="needs method.teachers=1"):
        privacy_report(dpdfd_cfg("method.teachers=3", method="dpdfd_direct"))


# ---------------------------------------------------------------------------------------------
# tiny runs of every switch (digits, 3 iterations)


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dpdfd")


SWITCHES = {
    "default": [],
    "clip": ["privacy.bound=clip"],
    "per_batch_noise": ["privacy.noise_over=batch"],
    "ensemble": ["method.teachers=2"],
    "no_onehot": ["method.generator_loss.onehot=0"],
    "no_entropy": ["method.generator_loss.entropy=0"],
    "no_activation": ["method.generator_loss.activation=0"],
    "argmax_target": ["method.teacher_target=argmax"],
    "calibrated": ["privacy.epsilon=1", "privacy.calibrate=claimed"],
}


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_dpdfd_runs_with_each_switch_and_fills_the_planned_ledger(results_dir, run_as_planned, switch):
    metrics, ledger = run_as_planned(dpdfd_cfg(f"results_dir={results_dir}", *TINY, *SWITCHES[switch]))
    assert math.isfinite(metrics["final_student_loss"]) and math.isfinite(metrics["final_generator_loss"])
    assert ledger["claimed_source"] == "DPDFD Theorem 3"
    if switch == "calibrated":
        assert ledger["eps_claimed"] == pytest.approx(1.0, rel=0.005)
    expected_queries = 3 if switch == "per_batch_noise" else 3 * 32
    assert ledger["queries"] == expected_queries


@pytest.mark.parametrize("privacy", ["data", "none"])
def test_direct_training_runs(results_dir, privacy):
    cfg = compose(["method=dpdfd_direct", f"privacy={privacy}", f"results_dir={results_dir}", *TINY])
    summary = run_experiment(cfg, show_progress=False)
    assert 0 <= summary["metrics"]["student_test_accuracy"] <= 1
    assert math.isfinite(summary["metrics"]["final_student_loss"])
    # every step trains the student at the private inputs: an unprotected release, mechanism or not (3 steps);
    # in data mode each step's Gaussian release of the output gradients comes beside it
    assert summary["privacy"]["eps_rigorous"] == math.inf
    assert summary["privacy"]["queries"] == (6 if privacy == "data" else 3)
    if privacy == "none":
        assert summary["privacy"]["eps_claimed"] == math.inf
