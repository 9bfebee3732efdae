"""DGD and DGD+: discriminative-generative distillation (only excerpts of the paper are at hand:
``../shared/papers/dgd-discriminative-generative-distillation.excerpts.json``).

Pipeline (the excerpts' §III, Fig. 2), one function per step:

1. discriminative stream: the baseline (the full-data teacher, ``ctx.teachers[0]``) and an ensemble
   of ``method.num_teachers`` teachers on disjoint subsets of the private split;
2. generative stream: a generator trained data-free with the baseline as fixed discriminator
   (DPSD's :func:`~dpsd.distill.generator_losses.generator_loss`), ``method.synthetic_count`` synthetic images
   (null: as many as private training examples, Fig. 6) and a convolutional VAE trained on them;
3. |Q| = ``method.queries`` synthetic images labelled by the ensemble's noisy vote, Eq. (3):
   argmax_k V_k(x) + Lap(2/eps_0) (``aggregator=laplace``, DGD) or + N(0, sigma^2)
   (``aggregator=gaussian``, DGD+); the others encoded by the VAE, their normalised codes
   perturbed by Laplace noise of scale 2c/eps_1, then along tangent and normal directions to
   form triples (x, x_par, x_perp);
4. semi-supervised student: cross-entropy on the labelled queries (supervised energy) plus
   tangent and normal regularisation and entropy minimisation on the triples (unsupervised
   energy, Eq. (6));
5. ``vae_data=private`` is the VAE ablation's DGD± (Fig. 7): no generator; a held-out pool of the
   private split gives the queries and feeds the VAE, as public unlabelled data does in PATE.

eps_0 is ``privacy.query_epsilon`` (privacy=label), so ``privacy.calibrate`` solves it; eps_1 is
``method.latent_epsilon``.
"""

from __future__ import annotations

import dataclasses

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from dpsd.data import DataInfo
from dpsd.distill.builders import make_optimizer
from dpsd.distill.generator_losses import GeneratorLossConfig, generator_loss
from dpsd.errors import ConfigError
from dpsd.losses import soft_cross_entropy
from dpsd.methods.base import Method, MethodConfig, RunContext, RunResult, register_method
from dpsd.models import (ConvVAE, build_classifier, generator_from_config, generator_trainable, init_generator_,
                         normalize_code, vae_loss, xavier_init_)
from dpsd.privacy import claims, mechanisms
from dpsd.privacy.boundary import CountedTeacher
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import GaussianRelease, LaplaceRelease, PrivacyEvent, UnprotectedRelease
from dpsd.ensembles import load_or_train_members, member_predictions, vote_counts, with_member_steps
from dpsd.vote_cache import cached_predictions
from dpsd.teachers import disjoint_partition, teacher_cache_dir

Aggregator = Enum("Aggregator", "laplace gaussian")
VaeData = Enum("VaeData", "synthetic private")
CodeProjection = Enum("CodeProjection", "clamp none")


@dataclass
class DGDConfig(MethodConfig):
    """``conf/method/dgd.yaml`` (its comments say what each setting is)."""

    iterations: int = MISSING
    batch_size: int = MISSING
    aggregator: Aggregator = MISSING
    sigma: Optional[float] = MISSING
    num_teachers: int = MISSING
    member_steps: Optional[int] = MISSING
    ensemble_eval_size: Optional[int] = MISSING
    queries: int = MISSING
    latent_epsilon: float = MISSING
    latent_dim: int = MISSING
    code_projection: CodeProjection = MISSING
    vae_width: int = MISSING
    vae_epochs: int = MISSING
    vae_lr: float = MISSING
    vae_regulariser: bool = MISSING
    vae_data: VaeData = MISSING
    pool_fraction: float = MISSING
    synthetic_count: Optional[int] = MISSING
    generator_iterations: int = MISSING
    generator_lr: float = MISSING
    generator_loss: GeneratorLossConfig = field(default_factory=GeneratorLossConfig)
    tangent_step: float = MISSING
    normal_step: float = MISSING
    tangent_weight: float = MISSING
    normal_weight: float = MISSING
    entropy_weight: float = MISSING
    steps_per_iteration: int = MISSING
    student_lr: float = MISSING

# ----------------------------------------------------------------------------- configuration


def check_config(cfg: DictConfig) -> None:
    """One-line ConfigErrors for settings DGD cannot honour."""
    method = cfg.method
    if cfg.privacy.mode not in ("label", "none"):
        raise ConfigError(f"method={method.name} needs privacy=label (privacy.query_epsilon is eps_0) or none, got privacy.mode={cfg.privacy.mode!r}")
    if cfg.privacy.rr_prior != "topk":
        raise ConfigError(f"method={method.name} answers by noisy votes: privacy.rr_prior must be topk, got {cfg.privacy.rr_prior!r}")
    if int(method.queries) < 1 or int(method.num_teachers) < 1:
        raise ConfigError(f"method.queries and method.num_teachers must be >= 1, got {method.queries}, {method.num_teachers}")
    if not float(method.latent_epsilon) > 0:
        raise ConfigError(f"method.latent_epsilon (eps_1) must be > 0, got {method.latent_epsilon}")


def aggregation_sigma(cfg: DictConfig) -> float:
    """DGD+'s Gaussian std on each vote count: ``method.sigma``, or when null 2 sqrt(2) / eps_0, the
    standard deviation of DGD's Lap(2/eps_0), so that DGD and DGD+ add noise of equal variance and
    ``privacy.calibrate`` (which solves eps_0) works for both."""
    if cfg.method.sigma is not None:
        return float(cfg.method.sigma)
    return 2 * math.sqrt(2) / float(cfg.privacy.query_epsilon)


def uses_vae(cfg: DictConfig) -> bool:
    return bool(cfg.method.vae_regulariser)


# ----------------------------------------------------------------------------- privacy


def aggregation_release(cfg: DictConfig) -> PrivacyEvent:
    """The |Q| noisy-argmax answers of Eq. (3). One changed private record changes one teacher's vote:
    two counts move by one (L1 sensitivity 2, L2 sensitivity sqrt 2), so Lap(2/eps_0) makes each
    answer eps_0-DP."""
    queries, epsilon = int(cfg.method.queries), float(cfg.privacy.query_epsilon)
    if cfg.method.aggregator == "laplace":
        return LaplaceRelease(l1_sensitivity=2.0, scale=2 / epsilon, count=queries, note=LAPLACE_NOTE,
                              relation="teacher_partition")
    return GaussianRelease(l2_sensitivity=math.sqrt(2), noise_std=aggregation_sigma(cfg), count=queries, note=GAUSSIAN_NOTE,
                           relation="teacher_partition")


LAPLACE_NOTE = "DGD Eq. (3): vote counts of the teacher ensemble + Lap(2/eps_0), argmax"
GAUSSIAN_NOTE = "DGD+: vote counts of the teacher ensemble + N(0, sigma^2), argmax"
LATENT_NOTE = "DGD §III-E: each image's normalised VAE code + Lap(2c/eps_1), released once"


def latent_release(cfg: DictConfig) -> LaplaceRelease:
    """The normalised latent codes + Lap(2c/eps_1): a code lies in [-1, 1]^c, so two images' codes
    differ by at most 2c in L1. Each image's code is released once (parallel composition over
    images, the excerpts' "taking the synthetic data as a sequence"): one eps_1 release."""
    c, epsilon = int(cfg.method.latent_dim), float(cfg.method.latent_epsilon)
    return LaplaceRelease(l1_sensitivity=2.0 * c, scale=2.0 * c / epsilon, count=1, note=LATENT_NOTE)


def private(cfg: DictConfig) -> bool:
    """Whether the run uses DGD's mechanisms; ``privacy=none`` (the ladder's R3) trains the student on
    the clean vote shares and the clean latent codes."""
    return cfg.privacy.mode == "label"


def trains_generator(cfg: DictConfig) -> bool:
    """Whether a generator is trained against the baseline (not with vae_data=private or gaussian_noise)."""
    return cfg.method.vae_data == "synthetic" and generator_trainable(cfg)


def generator_release(cfg: DictConfig) -> list[UnprotectedRelease]:
    """DGD's generator learns, without noise, against the baseline classifier trained on all the
    private data; the synthetic images, the queries, the VAE and the student all derive from it:
    a release no mechanism covers (as DPSD-T's). DGD± (``vae_data=private``) and a Gaussian-noise
    "generator" train none."""
    if not (private(cfg) and trains_generator(cfg)):
        return []
    return [UnprotectedRelease(count=1, note="DGD's generator, trained without noise against the baseline "
                                             "classifier (all private data): the synthetic images, queries, "
                                             "VAE and student derive from it")]


def pool_release(cfg: DictConfig) -> list[UnprotectedRelease]:
    """DGD± without privacy (``privacy=none``: the ladder's R3 ablation, ``vae_data=private``): the held-out pool's
    raw private images train the student and the VAE with no mechanism and no teacher partition to stand under, a
    release no mechanism covers (as KD on the data, R1). With privacy the pool stands in for public data under the
    teacher-partition relation the vote release names (:func:`plan_dgd_ledger`'s note)."""
    if private(cfg) or cfg.method.vae_data != "private":
        return []
    return [UnprotectedRelease(count=1, note="DGD± without privacy: the held-out pool's private images train the "
                                             "student and the VAE as they are")]


def dgd_releases(cfg: DictConfig) -> list[PrivacyEvent]:
    """Every release a DGD run makes, in the order ``fit`` records them (with ``privacy=none``, only DGD±'s pool)."""
    if not private(cfg):
        return pool_release(cfg)
    releases: list[PrivacyEvent] = [*generator_release(cfg)]
    releases.append(aggregation_release(cfg))
    if uses_vae(cfg):
        releases.append(latent_release(cfg))
    return releases


def dgd_claim(cfg: DictConfig) -> claims.Claim:
    """The excerpts' (|Q| eps_0^2 + eps_0 sqrt(-2|Q| log delta) + eps_1, delta) for DGD. The excerpts
    state no formula for DGD+; it gets PATE+'s data-independent Gaussian bound (the analysis of [21]
    whose aggregation it borrows) + eps_1, by the same basic composition the excerpts use."""
    queries, delta = int(cfg.method.queries), float(cfg.privacy.delta)
    latent_epsilon = float(cfg.method.latent_epsilon) if uses_vae(cfg) else 0.0
    if cfg.method.aggregator == "laplace":
        return claims.dgd_privacy_analysis(queries, float(cfg.privacy.query_epsilon), latent_epsilon, delta)
    epsilon = claims.pate_gnmax_data_independent(queries, aggregation_sigma(cfg), delta) + latent_epsilon
    return claims.Claim(epsilon, delta, "(eps, delta)-DP", "DGD+ : PATE+ data-independent GNMax bound (Papernot et al. 2018) + eps_1")


def plan_dgd_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
    method = cfg.method
    # eps_labels_only: what the paper's analysis covers (the ensemble's labels and the latent codes,
    # the generator treated as public); never eps_rigorous, which is inf for DGD (its generator)
    ledger = Ledger(claim=dgd_claim(cfg) if private(cfg) else None,
                    partial="eps_labels_only" if private(cfg) else None)
    for release in dgd_releases(cfg):
        ledger.record(release)
    if int(method.steps_per_iteration) > 1:
        ledger.notes.append(f"method.steps_per_iteration={method.steps_per_iteration}: more student steps on the same "
                            f"{method.queries} labelled queries; the teacher queries and both ledgers are unchanged")
    if method.vae_data == "synthetic" and not trains_generator(cfg):
        ledger.notes.append("model/generator=gaussian_noise: the queries and the VAE's images are N(0, 1) noise; "
                            "no generator is trained against the baseline")
    elif method.vae_data == "synthetic":
        ledger.notes.append(
            "the generator is trained against the baseline classifier (all private data) without noise: "
            "the synthetic images, the queries, the VAE and its triples are non-private functions of the "
            "private set: eps_rigorous = inf (as DPSD-T). eps_labels_only covers only the ensemble's labels "
            "and the latent-code release with the generator treated as public, as the paper's analysis does")
        if uses_vae(cfg):
            ledger.notes.append(
                "the latent Laplace release is eps_1-DP w.r.t. one synthetic image's code; synthetic "
                "images are not private records, so it protects no private record by itself")
    else:
        ledger.notes.append(
            f"DGD± (vae_data=private): a held-out pool ({method.pool_fraction:g} of the private split) stands "
            "in for public data; the query images train the student without protection, and the images fed "
            "to the VAE have no protection beyond eps_1 on their own code (the VAE is trained on them "
            "without noise)")
    return ledger


# ----------------------------------------------------------------------------- the pipeline


def evaluation_split(ctx: RunContext) -> Dataset:
    """The test images the ensemble's clean vote is scored on: the first ``method.ensemble_eval_size``
    (null: all), to bound the n x |test| teacher passes on a CPU."""
    size = ctx.cfg.method.ensemble_eval_size
    return ctx.data.test if size is None else Subset(ctx.data.test, range(min(int(size), len(ctx.data.test))))


def ensemble_votes(ctx: RunContext, parts: list[list[int]], tag: str, queries: Tensor) -> tuple[Tensor, Tensor, float]:
    """Step 1 and the vote counts of Eq. (3): each member trained (or loaded) on its subset votes on
    ``queries`` and on the evaluation split. Returns (query votes, evaluation votes, the members' mean
    accuracy on the evaluation split). The member key ``"i/n, pool f"`` is PATE's and DPDFD's: one
    cached member per split; the evaluation split's votes, the same in every cell of a seed, are cached
    beside the members (:mod:`dpsd.vote_cache`)."""
    cfg, data, device = with_member_steps(ctx.cfg, ctx.cfg.method.member_steps), ctx.data, ctx.device
    names = [f"{i}/{len(parts)}{tag}" for i in range(len(parts))]
    members = load_or_train_members(cfg, data, device, parts, names, ctx.phase_log)
    test = evaluation_split(ctx)
    test_images, test_labels = images_of(test), labels_of(test)
    # the evaluation split's votes score the ensemble, as the runner scores the teacher outside the boundary: the
    # networks behind the counted handles answer them, so only the queries' answers are counted (and covered)
    scorers = [member.teacher if isinstance(member, CountedTeacher) else member for member in members]
    test_predictions = cached_predictions(scorers, test_images.to(device), device, teacher_cache_dir(cfg) / "votes",
                                          log=ctx.phase_log("member votes (evaluation split)", len(members)))
    query_predictions = member_predictions(members, queries.to(device), device,
                                           log=ctx.phase_log("member votes (queries)", len(members)))
    accuracy = float((test_predictions.cpu() == test_labels).float().mean())
    return vote_counts(query_predictions, data.num_classes), vote_counts(test_predictions, data.num_classes), accuracy


def query_targets(votes: Tensor, cfg: DictConfig, rng: torch.Generator, ledger: Ledger) -> Tensor:
    """The student's targets for the queries: one-hot argmax of the noisy votes (Eq. (3)), whose
    event goes to ``ledger``, or with ``privacy=none`` the clean vote shares V_k(x) / n (soft teacher
    targets, no mechanism)."""
    if not private(cfg):
        return votes / votes.sum(dim=1, keepdim=True)
    noisy, event = noisy_votes(votes, cfg, rng)
    ledger.record(event)
    return F.one_hot(noisy.argmax(dim=1), votes.shape[1]).to(votes.dtype)


def noisy_votes(votes: Tensor, cfg: DictConfig, rng: torch.Generator) -> tuple[Tensor, PrivacyEvent]:
    """Eq. (3) before its argmax, and its event: V_k(x) + Lap(2/eps_0) (DGD) or V_k(x) + N(0, sigma^2)
    (DGD+), one release per query. One changed private record changes one teacher's vote: two
    counts move by one (L1 sensitivity 2, L2 sensitivity sqrt 2)."""
    if cfg.method.aggregator == "laplace":
        return mechanisms.laplace_mechanism(votes, 2.0, 2 / float(cfg.privacy.query_epsilon), rng, note=LAPLACE_NOTE,
                                            relation="teacher_partition")
    return mechanisms.gaussian_mechanism(votes, math.sqrt(2), aggregation_sigma(cfg), rng, note=GAUSSIAN_NOTE,
                                         relation="teacher_partition")


def train_generator(ctx: RunContext) -> nn.Module:
    """Step 2: data-free generator with the baseline as fixed discriminator (DPSD Eq. (8) losses,
    with the BN-statistics term as configured); fresh latents every iteration. ``gaussian_noise``
    is returned untrained (it has no parameters)."""
    cfg, info, device, method = ctx.cfg, ctx.info, ctx.device, ctx.cfg.method
    baseline = ctx.teachers[0].eval()
    latent_dim = int(cfg.model.generator.latent_dim)
    generator = init_generator_(generator_from_config(cfg.model.generator, info.channels, info.image_size, int(cfg.seed), info.space),
                                cfg.model.generator).to(device)
    if not generator_trainable(cfg):
        return generator.eval()
    optimizer = make_optimizer("adam", generator.parameters(), float(method.generator_lr))
    log = ctx.phase_log("generator", int(method.generator_iterations))
    for step in range(int(method.generator_iterations)):
        z = torch.randn(int(method.batch_size), latent_dim, generator=ctx.rng, device=device)
        loss = generator_loss(cfg, baseline, generator(z))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if log is not None:
            log.update(step, {"generator_loss": loss.detach()})
    return generator.eval()


@torch.no_grad()
def synthesise(ctx: RunContext, generator: nn.Module, count: int) -> Tensor:
    """``count`` synthetic images D_hat from the trained generator (on the CPU)."""
    latent_dim, chunks = int(ctx.cfg.model.generator.latent_dim), []
    for start in range(0, count, 512):
        z = torch.randn(min(512, count - start), latent_dim, generator=ctx.rng, device=ctx.device)
        chunks.append(generator(z).cpu())
    return torch.cat(chunks)


def images_of(dataset: Dataset) -> Tensor:
    return torch.cat([x for x, *_ in DataLoader(dataset, batch_size=1024)])


def labels_of(dataset: Dataset) -> Tensor:
    return torch.cat([torch.as_tensor(y) for _, y in DataLoader(dataset, batch_size=1024)])


def train_vae(ctx: RunContext, images: Tensor) -> ConvVAE:
    """Step 2's VAE {phi_e, phi_d} on ``images`` (negative ELBO, Adam)."""
    cfg, info, device, method = ctx.cfg, ctx.info, ctx.device, ctx.cfg.method
    torch.manual_seed(int(cfg.seed))
    vae = ConvVAE(int(method.latent_dim), info.channels, info.image_size, int(method.vae_width), info.space).to(device)
    optimizer = make_optimizer("adam", vae.parameters(), float(method.vae_lr))
    loader = DataLoader(TensorDataset(images), batch_size=int(method.batch_size), shuffle=True,
                        generator=torch.Generator().manual_seed(int(cfg.seed)))
    vae.train()
    log = ctx.phase_log("vae", int(method.vae_epochs) * len(loader))
    batches = (x for _ in range(int(method.vae_epochs)) for (x,) in loader)
    for step, x in enumerate(batches):
        x = x.to(device)
        loss = vae_loss(x, *vae(x))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if log is not None:
            log.update(step, {"vae_loss": loss.detach()})
    return vae.eval()


def unit_rows(x: Tensor) -> Tensor:
    flat = x.flatten(1)
    return (flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)).view_as(x)


@torch.no_grad()
def private_codes(ctx: RunContext, vae: ConvVAE, images: Tensor) -> Tensor:
    """Step 3's latent release: normalised codes tanh(mu(x)) + Lap(2c/eps_1), then the mapping M
    onto the decoder's input domain (``code_projection=clamp``: onto [-1, 1]^c, post-processing).
    A code lies in [-1, 1]^c, so two images' codes differ by at most 2c in L1; each image's code is
    released once (parallel composition over images): one release, recorded in ``ctx.ledger``."""
    cfg, device = ctx.cfg, ctx.device
    codes = torch.cat([normalize_code(vae.encode(x.to(device))[0]) for x in images.split(512)])
    if not private(cfg):
        return codes
    c = int(cfg.method.latent_dim)
    noisy, event = mechanisms.laplace_mechanism(codes, 2.0 * c, 2.0 * c / float(cfg.method.latent_epsilon), ctx.rng,
                                                release="once", note=LATENT_NOTE)
    ctx.ledger.record(dataclasses.replace(event, answers=1))  # codes of private images, no teacher's answers: as planned
    return noisy.clamp(-1, 1) if cfg.method.code_projection == "clamp" else noisy


@torch.no_grad()
def make_triples(ctx: RunContext, vae: ConvVAE, codes: Tensor) -> Tensor:
    """Step 3's triples (x, x_par, x_perp), shape (n, 3, C, H, W), from released codes only
    (post-processing). x = phi_d(M(z)); x_par = phi_d(M(z) + n_par), n_par a random latent direction
    of norm ``tangent_step`` (a move along the data manifold); x_perp = x + n_perp, n_perp random
    image noise of L2 norm ``normal_step`` with its component along the tangent x_par - x removed (the
    tangent space approximated by the sampled tangent direction, one decode per direction)."""
    method, device, rng = ctx.cfg.method, ctx.device, ctx.rng
    triples = []
    for z in codes.split(512):
        x = vae.decode(z)
        step = unit_rows(torch.randn(z.shape, generator=rng, device=device)) * float(method.tangent_step)
        x_par = vae.decode(z + step)
        tangent = unit_rows(x_par - x).flatten(1)
        noise = torch.randn(x.shape, generator=rng, device=device).flatten(1)
        normal = noise - (noise * tangent).sum(dim=1, keepdim=True) * tangent
        x_perp = x + unit_rows(normal).view_as(x) * float(method.normal_step)
        triples.append(torch.stack([x, x_par, x_perp], dim=1).cpu())
    return torch.cat(triples)


def unsupervised_energy(cfg: DictConfig, student: nn.Module, triples: Tensor) -> Tensor:
    """Eq. (6): normal + tangent regularisation and entropy minimisation on a batch of triples.
    KL(p(x) || p(x_perp)) and KL(p(x) || p(x_par)) with p(x) fixed (as VAT / TNAR), + H(p(x))."""
    method = cfg.method
    x, x_par, x_perp = triples.unbind(dim=1)
    logits = student(torch.cat([x, x_par, x_perp]))
    log_p, log_par, log_perp = F.log_softmax(logits, dim=1).chunk(3)
    target = log_p.detach().exp()
    kl_par = F.kl_div(log_par, target, reduction="batchmean")
    kl_perp = F.kl_div(log_perp, target, reduction="batchmean")
    entropy = -(log_p.exp() * log_p).sum(dim=1).mean()
    return float(method.tangent_weight) * kl_par + float(method.normal_weight) * kl_perp + float(method.entropy_weight) * entropy


def train_student(ctx: RunContext, queries: Tensor, targets: Tensor, triples: Tensor | None) -> tuple[nn.Module, dict[str, float]]:
    """Step 4: ``method.iterations`` x ``method.steps_per_iteration`` Adam steps of CE on a batch of
    labelled queries (the supervised energy; ``targets`` one-hot or soft) plus, with triples, the
    unsupervised energy on a batch of them."""
    cfg, info, device, method = ctx.cfg, ctx.info, ctx.device, ctx.cfg.method
    student = xavier_init_(build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)).to(device)
    optimizer = make_optimizer("adam", student.parameters(), float(method.student_lr))
    batch, metrics = int(method.batch_size), {}
    student.train()
    for step in range(DGD.total_steps(cfg)):
        index = torch.randint(0, len(queries), (min(batch, len(queries)),), generator=ctx.rng, device=device).cpu()
        supervised = soft_cross_entropy(student(queries[index].to(device)), targets[index].to(device)).mean()
        loss, metrics = supervised, {"supervised": supervised.detach()}
        if triples is not None:
            pick = torch.randint(0, len(triples), (batch,), generator=ctx.rng, device=device).cpu()
            unsupervised = unsupervised_energy(cfg, student, triples[pick].to(device))
            loss = loss + unsupervised
            metrics["unsupervised"] = unsupervised.detach()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ctx.progress(step, metrics)
    return student.eval(), metrics


@register_method("dgd")
@register_method("dgd_plus")
class DGD(Method):
    """DGD; ``method=dgd_plus`` is the same pipeline with Gaussian aggregation (``aggregator``)."""

    config = DGDConfig
    check_config = staticmethod(check_config)
    plan_ledger = staticmethod(plan_dgd_ledger)
    # Eq. (3)'s Laplace (or DGD+'s Gaussian) vote noise and the latent codes' Laplace noise
    noise_off = {"privacy.query_epsilon": math.inf, "method.sigma": 0.0, "method.latent_epsilon": math.inf}

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, data, method = ctx.cfg, ctx.data, ctx.cfg.method
        size, teachers, queries_n = len(data.train), int(method.num_teachers), int(method.queries)
        metrics: dict[str, float] = {}
        if method.vae_data == "synthetic":
            parts, _ = disjoint_partition(size, teachers, 0, int(cfg.seed))
            count = size if method.synthetic_count is None else int(method.synthetic_count)
            if count <= queries_n:
                raise ConfigError(f"method.synthetic_count={count} must exceed method.queries={queries_n}")
            generator = train_generator(ctx)
            images = synthesise(ctx, generator, count)
            queries, unlabelled, vae_images, tag = images[:queries_n], images[queries_n:], images, ", pool 0"
        else:
            pool_size = int(size * float(method.pool_fraction))
            if not queries_n < pool_size:
                raise ConfigError(f"method.queries={queries_n} must be below the pool ({pool_size} held-out private samples)")
            parts, pool = disjoint_partition(size, teachers, pool_size, int(cfg.seed))
            generator = None
            queries, unlabelled = images_of(Subset(data.train, pool[:queries_n])), images_of(Subset(data.train, pool[queries_n:]))
            vae_images, tag = unlabelled, f", pool {method.pool_fraction:g}"
        for release in [*generator_release(cfg), *pool_release(cfg)]:
            ctx.ledger.record(release)
        votes, test_votes, member_accuracy = ensemble_votes(ctx, parts, tag, queries)
        targets = query_targets(votes, cfg, ctx.rng, ctx.ledger)
        labels = targets.argmax(dim=1)
        test_labels = labels_of(evaluation_split(ctx)).to(test_votes.device)
        metrics["ensemble_test_accuracy"] = float((test_votes.argmax(dim=1) == test_labels).float().mean())
        metrics["member_mean_test_accuracy"] = member_accuracy
        metrics["label_agreement"] = float((labels == votes.argmax(dim=1)).float().mean())
        metrics["num_teachers"] = float(teachers)
        triples = None
        if uses_vae(cfg):
            vae = train_vae(ctx, vae_images)
            codes = private_codes(ctx, vae, unlabelled)
            triples = make_triples(ctx, vae, codes)
        student, final = train_student(ctx, queries, targets.cpu(), triples)
        metrics.update({f"final_{name}": value for name, value in final.items()})
        metrics["queries"] = float(queries_n)  # synthetic samples the ensemble labelled
        samples = triples[:64, 0] if triples is not None else queries[:64]
        return RunResult(student=student, generator=generator, ledger=ctx.ledger, samples=samples, metrics=metrics)
