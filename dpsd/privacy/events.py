"""What a method releases about the private training set, one record per kind of release.

Events describe mechanisms, not accounting: the accountants in :mod:`dpsd.privacy.accounting` turn
a list of them into an epsilon. Every event is w.r.t. *one private training record*: a teacher is
an arbitrary function of its private data, so one changed record may change every answer it gives,
and each event's sensitivity (or randomized-response pair) is the worst case over that change.

Events are frozen dataclasses; ``dataclasses.asdict(event)`` is JSON-ready and carries the event's
``kind``. ``count`` is the number of independent, adaptively composed releases of that kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable

from dpsd.errors import ConfigError

NEIGHBOURING: dict[str, str] = {
    "replace_record": "one private training record (image and label) replaced by another",
    "add_remove_record": "one private training record added or removed (DP-SGD's relation, under which "
                         "Poisson subsampling amplifies privacy)",
    "label": "one private record's label changed, its image kept (label-DP); nothing else is protected",
    "teacher_partition": "one private record replaced inside one teacher's disjoint partition, so that one "
                         "teacher of the ensemble (one vote) may change arbitrarily; records outside the "
                         "partitions (a held-out pool standing in for public data) are not protected",
}
"""The neighbouring relations a ledger may be stated under, each with what it protects. An ε is only
meaningful with its relation: tables and curves never put two relations in one ε column unlabelled."""


def check_neighbouring(relation: str) -> str:
    """``relation`` if it is one of :data:`NEIGHBOURING`, else a one-line ConfigError."""
    if relation not in NEIGHBOURING:
        raise ConfigError(f"neighbouring relation must be one of {', '.join(NEIGHBOURING)}, got {relation!r}")
    return relation


RECORD_RELATIONS = ("replace_record", "teacher_partition")
"""The relations a mechanism's event may be stated under (its ``relation`` field): one record
replaced (every answer of a full-data teacher may change) or one teacher's partition changed (one
vote). DP-SGD's add/remove relation belongs to :class:`SubsampledGaussianRelease` and the label
relation to :class:`PrivateImagesRelease`: no method names a relation for a whole ledger, its
releases decide it (:func:`relation_of`)."""


def _check_relation(kind: str, relation: str) -> None:
    if relation not in RECORD_RELATIONS:
        raise ConfigError(f"{kind}: relation must be one of {', '.join(RECORD_RELATIONS)}, got {relation!r}")


def _check_count(kind: str, count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"{kind}: count must be a non-negative integer, got {count!r}")


def _check_answers(kind: str, answers: int) -> None:
    if isinstance(answers, bool) or not isinstance(answers, int) or answers < 1:
        raise ConfigError(f"{kind}: answers must be a positive integer, got {answers!r}")


def _check_non_negative(kind: str, name: str, value: float) -> None:
    if not value >= 0:  # also rejects NaN
        raise ConfigError(f"{kind}: {name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class GaussianRelease:
    """``count`` releases of a vector with L2 sensitivity ``l2_sensitivity`` plus N(0, noise_std^2 I).

    The Gaussian mechanism (DPSD Theorem 5); its privacy depends only on
    ``noise_multiplier = noise_std / l2_sensitivity``. ``noise_std = 0`` with a positive sensitivity
    is a non-private release (epsilon = inf); ``l2_sensitivity = 0`` releases nothing private.

    ``answers``: how many answers of any one teacher each release privatises (1: a query's vote or output; b: the noisy
    sum of a batch's b output gradients). The privacy boundary reconciles ``count * answers`` with the answers it
    counted (:func:`dpsd.privacy.boundary.reconcile`); the accountants read the sensitivity, which must bound the
    aggregate of all ``answers``.
    """

    l2_sensitivity: float
    noise_std: float
    count: int = 1
    note: str = ""
    relation: str = "replace_record"
    answers: int = 1
    kind: str = field(default="gaussian", init=False)

    def __post_init__(self) -> None:
        _check_relation(self.kind, self.relation)
        _check_non_negative(self.kind, "l2_sensitivity", self.l2_sensitivity)
        _check_non_negative(self.kind, "noise_std", self.noise_std)
        _check_count(self.kind, self.count)
        _check_answers(self.kind, self.answers)

    @property
    def noise_multiplier(self) -> float:
        """``noise_std / l2_sensitivity`` (inf when the sensitivity is zero)."""
        if self.l2_sensitivity == 0:
            return math.inf
        return self.noise_std / self.l2_sensitivity


@dataclass(frozen=True)
class RandomizedResponseRelease:
    """``count`` k-ary randomized-response answers, each ``epsilon``-DP (DPSD Eq. (4), Lemma 2).

    Each answer is the true bucket with probability e^eps / (e^eps + k - 1) and each other bucket
    with probability 1 / (e^eps + k - 1). The worst case for one changed training record moves the
    truth from one bucket to another. ``epsilon = inf`` is a non-private answer; a single bucket or
    ``epsilon = 0`` releases nothing private.
    """

    epsilon: float
    num_buckets: int
    count: int = 1
    note: str = ""
    relation: str = "replace_record"
    kind: str = field(default="randomized_response", init=False)

    def __post_init__(self) -> None:
        _check_relation(self.kind, self.relation)
        _check_non_negative(self.kind, "epsilon", self.epsilon)
        buckets = self.num_buckets
        if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
            raise ConfigError(f"{self.kind}: num_buckets must be a positive integer, got {buckets!r}")
        _check_count(self.kind, self.count)

    @property
    def noise_parameter(self) -> float:
        """dp-accounting's parameterisation: the probability p of answering a uniformly random bucket.

        With p = k / (e^eps + k - 1) the truth comes out with probability 1 - p + p/k =
        e^eps / (e^eps + k - 1) and each other bucket with p/k = 1 / (e^eps + k - 1), as in Eq. (4).
        """
        # k / (e^eps + k - 1), written to avoid overflowing e^eps.
        odds = math.exp(-self.epsilon)
        return self.num_buckets * odds / (1.0 + (self.num_buckets - 1) * odds)


@dataclass(frozen=True)
class LaplaceRelease:
    """``count`` releases of a value with L1 sensitivity ``l1_sensitivity`` plus Laplace(``scale``) noise.

    Each release is pure ``epsilon = l1_sensitivity / scale``-DP. ``scale = 0`` with a positive
    sensitivity is a non-private release; ``l1_sensitivity = 0`` releases nothing private. ``answers``: as
    :class:`GaussianRelease`'s.
    """

    l1_sensitivity: float
    scale: float
    count: int = 1
    note: str = ""
    relation: str = "replace_record"
    answers: int = 1
    kind: str = field(default="laplace", init=False)

    def __post_init__(self) -> None:
        _check_relation(self.kind, self.relation)
        _check_non_negative(self.kind, "l1_sensitivity", self.l1_sensitivity)
        _check_non_negative(self.kind, "scale", self.scale)
        _check_count(self.kind, self.count)
        _check_answers(self.kind, self.answers)

    @property
    def epsilon(self) -> float:
        """Pure DP epsilon of one release, ``l1_sensitivity / scale``."""
        if self.l1_sensitivity == 0:
            return 0.0
        if self.scale == 0:
            return math.inf
        return self.l1_sensitivity / self.scale


@dataclass(frozen=True)
class SubsampledGaussianRelease:
    """``count`` steps of DP-SGD: a Poisson sample (each record in with probability ``sample_rate``)
    of per-example gradients clipped to L2 norm C, summed, plus N(0, (noise_multiplier * C)^2 I).

    The sampled Gaussian mechanism of Abadi et al. 2016 / Mironov, Talwar, Zhang 2019, as Opacus
    runs it. Its privacy is w.r.t. adding or removing one record (the neighbouring relation under
    which Poisson subsampling amplifies privacy), not replacing one. ``noise_multiplier = 0`` with a
    positive rate is non-private; ``sample_rate = 0`` or an infinite multiplier releases nothing.
    """

    noise_multiplier: float
    sample_rate: float
    count: int = 1
    note: str = ""
    kind: str = field(default="subsampled_gaussian", init=False)
    relation: str = field(default="add_remove_record", init=False)

    def __post_init__(self) -> None:
        _check_non_negative(self.kind, "noise_multiplier", self.noise_multiplier)
        if not 0 <= self.sample_rate <= 1:
            raise ConfigError(f"{self.kind}: sample_rate must lie in [0, 1], got {self.sample_rate!r}")
        _check_count(self.kind, self.count)


@dataclass(frozen=True)
class UnprotectedRelease:
    """``count`` releases that depend on the private data through no privacy mechanism at all.

    For example DPSD-T's generator update, computed from the teacher's raw outputs, or the literal
    Eq. (5) of DPSD, whose answers outside the student's top-k have an unbounded privacy loss. Any
    such release makes the rigorous epsilon infinite; ``note`` says what was released.
    """

    count: int = 1
    note: str = ""
    kind: str = field(default="unprotected", init=False)
    relation: str = field(default="replace_record", init=False)

    def __post_init__(self) -> None:
        _check_count(self.kind, self.count)

    @property
    def epsilon(self) -> float:
        return math.inf if self.count else 0.0


@dataclass(frozen=True)
class PrivateImagesRelease:
    """The private images used as they are, through no mechanism (e.g. a student trained on them
    with privatised labels, as LP-1ST does: Ghazi et al. 2021, Alg. 1).

    No label-DP mechanism covers it: under any relation that changes an image (``replace_record``,
    ``add_remove_record``, ``teacher_partition``) the release is not private (epsilon = inf); under
    ``label`` (one label changed, the image kept) it reveals nothing. Recording it therefore states
    the ledger's relation: ``label`` (:func:`relation_of`). A run that reads the private images with
    no release covering them is stopped (:meth:`dpsd.privacy.accounting.Ledger.check_image_use`).
    """

    count: int = 1
    note: str = ""
    kind: str = field(default="private_images", init=False)
    relation: str = field(default="label", init=False)

    def __post_init__(self) -> None:
        _check_count(self.kind, self.count)


PrivacyEvent = (
    GaussianRelease | RandomizedResponseRelease | LaplaceRelease | SubsampledGaussianRelease | UnprotectedRelease
    | PrivateImagesRelease
)
"""Any event the ledger accepts."""

EVENT_TYPES = (GaussianRelease, RandomizedResponseRelease, LaplaceRelease, SubsampledGaussianRelease,
               UnprotectedRelease, PrivateImagesRelease)


def relation_of(events: list[PrivacyEvent]) -> str:
    """The neighbouring relation a ledger of ``events`` is stated under, decided by its releases.

    Each event is stated under its ``relation``: a mechanism's under one replaced record (or one
    teacher's partition, PATE and DGD), DP-SGD's under add/remove, the raw private images' under
    ``label`` (the only relation under which they reveal nothing). A replaced-record statement also
    holds under the narrower ``label`` and ``teacher_partition`` relations, so the ledger takes the
    narrowest relation named; add/remove mixes with nothing else, and ``label`` with
    ``teacher_partition`` has no common relation: both are refused in one line. No events:
    ``replace_record``.
    """
    named = {event.relation for event in events}
    if "add_remove_record" in named and len(named) > 1:
        raise ConfigError("a ledger cannot mix Poisson-subsampled releases (add_remove_record) with releases "
                          f"stated under {', '.join(sorted(named - {'add_remove_record'}))}: account them separately")
    if {"label", "teacher_partition"} <= named:
        raise ConfigError("a ledger cannot mix the raw private images (label relation) with teacher-partition "
                          "releases: no neighbouring relation covers both")
    for relation in ("add_remove_record", "label", "teacher_partition"):
        if relation in named:
            return relation
    return "replace_record"


def totals(events: Iterable[PrivacyEvent]) -> list[PrivacyEvent]:
    """``events`` with each group of releases equal but for ``count`` merged into one release whose count is the
    group's sum, in the order the groups first appear: a ledger's totals, the size of its kinds of release rather
    than of its steps (what a checkpoint keeps, :mod:`dpsd.checkpoint`). The accountants merge the same groups and
    more (:mod:`dpsd.privacy.accounting`), and every count sums, so each figure of a ledger is the same over
    ``events`` and over its totals."""
    merged: dict[PrivacyEvent, int] = {}
    for event in events:
        group = replace(event, count=0)
        merged[group] = merged.get(group, 0) + event.count
    return [replace(group, count=count) for group, count in merged.items()]
