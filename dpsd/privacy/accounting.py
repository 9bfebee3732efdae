"""Rigorous privacy accounting over recorded releases, and the two-ledger :class:`Ledger`.

``eps_rigorous`` is a standard accountant over every teacher query, w.r.t. the private training
set (DESIGN.md, "Privacy: two ledgers, always both"): a teacher is an arbitrary function of its
private data, so one changed record may change every answer, and each event is accounted at its
worst case. Two accountants from dp-accounting are run and both are valid upper bounds:

* RDP (Mironov 2017) with dp-accounting's RDP-to-DP conversion (Canonne-Kamath-Steinke 2020,
  Prop. 12 of arXiv:2004.00010 v4), over :data:`RDP_ORDERS`;
* PLD (privacy loss distributions, Koskela et al. / Doroshenko et al. 2022) with pessimistic
  discretisation, composed here from per-mechanism PLDs. dp-accounting 0.6.0's ``PLDAccountant``
  counts a self-composed ``RandomizedResponseDpEvent`` once (it ignores the count), so that
  accountant is not used.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpsd.errors import ConfigError
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import (
    EVENT_TYPES,
    GaussianRelease,
    LaplaceRelease,
    PrivacyEvent,
    PrivateImagesRelease,
    RandomizedResponseRelease,
    SubsampledGaussianRelease,
    UnprotectedRelease,
    check_neighbouring,
    relation_of,
    totals,
)

RDP_ORDERS: tuple[float, ...] = tuple(
    sorted(
        set(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
        | {1 + x / 100 for x in range(2, 10)}
        | {1 + x / 20 for x in range(1, 100)}
        | {80, 96, 160, 192, 384, 768, 2048, 4096}
    )
)
"""dp-accounting's default orders plus a finer grid near 1 (large compositions) and larger orders
(few releases with much noise)."""

_PLD_MIN_INTERVAL = 1e-4
_PLD_RELATIVE_INTERVAL = 1e-4
_PLD_MAX_GAUSSIAN_POINTS = 2**18
"""PLD grid: at least 1e-4, 1e-4 times the std of the total privacy loss, and coarse enough that
the Gaussian PLD has at most 2^18 points (see :func:`_pld_interval`)."""


def _canonical(event: PrivacyEvent) -> PrivacyEvent:
    """One release (count 1, no note) with the same privacy as each of ``event``'s releases."""
    if isinstance(event, GaussianRelease):
        return GaussianRelease(l2_sensitivity=1.0, noise_std=event.noise_multiplier)
    if isinstance(event, RandomizedResponseRelease):
        return RandomizedResponseRelease(epsilon=event.epsilon, num_buckets=event.num_buckets)
    if isinstance(event, LaplaceRelease):
        return LaplaceRelease(l1_sensitivity=1.0, scale=1 / event.epsilon if event.epsilon else math.inf)
    if isinstance(event, SubsampledGaussianRelease):
        return SubsampledGaussianRelease(noise_multiplier=event.noise_multiplier, sample_rate=event.sample_rate)
    if isinstance(event, UnprotectedRelease):
        return UnprotectedRelease()
    if isinstance(event, PrivateImagesRelease):
        return PrivateImagesRelease()
    raise TypeError(f"not a privacy event: {event!r}")


def _leaks_nothing(event: PrivacyEvent) -> bool:
    """Whether the release is independent of the private data (infinite noise, eps 0, one bucket)."""
    if isinstance(event, GaussianRelease):
        return event.noise_multiplier == math.inf
    if isinstance(event, RandomizedResponseRelease):
        return event.epsilon == 0 or event.num_buckets == 1
    if isinstance(event, SubsampledGaussianRelease):
        return event.noise_multiplier == math.inf or event.sample_rate == 0
    return event.epsilon == 0


def _non_private(event: PrivacyEvent) -> bool:
    """Whether the release has no privacy at all (no noise: epsilon = inf)."""
    if isinstance(event, GaussianRelease):
        return event.noise_multiplier == 0
    if isinstance(event, SubsampledGaussianRelease):
        return event.noise_multiplier == 0 and event.sample_rate > 0
    return event.epsilon == math.inf


def _private_groups(events: list[PrivacyEvent], relation: str | None = None) -> Counter | None:
    """Releases merged by privacy (:func:`_canonical`), counts summed, leak-free ones dropped;
    ``None`` when some release is not private at all. The raw private images
    (:class:`PrivateImagesRelease`) reveal nothing under ``relation="label"`` and everything under
    any other; ``relation=None`` takes the one the events decide (:func:`relation_of`)."""
    images = [event for event in events if isinstance(event, PrivateImagesRelease)]
    if images:
        relation = relation_of(events) if relation is None else check_neighbouring(relation)
    groups: Counter = Counter()
    for event in events:
        if isinstance(event, PrivateImagesRelease):
            if relation != "label" and event.count > 0:
                return None
            continue
        if event.count > 0:
            groups[_canonical(event)] += event.count
    if any(_non_private(event) for event in groups):
        return None
    return Counter({event: count for event, count in groups.items() if not _leaks_nothing(event)})


def _neighboring_relation(groups: Counter) -> NeighboringRelation:
    """dp-accounting's relation for the accountant: add/remove-one for Poisson-subsampled releases
    (DP-SGD's relation, under which sampling amplifies privacy: Abadi et al. 2016, Opacus),
    replace-one for every other release (their sensitivities are stated for a changed record). A
    ledger mixing the two has no single neighbouring relation and is refused."""
    subsampled = [isinstance(event, SubsampledGaussianRelease) for event in groups]
    if subsampled and all(subsampled):
        return NeighboringRelation.ADD_OR_REMOVE_ONE
    if any(subsampled):
        raise ConfigError("a ledger cannot mix Poisson-subsampled releases (add/remove-one) with other "
                          "releases (replace-one): account them separately")
    return NeighboringRelation.REPLACE_ONE


def rdp_curve(events: list[PrivacyEvent], relation: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rényi DP of the adaptive composition of ``events`` at each order in :data:`RDP_ORDERS`.

    Gaussian: ``alpha / (2 z^2)`` per release (DPSD Theorem 5) via ``GaussianDpEvent``. Randomized
    response: the exact Rényi divergence between (p, q, q, ...) and (q, p, q, ...), dp-accounting's
    ``RandomizedResponseDpEvent`` under ``REPLACE_ONE`` (the truth moves from one bucket to
    another). Laplace: Mironov 2017 Prop. 6 via ``LaplaceDpEvent``. Subsampled Gaussian (DP-SGD):
    ``PoissonSampledDpEvent`` of a ``GaussianDpEvent`` under add/remove-one (Mironov, Talwar, Zhang
    2019, the analysis Opacus's RDP accountant implements). RDP adds up under composition.
    Non-private releases give inf at every order; ``relation`` as in :func:`_private_groups`.
    """
    groups = _private_groups(events, relation)
    if groups is None:
        return np.array(RDP_ORDERS), np.full(len(RDP_ORDERS), np.inf)
    accountant = rdp_privacy_accountant.RdpAccountant(list(RDP_ORDERS), _neighboring_relation(groups))
    for event, count in groups.items():
        if isinstance(event, SubsampledGaussianRelease):
            dp = dp_event.PoissonSampledDpEvent(
                sampling_probability=event.sample_rate,
                event=dp_event.GaussianDpEvent(noise_multiplier=event.noise_multiplier),
            )
        elif isinstance(event, GaussianRelease):
            dp = dp_event.GaussianDpEvent(noise_multiplier=event.noise_multiplier)
        elif isinstance(event, RandomizedResponseRelease):
            dp = dp_event.RandomizedResponseDpEvent(
                noise_parameter=event.noise_parameter, num_buckets=event.num_buckets
            )
        else:
            dp = dp_event.LaplaceDpEvent(noise_multiplier=1 / event.epsilon)
        accountant.compose(dp, count)
    return accountant.orders, accountant.rdp


def rdp_epsilon(events: list[PrivacyEvent], delta: float, relation: str | None = None) -> float:
    """Epsilon at ``delta`` from :func:`rdp_curve`, converted by dp-accounting's
    ``rdp_privacy_accountant.compute_epsilon`` (Canonne-Kamath-Steinke 2020, Prop. 12)."""
    orders, rdp = rdp_curve(events, relation)
    return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)[0])


def _loss_std(event: PrivacyEvent, count: int) -> float:
    """Standard deviation of the privacy loss of ``count`` such releases (an over-estimate for
    randomized response and Laplace, whose loss lies in [-eps, eps]), to size the PLD grid."""
    if isinstance(event, GaussianRelease):
        return math.sqrt(count) / event.noise_multiplier  # loss of N(mu, 1) vs N(0, 1): std mu
    if isinstance(event, SubsampledGaussianRelease):
        # the record is in a step with probability q; a rough scale suffices for the grid
        return math.sqrt(count) * event.sample_rate / event.noise_multiplier
    return math.sqrt(count) * event.epsilon


def _gaussian_mu(groups: Counter) -> float:
    """All Gaussian releases merged into one of sensitivity ``mu = sqrt(sum count / z^2)`` and unit
    noise: exact, as the composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP (Dong-Roth-Su
    2019, Cor. 3.3) and a Gaussian mechanism is exactly (sensitivity / std)-GDP."""
    gaussians = [(event, count) for event, count in groups.items() if isinstance(event, GaussianRelease)]
    return math.sqrt(sum(count / event.noise_multiplier**2 for event, count in gaussians))


def _pld_interval(groups: Counter) -> float:
    """The PLD discretisation interval.

    Aim at ``max(1e-4, 1e-4 * std of the total loss, mu (mu + 20) / 2^18)``: rounding errors stay
    small relative to the spread of the loss, and the arrays stay small whatever the number of
    releases (dp-accounting's PLD of a Gaussian of sensitivity mu and unit noise spans about
    mu (mu + 20) in loss: mu times the noise range, 10 std either side). When there is
    randomized response, the interval is its epsilon divided by a power of two (exact in floating
    point), so its losses -eps, 0, eps lie on the grid and its PLD is exact rather than rounded up
    by up to one interval per release; with randomized response alone (one kind), the interval is
    its epsilon.
    """
    loss_std = math.sqrt(sum(_loss_std(event, count) ** 2 for event, count in groups.items()))
    gaussian_mu = _gaussian_mu(groups)
    target = max(
        _PLD_MIN_INTERVAL,
        _PLD_RELATIVE_INTERVAL * loss_std,
        gaussian_mu * (gaussian_mu + 20) / _PLD_MAX_GAUSSIAN_POINTS,
    )
    responses = [event for event in groups if isinstance(event, RandomizedResponseRelease)]
    if not responses:
        return target
    # Align to the randomized response whose rounding would cost most (count times loss).
    epsilon = max(responses, key=lambda event: groups[event] * event.epsilon).epsilon
    if len(groups) == 1:
        return epsilon
    halvings = max(0, math.ceil(math.log2(epsilon / target)))
    return math.ldexp(epsilon, -halvings)


def _randomized_response_pld(
    epsilon: float, num_buckets: int, interval: float
) -> pld_lib.PrivacyLossDistribution:
    """PLD of one k-ary randomized-response answer (DPSD Eq. (4)), truth moved from bucket a to b.

    Under P = RR(a) the privacy loss ln P(o)/Q(o) is +eps w.p. e^eps/(e^eps+k-1) (o = a), -eps
    w.p. 1/(e^eps+k-1) (o = b) and 0 otherwise: the same distribution as dp-accounting's
    ``from_randomized_response(noise_parameter, k)`` (REPLACE_ONE), but with the loss taken as the
    event's exact epsilon instead of a log-difference recomputed from the noise parameter (a few
    ulps off), so that it lands exactly on a grid aligned to it. Losses off the grid are rounded up
    (pessimistic).
    """
    truth = 1.0 / (1.0 + (num_buckets - 1) * math.exp(-epsilon))
    other = truth * math.exp(-epsilon)
    pmf: Counter = Counter()
    pmf[math.ceil(epsilon / interval)] += truth
    pmf[math.ceil(-epsilon / interval)] += other
    pmf[0] += (num_buckets - 2) * other
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(dict(pmf), 0.0, interval)


def _pld(event: PrivacyEvent, count: int, interval: float) -> pld_lib.PrivacyLossDistribution:
    """PLD of ``count`` releases like ``event`` (randomized response, Laplace or subsampled Gaussian)."""
    if isinstance(event, RandomizedResponseRelease):
        single = _randomized_response_pld(event.epsilon, event.num_buckets, interval)
    elif isinstance(event, SubsampledGaussianRelease):
        single = pld_lib.from_gaussian_mechanism(
            standard_deviation=event.noise_multiplier, sensitivity=1, sampling_prob=event.sample_rate,
            value_discretization_interval=interval, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
        )
    else:
        single = pld_lib.from_laplace_mechanism(
            parameter=1 / event.epsilon, sensitivity=1, value_discretization_interval=interval
        )
    return single.self_compose(count)


def pld_epsilon(events: list[PrivacyEvent], delta: float, relation: str | None = None) -> float:
    """Epsilon at ``delta`` of the adaptive composition of ``events`` by privacy loss distributions.

    All Gaussian releases are merged exactly into one (:func:`_gaussian_mu`), built by
    ``from_gaussian_mechanism``. Randomized response, Laplace and subsampled-Gaussian PLDs come from
    :func:`_randomized_response_pld` / ``from_laplace_mechanism`` / ``from_gaussian_mechanism(...,
    sampling_prob=q)`` (add/remove-one) and are ``self_compose``-d by
    their counts; everything is composed with ``compose``. All PLDs are pessimistic
    (``get_epsilon_for_delta`` of a pessimistic PLD is an upper bound, Doroshenko et al. 2022),
    on the grid of :func:`_pld_interval`; ``relation`` as in :func:`_private_groups`.
    """
    groups = _private_groups(events, relation)
    if groups is None:
        return math.inf
    if not groups:
        return 0.0
    interval = _pld_interval(groups)
    gaussian_mu = _gaussian_mu(groups)
    total = pld_lib.identity(value_discretization_interval=interval)
    if gaussian_mu > 0:
        total = pld_lib.from_gaussian_mechanism(
            standard_deviation=1.0, sensitivity=gaussian_mu, value_discretization_interval=interval
        )
    for event, count in groups.items():
        if not isinstance(event, GaussianRelease):
            total = total.compose(_pld(event, count, interval))
    return float(total.get_epsilon_for_delta(delta))


def rigorous_epsilon(events: list[PrivacyEvent], delta: float, relation: str | None = None) -> dict:
    """Both accountants and the smaller of the two (each is a valid upper bound), under ``relation``
    (default: the one the events decide, :func:`~dpsd.privacy.events.relation_of`; LP-1ST's events
    give ``label`` and its label mechanism's epsilon, and the same events under ``replace_record``
    give inf, as its student trains on the raw private images).

    Returns ``eps_rigorous_rdp``, ``eps_rigorous_pld`` (``None`` if the PLD computation failed),
    ``eps_rigorous`` and ``accountant`` (``"pld"``, ``"rdp"``, or ``"none"`` without events).
    Fail closed: no events at all gives inf (a private run that recorded no release has accounted
    for nothing, not released nothing); an object that is not a known event raises TypeError.
    """
    if not 0 < delta < 1:
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")
    if not events:
        return {"eps_rigorous_rdp": math.inf, "eps_rigorous_pld": math.inf, "eps_rigorous": math.inf,
                "accountant": "none"}
    eps_rdp = rdp_epsilon(events, delta, relation)
    try:
        eps_pld = pld_epsilon(events, delta, relation)
    except (ValueError, OverflowError, FloatingPointError, MemoryError):
        eps_pld = None
    use_pld = eps_pld is not None and eps_pld <= eps_rdp
    return {
        "eps_rigorous_rdp": eps_rdp,
        "eps_rigorous_pld": eps_pld,
        "eps_rigorous": eps_pld if use_pld else eps_rdp,
        "accountant": "pld" if use_pld else "rdp",
    }


class Ledger:
    """Every private release of a run, the paper's claim for it, and plain-words caveats.

    Methods ``record`` each release as they make it (the event the mechanism call returned; events
    are kept as recorded, the accountants merge identical ones), set ``claim`` to the paper's own
    statement (:mod:`dpsd.privacy.claims`) and append caveats to ``notes``.

    ``neighbouring`` (:data:`~dpsd.privacy.events.NEIGHBOURING`), the relation ``eps_rigorous`` is
    stated under, is not declared: the releases decide it (:func:`~dpsd.privacy.events.relation_of`):
    DP-SGD's subsampled steps give ``add_remove_record``, PATE's and DGD's votes
    ``teacher_partition``, a student trained on the raw private images (LP-1ST's
    :class:`~dpsd.privacy.events.PrivateImagesRelease`) ``label``, anything else ``replace_record``.
    A claimed eps-label-DP stands on a ``label`` ledger, or on a ``replace_record`` one whose run read
    no private image (DPSD's and DP-DFD's students see synthetic images only, and a replaced record
    covers a changed label); elsewhere it is refused (:meth:`check_claim`), and so is a run that read
    the private images with no release covering them (:meth:`check_image_use`).

    ``eps_rigorous`` is what an attacker faces given everything released: any
    :class:`~dpsd.privacy.events.UnprotectedRelease` makes it inf, and so does a ledger with no
    release at all (fail closed). ``partial``, when a method sets it (e.g. ``"eps_labels_only"``),
    names a second figure: the same accountants over the protected releases only, i.e. what a
    paper's own analysis covers; it is never reported as ``eps_rigorous``.
    """

    def __init__(self, claim: Claim | None = None, notes: list[str] | None = None,
                 partial: str | None = None) -> None:
        self.events: list[PrivacyEvent] = []
        self.claim: Claim | None = claim
        self.notes: list[str] = list(notes or [])
        if partial is not None and (not partial.startswith("eps_") or partial.startswith("eps_rigorous")):
            raise ConfigError(f"Ledger: a partial figure is named eps_<what it covers>, never eps_rigorous*; got {partial!r}")
        self.partial: str | None = partial

    @property
    def neighbouring(self) -> str:
        """The relation the releases recorded so far decide (:func:`~dpsd.privacy.events.relation_of`)."""
        return relation_of(self.events)

    def record(self, event: PrivacyEvent) -> None:
        """Add ``event``; one whose relation no other release shares is refused in one line."""
        if not isinstance(event, EVENT_TYPES):
            raise TypeError(f"not a privacy event: {event!r}")
        relation_of([*self.events, event])
        self.events.append(event)

    def planned(self) -> "Ledger":
        """An empty ledger with this plan's claim, notes and partial figure, for a run to fill."""
        return Ledger(claim=self.claim, notes=self.notes, partial=self.partial)

    def check_claim(self) -> None:
        """Refuse, in one line, a claimed eps-label-DP on a ledger whose releases are stated under a
        relation that does not cover a changed label (add/remove, a teacher's partition)."""
        if self.claim is not None and "label-DP" in self.claim.notion and self.neighbouring not in ("label", "replace_record"):
            raise ConfigError(f"a claim of {self.claim.notion} ({self.claim.source}) needs a ledger under the label "
                              f"relation; these releases are stated under {self.neighbouring}")

    def covers_image_use(self) -> bool:
        """Whether a release in this ledger accounts for reading the private images directly: the raw
        images themselves (label relation), a mechanism on their gradients (DP-SGD's subsampled
        steps, a Gaussian release), an unprotected release (inf already), or a teacher-partition
        relation (its pool of private images stands in for public data, NEIGHBOURING says so).
        Randomized response and Laplace privatise a label or a vote, never an image."""
        return self.neighbouring in ("label", "add_remove_record", "teacher_partition") or any(
            isinstance(event, (GaussianRelease, UnprotectedRelease)) for event in self.events)

    def check_image_use(self, method: str, images_read: bool) -> None:
        """Stop a run of ``method`` that read the private images (``images_read``, watched by the
        runner) with no release covering them: its eps_rigorous would be finite while the student
        holds the raw images (the false-epsilon trap)."""
        if images_read and not self.covers_image_use():
            claim = f", and its claim {self.claim.notion} needs the label relation" if self.claim else ""
            raise ConfigError(
                f"method {method!r} read the private images, but its ledger ({self.neighbouring}) records no "
                f"release of them{claim}: record PrivateImagesRelease (dpsd.privacy.events) in plan_ledger and fit "
                "where the student trains on them (the relation becomes label; under replace_record eps_rigorous is inf)")

    @property
    def queries(self) -> int:
        """Total number of private releases through a mechanism or none (sum of counts); the raw
        private images (:class:`~dpsd.privacy.events.PrivateImagesRelease`) are a relation, not a query."""
        return sum(event.count for event in self.events if not isinstance(event, PrivateImagesRelease))

    def uncovered(self) -> list[str]:
        """What was released without any mechanism: one line per kind of unprotected release (its note), with its
        number of releases where that is more than one. Read from the ledger's totals
        (:func:`~dpsd.privacy.events.totals`), so a run resumed from a checkpoint says what an unbroken one says."""
        return [(event.note or "a release through no privacy mechanism") + (f" ({event.count:,} releases)"
                                                                              if event.count > 1 else "")
                for event in totals(self.events) if isinstance(event, UnprotectedRelease) and event.count]

    def summary(self, delta: float) -> dict:
        """Both ledgers for this run at ``delta`` (the rigorous one's delta; the claim keeps its own,
        reported as ``claimed_delta``). ``eps_claimed`` is ``None`` when the method records releases
        but the paper states no guarantee for them. A claim the releases cannot carry is refused
        (:meth:`check_claim`)."""
        self.check_claim()
        uncovered = self.uncovered()
        non_private = self.claim is None and (not self.events or bool(uncovered))
        rigorous = rigorous_epsilon(self.events, delta)
        if not self.events and self.claim is not None:
            uncovered = ["nothing was recorded although a guarantee is claimed (fail closed: eps_rigorous = inf)"]
        claim = self.claim
        partial = {}
        if self.partial is not None:
            protected = [event for event in self.events if not isinstance(event, UnprotectedRelease)]
            partial = {self.partial: rigorous_epsilon(protected, delta)["eps_rigorous"]}
        return {
            "eps_claimed": math.inf if non_private else (claim.epsilon if claim else None),
            "claimed_delta": claim.delta if claim else None,
            "claimed_notion": claim.notion if claim else None,
            "claimed_source": claim.source if claim else None,
            **rigorous,
            **partial,
            "neighbouring": self.neighbouring,
            "uncovered": uncovered,
            "delta": delta,
            "queries": self.queries,
            "events": [asdict(event) for event in self.events],
            "notes": list(self.notes),
        }
