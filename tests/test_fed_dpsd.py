"""FedDPSD (Alg. 2): the Dirichlet partition, the server's averaging, the per-client ledgers and
parallel composition, and the Ray backend giving the same answers as in-process clients."""

import math

import numpy as np
import pytest
import torch

from dpsd.config import compose, resolve_device
from dpsd.experiment import resolve_run
from dpsd.data import load_data
from dpsd.distill.annotators import PrivateAnnotator
from dpsd.errors import ConfigError
from dpsd.methods.base import RunContext
from dpsd.methods.dpsd import plan_dpsd_ledger
from dpsd.methods.fed_dpsd import (
    FedDPSD,
    FederatedQuery,
    dirichlet_partition,
    dirichlet_proportions,
    mean_over_clients,
    plan_fed_dpsd_ledger,
    worst_client,
)
from dpsd.privacy.accounting import Ledger, rigorous_epsilon

TINY = ["method=fed_dpsd", "method.num_clients=3", "method.batch_size=16", "model.teacher.recipe.steps=30",
        "device=cpu", "tracking=none"]


def test_partition_is_disjoint_complete_and_seeded():
    labels = np.repeat(np.arange(10), 300)
    parts = dirichlet_partition(labels, 5, 0.5, seed=3)
    flat = sorted(i for part in parts for i in part)
    assert flat == list(range(len(labels)))
    assert dirichlet_partition(labels, 5, 0.5, seed=3) == parts
    assert dirichlet_partition(labels, 5, 0.5, seed=4) != parts


def test_each_class_is_cut_by_its_dirichlet_draw():
    labels = np.repeat(np.arange(4), 1000)
    parts = dirichlet_partition(labels, 3, 0.5, seed=7)
    shares = dirichlet_proportions(4, 3, 0.5, np.random.default_rng(7))  # the first draw, the one kept
    for cls in range(4):
        for client, part in enumerate(parts):
            fraction = np.mean(labels[part] == cls) * len(part) / 1000
            assert abs(fraction - shares[cls, client]) <= 1 / 1000


@pytest.mark.parametrize("alpha", [0.5, 100.0])
def test_class_proportions_follow_dirichlet_alpha(alpha):
    """Each client's share of a class has mean 1/m and variance (1/m)(1 - 1/m)/(m alpha + 1)."""
    m, per_class = 5, 1000
    labels = np.repeat(np.arange(10), per_class)
    fractions = []
    for seed in range(60):
        parts = dirichlet_partition(labels, m, alpha, seed=seed)
        fractions += [np.bincount(labels[part], minlength=10) / per_class for part in parts]
    fractions = np.concatenate(fractions)
    expected_var = (1 / m) * (1 - 1 / m) / (m * alpha + 1)
    assert abs(fractions.mean() - 1 / m) < 1e-3  # the shares of a class sum to one
    assert fractions.var() == pytest.approx(expected_var, rel=0.15)


def test_partition_refuses_what_it_cannot_do():
    with pytest.raises(ConfigError, match="alpha"):
        dirichlet_partition([0, 1, 2], 2, 0.0, seed=0)
    with pytest.raises(ConfigError, match="fewer clients"):
        dirichlet_partition([0, 1, 2], 5, 0.5, seed=0, min_size=1, max_tries=5)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One results directory for the module: the client teachers are trained once, then cached."""
    return tmp_path_factory.mktemp("fed")


def trainer_for(results, *overrides):
    cfg = compose([*TINY, f"results_dir={results}", *overrides])
    device = resolve_device(cfg.device)
    data = load_data(cfg)
    ctx = RunContext(cfg=cfg, data=data, teachers=[torch.nn.Identity()], device=device,
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    return FedDPSD().make_trainer(ctx), ctx


class FixedClients:
    """Clients that answer with given tensors: isolates the server's side of Alg. 2."""

    def __init__(self, answers):
        self.answers = answers

    def respond(self, samples, student_logits):
        return list(self.answers)


def server_cfg(noise_at):
    return compose(["method=fed_dpsd", "privacy=data", "method.outputs=probabilities", "method.output_step=1",
                    "privacy.sigma=2", "privacy.beta=0.5", f"method.noise_at={noise_at}"])


@pytest.mark.parametrize(("noise_at", "std"), [("client", 0.0), ("server", 2 * 0.5 / 4)])
def test_server_averages_the_clients_gradients_and_adds_line_14_noise_only_if_asked(noise_at, std):
    cfg = server_cfg(noise_at)
    answers = [torch.full((4000, 10), float(j)) for j in range(4)]  # mean 1.5
    server = PrivateAnnotator(cfg, 10, torch.Generator().manual_seed(0), Ledger())
    student_logits = torch.zeros(4000, 10)
    targets = FederatedQuery(cfg, FixedClients(answers), server)(torch.zeros(4000, 1), student_logits)
    step = 0.1 - targets  # probabilities 0.1 minus the averaged (noisy) gradient
    assert step.mean().item() == pytest.approx(1.5, abs=0.01)
    assert step.std().item() == pytest.approx(std, abs=0.01)  # sigma beta / m at the server; none added there


def test_label_answers_are_averaged_into_vote_shares(results):
    trainer, _ = trainer_for(results, "privacy=label")
    samples = torch.randn(16, 1, 8, 8)
    with torch.no_grad():
        targets = trainer.query(samples, trainer.student(samples))
    assert torch.allclose(targets.sum(dim=1), torch.ones(16))
    assert torch.allclose(targets * 3, (targets * 3).round())  # k/3: each of 3 clients gave one label


def test_the_top_k_survival_share_is_each_annotations_mean_over_the_clients(results):
    assert [s.item() for s in mean_over_clients([[torch.tensor(0.0), torch.tensor(1.0)],
                                                 [torch.tensor(0.5), torch.tensor(1.0)]])] == [0.25, 1.0]
    trainer, _ = trainer_for(results, "privacy=label")
    metrics = trainer.step()
    clients = [client.survival_shares() for client in trainer.clients.clients]
    assert [len(shares) for shares in clients] == [1, 1, 1]  # each client's own teacher against the student's top-k
    assert metrics["topk_survival"].item() == pytest.approx(torch.stack([s[0] for s in clients]).mean().item())


def test_privacy_none_averages_the_client_teachers_softmax(results):
    trainer, _ = trainer_for(results, "privacy=none")
    samples = torch.randn(16, 1, 8, 8)
    with torch.no_grad():
        expected = torch.stack([c.teacher(samples).softmax(dim=1) for c in trainer.clients.clients]).mean(dim=0)
        assert torch.allclose(trainer.query(samples, trainer.student(samples)), expected)


@pytest.mark.parametrize("privacy", ["label", "data"])
def test_ledger_is_one_clients_composition(results, privacy):
    """A record belongs to one client: each client's own ledger holds what the run's does, and the
    run's rigorous epsilon is that of one client, not of all m clients' releases composed."""
    trainer, ctx = trainer_for(results, f"privacy={privacy}", "method.iterations=2")
    for _ in range(2):
        trainer.step()
    delta = float(ctx.cfg.privacy.delta)
    for event in worst_client(trainer.clients.ledgers(), delta):  # as fit does at the end
        ctx.ledger.record(event)
    run = ctx.ledger.summary(delta)
    planned = plan_fed_dpsd_ledger(ctx.cfg, ctx.info).summary(delta)
    assert run["eps_rigorous"] == planned["eps_rigorous"] == plan_dpsd_ledger(ctx.cfg, ctx.info).summary(delta)["eps_rigorous"]
    assert run["queries"] == 2 * 16
    client_ledgers = trainer.clients.ledgers()
    assert len(client_ledgers) == 3
    for events in client_ledgers:
        assert events == ctx.ledger.events
    every_client = rigorous_epsilon([e for events in client_ledgers for e in events], delta)["eps_rigorous"]
    assert every_client > run["eps_rigorous"] * 1.5  # sequential composition would have been wrong
    assert any("parallel composition" in note for note in planned["notes"])


def test_server_side_noise_leaves_the_server_an_unprotected_view(results):
    trainer, ctx = trainer_for(results, "privacy=data", "method.noise_at=server")
    trainer.step()
    assert all(e.kind == "unprotected" for events in trainer.clients.ledgers() for e in events)
    assert math.isfinite(ctx.ledger.summary(1e-5)["eps_rigorous"])  # the released student is covered
    assert any("untrusted server" in note for note in plan_fed_dpsd_ledger(ctx.cfg, ctx.info).notes)


def test_the_server_draws_fresh_latents_every_iteration_and_trains_only_the_generator(results):
    """Alg. 2 line 3 samples z inside the loop; line 18 updates w_g alone (not a trained batch Z as in Alg. 1)."""
    trainer, _ = trainer_for(results, "privacy=none")
    generator_params = {id(p) for p in trainer.generator.parameters()}
    assert {id(p) for group in trainer.generator_opt.param_groups for p in group["params"]} == generator_params
    drawn = []
    for _ in range(2):
        trainer.step()
        drawn.append(trainer.latents.clone())
    assert not trainer.latents.requires_grad
    assert (drawn[1] - drawn[0]).abs().mean() > 0.5  # independent N(0, 1) draws, not one batch nudged by Adam


@pytest.mark.parametrize(("switch", "kept"), [([], 10), (["method.top_k_in_data_mode=true"], 3)])
def test_a_client_s_data_answer_has_no_top_k_unless_switched(results, switch, kept):
    """Fed-FlexPer (Alg. 2 lines 24-26) normalises the whole output gradient; the previous reading applied
    DPSD's M_k (privacy.k = 3 here). noise_at=server: the clients' answers are the un-noised gradients."""
    trainer, _ = trainer_for(results, "privacy=data", "privacy.k=3", "method.noise_at=server", *switch)
    student_logits = torch.randn(16, 10, generator=torch.Generator().manual_seed(3))
    for answer in trainer.clients.respond(torch.randn(16, 1, 8, 8), student_logits):
        assert ((answer != 0).sum(dim=1) == kept).all()


@pytest.mark.parametrize("override", ["method.clients_backend=mpi", "method.noise_at=anywhere",
                                      "method.num_clients=0", "method.discriminator=teacher"])
def test_bad_config_is_refused(override):
    with pytest.raises(ConfigError, match="method"):  # a bad switch at composition, a bad rule at validation
        resolve_run(compose(["method=fed_dpsd", override]))


@pytest.mark.slow  # starting Ray and its actor processes: 10-100 s on a shared 2-core machine
def test_ray_actors_answer_as_local_clients_do(results):
    ray = pytest.importorskip("ray")
    local, _ = trainer_for(results, "privacy=data")
    remote, _ = trainer_for(results, "privacy=data", "method.clients_backend=ray", "method.ray_num_cpus=1")
    try:
        samples = torch.randn(16, 1, 8, 8)
        student_logits = torch.randn(16, 10)
        for _ in range(2):  # same per-client seeds: the same noise, call after call
            assert torch.allclose(remote.clients.respond(samples, student_logits)[2],
                                  local.clients.respond(samples, student_logits)[2])
        assert remote.clients.ledgers() == local.clients.ledgers()
    finally:
        remote.clients.close()
        ray.shutdown()
