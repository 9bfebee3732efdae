"""The teacher's private answers for a batch of synthetic samples (DPSD §III-B, Eq. (2)-(5)).

:class:`PrivateAnnotator` is step 2 of DPSD's Alg. 1 and the base of DPDFD's and FedDPSD's
annotators. Each of its mechanism calls returns the event it realised, and the annotator records
that event in the ledger it was given; :func:`output_gradient_release` is the *plan* of its
data-sensitive mode (what ``plan_ledger`` predicts from the config), which the contract test
compares with the realised events.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor

from dpsd import losses
from dpsd.distill.survival import topk_survival
from dpsd.errors import ConfigError
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import GaussianRelease

BOUNDS = ("normalize", "clip")
NOISE_OVER = ("sample", "batch")
LABEL_NOTE = "teacher label of each synthetic sample, top-k randomized response (Eq. (5))"
RR_WITH_PRIOR_NOTE = ("teacher label of each synthetic sample, RRWithPrior (Ghazi et al. 2021 Alg. 2; variant), "
                      "accounted as binary RR_eps, which dominates it for every per-sample k")
GRADIENT_NOTE = "bounded output gradient of each synthetic sample + N(0, sigma^2 beta^2)/n (Eq. (3); DPDFD §4.4)"
MEAN_NOTE = "noisy sum of the batch's bounded output gradients, (1/b)(sum_i g_i + N(0, sigma^2 beta^2)/n) (DPDFD Alg. 1 line 9)"


def gradient_sensitivity(cfg: DictConfig, teachers: int, batch: int, disjoint_rows: bool = False) -> float:
    """L2 sensitivity of one data-mode release (Eq. (3); DPDFD Eq. (4) and §4.4).

    Each teacher's bounded gradient row (``normalize_over=sample``) or batch matrix (``batch``)
    has L2 norm <= beta; a changed record may turn it into its opposite (2 beta); with n members
    on disjoint partitions averaged before the noise, one record changes one member: 2 beta / n.
    That is one release with ``noise_over=sample`` (a row, or the batch matrix as a whole). With
    ``noise_over=batch`` the release is the sum of the b rows: b times a row's (each row may
    change), or sqrt(b) times the matrix's Frobenius bound (``|1^T D| <= sqrt(b) ||D||_F``).
    ``disjoint_rows`` (DPDFD's direct training: each row is a different private record): one
    record changes one row-bounded row, so the sum moves by one row's 2 beta / n.
    """
    privacy = cfg.privacy
    one = 2 * float(privacy.beta) / teachers
    if privacy.noise_over == "sample":
        return one
    if privacy.normalize_over == "sample":
        return one if disjoint_rows else one * batch
    return one * math.sqrt(batch)


def output_gradient_release(cfg: DictConfig, iterations: int, teachers: int = 1) -> GaussianRelease:
    """The plan of the data-mode releases of ``iterations`` iterations (what
    :meth:`PrivateAnnotator.private_gradient` realises): noise std sigma beta / n, the sensitivity of
    :func:`gradient_sensitivity`; ``noise_over=sample`` releases each of the b rows (b per iteration;
    a batch-bounded matrix is one), ``batch`` one noisy sum per iteration."""
    privacy, batch = cfg.privacy, int(cfg.method.batch_size)
    if privacy.bound not in BOUNDS:
        raise ConfigError(f"privacy.bound must be one of {', '.join(BOUNDS)}, got {privacy.bound!r}")
    if privacy.noise_over not in NOISE_OVER:
        raise ConfigError(f"privacy.noise_over must be one of {', '.join(NOISE_OVER)}, got {privacy.noise_over!r}")
    per_iteration = batch if privacy.noise_over == "sample" and privacy.normalize_over == "sample" else 1
    return GaussianRelease(
        l2_sensitivity=gradient_sensitivity(cfg, teachers, batch),
        noise_std=float(privacy.sigma) * float(privacy.beta) / teachers, count=iterations * per_iteration,
        note=GRADIENT_NOTE if privacy.noise_over == "sample" else MEAN_NOTE, answers=batch // per_iteration,
    )


class PrivateAnnotator:
    """Step 2 of Alg. 1: the teacher's answers for a batch, through the configured mechanism."""

    def __init__(self, cfg: DictConfig, num_classes: int, rng: torch.Generator, ledger: Ledger,
                 disjoint_rows: bool = False) -> None:
        """``ledger`` receives the event of every mechanism call this annotator makes.
        ``disjoint_rows``: each row of a batch is a different private record (DPDFD's direct
        training), so the rows compose in parallel (:func:`gradient_sensitivity`)."""
        self.cfg = cfg
        self.privacy = cfg.privacy
        self.method = cfg.method
        self.num_classes = num_classes
        self.rng = rng
        self.ledger = ledger
        self.disjoint_rows = disjoint_rows
        self.survival: list[Tensor] = []  # each Eq. (5) annotation's top-k survival share (dpsd.distill.survival)

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
        """Eq. (5): one-hot of top-k randomized response around the teacher's class, the share of the batch whose
        teacher class lies in the student's top-k kept in :attr:`survival`; with ``privacy.rr_prior=rr_with_prior``
        Ghazi et al.'s RRWithPrior on the student's softmax (a labelled variant: the set size k is chosen per sample
        from the prior)."""
        if self.privacy.rr_prior == "rr_with_prior":
            labels, event = mechanisms.rr_with_prior(
                teacher_logits.argmax(dim=1), F.softmax(student_logits, dim=1), float(self.privacy.query_epsilon), self.rng,
                note=RR_WITH_PRIOR_NOTE,
            )
            self.ledger.record(event)
            return F.one_hot(labels, self.num_classes).to(student_logits.dtype)
        self.survival.append(topk_survival(teacher_logits.argmax(dim=1), student_logits, int(self.privacy.k)))
        labels, event = mechanisms.topk_randomized_response(
            teacher_logits.argmax(dim=1), student_logits, int(self.privacy.k),
            float(self.privacy.query_epsilon), self.rng, domain=self.privacy.rr_domain, note=LABEL_NOTE,
        )
        self.ledger.record(event)
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
        sensitivity = gradient_sensitivity(self.cfg, len(members), len(gradient), self.disjoint_rows)
        if privacy.noise_over == "sample":
            release = "rows" if privacy.normalize_over == "sample" and not self.disjoint_rows else "once"
            noisy, event = mechanisms.gaussian_mechanism(gradient, sensitivity, std, self.rng, release, GRADIENT_NOTE)
        else:
            noisy, event = mechanisms.noisy_mean(gradient, sensitivity, std, self.rng, MEAN_NOTE)
        self.ledger.record(event)
        return noisy

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
        """Eq. (3)'s step: Phi_s - gamma_s * noisy gradient, as a soft target (post-processing).

        ``method.output_step_scale=inverse_bound`` (a labelled repair, not the paper's method) takes
        the step gamma_s / beta: the bounded gradient has norm <= beta, so the outputs then move by up
        to gamma_s whatever beta (with beta = 5e-3 and gamma_s = 0.1 Eq. (3) moves them by 5e-4)."""
        method = self.method
        logits = student_logits.detach()
        outputs = logits if method.outputs == "logits" else F.softmax(logits, dim=1)
        step = float(method.output_step)
        if method.output_step_scale == "inverse_bound":
            step = step / float(self.privacy.beta)
        stepped = outputs - step * noisy_gradient
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
        loss_t = losses.distillation_loss(method.distillation_loss, as_logits, teacher_probs,
                                          float(method.dkd_lambda), float(method.dkd_temperature))
        (gradient,) = torch.autograd.grad(loss_t.sum(), outputs)
        return gradient, outputs.detach()
