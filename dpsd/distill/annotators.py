"""The teacher's private answers for a batch of synthetic samples (DPSD §III-B, Eq. (2)-(5)).

:class:`PrivateAnnotator` is step 2 of DPSD's Alg. 1 and the base of DPDFD's and FedDPSD's
annotators; :func:`output_gradient_release` is the privacy event of its data-sensitive mode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor

from dpsd import losses
from dpsd.errors import ConfigError
from dpsd.privacy import mechanisms
from dpsd.privacy.events import GaussianRelease

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
        """Eq. (5): one-hot of top-k randomized response around the teacher's class; with
        ``privacy.rr_prior=rr_with_prior`` Ghazi et al.'s RRWithPrior on the student's softmax
        (a labelled variant: the set size k is chosen per sample from the prior)."""
        if self.privacy.rr_prior == "rr_with_prior":
            labels = mechanisms.rr_with_prior(
                teacher_logits.argmax(dim=1), F.softmax(student_logits, dim=1), float(self.privacy.query_epsilon), self.rng,
            )
            return F.one_hot(labels, self.num_classes).to(student_logits.dtype)
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
