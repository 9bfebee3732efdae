"""The ladder's rung switches (DESIGN.md "The ladder"), each for every seed method.

R1 ``method=kd_data``, R2 ``model/generator=gaussian_noise``, R3 ``privacy=none``, R4
``privacy.noiseless=true`` and the query axis ``method.steps_per_iteration``: each composes for
every seed method, and a tiny digits run shows the switch acts.
"""

import math

import pytest
import torch

from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.experiment import privacy_report
from dpsd.methods import METHODS
from dpsd.methods.base import RunContext
from dpsd.methods.dpdfd import DPDFDAnnotator
from dpsd.distill.annotators import PrivateAnnotator
from dpsd.models import GaussianNoise, build_generator, generator_from_config, init_generator_
from dpsd.privacy.accounting import Ledger
from dpsd.data import load_data
from dpsd.teachers import load_or_train_teacher

TEACHER = ["model.teacher.recipe.steps=30", "device=cpu", "tracking=none"]
GENERIC = ["method.iterations=3", "method.batch_size=32"]
TINY = {
    "fed_dpsd": [*GENERIC, "method.num_clients=2"],
    # DP-DFD's one-hot kept answer: the reading whose answers randomized response covers (its soft default releases
    # the teacher's output itself, unprotected: test_dp_dfd.py)
    "dp_dfd": ["method.stages=2", "method.samples_per_stage=32", "method.student_epochs=1",
               "method.batch_size=16", "method.pretrain_iterations=2", "method.keep_answer=onehot"],
    "dgd": ["method.num_teachers=3", "method.member_steps=15", "method.queries=40", "method.iterations=4",
            "method.batch_size=32", "method.generator_iterations=2", "method.vae_epochs=1",
            "method.synthetic_count=200", "method.latent_dim=4"],
}
# (method, its private mode): the seed methods, DPSD in both modes
SEEDS = [("dpsd", "label"), ("dpsd", "data"), ("dpsd_t", "label"), ("fed_dpsd", "label"), ("dpdfd", "data"),
         ("dp_dfd", "label"), ("dgd", "label")]
IDS = [f"{name}-{mode}" for name, mode in SEEDS]


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ladder")


def tiny(results_dir, name, privacy, *extra):
    return compose([f"method={name}", f"privacy={privacy}", f"results_dir={results_dir}", *TEACHER,
                    *TINY.get(name, GENERIC), *extra])


# ------------------------------------------------------------------------------------ R1 kd_data


def test_kd_data_distils_on_the_private_split_non_privately(results_dir, run_as_planned):
    metrics, ledger = run_as_planned(tiny(results_dir, "kd_data", "none", "method.iterations=40"))
    assert metrics["queries"] == 40 * 32  # iterations x batch_size teacher answers on private images
    assert ledger["eps_claimed"] == math.inf and ledger["eps_rigorous"] == math.inf
    assert metrics["student_test_accuracy"] > 0.3  # learns (digits: chance is 0.1)


# ------------------------------------------------------------------------- R2 gaussian_noise


def test_gaussian_noise_generator_has_no_parameters_and_samples_standard_normal_images():
    noise = build_generator(100, 1, 28, name="gaussian_noise", seed=3)
    assert isinstance(noise, GaussianNoise) and not list(noise.parameters())
    z = torch.zeros(4000, 100)
    x = noise(z)
    assert x.shape == (4000, 1, 28, 28)
    assert abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01  # 3.1M draws: N(0, 1)
    assert not torch.equal(noise(z[:8]), noise(z[:8]))  # fresh images every call
    assert torch.equal(build_generator(100, 1, 28, name="gaussian_noise", seed=3)(z[:8]),
                       build_generator(100, 1, 28, name="gaussian_noise", seed=3)(z[:8]))  # seeded
    with pytest.raises(ConfigError, match="unknown model.generator.name"):
        build_generator(100, 1, 28, name="vae")



def test_gaussian_noise_moments_come_from_the_generator_config():
    """``model.generator.mean/std`` set the noise's moments (R2 with a dark-background prior)."""
    cfg = compose(["model/generator=gaussian_noise", "model.generator.mean=-1", "model.generator.std=0.5"])
    images = generator_from_config(cfg.model.generator, 1, 28, seed=0)(torch.zeros(4096, 100))
    assert abs(images.mean().item() + 1) < 0.01 and abs(images.std().item() - 0.5) < 0.01
    with pytest.raises(ConfigError, match="std"):
        build_generator(100, 1, 28, name="gaussian_noise", std=0.0)


def test_generator_output_bias_darkens_the_first_samples_and_defaults_to_the_papers_zero():
    """``model.generator.output_bias`` (a labelled variant) sets the last conv's bias after Xavier."""
    def first_samples(*overrides):
        cfg = compose(list(overrides))
        torch.manual_seed(0)
        generator = init_generator_(generator_from_config(cfg.model.generator, 1, 28, seed=0), cfg.model.generator)
        with torch.no_grad():
            return generator.blocks[-2].bias, generator(torch.randn(256, 100))

    bias, paper = first_samples()
    assert torch.equal(bias, torch.zeros_like(bias)) and abs(paper.mean().item()) < 0.2
    bias, dark = first_samples("model.generator.output_bias=-2")
    assert torch.equal(bias, torch.full_like(bias, -2.0)) and dark.mean().item() < -0.7

@pytest.mark.parametrize(("name", "privacy"), SEEDS, ids=IDS)
def test_gaussian_noise_runs_every_seed_method_without_a_generator_step(results_dir, run_as_planned, name, privacy):
    cfg = tiny(results_dir, name, privacy, "model/generator=gaussian_noise")
    metrics, ledger = run_as_planned(cfg)
    assert "final_generator_loss" not in metrics  # every generator update skipped
    # the generator-only releases (DPSD-T's update, DP-DFD's pre-training and fine-tuning) are gone
    assert not any(event["kind"] == "unprotected" for event in ledger["events"])
    assert math.isfinite(ledger["eps_rigorous"])


def test_gaussian_noise_dpsd_trainer_trains_neither_generator_nor_latents(results_dir):
    # Alg. 1's trained batch Z (not DPSD's default, which draws fresh latents): R2 must leave it as it was
    cfg = tiny(results_dir, "dpsd", "label", "model/generator=gaussian_noise", "method.latents=trainable",
               "method.update_order=student_first")
    data = load_data(cfg)
    net, _ = load_or_train_teacher(cfg, data, torch.device("cpu"))
    ctx = RunContext(cfg=cfg, data=data, teachers=[net], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    trainer = METHODS.get("dpsd")().make_trainer(ctx)
    assert not trainer.trains_generator and not trainer.latents.requires_grad
    before = trainer.latents.clone()
    trainer.step()
    assert torch.equal(before, trainer.latents) and trainer.queries == 32


# ---------------------------------------------------------------------------- R3 privacy=none


@pytest.mark.parametrize(("name", "privacy"), SEEDS, ids=IDS)
def test_privacy_none_runs_every_seed_method_as_non_private(results_dir, run_as_planned, name, privacy):
    metrics, ledger = run_as_planned(tiny(results_dir, name, "none"))
    assert ledger["eps_claimed"] == math.inf and ledger["eps_rigorous"] == math.inf
    assert metrics["queries"] >= 1  # teacher queries are counted without any ledger event


@pytest.mark.parametrize("annotator", [PrivateAnnotator, DPDFDAnnotator])
def test_privacy_none_annotates_with_the_teachers_soft_outputs(annotator):
    cfg = compose(["method=dpdfd" if annotator is DPDFDAnnotator else "method=dpsd", "privacy=none"])
    teacher_logits = torch.randn(16, 10)
    targets = annotator(cfg, 10, torch.Generator(), Ledger())(teacher_logits, torch.randn(16, 10))
    assert torch.allclose(targets, torch.softmax(teacher_logits, dim=1))


# ------------------------------------------------------------------------ R4 privacy.noiseless


@pytest.mark.parametrize(("name", "privacy"), SEEDS, ids=IDS)
def test_noiseless_switches_every_noise_parameter_off_and_both_ledgers_say_inf(name, privacy):
    cfg = compose([f"method={name}", f"privacy={privacy}", "privacy.noiseless=true", *TINY.get(name, GENERIC)])
    if privacy == "label":
        assert cfg.privacy.query_epsilon == math.inf
    else:
        assert cfg.privacy.sigma == 0 and cfg.privacy.beta > 0  # the normalisation stays
    if name == "dgd":
        assert cfg.method.latent_epsilon == math.inf
    report = privacy_report(cfg)
    assert report["eps_claimed"] == math.inf and report["eps_rigorous"] == math.inf
    assert report["claimed_source"]  # still the paper's formula, evaluated at no noise


def test_noiseless_label_mechanism_keeps_the_top_k_structure():
    cfg = compose(["method=dpsd", "privacy=label", "privacy.noiseless=true", "privacy.k=3"])
    annotate = PrivateAnnotator(cfg, 10, torch.Generator().manual_seed(0), Ledger())
    teacher_logits, student_logits = torch.randn(2000, 10), torch.randn(2000, 10)
    answers = annotate(teacher_logits, student_logits).argmax(dim=1)
    truth, top3 = teacher_logits.argmax(dim=1), student_logits.topk(3, dim=1).indices
    inside = (top3 == truth.unsqueeze(1)).any(dim=1)
    assert torch.equal(answers[inside], truth[inside])  # no noise: the truth whenever the prior holds it
    assert (top3[~inside] == answers[~inside].unsqueeze(1)).any(dim=1).all()  # else still inside the top-k
    assert len(set(answers[~inside].tolist())) > 1  # ... drawn uniformly from it


def test_noiseless_data_mechanism_is_the_normalised_step_without_noise():
    cfg = compose(["method=dpsd", "privacy=data", "privacy.noiseless=true"])
    annotate = PrivateAnnotator(cfg, 10, torch.Generator().manual_seed(0), Ledger())
    teacher_logits, student_logits = torch.randn(64, 10), torch.randn(64, 10)
    noisy = annotate.private_gradient(teacher_logits, student_logits)
    clean = annotate.private_gradient(teacher_logits, student_logits, noise=False)
    assert torch.equal(noisy, clean)
    assert torch.allclose(clean.norm(dim=1), torch.full((64,), cfg.privacy.beta), rtol=1e-3)  # normalised


@pytest.mark.parametrize("extra", [["privacy=none"], ["privacy=data", "privacy.calibrate=rigorous", "privacy.epsilon=1"]])
def test_noiseless_needs_a_mechanism_and_no_calibration(extra):
    with pytest.raises(ConfigError, match="noiseless"):
        compose(["method=dpsd", *extra, "privacy.noiseless=true"])


def test_noiseless_is_refused_by_a_method_without_a_noise_switch():
    with pytest.raises(ConfigError, match="does not support privacy.noiseless"):
        compose(["method=dpsgd", "privacy.noiseless=true"])


def test_a_noiseless_run_records_no_noise(results_dir, run_as_planned):
    metrics, ledger = run_as_planned(tiny(results_dir, "dpdfd", "data", "privacy.noiseless=true"))
    assert ledger["eps_rigorous"] == math.inf and ledger["events"][0]["noise_std"] == 0


# ---------------------------------------------------------------- method.steps_per_iteration


@pytest.mark.parametrize(("name", "privacy"), [seed for seed in SEEDS if seed[0] != "dgd"], ids=IDS[:-1])
def test_steps_per_iteration_counts_every_query_rigorously_and_keeps_the_claim(name, privacy):
    base = [f"method={name}", f"privacy={privacy}", *TINY.get(name, GENERIC)]
    one, three = privacy_report(compose(base)), privacy_report(compose([*base, "method.steps_per_iteration=3"]))

    def answers(report):  # the mechanism's answers (DP-DFD's generator pre-training is not one per step)
        return sum(event["count"] for event in report["events"] if event["kind"] != "unprotected")

    assert answers(three) == 3 * answers(one) > 0
    assert three["eps_claimed"] == one["eps_claimed"]
    if math.isfinite(one["eps_rigorous"]):  # DPSD-T and DP-DFD are inf either way (unprotected generator)
        assert three["eps_rigorous"] > one["eps_rigorous"]


@pytest.mark.parametrize(("order", "queries_per_step"), [("student_first", 1), ("generator_first", 2)])
def test_steps_per_iteration_runs_that_many_steps_per_iteration(results_dir, run_as_planned, order, queries_per_step):
    # generator_first annotates twice a step: the batch the generator's L_s reads, then the batch drawn after it
    metrics, ledger = run_as_planned(tiny(results_dir, "dpsd", "label", "method.steps_per_iteration=2",
                                          f"method.update_order={order}"))
    assert metrics["queries"] == 3 * 2 * queries_per_step * 32 == ledger["queries"]


def test_steps_per_iteration_in_dgd_adds_student_steps_not_queries():
    base = ["method=dgd", "privacy=label", *TINY["dgd"]]
    one, three = privacy_report(compose(base)), privacy_report(compose([*base, "method.steps_per_iteration=3"]))
    assert (three["queries"], three["eps_rigorous"], three["eps_claimed"]) == (one["queries"], one["eps_rigorous"], one["eps_claimed"])


def test_steps_per_iteration_must_be_positive():
    from dpsd.experiment import resolve_run

    with pytest.raises(ConfigError, match="steps_per_iteration"):
        resolve_run(compose(["method=dpsd", "method.steps_per_iteration=0"]))


# ------------------------------------------------------------- RRWithPrior (a labelled variant)


def test_rr_with_prior_is_a_labelled_variant_with_its_own_claim_and_a_dominating_ledger(results_dir, run_as_planned):
    metrics, ledger = run_as_planned(tiny(results_dir, "dpsd", "label", "privacy.rr_prior=rr_with_prior", "privacy.epsilon=2"))
    assert ledger["eps_claimed"] == 2 and "Ghazi" in ledger["claimed_source"]
    assert all(event["num_buckets"] == 2 for event in ledger["events"])
    # DPSD's default order (generator_first) annotates twice a step: 3 steps, 2 batches of 32 each
    assert sum(event["count"] for event in ledger["events"]) == metrics["queries"] == 3 * 2 * 32
    assert any("not the paper's method" in note for note in ledger["notes"])


@pytest.mark.parametrize("name", ["dp_dfd", "dgd"])
def test_rr_with_prior_is_refused_where_the_method_has_no_top_k_rr(name):
    with pytest.raises(ConfigError, match="rr_prior must be topk"):
        privacy_report(compose([f"method={name}", "privacy=label", "privacy.rr_prior=rr_with_prior"]))


# ------------------------------------------------- repair: Eq. (3)'s output step scaled by 1/beta


def test_output_step_scale_inverse_bound_moves_the_outputs_by_gamma_and_keeps_both_ledgers():
    base = ["method=dpdfd", "privacy=data", "privacy.noiseless=true", "privacy.beta=0.005", *GENERIC]
    paper, repair = compose(base), compose([*base, "method.output_step_scale=inverse_bound"])
    student_logits, teacher_logits = torch.randn(64, 10), torch.randn(64, 10)
    moves = []
    for cfg in (paper, repair):
        annotate = DPDFDAnnotator(cfg, 10, torch.Generator().manual_seed(0), Ledger())
        gradient = annotate.private_gradient(teacher_logits, student_logits)
        stepped = student_logits - torch.log(annotate.step_outputs(student_logits, gradient))  # logits shift + const
        moves.append((stepped - stepped.mean(dim=1, keepdim=True)).norm(dim=1).max().item())
    assert moves[0] < 1e-3 < 0.05 < moves[1] <= 0.1 + 1e-4  # gamma * beta vs gamma (the gradient has norm ~beta)
    plans = [privacy_report(compose(["method=dpdfd", "privacy=data", "privacy.epsilon=1", "privacy.calibrate=claimed", *GENERIC, *extra]))
             for extra in ([], ["method.output_step_scale=inverse_bound"])]
    assert (plans[0]["eps_claimed"], plans[0]["eps_rigorous"]) == (plans[1]["eps_claimed"], plans[1]["eps_rigorous"])
    assert any("not the paper's method" in note for note in plans[1]["notes"])
    with pytest.raises(ConfigError, match="output_step_scale"):
        privacy_report(compose(["method=dpsd", "privacy=data", "method.output_step_scale=huge"]))


# ------------------------------------------- repair: warm-start the student on R2's noise inputs


def test_warm_start_annotates_noise_through_the_same_mechanism_first_and_leaves_the_generator(results_dir, run_as_planned):
    cfg = tiny(results_dir, "dpsd", "label", "method.warm_start_steps=2")
    data = load_data(cfg)
    net, _ = load_or_train_teacher(cfg, data, torch.device("cpu"))
    ctx = RunContext(cfg=cfg, data=data, teachers=[net], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    trainer = METHODS.get("dpsd")().make_trainer(ctx)
    before = [p.clone() for p in trainer.generator.parameters()]
    assert "generator_loss" not in trainer.step() and "generator_loss" not in trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.generator.parameters()))
    assert "generator_loss" in trainer.step()  # the method's own loop from step 3 on
    # two warm steps annotate one batch each; step 3, generator first (the default), annotates two
    assert trainer.queries == (2 + 2) * 32 and sum(event.count for event in ctx.ledger.events) == (2 + 2) * 32
    metrics, ledger = run_as_planned(tiny(results_dir, "dpsd_t", "label", "method.warm_start_steps=2"))
    unprotected = [event for event in ledger["events"] if event["kind"] == "unprotected"]
    assert sum(event["count"] for event in unprotected) == 1  # DPSD-T's generator: 3 steps - 2 warm
    assert any("not the paper's method" in note for note in ledger["notes"])
    with pytest.raises(ConfigError, match="warm_start_steps"):
        privacy_report(compose(["method=dpsd", "method.warm_start_steps=5", *GENERIC]))
