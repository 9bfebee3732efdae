"""FedDPSD: DPSD under the federated setup (§III-D.1 and Alg. 2 of dpsd-model-transcription.txt).

``method.num_clients`` clients each hold a teacher trained on their own part of the private split,
drawn as a Dirichlet(``method.dirichlet_alpha``) non-IID partition (§IV-E, after DENSE [83]). The
server runs DPSD's iteration (:class:`~dpsd.methods.dpsd.DPSDTrainer`) with line 4's teacher query
replaced by Alg. 2 lines 6-14: it sends the synthetic batch and the student's predictions to every
client; each client answers with Fed-FlexPer (Alg. 2 lines 21-35: the privatised output gradient in
data mode, top-k randomized-response labels in label mode); the server averages the answers and
uses the average as DPSD uses one teacher's answer. As Alg. 2 has it, the server draws fresh latents every
iteration (line 3) and its generator step updates the generator's weights only (line 18):
``method.latents=resample``; and a client's data-mode answer has no top-k operator M_k (lines 24-26;
``method.top_k_in_data_mode=true`` applies DPSD's, the previous reading). Clients run in this process
(``method.clients_backend=local``) or as Ray actors holding their teachers (``ray``).

Privacy: a private record belongs to exactly one client, so only that client's answers depend on
it; by parallel composition the run's guarantee is one client's composition (every client makes
the same releases: b answers per iteration). Averaging the answers improves utility, not epsilon.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Sequence
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor, nn

from dpsd.data import DataInfo, split_labels, teacher_view
from dpsd.distill.annotators import GRADIENT_NOTE, PrivateAnnotator, gradient_sensitivity
from dpsd.distill.survival import survival_metrics
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, RunContext, RunResult, register_method
from dpsd.methods.dpsd import DPSD, DPSDConfig, DPSDTrainer, check_dpsd_config, dpsd_releases, plan_dpsd_ledger
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger, rigorous_epsilon
from dpsd.privacy.events import PrivacyEvent, UnprotectedRelease
from dpsd.ensembles import load_or_train_members, with_member_steps

Backend = Enum("Backend", "local ray")
NoiseAt = Enum("NoiseAt", "client server")


@dataclass
class FedDPSDConfig(DPSDConfig):
    """``conf/method/fed_dpsd.yaml``: DPSD's settings and the clients'."""

    num_clients: int = MISSING
    dirichlet_alpha: float = MISSING
    clients_backend: Backend = MISSING
    ray_num_cpus: int = MISSING
    noise_at: NoiseAt = MISSING
    client_teacher_steps: Optional[int] = MISSING
    top_k_in_data_mode: bool = MISSING


# ------------------------------------------------------------------------------------------------
# The non-IID partition (§IV-E, DENSE [83]: Dirichlet with scaling parameter 0.5)


def dirichlet_proportions(num_classes: int, num_clients: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """``num_classes x num_clients``: row c is the share of class c each client receives, ~ Dir(alpha 1_m)."""
    return rng.dirichlet(np.full(num_clients, float(alpha)), size=num_classes)


def dirichlet_partition(
    labels: Sequence[int], num_clients: int, alpha: float, seed: int, min_size: int = 1, max_tries: int = 1000,
) -> list[list[int]]:
    """Disjoint client index lists covering ``labels``: each class's (shuffled) indices are cut by
    a Dirichlet(alpha) draw of client shares (Hsu et al. 2019, as in DENSE [83] and §IV-E).

    Pure and seeded. Draws are repeated (as DENSE does) until every client holds at least
    ``min_size`` records; a client with no data could train no teacher.
    """
    if num_clients < 1 or not alpha > 0:
        raise ConfigError(f"dirichlet_partition needs num_clients >= 1 and alpha > 0, got {num_clients}, {alpha}")
    labels = np.asarray(labels)
    classes = np.unique(labels)
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        shares = dirichlet_proportions(len(classes), num_clients, alpha, rng)
        clients: list[list[int]] = [[] for _ in range(num_clients)]
        for share, cls in zip(shares, classes):
            members = rng.permutation(np.flatnonzero(labels == cls))
            cuts = (np.cumsum(share)[:-1] * len(members)).round().astype(int)
            for client, part in zip(clients, np.split(members, cuts)):
                client.extend(part.tolist())
        if min(len(client) for client in clients) >= min_size:
            return [sorted(client) for client in clients]
    raise ConfigError(
        f"no Dirichlet({alpha}) partition of {len(labels)} records gave each of {num_clients} clients "
        f">= {min_size} records in {max_tries} draws: use fewer clients or a larger alpha"
    )


# ------------------------------------------------------------------------------------------------
# Clients (Alg. 2 lines 8-12)


def client_releases(cfg: DictConfig, info: DataInfo, iterations: int) -> list[PrivacyEvent]:
    """What one client sends the server in ``iterations`` iterations (Alg. 2 line 11).

    With the noise at the client these are DPSD's releases; with the noise at the server
    (literal Alg. 2 line 14) a data-mode client sends its normalised gradients without noise.
    """
    if cfg.privacy.mode == "data" and cfg.method.noise_at == "server":
        return [raw_gradient_release(iterations * int(cfg.method.batch_size))]
    return dpsd_releases(cfg, info, iterations)


def raw_gradient_release(count: int) -> UnprotectedRelease:
    """``count`` normalised output gradients a client sends without noise (``noise_at=server``)."""
    return UnprotectedRelease(
        count=count,
        note="FedDPSD noise_at=server: the client sends its normalised output gradient without "
             "noise; the server adds the noise (Alg. 2 line 14), so the server itself sees raw answers",
    )


def server_noise(cfg: DictConfig) -> bool:
    """Whether the server adds the noise (data mode, ``noise_at=server``, Alg. 2 line 14 as printed)."""
    return cfg.privacy.mode == "data" and cfg.method.noise_at == "server"


def worst_client(client_ledgers: list[list[PrivacyEvent]], delta: float) -> list[PrivacyEvent]:
    """Parallel composition: a record belongs to one client, so the run's ledger is the client ledger
    (the events its own mechanism calls realised) with the largest rigorous epsilon; the clients
    answer alike, so normally any of them."""
    return max(client_ledgers, key=lambda events: rigorous_epsilon(events, delta)["eps_rigorous"])


class FlexPerAnnotator(PrivateAnnotator):
    """A client's mechanism (Fed-FlexPer, Alg. 2 lines 21-35): DPSD's, with M_k in data mode only where
    ``method.top_k_in_data_mode`` asks for it (lines 24-26 normalise the whole output gradient)."""

    def output_topk(self) -> int:
        return int(self.privacy.k) if self.method.top_k_in_data_mode else self.num_classes


class FedClient:
    """One client: its teacher, its own mechanism randomness and a ledger of what it sent.

    ``respond`` is Fed-FlexPer (Alg. 2 lines 21-35). Runs in-process or as a Ray actor.
    """

    def __init__(self, cfg: DictConfig, info: DataInfo, teacher: nn.Module, seed: int) -> None:
        self.cfg, self.info = cfg, info
        self.teacher = teacher.eval()
        device = next(teacher.parameters()).device
        self.ledger = Ledger()
        self.annotate = FlexPerAnnotator(cfg, info.num_classes, torch.Generator(device=device).manual_seed(seed), self.ledger)

    @torch.no_grad()
    def respond(self, samples: Tensor, student_logits: Tensor) -> Tensor:
        """Fed-FlexPer: s = 1 (data) the normalised (noisy, per ``noise_at``) output gradients;
        s = 0 (label) one-hot top-k randomized-response labels; privacy=none the teacher's softmax."""
        device = next(self.teacher.parameters()).device
        samples, student_logits = samples.to(device), student_logits.to(device)
        teacher_logits = self.teacher(samples)
        mode = self.cfg.privacy.mode
        # the annotator records its mechanisms' events in self.ledger; a raw answer is recorded here
        if mode == "data" and self.cfg.method.noise_at == "server":
            answer = self.annotate.private_gradient(teacher_logits, student_logits, noise=False)
            self.ledger.record(raw_gradient_release(len(samples)))
        elif mode == "data":
            answer = self.annotate.private_gradient(teacher_logits, student_logits)
        elif mode == "label":
            answer = self.annotate.label_sensitive(teacher_logits, student_logits)
        else:
            answer = F.softmax(teacher_logits, dim=1)
        return answer

    def ledger_events(self) -> list[PrivacyEvent]:
        return list(self.ledger.events)

    def survival_shares(self, start: int = 0) -> list[Tensor]:
        """This client's Eq. (5) top-k survival share of each annotation from the ``start``-th on."""
        return self.annotate.survival[start:]


def mean_over_clients(shares: list[list[Tensor]]) -> list[Tensor]:
    """Each annotation's top-k survival share averaged over the clients (every client answers every annotation):
    the share of the clients' answers in which the teacher's class survived."""
    return [torch.stack(per_client).mean() for per_client in zip(*shares)]


class LocalClients:
    """All clients in this process, asked one after the other."""

    def __init__(self, clients: list[FedClient]) -> None:
        self.clients = clients

    def respond(self, samples: Tensor, student_logits: Tensor) -> list[Tensor]:
        return [client.respond(samples, student_logits) for client in self.clients]

    def ledgers(self) -> list[list[PrivacyEvent]]:
        return [client.ledger_events() for client in self.clients]

    def survival_shares(self, start: int = 0) -> list[Tensor]:
        return mean_over_clients([client.survival_shares(start) for client in self.clients])

    def close(self) -> None:
        pass


class RayClients:
    """Each client a ``ray.remote`` actor holding its teacher; the server asks them all at once."""

    def __init__(self, cfg: DictConfig, info: DataInfo, teachers: list[nn.Module], seeds: list[int]) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(num_cpus=int(cfg.method.ray_num_cpus), include_dashboard=False, log_to_driver=False)
        actor = ray.remote(num_cpus=0)(FedClient)  # CPU slots do not bound the clients; torch threads do
        self.ray = ray
        self.actors = [actor.remote(cfg, info, teacher.cpu(), seed) for teacher, seed in zip(teachers, seeds)]

    def respond(self, samples: Tensor, student_logits: Tensor) -> list[Tensor]:
        device = samples.device
        samples, student_logits = self.ray.put(samples.detach().cpu()), self.ray.put(student_logits.detach().cpu())
        answers = self.ray.get([actor.respond.remote(samples, student_logits) for actor in self.actors])
        return [answer.to(device) for answer in answers]

    def ledgers(self) -> list[list[PrivacyEvent]]:
        return self.ray.get([actor.ledger_events.remote() for actor in self.actors])

    def survival_shares(self, start: int = 0) -> list[Tensor]:
        return mean_over_clients(self.ray.get([actor.survival_shares.remote(start) for actor in self.actors]))

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)


# ------------------------------------------------------------------------------------------------
# Server (Alg. 2 lines 13-14)


class FederatedQuery:
    """Alg. 2 lines 6-14, as the query DPSDTrainer makes in place of Alg. 1 line 4."""

    def __init__(self, cfg: DictConfig, clients: LocalClients | RayClients, server: PrivateAnnotator) -> None:
        self.cfg, self.clients, self.server = cfg, clients, server

    def __call__(self, samples: Tensor, student_logits: Tensor) -> Tensor:
        answers = torch.stack(self.clients.respond(samples, student_logits))
        if self.cfg.privacy.mode != "data":
            return answers.mean(dim=0)  # s = 0: the average of the clients' labels (soft votes)
        total = answers.sum(dim=0)
        if server_noise(self.cfg):  # Alg. 2 line 14 as printed: (sum O_i + N(0, sigma^2 beta^2)) / m
            # one record changes one client's normalised row by at most 2 beta; the event goes to the
            # run's ledger (what the trusted server releases), the clients' raw answers to theirs
            privacy = self.cfg.privacy
            total, event = mechanisms.gaussian_mechanism(
                total, gradient_sensitivity(self.cfg, 1, len(total)), float(privacy.sigma) * float(privacy.beta),
                self.server.rng, note=GRADIENT_NOTE)
            self.server.ledger.record(event)
        return self.server.step_outputs(student_logits, total / len(answers))


# ------------------------------------------------------------------------------------------------
# The method


def check_config(cfg: DictConfig) -> None:
    check_dpsd_config(cfg)
    method = cfg.method
    if int(method.num_clients) < 1:
        raise ConfigError(f"method.num_clients must be >= 1, got {method.num_clients}")
    if cfg.privacy.mode == "data" and method.noise_at == "server" and cfg.privacy.get("noise_over", "sample") != "sample":
        raise ConfigError("method.noise_at=server adds Alg. 2 line 14's noise per sample: privacy.noise_over must be sample")
    if method.discriminator != "student":
        raise ConfigError(f"FedDPSD's server holds no teacher: method.discriminator must be student, got {method.discriminator!r}")
    if method.update_order != "student_first":
        raise ConfigError("Alg. 2 updates the student (line 16), then the generator (line 18): method.update_order must be "
                          f"student_first for fed_dpsd, got {method.update_order!r}")


def plan_fed_dpsd_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
    """One client's releases (parallel composition), DPSD's theorem as the claim, and the caveats."""
    ledger = plan_dpsd_ledger(cfg, info)
    method = cfg.method
    ledger.notes.append(
        f"FedDPSD: {method.num_clients} clients on disjoint Dirichlet({method.dirichlet_alpha:g}) parts of the "
        "private split; each client makes the same b answers per iteration and a record belongs to one "
        "client, so by parallel composition the rigorous epsilon is one client's composition (the ledger "
        "holds one client's releases); averaging the answers reduces the noise's effect, not epsilon"
    )
    ledger.notes.append(
        "claimed: the paper states no separate theorem for FedDPSD (§III-D.1, §IV-E: 'sets the privacy "
        "budget as 10'); the claim is DPSD's Theorem for the chosen mode, applied per client"
    )
    if cfg.privacy.mode == "data" and method.noise_at == "server":
        ledger.notes.append(
            "noise_at=server (Alg. 2 line 14 as printed): clients send un-noised normalised gradients, so "
            "the server is trusted; the guarantee covers what the server releases (student, generator), "
            "not the server's view, contrary to §III-D.1's 'even with an untrusted server'"
        )
    return ledger


def client_member(index: int, cfg: DictConfig) -> str:
    """The teacher-cache member key of client ``index``: carries the partition that trained it."""
    method = cfg.method
    return f"dirichlet {index}/{method.num_clients} alpha {float(method.dirichlet_alpha):g} seed {int(cfg.seed)}"


class FedDPSDTrainer(DPSDTrainer):
    """DPSD's server iteration (Alg. 2 lines 3-6, 15-16) querying ``clients`` instead of a teacher."""

    def __init__(self, ctx: RunContext, clients: LocalClients | RayClients, server: PrivateAnnotator,
                 partition_sizes: list[int]) -> None:
        super().__init__(ctx, query=FederatedQuery(ctx.cfg, clients, server))
        self.clients, self.partition_sizes = clients, partition_sizes

    def survival_shares(self, start: int = 0) -> list[Tensor]:
        """The clients' mean top-k survival share of each annotation from the ``start``-th on (each client's own
        teacher against the student's top-k)."""
        return self.clients.survival_shares(start)

    def close(self) -> None:
        self.clients.close()


@register_method("fed_dpsd")
class FedDPSD(Method):
    """Alg. 2: DPSD's server loop with the clients' averaged privatised answers as annotations."""

    config = FedDPSDConfig
    check_config = staticmethod(check_config)
    plan_ledger = staticmethod(plan_fed_dpsd_ledger)
    annotator_class = FlexPerAnnotator  # each client's
    noise_off = DPSD.noise_off

    def make_trainer(self, ctx: RunContext) -> FedDPSDTrainer:
        cfg, data, device = ctx.cfg, ctx.data, ctx.device
        method = cfg.method
        parts = dirichlet_partition(
            split_labels(teacher_view(data.train)), int(method.num_clients), float(method.dirichlet_alpha), int(cfg.seed)
        )
        client_cfg = with_member_steps(cfg, method.client_teacher_steps)  # a client holds 1/m of the data
        teachers = load_or_train_members(client_cfg, data, device, parts,
                                         [client_member(i, cfg) for i in range(len(parts))], ctx.phase_log)
        # each client's mechanism has its own randomness, the same whichever backend runs it
        seeds = [int(cfg.seed) * 1000 + 1 + i for i in range(len(teachers))]
        if method.clients_backend == "ray":
            clients: LocalClients | RayClients = RayClients(cfg, ctx.info, teachers, seeds)
        else:
            clients = LocalClients([FedClient(cfg, ctx.info, t, s) for t, s in zip(teachers, seeds)])
        server = PrivateAnnotator(cfg, ctx.info.num_classes, ctx.rng, ctx.ledger)  # its noise, if any, goes to the run's ledger
        return FedDPSDTrainer(ctx, clients, server, [len(part) for part in parts])

    def result(self, ctx: RunContext, trainer: FedDPSDTrainer, metrics: dict[str, float]) -> RunResult:
        """DPSD's result (``queries``: samples annotated, each answered by every client), with the top-k survival
        shares (the clients' mean), the number of clients and the smallest client's records; the run's ledger is the
        worst client's realised events (:func:`worst_client`) unless the server added the noise and recorded its own."""
        client_ledgers = trainer.clients.ledgers()
        if not server_noise(ctx.cfg):
            for event in worst_client(client_ledgers, float(ctx.cfg.privacy.delta)):
                ctx.ledger.record(event)
        result = super().result(ctx, trainer, metrics)
        result.metrics.update(survival_metrics(trainer.survival_shares()))
        result.metrics["clients"] = float(len(client_ledgers))
        result.metrics["smallest_client_records"] = float(min(trainer.partition_sizes))
        return result
