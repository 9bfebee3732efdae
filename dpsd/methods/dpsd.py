"""DPSD: differentially private synthetic distillation (Alg. 1 of dpsd-model-transcription.txt).

Each iteration: (1) the generator turns latent vectors into a batch of synthetic samples; (2) the
teacher annotates them through a private mechanism — data-sensitive (top-k, normalised,
Gaussian-noised output gradients, Eq. (2)-(3)) or label-sensitive (top-k randomized response with
the student as prior, Eq. (4)-(5)); (3) the student learns from the noisy annotations (Eq. (7));
(4) the generator and its latents learn with the student as discriminator (L_s + L_g, Eq. (8)).
``method.discriminator=teacher`` gives DPSD-T (§IV-F.3), whose generator is not covered by DP.
Readings where the paper is ambiguous are config switches; see ``conf/method/dpsd.yaml``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from dpsd import losses
from dpsd.errors import ConfigError
from dpsd.methods.base import DataInfo, Method, RunContext, RunResult, register_method
from dpsd.models import build_classifier, build_generator, penultimate_features, xavier_init_
from dpsd.privacy import claims, mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import GaussianRelease, PrivacyEvent, RandomizedResponseRelease, UnprotectedRelease


def dpsd_releases(cfg: DictConfig, info: DataInfo, iterations: int) -> list[PrivacyEvent]:
    """What ``iterations`` iterations of Alg. 1 release about the private data.

    Rigorous view: a teacher is an arbitrary function of its private data, so one changed record
    may change every answer; each of the b answers per iteration is one mechanism release.
    """
    privacy, batch = cfg.privacy, int(cfg.method.batch_size)
    releases: list[PrivacyEvent] = []
    if privacy.mode == "label" and privacy.rr_domain == "all":
        releases.append(UnprotectedRelease(
            count=iterations * batch,
            # An answer outside the student's top-k happens only when the teacher's class is
            # inside it, which an answer for a class outside the top-k never produces.
            note="teacher label of each synthetic sample, literal Eq. (5) (rr_domain=all): "
                 "an answer outside the student's top-k has an unbounded privacy loss",
        ))
    elif privacy.mode == "label":
        releases.append(RandomizedResponseRelease(
            epsilon=float(privacy.query_epsilon), num_buckets=int(privacy.k), count=iterations * batch,
            note="teacher label of each synthetic sample, top-k randomized response (Eq. (5))",
        ))
    elif privacy.mode == "data":
        releases.append(output_gradient_release(cfg, iterations))
    if cfg.method.discriminator == "teacher":
        releases.append(UnprotectedRelease(
            count=iterations,
            note="DPSD-T generator update from the teacher's raw outputs: the generator, its "
                 "samples and hence the student are not covered by any guarantee",
        ))
    return releases


BOUNDS = ("normalize", "clip")
NOISE_OVER = ("sample", "batch")


def output_gradient_release(cfg: DictConfig, iterations: int, teachers: int = 1) -> GaussianRelease:
    """The data-mode release of ``iterations`` iterations (Eq. (3); DPDFD Eq. (4) and §4.4).

    Each teacher's bounded gradient row (``normalize_over=sample``) or batch matrix (``batch``)
    has L2 norm <= beta (normalised or clipped, ``privacy.bound``); a changed record may turn it
    into its opposite (2 beta). With ``teachers`` = n members on disjoint partitions, one record
    changes one member, and the members are averaged before the noise, (1/n)(sum_j g_j + N(0,
    sigma^2 beta^2)): sensitivity 2 beta / n, noise std sigma beta / n. ``noise_over=sample``
    releases each of the b rows (b per iteration); ``batch`` releases only the noisy batch mean
    (1/b)(sum_i rows + N) (one per iteration): every row may change, so the mean moves by 2 beta / n
    (by 2 beta / (n sqrt(b)) when the batch matrix was bounded as a whole), noise std sigma beta / (n b).
    """
    privacy, batch = cfg.privacy, int(cfg.method.batch_size)
    if privacy.bound not in BOUNDS:
        raise ConfigError(f"privacy.bound must be one of {', '.join(BOUNDS)}, got {privacy.bound!r}")
    if privacy.noise_over not in NOISE_OVER:
        raise ConfigError(f"privacy.noise_over must be one of {', '.join(NOISE_OVER)}, got {privacy.noise_over!r}")
    beta, std = float(privacy.beta), float(privacy.sigma) * float(privacy.beta)
    if privacy.noise_over == "sample":
        rows = batch if privacy.normalize_over == "sample" else 1  # a batch-bounded matrix is one release
        return GaussianRelease(
            l2_sensitivity=2 * beta / teachers, noise_std=std / teachers, count=iterations * rows,
            note=f"{privacy.bound}d top-k output gradient of each synthetic sample, averaged over {teachers} "
                 "teacher(s), + N(0, sigma^2 beta^2)/n (Eq. (3); DPDFD §4.4)",
        )
    shrink = 1.0 if privacy.normalize_over == "sample" else batch**-0.5
    return GaussianRelease(
        l2_sensitivity=2 * beta * shrink / teachers, noise_std=std / (teachers * batch), count=iterations,
        note=f"noisy batch mean of the {privacy.bound}d output gradients, averaged over {teachers} teacher(s), "
             "(1/b)(sum_i g_i + N(0, sigma^2 beta^2)) (DPDFD Alg. 1 line 9)",
    )


def plan_dpsd_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
    """The whole run's releases (b * T teacher answers), the paper's claim and the caveats."""
    privacy, method = cfg.privacy, cfg.method
    ledger = Ledger()
    for release in dpsd_releases(cfg, info, int(method.iterations)):
        ledger.record(release)
    if privacy.mode == "label":
        ledger.claim = claims.dpsd_theorem2(float(privacy.query_epsilon))
        if privacy.rr_domain == "all":
            ledger.notes.append(
                "rr_domain=all: when the teacher's class is outside the student's top-k the answer "
                "is confined to the top-k, otherwise it may fall anywhere, so an answer outside the "
                "top-k reveals the class is inside it; the per-query eps-DP of Theorem 2 does not hold"
            )
    elif privacy.mode == "data":
        ledger.claim = claims.dpsd_theorem1(
            beta=float(privacy.beta), num_classes=info.num_classes, batch_size=int(method.batch_size),
            iterations=int(method.iterations), sigma=float(privacy.sigma), delta=float(privacy.delta),
        )
    if method.discriminator == "teacher":
        ledger.notes.append(
            "DPSD-T (§IV-F.3): the generator learns from the teacher's raw outputs, so it carries no "
            "DP guarantee; the synthetic samples the student learns from come from it, so the "
            "rigorous ledger covers neither (eps_rigorous = inf); the claim is the paper's, for the labels"
        )
    return ledger


class PrivateAnnotator:
    """Step 2 of Alg. 1: the teacher's answers for a batch, through the configured mechanism."""

    def __init__(self, cfg: DictConfig, num_classes: int, rng: torch.Generator) -> None:
        self.privacy = cfg.privacy
        self.method = cfg.method
        self.num_classes = num_classes
        self.rng = rng

    def __call__(self, teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
        """Soft targets y_hat for the student's cross-entropy, Eq. (6)."""
        mode = self.privacy.mode
        if mode == "label":
            return self.label_sensitive(teacher_logits, student_logits)
        if mode == "data":
            return self.data_sensitive(teacher_logits, student_logits)
        return self.teacher_targets(teacher_logits)

    def teacher_targets(self, teacher_logits: Tensor) -> Tensor:
        """What the distillation loss L_t compares the student with: the teacher's softmax (DPSD)."""
        return F.softmax(teacher_logits, dim=1)

    def output_topk(self) -> int:
        """k of M_k (§III-B.2); a subclass without M_k returns the number of classes."""
        return int(self.privacy.k)

    def label_sensitive(self, teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
        """Eq. (5): one-hot of top-k randomized response around the teacher's class."""
        labels = mechanisms.topk_randomized_response(
            teacher_logits.argmax(dim=1), student_logits, int(self.privacy.k),
            float(self.privacy.query_epsilon), self.rng, domain=self.privacy.rr_domain,
        )
        return F.one_hot(labels, self.num_classes).to(student_logits.dtype)

    def data_sensitive(self, teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
        """Eq. (2)-(3): a noisy step on the student's outputs along the normalised DKD gradient.

        ``method.outputs`` says what Phi_s is: ``logits`` (the step is taken on logits and the
        target is its softmax) or ``probabilities`` (the step is taken on probabilities and used
        as the target as it is). Eq. (3)'s ``gamma_s / b * sum_i`` is read per sample: sample i's
        target moves by ``gamma_s`` times its own noisy normalised gradient.
        """
        return self.step_outputs(student_logits, self.private_gradient(teacher_logits, student_logits))

    def private_gradient(self, teacher_logits: Tensor, student_logits: Tensor, noise: bool = True) -> Tensor:
        """What Eq. (3) releases: the top-k, normalised dL_t/dPhi_s plus N(0, sigma^2 beta^2).

        ``noise=False`` leaves the noise out, for FedDPSD's server-side noise (Alg. 2 line 14).
        ``teacher_logits`` of shape (n, b, c) stack n teachers (DPDFD §4.4): each one's gradient is
        bounded on its own and the n are averaged before the noise, (1/n)(sum_j g_j + N(0, sigma^2
        beta^2)). ``privacy.bound`` and ``privacy.noise_over`` pick the bound and the noise's
        granularity (:func:`output_gradient_release` accounts for each).
        """
        privacy = self.privacy
        members = teacher_logits.reshape(-1, *student_logits.shape)
        gradient = torch.stack([self._bounded_gradient(member, student_logits) for member in members]).mean(dim=0)
        if not noise:
            return gradient
        std = float(privacy.sigma) * float(privacy.beta) / len(members)
        return mechanisms.add_gaussian_noise(gradient, std, self.rng, over=privacy.noise_over)

    def _bounded_gradient(self, teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
        """One teacher's M_k(dL_t/dPhi_s), normalised (Eq. (3)) or clipped to norm beta."""
        privacy = self.privacy
        with torch.enable_grad():  # the annotation runs under no_grad; L_t's gradient is its input
            gradient, _ = self._output_gradient(teacher_logits, student_logits)
        gradient = mechanisms.keep_topk(gradient, self.output_topk(), by=privacy.gradient_topk)
        return mechanisms.bound_rows(
            gradient, float(privacy.beta), float(privacy.stability), how=privacy.bound, over=privacy.normalize_over
        )

    def step_outputs(self, student_logits: Tensor, noisy_gradient: Tensor) -> Tensor:
        """Eq. (3)'s step: Phi_s - gamma_s * noisy gradient, as a soft target (post-processing)."""
        method = self.method
        logits = student_logits.detach()
        outputs = logits if method.outputs == "logits" else F.softmax(logits, dim=1)
        stepped = outputs - float(method.output_step) * noisy_gradient
        return F.softmax(stepped, dim=1) if method.outputs == "logits" else stepped

    def _output_gradient(self, teacher_logits: Tensor, student_logits: Tensor) -> tuple[Tensor, Tensor]:
        """dL_t/dPhi_s (Eq. (2)) and Phi_s itself, as logits or probabilities per ``method.outputs``."""
        method = self.method
        if method.outputs == "logits":
            outputs = student_logits.detach().requires_grad_(True)
            as_logits = outputs
        else:
            outputs = F.softmax(student_logits.detach(), dim=1).requires_grad_(True)
            as_logits = torch.log(outputs.clamp_min(1e-8))
        teacher_probs = self.teacher_targets(teacher_logits)
        loss_t = losses.distillation_loss(method.distillation_loss, as_logits, teacher_probs, method.dkd_lambda)
        (gradient,) = torch.autograd.grad(loss_t.sum(), outputs)
        return gradient, outputs.detach()


def generator_loss(cfg: DictConfig, discriminator: nn.Module, samples: Tensor) -> Tensor:
    """DPSD Eq. (8): one-hot CE + information entropy + activation norm on the discriminator.

    ``bn_statistics`` (0 in DPSD, whose student has no BatchNorm) adds DP-DFD's BN-statistics term
    for a discriminator with BatchNorm layers (the teacher, in DPSD-T).
    """
    weights = cfg.method.generator_loss
    loss = torch.zeros((), device=samples.device)
    # A 0 weight switches its term off (Table VI): it is not computed, so it adds no gradient at all
    # (0 * a non-finite term would still poison the sum) and, with every term off, no forward pass.
    if not any(weights[term] for term in ("onehot", "entropy", "activation", "bn_statistics")):
        return loss
    if weights.bn_statistics:
        with losses.BatchNormStatistics(discriminator) as bn:
            features, logits = penultimate_features(discriminator, samples)
        loss = loss + weights.bn_statistics * bn.loss()
    else:
        features, logits = penultimate_features(discriminator, samples)
    if weights.onehot:
        loss = loss + weights.onehot * losses.one_hot_loss(logits)
    if weights.entropy:
        loss = loss + weights.entropy * losses.information_entropy_loss(logits, weights.entropy_form)
    if weights.activation:
        loss = loss + weights.activation * losses.activation_loss(features, weights.activation_sign)
    return loss


def student_loss_for_generator(cfg: DictConfig, student: nn.Module, samples: Tensor, targets: Tensor) -> Tensor:
    """The L_s part of the generator's objective (Alg. 1 line 6), per ``generator_loss.student_loss``.

    ``minimize``: Alg. 1 line 6 as printed, the generator descends L_s + L_g. ``maximize``: the
    "adversarial learning" of §III-B.4's title, the generator ascends L_s (seeks samples where the
    student still disagrees with the private annotations, as DFAD does). ``off``: L_g alone. The
    targets are the mechanism's outputs, so every choice is post-processing of the private release.
    """
    mode = cfg.method.generator_loss.student_loss
    if mode == "off":
        return torch.zeros((), device=samples.device)
    loss = losses.soft_cross_entropy(student(samples), targets).mean()
    if mode == "minimize":
        return loss
    if mode == "maximize":
        return -loss
    raise ValueError(f"generator_loss.student_loss must be minimize, maximize or off, got {mode!r}")


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}; known: adam, sgd")


def build_student_and_generator(cfg: DictConfig, info: DataInfo, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """The configured student and generator, Xavier-initialised (DPSD §IV-A) and on ``device``."""
    student = build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
    generator_cfg = cfg.model.generator
    generator = build_generator(generator_cfg.latent_dim, info.channels, info.image_size, generator_cfg.width)
    return xavier_init_(student).to(device), xavier_init_(generator).to(device)


class DPSDTrainer:
    """The state of one DPSD run (student, generator, latents, optimisers) and its Alg. 1 iteration."""

    def __init__(self, ctx: RunContext, query: Callable[[Tensor, Tensor], Tensor] | None = None) -> None:
        """``query(samples, student_logits) -> targets`` replaces Alg. 1 line 4's teacher query
        (FedDPSD, Alg. 2 lines 6-14: the average of the clients' privatised answers)."""
        cfg, info, device, rng = ctx.cfg, ctx.info, ctx.device, ctx.rng
        method = cfg.method
        self.ctx, self.cfg, self.info, self.rng = ctx, cfg, info, rng
        self.teacher = ctx.teachers[0].eval()
        self.student, self.generator = build_student_and_generator(cfg, info, device)
        self.latents = torch.randn(
            int(method.batch_size), int(cfg.model.generator.latent_dim), generator=rng, device=device
        ).requires_grad_(method.latents == "trainable")
        self.student_opt = make_optimizer(method.optimizer, self.student.parameters(), method.student_lr)
        generator_params = list(self.generator.parameters()) + ([self.latents] if self.latents.requires_grad else [])
        self.generator_opt = make_optimizer(method.optimizer, generator_params, method.generator_lr)
        self.annotate = PrivateAnnotator(cfg, info.num_classes, rng)
        self.query = query or self.query_teacher
        self.discriminator = self.teacher if method.discriminator == "teacher" else self.student

    def step(self) -> dict[str, float]:
        """One iteration of Alg. 1 (lines 3-6); returns its losses."""
        cfg, method, ledger = self.cfg, self.cfg.method, self.ctx.ledger
        if method.latents == "resample":
            self.latents = torch.randn(self.latents.shape, generator=self.rng, device=self.latents.device)
        # (1) synthetic data. The generator does not change before line 6 of Alg. 1 uses the same x
        # again, so one forward pass (with its graph) serves both.
        samples = self.generator(self.latents)
        # (2) private annotation: the only place the teacher is queried.
        with torch.no_grad():
            targets = self.query(samples, self.student(samples))
        for release in self.releases(1):
            ledger.record(release)
        # (3) student update, Eq. (7).
        for _ in range(int(method.student_steps)):
            student_loss = losses.soft_cross_entropy(self.student(samples.detach()), targets).mean()
            self.student_opt.zero_grad(set_to_none=True)
            student_loss.backward()
            self.student_opt.step()
        # (4) generator and latent update with L_s + L_g (Alg. 1 line 6), on the updated student.
        gen_loss = generator_loss(cfg, self.discriminator, samples)
        gen_loss = gen_loss + student_loss_for_generator(cfg, self.student, samples, targets)
        self.generator_opt.zero_grad(set_to_none=True)
        if gen_loss.requires_grad:  # every term switched off: the generator stays as it is
            gen_loss.backward()
            self.generator_opt.step()
        return {"student_loss": student_loss.item(), "generator_loss": gen_loss.item()}

    def releases(self, iterations: int) -> list[PrivacyEvent]:
        """What ``iterations`` iterations release (:func:`dpsd_releases`; a variant's own ledger)."""
        return dpsd_releases(self.cfg, self.info, iterations)

    def query_teacher(self, samples: Tensor, student_logits: Tensor) -> Tensor:
        """Alg. 1 line 4: the teacher's answers for ``samples`` through the private mechanism."""
        return self.annotate(self.teacher(samples), student_logits)

    def sample_grid(self) -> Tensor:
        with torch.no_grad():
            return self.generator(self.latents[:64].detach()).cpu()


@register_method("dpsd")
@register_method("dpsd_t")
class DPSD(Method):
    """Alg. 1; ``method=dpsd_t`` is the same algorithm with the teacher as discriminator."""

    plan_ledger = staticmethod(plan_dpsd_ledger)

    def make_trainer(self, ctx: RunContext) -> DPSDTrainer:
        return DPSDTrainer(ctx)

    def fit(self, ctx: RunContext) -> RunResult:
        trainer = self.make_trainer(ctx)
        metrics: dict[str, float] = {}
        for step in range(int(ctx.cfg.method.iterations)):
            metrics = trainer.step()
            ctx.progress(step, metrics)
        return RunResult(
            student=trainer.student, generator=trainer.generator, ledger=ctx.ledger, samples=trainer.sample_grid(),
            metrics={f"final_{name}": value for name, value in metrics.items()},
        )
