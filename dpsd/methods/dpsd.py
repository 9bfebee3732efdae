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

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from dpsd import losses
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
        per_sample = privacy.normalize_over == "sample"
        releases.append(GaussianRelease(
            # Each released row (sample) or batch matrix has L2 norm <= beta after Eq. (3)'s
            # normalisation; a changed teacher can flip it to its opposite: sensitivity 2 beta.
            l2_sensitivity=2 * float(privacy.beta),
            noise_std=float(privacy.sigma) * float(privacy.beta),
            count=iterations * batch if per_sample else iterations,
            note="normalised top-k output gradient of each synthetic sample + N(0, sigma^2 beta^2) (Eq. (3))",
        ))
    if cfg.method.discriminator == "teacher":
        releases.append(UnprotectedRelease(
            count=iterations,
            note="DPSD-T generator update from the teacher's raw outputs: the generator, its "
                 "samples and hence the student are not covered by any guarantee",
        ))
    return releases


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
        return F.softmax(teacher_logits, dim=1)

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
        privacy, method = self.privacy, self.method
        with torch.enable_grad():  # the annotation runs under no_grad; L_t's gradient is its input
            gradient, outputs = self._output_gradient(teacher_logits, student_logits)
        gradient = mechanisms.keep_topk(gradient, int(privacy.k), by=privacy.gradient_topk)
        gradient = mechanisms.normalize_rows(
            gradient, float(privacy.beta), float(privacy.stability), over=privacy.normalize_over
        )
        noisy = gradient + mechanisms.gaussian_noise(gradient, float(privacy.sigma) * float(privacy.beta), self.rng)
        stepped = outputs - float(method.output_step) * noisy
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
        teacher_probs = F.softmax(teacher_logits, dim=1)
        loss_t = losses.distillation_loss(method.distillation_loss, as_logits, teacher_probs, method.dkd_lambda)
        (gradient,) = torch.autograd.grad(loss_t.sum(), outputs)
        return gradient, outputs.detach()


def generator_loss(cfg: DictConfig, discriminator: nn.Module, samples: Tensor) -> Tensor:
    """DPSD Eq. (8): one-hot CE + information entropy + activation norm on the discriminator.

    ``bn_statistics`` (0 in DPSD, whose student has no BatchNorm) adds DP-DFD's BN-statistics term
    for a discriminator with BatchNorm layers (the teacher, in DPSD-T).
    """
    weights = cfg.method.generator_loss
    if weights.bn_statistics:
        with losses.BatchNormStatistics(discriminator) as bn:
            features, logits = penultimate_features(discriminator, samples)
        loss = weights.bn_statistics * bn.loss()
    else:
        features, logits = penultimate_features(discriminator, samples)
        loss = torch.zeros((), device=samples.device)
    loss = loss + weights.onehot * losses.one_hot_loss(logits)
    loss = loss + weights.entropy * losses.information_entropy_loss(logits, weights.entropy_form)
    return loss + weights.activation * losses.activation_loss(features, weights.activation_sign)


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


class DPSDTrainer:
    """The state of one DPSD run (student, generator, latents, optimisers) and its Alg. 1 iteration."""

    def __init__(self, ctx: RunContext) -> None:
        cfg, info, device, rng = ctx.cfg, ctx.info, ctx.device, ctx.rng
        method = cfg.method
        self.ctx, self.cfg, self.info, self.rng = ctx, cfg, info, rng
        self.teacher = ctx.teachers[0].eval()
        self.student = xavier_init_(
            build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
        ).to(device)
        self.generator = xavier_init_(
            build_generator(cfg.model.generator.latent_dim, info.channels, info.image_size, cfg.model.generator.width)
        ).to(device)
        self.latents = torch.randn(
            int(method.batch_size), int(cfg.model.generator.latent_dim), generator=rng, device=device
        ).requires_grad_(method.latents == "trainable")
        self.student_opt = make_optimizer(method.optimizer, self.student.parameters(), method.student_lr)
        generator_params = list(self.generator.parameters()) + ([self.latents] if self.latents.requires_grad else [])
        self.generator_opt = make_optimizer(method.optimizer, generator_params, method.generator_lr)
        self.annotate = PrivateAnnotator(cfg, info.num_classes, rng)
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
            targets = self.annotate(self.teacher(samples), self.student(samples))
        for release in dpsd_releases(cfg, self.info, 1):
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
        gen_loss.backward()
        self.generator_opt.step()
        return {"student_loss": student_loss.item(), "generator_loss": gen_loss.item()}

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
