"""Mechanism audit: an empirical lower bound on the ε of the mechanism a run's ledger records.

The audit of Jagielski, Ullman & Oprea 2020 ("Auditing Differentially Private Machine Learning:
How Private is Private SGD?") and Nasr, Song, Thakurta, Papernot & Carlini 2021 ("Adversary
Instantiation: Lower Bounds for Differentially Private Machine Learning"): run the mechanism many
times in two neighbouring worlds, distinguish them with a threshold test on a statistic, bound the
test's true- and false-positive rates with Clopper–Pearson intervals (Clopper & Pearson 1934), and
report ``eps_lb = log((TPR_lo - delta) / FPR_hi)``: any (eps, delta)-DP mechanism has
``TPR <= e^eps FPR + delta`` for every test, so with the stated confidence eps >= eps_lb. A valid
accountant's ε can never be below it (up to that confidence); a claim below it is refuted.

The worlds are the worst case of the ledger's one private release kind, over all its releases
(``count`` of them, composed), as a teacher that changes with one record may change every answer:

* Gaussian (DPSD data-sensitive, Eq. (3)): one teacher's normalised gradient is ``+beta u`` on
  every query, the neighbour's ``-beta u``, for a fixed unit vector u (sensitivity 2 beta), plus
  N(0, (sigma beta)^2 I). The statistic is the sum over releases of the projection onto u, the
  log-likelihood ratio's sufficient statistic; it is simulated directly as
  N(+-count * sensitivity / 2, count * noise_std^2) rather than through full vectors (the tests
  check that both give the same distribution).
* Randomized response (DPSD label-sensitive, Eq. (4)-(5)): one teacher answers class a on every
  query, the neighbour class b. The statistic is #answers a - #answers b, the privacy loss
  divided by the per-query ε (the Neyman–Pearson optimal statistic); answers are drawn from their
  multinomial counts.

The threshold and tail direction are chosen on one half of the trials and the bound is computed
on the other, so the reported bound is a single test at the stated confidence (TPR and FPR each
bounded at ``1 - (1 - confidence) / 2``, Bonferroni).
"""

from __future__ import annotations

import math
from typing import Any

import dataclasses

import numpy as np
import torch
from omegaconf import DictConfig
from scipy.stats import beta as beta_dist

from dpsd.errors import ConfigError
from dpsd.privacy.events import GaussianRelease, RandomizedResponseRelease
from dpsd.privacy.mechanisms import randomized_response_keep_probability


def gaussian_statistic(world: int, count: int, sensitivity: float, noise_std: float, trials: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Sum over ``count`` Gaussian releases of the projection onto u, in world ``+1`` (release
    ``+sensitivity/2 u``) or ``-1`` (``-sensitivity/2 u``): N(world count sensitivity/2, count noise_std^2)."""
    return rng.normal(world * count * sensitivity / 2, noise_std * math.sqrt(count), size=trials)


def randomized_response_statistic(world: int, count: int, epsilon: float, num_buckets: int, trials: int,
                                  rng: np.random.Generator) -> np.ndarray:
    """#a - #b over ``count`` k-ary randomized responses whose truth is a (world ``+1``) or b (``-1``)."""
    keep = randomized_response_keep_probability(epsilon, num_buckets)
    other = (1 - keep) / (num_buckets - 1)
    answers = rng.multinomial(count, [keep, other, max(0.0, 1 - keep - other)], size=trials)
    return world * (answers[:, 0] - answers[:, 1]).astype(float)


def clopper_pearson(successes: np.ndarray, trials: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper–Pearson bounds on a binomial proportion, each holding with ``confidence``:
    the lower bound Beta^-1(1 - confidence; k, n - k + 1) and the upper Beta^-1(confidence; k + 1, n - k)."""
    k = np.asarray(successes, dtype=float)
    with np.errstate(invalid="ignore"):
        lower = np.where(k > 0, beta_dist.ppf(1 - confidence, k, trials - k + 1), 0.0)
        upper = np.where(k < trials, beta_dist.ppf(confidence, k + 1, trials - k), 1.0)
    return lower, upper


def _bounds(positive: np.ndarray, negative: np.ndarray, thresholds: np.ndarray, delta: float,
            confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the test "guess the positive world iff its statistic >= t", per threshold t: the
    bound eps_lb (-inf where TPR_lo <= delta), TPR_lo and FPR_hi."""
    positive, negative = np.sort(positive), np.sort(negative)
    true_pos = len(positive) - np.searchsorted(positive, thresholds, side="left")
    false_pos = len(negative) - np.searchsorted(negative, thresholds, side="left")
    one_sided = 1 - (1 - confidence) / 2
    tpr_lo, _ = clopper_pearson(true_pos, len(positive), one_sided)
    _, fpr_hi = clopper_pearson(false_pos, len(negative), one_sided)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(tpr_lo > delta, np.log((tpr_lo - delta) / fpr_hi), -np.inf)
    return eps, tpr_lo, fpr_hi


def _oriented(direction: str, world_plus: np.ndarray, world_minus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the guessed world's statistic, the other's), signed so that large values say "guessed":
    ``upper`` guesses world +1 on a large statistic, ``lower`` world -1 on a small one."""
    return (world_plus, world_minus) if direction == "upper" else (-world_minus, -world_plus)


def epsilon_lower_bound(world_plus: np.ndarray, world_minus: np.ndarray, delta: float,
                        confidence: float) -> dict[str, Any]:
    """The audit bound from two samples of the statistic (same size, one per world).

    The first half of each sample chooses the tail direction (``upper``: guess world +1 when the
    statistic is >= t; ``lower``: guess world -1 when it is <= t) and the threshold t maximising
    the bound; the second half gives the reported bound, 0 when the test shows nothing.
    """
    half = len(world_plus) // 2
    best = (-np.inf, "upper", 0.0)
    for direction in ("upper", "lower"):
        guessed, other = _oriented(direction, world_plus[:half], world_minus[:half])
        thresholds = np.unique(np.concatenate([guessed, other]))
        eps, _, _ = _bounds(guessed, other, thresholds, delta, confidence)
        index = int(np.argmax(eps))
        if eps[index] > best[0]:
            best = (float(eps[index]), direction, float(thresholds[index]))
    _, direction, threshold = best
    guessed, other = _oriented(direction, world_plus[half:], world_minus[half:])
    eps, tpr_lo, fpr_hi = _bounds(guessed, other, np.array([threshold]), delta, confidence)
    return {"eps_lower_bound": max(0.0, float(eps[0])), "direction": direction,
            "threshold": threshold if direction == "upper" else -threshold,
            "tpr_lower": float(tpr_lo[0]), "fpr_upper": float(fpr_hi[0])}


def audit_mechanism(cfg: DictConfig, trials: int, confidence: float) -> dict[str, Any]:
    """Audit the private releases the run ``cfg`` plans (after calibration), next to both ledgers.

    ``trials`` runs of the whole composed mechanism per world (half to choose the test, half to
    bound it), seeded by ``cfg.seed``.
    """
    from dpsd.data import data_info
    from dpsd.methods import METHODS

    _check_audit(trials, confidence)
    ledger = METHODS.get(cfg.method.name).plan_ledger(cfg, data_info(cfg))
    events = [event for event in ledger.events if event.count]
    if len(events) != 1 or not isinstance(events[0], (GaussianRelease, RandomizedResponseRelease)):
        kinds = ", ".join(event.kind for event in events) or "none"
        raise ConfigError(f"audit mechanism: needs exactly one Gaussian or randomized-response release kind, "
                          f"the run makes: {kinds}")
    event, delta = events[0], float(cfg.privacy.delta)
    rng = np.random.default_rng(int(cfg.seed))
    if isinstance(event, GaussianRelease):
        mechanism = {"mechanism": "gaussian", "l2_sensitivity": event.l2_sensitivity, "noise_std": event.noise_std}
        samples = [gaussian_statistic(world, event.count, event.l2_sensitivity, event.noise_std, trials, rng)
                   for world in (1, -1)]
    else:
        mechanism = {"mechanism": "randomized_response", "query_epsilon": event.epsilon,
                     "num_buckets": event.num_buckets}
        samples = [randomized_response_statistic(world, event.count, event.epsilon, event.num_buckets, trials, rng)
                   for world in (1, -1)]
    summary = ledger.summary(delta)
    return {
        "method": cfg.method.name, "privacy_mode": cfg.privacy.mode, "source": "event", **mechanism,
        "releases": event.count,
        "trials": trials, "confidence": confidence, "delta": delta,
        **epsilon_lower_bound(samples[0], samples[1], delta, confidence),
        **{key: summary[key] for key in ("eps_claimed", "eps_rigorous", "eps_rigorous_rdp", "eps_rigorous_pld",
                                         "claimed_source")},
    }


SOURCES = ("code", "event")
"""``code``: drive the method's own annotator (:func:`audit_code_path`); ``event``: sample the planned
ledger event (:func:`audit_mechanism`), for methods without an annotator (PATE, DGD, LP-1ST, DP-SGD)."""


def worst_case_logits(num_classes: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two neighbouring teachers and the student prior, ``rows`` queries each: the teacher of world
    +1 answers class 0 on every query and that of world -1 class 1 (a teacher may change every
    answer when one record changes); the student's prior puts classes 0 and 1 first and the rest far
    below, so both are in any top-k (k >= 2) and DP-DFD's set I is exactly {0, 1} (its worst case, k = 2)."""
    plus, minus = torch.zeros(rows, num_classes), torch.zeros(rows, num_classes)
    plus[:, 0], minus[:, 1] = 10.0, 10.0
    student = torch.full((rows, num_classes), -10.0)
    student[:, :2] = 10.0
    return plus, minus, student


def audit_code_path(cfg: DictConfig, trials: int, confidence: float, releases: int) -> dict[str, Any]:
    """The audit of the method's own annotation code: the annotator class its trainer builds
    (``Method.annotator_class``), called as training calls it, on two neighbouring worst-case
    teachers (:func:`worst_case_logits`); each trial is ``releases`` queries.

    Label mode: the annotator's answers; the statistic is #class 0 - #class 1 over a trial's
    queries (the privacy loss of randomized response divided by its epsilon). Data mode: the noisy
    output gradients ``private_gradient`` releases; the statistic is their sum projected onto the
    difference of the two worlds' noiseless gradients (the Gaussian likelihood ratio's sufficient
    statistic). The bound is compared with ``eps_rigorous`` of the events the annotator itself
    recorded for one trial: a bug that adds less noise than its event states, or answers at another
    epsilon, shows as a lower bound above it.
    """
    from dpsd.data import data_info
    from dpsd.methods import METHODS
    from dpsd.privacy.accounting import Ledger, rigorous_epsilon

    _check_audit(trials, confidence)
    if releases < 1:
        raise ConfigError(f"audit: --releases must be >= 1, got {releases}")
    method = METHODS.get(cfg.method.name)
    if method.annotator_class is None:
        raise ConfigError(f"audit mechanism: method {cfg.method.name} has no annotator to drive; use --source event")
    mode = cfg.privacy.mode
    if mode not in ("label", "data") or (mode == "data" and cfg.privacy.noise_over != "sample"):
        raise ConfigError("audit mechanism --source code: needs privacy=label, or privacy=data with "
                          f"privacy.noise_over=sample (per-row releases); got {mode}")
    num_classes, rows = data_info(cfg).num_classes, trials * releases
    plus, minus, student = worst_case_logits(num_classes, rows)
    statistics, ledgers = [], []
    for world, teacher in ((1, plus), (-1, minus)):
        ledger = Ledger()
        annotator = method.annotator_class(cfg, num_classes, torch.Generator().manual_seed(int(cfg.seed) + world), ledger)
        with torch.no_grad():
            if mode == "label":
                answers = annotator(teacher, student).argmax(dim=1).view(trials, releases)
                statistic = ((answers == 0).sum(dim=1) - (answers == 1).sum(dim=1)).double()
            else:
                clean = [annotator.private_gradient(t[:1], student[:1], noise=False)[0] for t in (plus, minus)]
                direction = clean[0] - clean[1]
                direction = direction / direction.norm().clamp_min(1e-12)
                noisy = annotator.private_gradient(teacher, student)
                statistic = (noisy @ direction).view(trials, releases).sum(dim=1).double()
        statistics.append(statistic.numpy())
        ledgers.append(ledger)
    # the events one trial realised: each recorded event scaled from all rows to one trial's
    per_trial = [dataclasses.replace(event, count=event.count * releases // rows) for event in ledgers[0].events]
    rigorous = rigorous_epsilon(per_trial, float(cfg.privacy.delta))
    return {
        "method": cfg.method.name, "privacy_mode": mode, "source": "code",
        "annotator": method.annotator_class.__name__, "mechanism": per_trial[0].kind if per_trial else "none",
        "releases": releases, "trials": trials, "confidence": confidence, "delta": float(cfg.privacy.delta),
        "events_per_trial": [dataclasses.asdict(event) for event in per_trial],
        **epsilon_lower_bound(statistics[0], statistics[1], float(cfg.privacy.delta), confidence),
        "eps_rigorous": rigorous["eps_rigorous"], "neighbouring": ledgers[0].neighbouring,
    }


def _check_audit(trials: int, confidence: float) -> None:
    if trials < 4:
        raise ConfigError(f"audit: --trials must be >= 4, got {trials}")
    if not 0 < confidence < 1:
        raise ConfigError(f"audit: --confidence must lie in (0, 1), got {confidence}")


def record_audit(cfg: DictConfig, result: dict[str, Any]) -> str:
    """Log an audit as an MLflow run (tag ``kind=audit``, the result as ``audit.json``); returns its id."""
    from dpsd.tracking import record_report

    tags = {"kind": "audit", "method": cfg.method.name, "privacy_mode": cfg.privacy.mode,
            "mechanism": result["mechanism"]}
    metrics = {key: result[key] for key in ("eps_lower_bound", "eps_claimed", "eps_rigorous", "trials", "confidence")
               if key in result}
    return record_report(cfg, metrics, tags, result, "audit.json")
