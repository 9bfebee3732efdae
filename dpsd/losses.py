"""Distillation and generator losses shared by the methods.

Each function returns the *sum* over the batch unless it says otherwise, matching the papers'
``sum_{i=1}^b`` notation; callers divide by the batch size where an optimiser step wants a mean.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

_EPS = 1e-8


def soft_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """DPSD Eq. (7): cross-entropy of the student's outputs against (possibly soft) targets, per row."""
    return -(target * F.log_softmax(logits, dim=1)).sum(dim=1)


def kd_loss(student_logits: Tensor, teacher_probs: Tensor) -> Tensor:
    """Classic KD (Hinton et al.): KL(teacher || student) per row, at temperature 1."""
    log_ps = F.log_softmax(student_logits, dim=1)
    return (teacher_probs * (torch.log(teacher_probs + _EPS) - log_ps)).sum(dim=1)


DISTILLATION_LOSSES = ("dkd", "dkd_as_printed", "kd")
"""The names ``method.distillation_loss`` accepts (:func:`distillation_loss`)."""


def dkd_loss(student_logits: Tensor, teacher_probs: Tensor, lam: float, temperature: float) -> Tensor:
    """DPSD Eq. (2) read as the DKD it cites ([88]: Zhao et al., CVPR 2022): T^2 (l_tc + lam * l_nc), per row.

    r is the teacher's class (argmax, as DPSD §III-B.2 says; DKD's r is the ground-truth label, which a
    data-free loop does not have). With p = softmax(. / T) of each side:

    * l_tc (DKD's TCKD): the binary KL between (p_t,r, 1 - p_t,r) and (p_s,r, 1 - p_s,r);
    * l_nc (DKD's NCKD): the KL between the non-target distributions p_.,j / (1 - p_.,r), j != r.

    Eq. (2) weights l_tc by 1 and l_nc by lambda (DPSD: 8.0), i.e. DKD's alpha = 1 and beta = lambda;
    ``lam`` is that lambda (``method.dkd_lambda``).
    Both terms are KL divergences, so the loss is >= 0 and is 0, with a zero gradient, where the
    student matches the teacher; the T^2 factor keeps the gradient's scale across temperatures
    (Hinton et al.; DKD's code multiplies both terms by it).

    ``temperature`` T: DPSD is silent on it (neither Eq. (2) nor §IV-A names one); the default,
    ``method.dkd_temperature`` = 4, is DKD's, the T of its CIFAR-100 configurations (mdistiller's
    ``configs/cifar100/dkd``, with alpha 1, beta 8). The teacher side arrives as probabilities
    (what ``PrivateAnnotator.teacher_targets`` gives: the teacher's softmax, or DPDFD's one-hot argmax).
    They are tempered as softmax(log p_t / T), i.e. p_t^(1/T) renormalised: for a softmax teacher this
    *is* softmax(z_t / T), since log p_t and z_t differ by a per-row constant; a one-hot teacher stays
    one-hot. The student's logits are divided by T.

    Edge cases, without NaN: a teacher with no non-target mass (one-hot, or 1 - p_t,r rounded to 0)
    has no non-target distribution to transfer; its l_nc is 0 (and l_tc is -log p_s,r), and entries
    with p = 0 contribute 0 log 0 = 0.
    """
    tau = float(temperature)
    target = teacher_probs.argmax(dim=1, keepdim=True)
    is_target = torch.zeros_like(teacher_probs, dtype=torch.bool).scatter_(1, target, True)
    log_pt = F.log_softmax(torch.log(teacher_probs.detach()) / tau, dim=1)  # log 0 = -inf: stays a zero
    log_ps = F.log_softmax(student_logits / tau, dim=1)
    # (log p_r, log(1 - p_r)) of each side; the rest's mass as a logsumexp keeps 1 - p_r accurate near 1
    rest_t = torch.logsumexp(log_pt.masked_fill(is_target, -math.inf), dim=1, keepdim=True)
    rest_s = torch.logsumexp(log_ps.masked_fill(is_target, -math.inf), dim=1, keepdim=True)
    binary_t = torch.cat([log_pt.gather(1, target), rest_t], dim=1).exp()
    binary_log_s = torch.cat([log_ps.gather(1, target), rest_s], dim=1)
    l_tc = (torch.special.xlogy(binary_t, binary_t) - binary_t * binary_log_s).sum(dim=1)
    # the non-target distributions, p_j / (1 - p_r) for j != r; a teacher row without any is all zeros
    has_rest = torch.isfinite(rest_t)
    q_t = (log_pt - torch.where(has_rest, rest_t, torch.zeros_like(rest_t))).exp().masked_fill(is_target, 0.0)
    q_t = q_t * has_rest
    log_q_s = F.log_softmax((student_logits / tau).masked_fill(is_target, -math.inf), dim=1).masked_fill(is_target, 0.0)
    l_nc = (torch.special.xlogy(q_t, q_t) - q_t * log_q_s).sum(dim=1)
    return tau**2 * (l_tc + lam * l_nc)


def dkd_as_printed_loss(student_logits: Tensor, teacher_probs: Tensor, lam: float) -> Tensor:
    """DPSD Eq. (2) exactly as printed, the misprint kept for comparison (``method.distillation_loss=dkd_as_printed``).

    With r the teacher's class, p_t and p_s the teacher's and student's probabilities:
    l_tc = p_t,r log(p_t,r / p_s,r) + (1 - p_t,r) log((1 - p_t,r) / (1 - p_s,r)) and
    l_nc = sum_{j != r} p_t,j / (1 - p_t,j) * log(p_t,j (1 - p_s,j) / (p_s,j (1 - p_t,j))); returns
    l_tc + ``lam`` * l_nc per row, with no temperature (Eq. (2) has none). l_nc divides each class by its
    *own* complement 1 - p_.,j where DKD ([88]) normalises the non-target distribution by the target's
    1 - p_.,r: it is not a divergence. It can be negative, and at student = teacher it is 0 while its
    gradient is not (tests/test_losses.py), so a descent step moves a matching student away. Every run
    recorded as ``dkd`` before ``method.dkd_temperature`` existed computed this.
    """
    # 1 - 1e-8 rounds to 1 in float32: a one-hot or saturated teacher (p_t,r = 1) made l_tc and l_nc NaN
    eps = max(_EPS, torch.finfo(teacher_probs.dtype).eps)
    p_s = F.softmax(student_logits, dim=1).clamp(eps, 1 - eps)
    p_t = teacher_probs.clamp(eps, 1 - eps)
    target = p_t.argmax(dim=1, keepdim=True)
    pt_r, ps_r = p_t.gather(1, target), p_s.gather(1, target)
    l_tc = pt_r * torch.log(pt_r / ps_r) + (1 - pt_r) * torch.log((1 - pt_r) / (1 - ps_r))
    non_target = torch.ones_like(p_t).scatter_(1, target, 0.0)
    ratio = p_t / (1 - p_t)
    l_nc = (non_target * ratio * torch.log(p_t * (1 - p_s) / (p_s * (1 - p_t)))).sum(dim=1, keepdim=True)
    return (l_tc + lam * l_nc).squeeze(1)


def distillation_loss(name: str, student_logits: Tensor, teacher_probs: Tensor, lam: float,
                      temperature: float) -> Tensor:
    """The distillation loss L_t named by ``method.distillation_loss``, per row: ``dkd`` (Eq. (2) as DKD,
    :func:`dkd_loss`), ``dkd_as_printed`` (:func:`dkd_as_printed_loss`, no temperature) or ``kd``
    (classic KD at temperature 1, DPSD Fig. 6's other arm); ``lam`` is Eq. (2)'s lambda."""
    if name == "dkd":
        return dkd_loss(student_logits, teacher_probs, lam, temperature)
    if name == "dkd_as_printed":
        return dkd_as_printed_loss(student_logits, teacher_probs, lam)
    if name == "kd":
        return kd_loss(student_logits, teacher_probs)
    raise ValueError(f"unknown distillation loss {name!r}; known: {', '.join(DISTILLATION_LOSSES)}")


def one_hot_loss(logits: Tensor) -> Tensor:
    """DPSD Eq. (8), first term: cross-entropy against the discriminator's own argmax (mean over batch)."""
    return F.cross_entropy(logits, logits.argmax(dim=1))


def information_entropy_loss(logits: Tensor, form: str) -> Tensor:
    """DPSD Eq. (8), second term.

    ``form="batch_mean"`` (DAFL): p_bar log p_bar of the batch-mean prediction, minimised to
    balance classes — the purpose the text gives. ``form="per_sample"``: the literal
    ``sum_i Phi_s(x_i) log Phi_s(x_i)`` averaged over samples, which minimised makes each sample
    *less* confident.
    """
    probs = F.softmax(logits, dim=1)
    if form == "batch_mean":
        mean = probs.mean(dim=0)
        return (mean * torch.log(mean + _EPS)).sum()
    if form == "per_sample":
        return (probs * torch.log(probs + _EPS)).sum(dim=1).mean()
    raise ValueError(f"information_entropy_loss: form must be 'batch_mean' or 'per_sample', got {form!r}")


def activation_loss(features: Tensor, sign: str) -> Tensor:
    """DPSD Eq. (8), third term: L2 norm of the backbone features (mean over batch).

    ``sign="maximize"`` returns ``-||f||`` (DAFL, and the text: real data activates the backbone
    more); ``sign="minimize"`` returns ``+||f||`` as Eq. (8) literally adds it to the minimised loss.
    """
    norm = features.flatten(1).norm(dim=1).mean()
    if sign == "maximize":
        return -norm
    if sign == "minimize":
        return norm
    raise ValueError(f"activation_loss: sign must be 'maximize' or 'minimize', got {sign!r}")


class BatchNormStatistics:
    """DeepInversion's BN-statistics loss (DP-DFD Eq. (2), third term), as a context manager.

    Within ``with BatchNormStatistics(model) as bn: model(x)``, ``bn.loss()`` is the sum over the
    model's BatchNorm2d layers of ``||mu_l(x) - running_mean_l||_2 + ||var_l(x) - running_var_l||_2``:
    how far the batch's feature statistics are from those the model saw on its (private) training
    data. Only a model with BatchNorm layers has such statistics.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        if not self.layers:
            raise ValueError(f"{type(model).__name__} has no BatchNorm2d layer: no BN-statistics loss")
        self._terms: list[Tensor] = []
        self._handles: list = []

    def _hook(self, layer: torch.nn.BatchNorm2d, inputs: tuple[Tensor, ...]) -> None:
        # a pre-hook: compare with the running statistics before a train-mode forward updates them
        features = inputs[0]
        mean = features.mean(dim=(0, 2, 3))
        var = features.var(dim=(0, 2, 3), unbiased=False)
        self._terms.append((mean - layer.running_mean).norm() + (var - layer.running_var).norm())

    def __enter__(self) -> "BatchNormStatistics":
        self._terms = []
        self._handles = [layer.register_forward_pre_hook(self._hook) for layer in self.layers]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def loss(self) -> Tensor:
        return torch.stack(self._terms).sum()
