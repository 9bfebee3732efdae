"""The papers' own privacy statements, reproduced exactly as published.

These numbers are the "claimed" ledger: what the paper's formula gives for a configuration, named
after its source. They are not re-derived or corrected here; :mod:`dpsd.privacy.accounting` gives
the rigorous number for the mechanism as implemented, and reports show both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.optimize import brentq

from dpsd.errors import ConfigError


PLACEHOLDER = "TODO"
"""How a scaffolded method's claim starts until a person writes it (:mod:`dpsd.scaffold`): refused by :class:`Claim`."""


@dataclass(frozen=True)
class Claim:
    """A published privacy statement: ``(epsilon, delta)`` under ``notion``, from ``source``."""

    epsilon: float
    delta: float
    notion: str
    source: str

    def __post_init__(self) -> None:
        for name in ("notion", "source"):
            if str(getattr(self, name)).startswith(PLACEHOLDER):
                raise ConfigError(f"the claim's {name} is still the placeholder `dpsd new method` wrote "
                                  f"({getattr(self, name)!r}): write the paper's own {name}")


def rdp_to_dp_mironov(rdp_epsilon_at_q: float, q: float, delta: float) -> float:
    """DPSD Theorem 3 ("Convert RDP to DP", attributed there to Mironov [57]), as printed.

    A (q, eps)-RDP mechanism is ``(eps + log((q-1)/q) - (log(delta) + log(q)) / (q-1), delta)``-DP.
    """
    if not q > 1:
        raise ConfigError(f"rdp_to_dp_mironov: the order q must be > 1, got {q!r}")
    if not 0 < delta < 1:
        raise ConfigError(f"rdp_to_dp_mironov: delta must be in (0, 1), got {delta!r}")
    return rdp_epsilon_at_q + math.log((q - 1) / q) - (math.log(delta) + math.log(q)) / (q - 1)


def dpsd_theorem1(
    beta: float, num_classes: int, batch_size: int, iterations: int, sigma: float, delta: float
) -> Claim:
    """DPSD Theorem 1 (proof: Appendix B-A), verbatim: the data-sensitive protection is

    ``(min over q > 1 of 2 beta^2 c b T q / sigma^2 + log((q-1)/q) - (log(delta) + log(q))/(q-1), delta)``-DP,

    i.e. the RDP curve ``(q, 2 beta^2 c b T q / sigma^2)`` (Theorem 5 with the Lemma 1 sensitivity
    2 beta sqrt(c), composed over b T queries) converted by Theorem 3 (:func:`rdp_to_dp_mironov`).

    Reproduced as published: the theorem keeps beta^2 in the numerator although Eq. (3) adds noise
    of std sigma * beta, under which a standard accountant would cancel beta. Also as published, c
    (``num_classes``) enters through Lemma 1's coordinate-wise sensitivity 2 beta sqrt(c).

    The minimum is found exactly: with ``a = 2 beta^2 c b T / sigma^2`` the derivative of the
    objective is ``a + log(delta q) / (q-1)^2``, whose numerator ``a (q-1)^2 + log(delta q)`` is
    increasing in q, negative at q = 1 and positive at ``q = 1 + sqrt(log(1/delta) / a)``; the
    unique root is the minimiser.
    """
    if sigma == 0 and beta > 0:  # the formula at sigma = 0 (privacy.noiseless): no privacy
        return Claim(epsilon=math.inf, delta=delta, notion="(eps, delta)-DP", source="DPSD Theorem 1")
    if not (beta > 0 and sigma > 0 and math.isfinite(beta) and math.isfinite(sigma)):
        raise ConfigError(f"dpsd_theorem1: beta and sigma must be positive and finite, got {beta!r}, {sigma!r}")
    for name, value in (("num_classes", num_classes), ("batch_size", batch_size), ("iterations", iterations)):
        if not value >= 1:
            raise ConfigError(f"dpsd_theorem1: {name} must be >= 1, got {value!r}")
    if not 0 < delta < 1:
        raise ConfigError(f"dpsd_theorem1: delta must be in (0, 1), got {delta!r}")
    slope = 2 * beta**2 * num_classes * batch_size * iterations / sigma**2
    return Claim(epsilon=linear_rdp_to_dp(slope, delta), delta=delta, notion="(eps, delta)-DP", source="DPSD Theorem 1")


def linear_rdp_to_dp(slope: float, delta: float) -> float:
    """``min over q > 1`` of :func:`rdp_to_dp_mironov` for the linear RDP curve ``(q, slope * q)``
    (DPSD Theorem 1, DPDFD Theorem 3), found exactly as :func:`dpsd_theorem1` explains."""
    q_high = 1 + math.sqrt(math.log(1 / delta) / slope)
    q_best = brentq(lambda q: slope * (q - 1) ** 2 + math.log(delta * q), 1.0, q_high, xtol=1e-14, rtol=1e-14)
    # Epsilon is non-negative by definition; the formula dips below zero only when slope ~ 0.
    return max(0.0, rdp_to_dp_mironov(slope * q_best, q_best, delta))


def dpsd_theorem2(epsilon: float) -> Claim:
    """DPSD Theorem 2 (proof: Appendix B-B via Lemmas 2-3): the label-sensitive protection is
    ``(epsilon, 0)``-label-DP, where ``epsilon`` is the randomized response's per-answer epsilon of
    Eq. (4), however many answers are given."""
    if not epsilon >= 0:
        raise ConfigError(f"dpsd_theorem2: epsilon must be >= 0, got {epsilon!r}")
    return Claim(epsilon=epsilon, delta=0.0, notion="eps-label-DP", source="DPSD Theorem 2")


def rr_with_prior_label_dp(epsilon: float) -> Claim:
    """Ghazi et al., NeurIPS 2021, "Deep Learning with Label Differential Privacy", §3.1: RRWithPrior
    (Alg. 2) is eps-label-DP per answer (its answer set depends on the prior only). Applied to each
    answer as DPSD Theorem 2 is; the variant's own statement, not DPSD's."""
    if not epsilon >= 0:
        raise ConfigError(f"rr_with_prior_label_dp: epsilon must be >= 0, got {epsilon!r}")
    return Claim(epsilon=epsilon, delta=0.0, notion="eps-label-DP", source="RRWithPrior (Ghazi et al. 2021, Alg. 2)")


def dp_dfd_label_dp(epsilon: float) -> Claim:
    """DP-DFD (Liu et al., "Privacy-Preserving Student Learning with Differentially Private Data-Free
    Distillation"), §II-A and §II-C, verbatim: "the labels from the teacher are protected by the
    selective randomized response module which implements eps-LabelDP", and "Unlike DPSGD and PATE,
    which require the composition theorems to calculate the final privacy budget eps, we query the
    random labels once and reuse them in training process." The paper states no theorem: the claim
    is ``(epsilon, 0)``-label-DP with ``epsilon`` the per-answer epsilon of Alg. 1 line 9, however
    many stages and samples are labelled."""
    if not epsilon >= 0:
        raise ConfigError(f"dp_dfd_label_dp: epsilon must be >= 0, got {epsilon!r}")
    return Claim(epsilon=epsilon, delta=0.0, notion="eps-label-DP", source="DP-DFD §II-A, §II-C (Alg. 1)")


def dgd_privacy_analysis(queries: int, query_epsilon: float, latent_epsilon: float, delta: float) -> Claim:
    """DGD's privacy analysis (§III-E and §IV of the excerpts), verbatim: the discriminative stream is
    ``(|Q| eps_0^2 + eps_0 sqrt(-2 |Q| log delta), delta)``-DP over |Q| queries of the eps_0-DP Laplace
    aggregation (Eq. (3)), the generative stream eps_1-DP (Laplace of scale 2c/eps_1 on normalised
    latent codes), and by composition the whole is
    ``(|Q| eps_0^2 + eps_0 sqrt(-2 |Q| log delta) + eps_1, delta)``-DP.

    As published: the first term is |Q| eps_0^2, not the advanced composition theorem's
    |Q| eps_0 (e^eps_0 - 1) (Dwork-Roth Thm. 3.20); the two agree to first order in eps_0. The
    excerpts' example, eps_0 = 1/20, delta = 1e-5, 400 queries, gives 1 + 4.798 = 5.80 (+ eps_1).
    """
    if not (query_epsilon >= 0 and latent_epsilon >= 0):
        raise ConfigError(f"dgd_privacy_analysis: epsilons must be >= 0, got {query_epsilon!r}, {latent_epsilon!r}")
    if not 0 < delta < 1:
        raise ConfigError(f"dgd_privacy_analysis: delta must be in (0, 1), got {delta!r}")
    epsilon = queries * query_epsilon**2 + query_epsilon * math.sqrt(-2 * queries * math.log(delta)) + latent_epsilon
    return Claim(epsilon=epsilon, delta=delta, notion="(eps, delta)-DP", source="DGD §III-E privacy analysis")


def pate_gnmax_data_independent(queries: int, sigma: float, delta: float) -> float:
    """PATE+ (Papernot et al. 2018, Prop. 8 and Thm. 5), data-independent: GNMax answers are
    (lambda, lambda / sigma^2)-RDP each, so eps = min over integer lambda in [2, 256] of
    ``queries * lambda / sigma^2 + ln(1/delta) / (lambda - 1)``."""
    if sigma == 0:  # no noise (privacy.noiseless): no privacy
        return math.inf
    log_inv_delta = math.log(1 / delta)
    return min(queries * order / sigma**2 + log_inv_delta / (order - 1) for order in range(2, 257))


def dpdfd_theorem3(
    norm_bound: float, teachers: int, batch_size: int, iterations: int, sigma: float, delta: float
) -> Claim:
    """DPDFD Theorem 3 (Liu et al., IJCAI 2023, §4.2), verbatim: DPDFD guarantees

    ``(2 C^2 n B T lambda / sigma^2 + log((lambda-1)/lambda) - (log(delta) + log(lambda))/(lambda-1), delta)``-DP
    "for all lambda >= 1"; the claim is the best of these, the minimum over lambda > 1
    (:func:`linear_rdp_to_dp` with slope ``2 C^2 n B T / sigma^2``).

    Reproduced as published: like DPSD Theorem 1 it keeps C^2 in the numerator although Eq. (4)
    adds noise of std sigma * C, under which a standard accountant cancels C. The paper does not
    define n; it is read as the number of teachers of §4.4 (n = 1 for one teacher), the only n in
    the paper (``method.theorem3_n`` in conf/method/dpdfd.yaml offers the number of classes, the c
    of DPSD Theorem 1, as the other reading).
    """
    if sigma == 0 and norm_bound > 0:  # the formula at sigma = 0 (privacy.noiseless): no privacy
        return Claim(epsilon=math.inf, delta=delta, notion="(eps, delta)-DP", source="DPDFD Theorem 3")
    if not (norm_bound > 0 and sigma > 0 and math.isfinite(norm_bound) and math.isfinite(sigma)):
        raise ConfigError(f"dpdfd_theorem3: C and sigma must be positive and finite, got {norm_bound!r}, {sigma!r}")
    for name, value in (("n", teachers), ("batch_size", batch_size), ("iterations", iterations)):
        if not value >= 1:
            raise ConfigError(f"dpdfd_theorem3: {name} must be >= 1, got {value!r}")
    if not 0 < delta < 1:
        raise ConfigError(f"dpdfd_theorem3: delta must be in (0, 1), got {delta!r}")
    slope = 2 * norm_bound**2 * teachers * batch_size * iterations / sigma**2
    return Claim(epsilon=linear_rdp_to_dp(slope, delta), delta=delta, notion="(eps, delta)-DP", source="DPDFD Theorem 3")
