"""Baseline adapters: DP-SGD against Opacus's accountant, LP-1ST's label-DP ledger, PATE's aggregators,
DFKD's upper bound."""

import math

import pytest
from opacus.accountants import RDPAccountant

from baselines.dpsgd import dpsgd_steps, opacus_epsilon, per_sample_gradients
from baselines.pate import partition
from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.experiment import privacy_report, run_experiment
from dpsd.privacy import GaussianRelease, LaplaceRelease, SubsampledGaussianRelease, rdp_epsilon

DELTA = 1e-5
TEACHER = ["model.teacher.recipe.steps=30", "device=cpu", "tracking=none"]


@pytest.mark.parametrize(("noise_multiplier", "sample_rate", "steps"), [
    (1.1, 0.01, 1000),   # Abadi et al. 2016's MNIST regime
    (2.0, 0.004, 5000),
    (1.5, 0.02, 500),
])
def test_subsampled_gaussian_rdp_agrees_with_opacus_to_the_digits_it_prints(noise_multiplier, sample_rate, steps):
    opacus = RDPAccountant()
    opacus.history = [(noise_multiplier, sample_rate, steps)]
    ours = rdp_epsilon([SubsampledGaussianRelease(noise_multiplier, sample_rate, count=steps)], DELTA)
    assert round(ours, 2) == round(opacus.get_epsilon(DELTA), 2)


def test_dpsgd_plan_calibrates_noise_to_the_target_with_the_steps_it_runs():
    cfg = compose(["method=dpsgd", "privacy.epsilon=3", "method.epochs=2", "method.sample_rate=0.03"])
    assert dpsgd_steps(cfg) == math.ceil(2 / 0.03)
    report = privacy_report(cfg)
    assert report["queries"] == dpsgd_steps(cfg)
    assert report["claimed_source"] == "Opacus rdp accountant"
    assert 3 - 0.01 <= report["eps_claimed"] <= 3  # Opacus's binary search stops within its tolerance
    assert report["eps_rigorous_rdp"] == pytest.approx(report["eps_claimed"], abs=0.01)
    assert report["eps_rigorous"] <= report["eps_rigorous_rdp"]  # PLD is tighter


def test_dpsgd_counts_expected_passes_so_a_fraction_of_one_runs_fewer_steps():
    """``epochs`` is a float: the smoke scale's 0.1 expected passes at q = 0.01 are 10 steps, not one pass's 100,
    and the noise is calibrated to those 10."""
    short = compose(["method=dpsgd", "privacy.epsilon=3", "method.epochs=0.1", "method.sample_rate=0.01"])
    full = compose(["method=dpsgd", "privacy.epsilon=3", "method.epochs=1", "method.sample_rate=0.01"])
    assert (dpsgd_steps(short), dpsgd_steps(full)) == (10, 100)
    assert privacy_report(short)["queries"] == 10
    assert compose(["method=dpsgd", "scale=smoke"]).method.epochs == 0.1


@pytest.mark.parametrize("arch", ["datalens_cnn", "small_cnn"])
def test_dpsgd_per_sample_gradients_are_each_examples_own_gradient(arch):
    # Models are built channels-last; Opacus's conv grad sampler gives zeros there, so DP-SGD hands it NCHW.
    import copy

    import torch
    import torch.nn.functional as F
    from opacus.validators import ModuleValidator

    from dpsd.models import build_classifier

    torch.manual_seed(0)
    model = ModuleValidator.fix(build_classifier(arch, 1, 28, 10))
    x, y = torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))
    wrapped = per_sample_gradients(copy.deepcopy(model), torch.device("cpu"))
    F.cross_entropy(wrapped(x), y).backward()
    for i in range(len(x)):
        alone = copy.deepcopy(model)
        F.cross_entropy(alone(x[i:i + 1]), y[i:i + 1]).backward()
        for (name, mine), theirs in zip(alone.named_parameters(), wrapped._module.parameters()):
            assert mine.grad.abs().max() > 0, name
            torch.testing.assert_close(theirs.grad_sample[i], mine.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_dpsgd_run_spends_exactly_what_opacus_accounts(tmp_path):
    cfg = compose(["method=dpsgd", f"results_dir={tmp_path}", *TEACHER, "method.epochs=1",
                   "method.sample_rate=0.05", "method.noise_multiplier=1.0"])
    metrics = run_experiment(cfg, show_progress=False)["metrics"]
    assert metrics["dpsgd_steps"] == 20
    assert metrics["eps_opacus"] == pytest.approx(metrics["eps_claimed"])
    assert metrics["eps_claimed"] == pytest.approx(opacus_epsilon("rdp", 1.0, 0.05, 20, DELTA))


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
def test_lp1st_label_dp_epsilon_is_the_randomized_response_epsilon_once(epsilon):
    report = privacy_report(compose(["method=lp1st", f"privacy.epsilon={epsilon}"]))
    assert report["eps_claimed"] == epsilon and report["claimed_notion"] == "eps-label-DP"
    # parallel composition over records: one randomized-response answer per record, whatever the size
    assert report["queries"] == 1
    assert report["eps_rigorous"] == pytest.approx(epsilon, rel=1e-3)
    assert any("label-DP" in note for note in report["notes"])


def test_lp1st_calibrates_its_randomized_response_to_the_rigorous_target():
    report = privacy_report(compose(["method=lp1st", "privacy.epsilon=2", "privacy.calibrate=rigorous"]))
    assert report["eps_rigorous"] == pytest.approx(2.0, rel=0.005)


def test_baselines_needing_an_epsilon_say_so_in_one_line():
    with pytest.raises(ConfigError, match="lp1st needs privacy=label"):
        privacy_report(compose(["method=lp1st", "privacy=data"]))
    with pytest.raises(ConfigError, match="dpsgd needs method.noise_multiplier"):
        privacy_report(compose(["method=dpsgd", "privacy=none"]))
    assert math.isfinite(privacy_report(compose(["method=dpsgd", "privacy=none", "method.noise_multiplier=1"]))["eps_rigorous"])


def test_dfkd_is_non_private_whatever_the_privacy_group_says():
    for privacy in ("label", "data", "none"):
        report = privacy_report(compose(["method=dfkd", f"privacy={privacy}"]))
        assert report["eps_claimed"] == math.inf and report["eps_rigorous"] == math.inf


def test_dfkd_learns_the_teacher_on_digits_in_a_short_run(tmp_path):
    cfg = compose(["method=dfkd", f"results_dir={tmp_path}", *TEACHER, "method.iterations=60",
                   "method.batch_size=64"])
    metrics = run_experiment(cfg, show_progress=False)["metrics"]
    assert metrics["teacher_test_accuracy"] > 0.8
    assert metrics["student_test_accuracy"] > 0.3


def test_pate_claims_the_papers_data_independent_bounds_and_accounts_each_answer():
    gnmax = privacy_report(compose(["method=pate", "method.aggregator=gnmax", "method.sigma=40", "method.queries=640"]))
    # Papernot et al. 2018, Prop. 8 + Thm. 5: min over lambda of 640 lambda / 1600 + ln(1e5) / (lambda - 1)
    assert gnmax["eps_claimed"] == pytest.approx(min(640 * l / 1600 + math.log(1e5) / (l - 1) for l in range(2, 257)))
    assert gnmax["eps_rigorous_rdp"] == pytest.approx(rdp_epsilon([GaussianRelease(math.sqrt(2), 40.0, 640)], DELTA))
    lnmax = privacy_report(compose(["method=pate", "method.aggregator=lnmax", "method.gamma=0.05", "method.queries=100"]))
    # Papernot et al. 2017: each answer (2 gamma, 0)-DP, moments bound 2 gamma^2 l (l + 1) per answer
    assert lnmax["eps_claimed"] == pytest.approx(min((100 * 2 * 0.05**2 * l * (l + 1) + math.log(1e5)) / l for l in range(1, 257)))
    assert lnmax["eps_rigorous"] <= 100 * 2 * 0.05  # never worse than basic composition of (2 gamma)-DP answers
    assert lnmax["eps_rigorous_rdp"] == pytest.approx(rdp_epsilon([LaplaceRelease(2.0, 20.0, 100)], DELTA))


def test_pate_teachers_get_disjoint_partitions_and_never_see_the_pool():
    cfg = compose(["method=pate", "method.num_teachers=4", "method.pool_fraction=0.25", "method.queries=10"])
    parts, pool = partition(cfg, 100)
    members = [index for part in parts for index in part]
    assert len(pool) == 25 and len(members) == 75
    assert sorted(members + pool) == list(range(100))
    with pytest.raises(ConfigError, match="exceeds the pool"):
        partition(compose(["method=pate", "method.queries=30", "method.pool_fraction=0.25"]), 100)


def test_pate_gnmax_epsilon_agrees_with_independent_computations():
    import dp_accounting
    from dp_accounting import pld, rdp
    from scipy.stats import norm

    sigma, queries = 40.0, 640
    report = privacy_report(compose(["method=pate", "method.aggregator=gnmax", f"method.sigma={sigma}",
                                     f"method.queries={queries}"]))
    orders = [1 + x / 10 for x in range(1, 100)] + list(range(12, 257))
    # closed form: each answer is (alpha, alpha * (sqrt 2)^2 / (2 sigma^2))-RDP; composition adds
    by_hand = rdp.compute_epsilon(orders, [queries * a / sigma**2 for a in orders], DELTA)[0]
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma / math.sqrt(2)), queries)
    library = rdp.RdpAccountant(orders).compose(event).get_epsilon(DELTA)
    assert library == pytest.approx(by_hand, abs=1e-6)
    assert report["eps_rigorous_rdp"] <= by_hand + 1e-6  # our order grid is a superset of these orders
    assert report["eps_rigorous_rdp"] == pytest.approx(by_hand, rel=1e-3)
    # exact: Q Gaussians of multiplier s compose to one of multiplier s / sqrt(Q) (Balle & Wang 2018, Thm. 8)
    mu = math.sqrt(queries) * math.sqrt(2) / sigma
    exact_delta = lambda eps: norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    from scipy.optimize import brentq
    exact = brentq(lambda eps: exact_delta(eps) - DELTA, 0, 50)
    assert report["eps_rigorous_pld"] == pytest.approx(exact, rel=1e-3)
    assert pld.PLDAccountant().compose(event).get_epsilon(DELTA) == pytest.approx(exact, rel=1e-3)


def test_confident_gnmax_charges_the_threshold_check_for_every_query_and_gnmax_as_planned():
    cfg = compose(["method=pate", "method.queries=100", "method.sigma=40", "method.confident_threshold=200",
                   "method.sigma1=150"])
    report = privacy_report(cfg)
    sensitivities = sorted((e["l2_sensitivity"], e["noise_std"], e["count"]) for e in report["events"])
    assert sensitivities == [(1.0, 150.0, 100), (math.sqrt(2), 40.0, 100)]
    # Papernot et al. 2018: lambda / sigma^2 (GNMax) + lambda / (2 sigma1^2) (threshold) per query
    per_query = 1 / 40**2 + 1 / (2 * 150**2)
    assert report["eps_claimed"] == pytest.approx(min(100 * l * per_query + math.log(1e5) / (l - 1) for l in range(2, 257)))
    assert report["eps_rigorous"] < report["eps_claimed"]
    with pytest.raises(ConfigError, match="confident_threshold needs method.aggregator=gnmax"):
        privacy_report(compose(["method=pate", "method.aggregator=lnmax", "method.confident_threshold=3"]))


def test_confident_mask_answers_exactly_the_confident_queries():
    import torch

    from baselines.pate import confident_mask

    votes = torch.tensor([[5.0, 0, 0], [2, 2, 1], [0, 4, 1]])
    cfg = compose(["method=pate", "method.confident_threshold=3.5", "method.sigma1=1e-6"])
    assert confident_mask(votes, cfg, torch.Generator().manual_seed(0))[0].tolist() == [True, False, True]
    noisy = compose(["method=pate", "method.confident_threshold=3.5", "method.sigma1=1.0"])
    answered = torch.stack([confident_mask(votes[:1].expand(20000, 3), noisy, torch.Generator().manual_seed(s))[0]
                            for s in range(2)]).float().mean()
    # P(5 + N(0, 1) >= 3.5) = Phi(1.5) = 0.9332
    assert float(answered) == pytest.approx(0.9332, abs=0.005)


def test_a_confident_pate_run_charges_gnmax_for_the_answered_queries_only(tmp_path):
    cfg = compose(["method=pate", f"results_dir={tmp_path}", *TEACHER, "method.num_teachers=3", "method.queries=100",
                   "method.epochs=1", "method.confident_threshold=2.5", "method.sigma1=1.0", "method.sigma=1.0"])
    summary = run_experiment(cfg, show_progress=False)
    answered = summary["metrics"]["answered_queries"]
    assert 0 < answered < 100  # 3 teachers: a split vote (max 2) is mostly refused, a unanimous one answered
    counts = sorted((e["l2_sensitivity"], e["count"]) for e in summary["privacy"]["events"])
    assert counts == [(1.0, 100), (math.sqrt(2), answered)]
    assert summary["privacy"]["eps_rigorous"] < privacy_report(cfg)["eps_rigorous"]
