"""PATE's data-dependent RDP analysis of GNMax (Papernot et al. 2018, ICLR, §3 and Appendix A).

GNMax answers ``argmax_j (n_j + N(0, sigma^2))``. Its data-independent bound is ``lambda / sigma^2``
at every order (Prop. 8). When the teachers agree strongly, the answer is almost certainly the
plurality class, and Theorem 6 gives a much smaller bound as a function of an upper bound ``q`` on
the probability of any other answer (Prop. 7). That bound is a function of the private votes: it is
itself private, and publishing it needs the smooth-sensitivity analysis of the same paper (§4.2),
which this module does not implement. The harness therefore reports it only as a run metric,
never as ``eps_claimed`` or ``eps_rigorous``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

from dpsd.errors import ConfigError

DEFAULT_ORDERS = np.concatenate([np.linspace(1.1, 10.9, 99), np.arange(11, 101), [128, 256, 512]])

NOT_PUBLISHABLE = ("data-dependent (Papernot et al. 2018, Thm. 6): a function of the private votes; it may not "
                   "be published without the smooth-sensitivity analysis of §4.2, which is not implemented")


def _log1mexp(x: float) -> float:
    """``log(1 - e^x)`` for ``x <= 0``, without cancellation."""
    if x > 0:
        raise ValueError(f"log1mexp needs x <= 0, got {x}")
    if x == 0:
        return -math.inf
    return math.log1p(-math.exp(x)) if x < -math.log(2) else math.log(-math.expm1(x))


def gnmax_log_q(counts: np.ndarray, sigma: float) -> float:
    """Prop. 7: ``log q``, q a union bound on Pr[GNMax answers other than the plurality class].

    Class j beats the plurality class i* when ``N_j - N_i* > n_i* - n_j``; the difference of two
    N(0, sigma^2) draws is N(0, 2 sigma^2). q is capped at ``1 - 1/c`` (uniform answers).
    """
    counts = np.asarray(counts, dtype=float)
    top = int(np.argmax(counts))
    gaps = np.delete(counts[top] - counts, top)
    log_q = float(logsumexp(norm.logsf(gaps, scale=math.sqrt(2) * sigma)))
    return min(log_q, math.log(1 - 1 / len(counts)))


def gnmax_data_dependent_rdp(log_q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """Theorem 6 with Prop. 10's choice of the two higher orders mu_2 = sigma sqrt(log(1/q)),
    mu_1 = mu_2 + 1 (the data-independent eps_i = mu_i / sigma^2 at those orders):

    ``RDP(lambda) <= 1/(lambda-1) log((1-q) A^(lambda-1) + q B^(lambda-1))`` with
    ``A = (1-q) / (1 - (q e^eps_2)^((mu_2-1)/mu_2))`` and ``B = e^eps_1 / q^(1/(mu_1-1))``,
    valid for ``lambda < mu_1`` when ``q`` lies in the range where the bound increases with q
    (``q <= e^((mu_2-1) eps_2) / (mu_1/(mu_1-1) * mu_2/(mu_2-1))^mu_2``) and ``mu_2 > 1``.
    Elsewhere, and wherever it is larger, the data-independent ``lambda / sigma^2`` is kept.
    """
    orders = np.asarray(orders, dtype=float)
    if log_q > 0 or not sigma > 0 or np.any(orders <= 1):
        raise ConfigError(f"gnmax_data_dependent_rdp: need log_q <= 0, sigma > 0, orders > 1; got {log_q}, {sigma}")
    independent = orders / sigma**2
    if math.isinf(log_q):  # the answer is fixed: nothing is revealed
        return np.zeros_like(orders)
    mu2 = sigma * math.sqrt(-log_q)
    mu1 = mu2 + 1
    eps1, eps2 = mu1 / sigma**2, mu2 / sigma**2
    applies = (orders < mu1) & (mu2 > 1)
    in_range = (mu2 > 1 and -log_q > eps2
                and log_q <= (mu2 - 1) * eps2 - mu2 * (math.log(mu1 / (mu1 - 1)) + math.log(mu2 / (mu2 - 1))))
    if not (applies.any() and in_range):
        return independent
    log_1mq = _log1mexp(log_q)
    log_a = log_1mq - _log1mexp((log_q + eps2) * (mu2 - 1) / mu2)
    log_b = eps1 - log_q / (mu1 - 1)
    bound = np.logaddexp(log_1mq + (orders - 1) * log_a, log_q + (orders - 1) * log_b) / (orders - 1)
    return np.where(applies, np.minimum(independent, bound), independent)


def gnmax_data_dependent_epsilon(votes: np.ndarray, sigma: float, delta: float,
                                 orders: np.ndarray = DEFAULT_ORDERS) -> float:
    """Every answered query's Theorem 6 bound composed (RDP adds up), converted to (eps, delta)
    with the 2018 paper's conversion ``eps = RDP(lambda) + log(1/delta) / (lambda - 1)``."""
    total = sum(gnmax_data_dependent_rdp(gnmax_log_q(row, sigma), sigma, orders) for row in np.asarray(votes))
    return float(np.min(total + math.log(1 / delta) / (orders - 1)))
