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


@dataclass(frozen=True)
class Claim:
    """A published privacy statement: ``(epsilon, delta)`` under ``notion``, from ``source``."""

    epsilon: float
    delta: float
    notion: str
    source: str


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
    if not (beta > 0 and sigma > 0 and math.isfinite(beta) and math.isfinite(sigma)):
        raise ConfigError(f"dpsd_theorem1: beta and sigma must be positive and finite, got {beta!r}, {sigma!r}")
    for name, value in (("num_classes", num_classes), ("batch_size", batch_size), ("iterations", iterations)):
        if not value >= 1:
            raise ConfigError(f"dpsd_theorem1: {name} must be >= 1, got {value!r}")
    if not 0 < delta < 1:
        raise ConfigError(f"dpsd_theorem1: delta must be in (0, 1), got {delta!r}")
    slope = 2 * beta**2 * num_classes * batch_size * iterations / sigma**2
    q_high = 1 + math.sqrt(math.log(1 / delta) / slope)
    q_best = brentq(lambda q: slope * (q - 1) ** 2 + math.log(delta * q), 1.0, q_high, xtol=1e-14, rtol=1e-14)
    epsilon = rdp_to_dp_mironov(slope * q_best, q_best, delta)
    # Epsilon is non-negative by definition; the formula dips below zero only when slope ~ 0.
    return Claim(epsilon=max(0.0, epsilon), delta=delta, notion="(eps, delta)-DP", source="DPSD Theorem 1")


def dpsd_theorem2(epsilon: float) -> Claim:
    """DPSD Theorem 2 (proof: Appendix B-B via Lemmas 2-3): the label-sensitive protection is
    ``(epsilon, 0)``-label-DP, where ``epsilon`` is the randomized response's per-answer epsilon of
    Eq. (4), however many answers are given."""
    if not epsilon >= 0:
        raise ConfigError(f"dpsd_theorem2: epsilon must be >= 0, got {epsilon!r}")
    return Claim(epsilon=epsilon, delta=0.0, notion="eps-label-DP", source="DPSD Theorem 2")
