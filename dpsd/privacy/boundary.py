"""The privacy boundary: what a run touched of the private data, counted, reconciled with what its ledger records.

A method never holds the private data or a teacher as they are: the runner hands it counted handles (the private
split, :class:`dpsd.data.WatchedSplit`; each teacher, :class:`CountedTeacher`) and, after ``fit``, reconciles what
they counted (:class:`Accesses`) with the releases the method recorded and with its ``plan_ledger``
(:func:`reconcile`). A shortfall is not published as a finite epsilon: the run's ledger gets an
:class:`~dpsd.privacy.events.UnprotectedRelease` per shortfall, whose note says what was missing, so
``eps_rigorous`` is infinite and the run's ``uncovered`` list says why (fail closed).

What counts as covered (every event is w.r.t. one private record, :mod:`dpsd.privacy.events`):

* **the plan**: the releases a run records are within its ``plan_ledger``: no kind it lacks, no more of any kind (a
  plan may bound the run from above, never below);
* **teacher answers** (inputs a full-data teacher answered): each may change with any one record, so the releases
  stated under ``replace_record`` must cover at least as many answers: a randomized response covers one, a Gaussian
  or Laplace release the ``answers`` its aggregate sums, times its ``count`` (PATE's noisy votes: one answer of
  each member a query; a noisy batch mean: b answers); an unprotected release covers all (its epsilon is infinite
  already);
* **a partition teacher's answers** (an ensemble member trained on one of disjoint partitions): releases under
  ``teacher_partition`` count at least as many as the most any member answered; ``teacher_partition`` releases
  with no member trained on a disjoint partition are a relation the facts do not support;
* **labels**: a label a mechanism consumed inside the split (:meth:`dpsd.data.WatchedSplit.sealed_labels`) is
  covered by the event that mechanism returned, which the ledger must hold; a label read as it is (an item, the
  split's ``labels`` or ``tensors``) is covered only by a release of whole records (DP-SGD's subsampled steps) or
  an unprotected one, or, under ``teacher_partition``, where the record lies outside every partition (the public
  pool);
* **images** read as they are: :meth:`dpsd.privacy.accounting.Ledger.covers_image_use`.

And whatever was touched, a finite ``eps_rigorous`` of 0 is refused: a run that read the private data released
something about it.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
from torch import Tensor, nn

from dpsd.privacy.events import (
    GaussianRelease,
    LaplaceRelease,
    PrivacyEvent,
    RandomizedResponseRelease,
    SubsampledGaussianRelease,
    UnprotectedRelease,
)

ANSWER_RELEASES = (GaussianRelease, RandomizedResponseRelease, LaplaceRelease)
"""The mechanisms that privatise a teacher's answers (an output, a label, a vote)."""


@dataclass
class Accesses:
    """What a run touched of the private data, as the handles counted it."""

    records: int = 0  # the private split's size
    image_reads: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per record
    label_reads: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # raw reads per record
    consumed: list[PrivacyEvent] = field(default_factory=list)  # events of mechanisms that consumed sealed labels
    teacher_answers: int = 0  # inputs the full-data teacher(s) answered
    member_answers: Counter = field(default_factory=Counter)  # inputs each partition teacher answered
    partitions: list[list[int]] = field(default_factory=list)  # the disjoint partitions members were trained on

    @property
    def touched(self) -> bool:
        return bool(self.image_reads.any() or self.label_reads.any() or self.consumed or self.teacher_answers
                    or sum(self.member_answers.values()))


class CountedTeacher(nn.Module):
    """A teacher as a method holds it: every input it answers is counted in ``accesses`` (``member`` names an
    ensemble member trained on a partition; ``None``: a teacher of the whole private split)."""

    def __init__(self, teacher: nn.Module, accesses: Accesses, member: str | None = None) -> None:
        super().__init__()
        self.teacher, self.member = teacher, member
        object.__setattr__(self, "accesses", accesses)  # not a submodule, not state

    def forward(self, inputs: Tensor) -> Tensor:
        self.count(int(inputs.shape[0]))
        return self.teacher(inputs)

    def count(self, answered: int) -> None:
        """``answered`` inputs answered by this teacher."""
        if self.member is None:
            self.accesses.teacher_answers += answered
        else:
            self.accesses.member_answers[self.member] += answered

    def get_submodule(self, target: str) -> nn.Module:
        """The wrapped network's submodule (a method names its layers as the network does)."""
        return self.teacher.get_submodule(target)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:  # what the wrapped network offers beyond forward (its layers, its features)
            return getattr(super().__getattr__("teacher"), name)


def count_cached_answers(members: list[nn.Module], answered: int) -> None:
    """Answers each of ``members`` gave earlier about ``answered`` inputs, read back from a cache
    (:mod:`dpsd.vote_cache`): counted as answered now, as if the member had answered again. Members outside a
    boundary (a benchmark, a test) are not counted."""
    for member in members:
        if isinstance(member, CountedTeacher):
            member.count(answered)


def _counts(events: list[PrivacyEvent], kinds: tuple[type, ...], relation: str) -> int:
    return sum(event.count for event in events if isinstance(event, kinds) and event.relation == relation)


def _merged(events: list[PrivacyEvent]) -> Counter:
    """Events merged by what they release (note dropped), counts summed: the same releases recorded one at a time
    or planned at once compare equal."""
    merged: Counter = Counter()
    for event in events:
        params = {key: value for key, value in vars(event).items() if key not in ("count", "note")}
        merged[(type(event).__name__, tuple(sorted(params.items())))] += event.count
    return Counter({key: count for key, count in merged.items() if count})


def _answers_covered(events: list[PrivacyEvent], relation: str) -> int:
    """How many answers of any one teacher the releases under ``relation`` cover: randomized response privatises one
    answer a release; a Gaussian or Laplace release privatises the ``answers`` its aggregate sums (a query's vote
    over an ensemble: one answer of each member; a batch's noisy mean output gradient: b answers of the teacher), so
    it covers ``count * answers``. A release recorded with fewer answers than it privatised (a run's PATE votes
    recorded as one release) covers too few, and the run is refused."""
    aggregates = sum(event.count * event.answers for event in events
                     if isinstance(event, (GaussianRelease, LaplaceRelease)) and event.relation == relation)
    return aggregates + _counts(events, (RandomizedResponseRelease,), relation)


def _within(events: list[PrivacyEvent], planned: list[PrivacyEvent]) -> bool:
    """Whether the releases a run recorded are within its plan: no kind the plan lacks, no more of any kind. A plan
    may bound the run from above (Confident-GNMax charges every query in the plan, the answered ones in the run):
    ``dpsd privacy-report`` then overstates the run's epsilon, never understates it."""
    recorded, bound = _merged(events), _merged(planned)
    return all(count <= bound.get(key, 0) for key, count in recorded.items())


def _disjoint(partitions: list[list[int]]) -> bool:
    seen: set[int] = set()
    for part in partitions:
        if seen & set(part):
            return False
        seen |= set(part)
    return True


def reconcile(method: str, accesses: Accesses, events: list[PrivacyEvent], planned: list[PrivacyEvent] | None,
              covers_images: bool) -> list[str]:
    """Every shortfall between what ``method``'s run touched (``accesses``), the releases it recorded (``events``)
    and its plan (``planned``; ``None``: no plan to compare), one line each naming the access and the missing
    release; empty when the ledger accounts for everything touched. ``covers_images``: whether the ledger covers
    reading the raw images (:meth:`dpsd.privacy.accounting.Ledger.covers_image_use`)."""
    shortfalls: list[str] = []
    # eps_rigorous is infinite already: an unprotected release, or no release at all (the accountants fail closed)
    unprotected = not events or any(isinstance(event, UnprotectedRelease) and event.count for event in events)
    if planned is not None and not _within(events, planned):
        shortfalls.append(f"method {method!r}: its plan_ledger plans {_described(planned)} but fit recorded "
                          f"{_described(events)}")
    covered = _answers_covered(events, "replace_record")
    if accesses.teacher_answers > covered and not unprotected:
        shortfalls.append(f"method {method!r}: the teacher answered {accesses.teacher_answers} inputs, but the "
                          f"releases under replace_record cover {covered}: record the mechanism's event for every "
                          "answer (a RandomizedResponseRelease with count = answers, or the Gaussian or Laplace "
                          "release of their noisy aggregate)")
    partition_events = _counts(events, ANSWER_RELEASES, "teacher_partition")
    if partition_events and not (accesses.partitions and _disjoint(accesses.partitions)):
        shortfalls.append(f"method {method!r}: {partition_events} releases are stated under teacher_partition, but no "
                          "teacher of this run was trained on a disjoint partition of the private split (the runner "
                          "trains ensemble members through dpsd.ensembles): state them under replace_record")
    most = max(accesses.member_answers.values(), default=0)
    members_covered = _answers_covered(events, "teacher_partition") + covered
    if most > members_covered and not unprotected:
        shortfalls.append(f"method {method!r}: an ensemble member answered {most} inputs, but the releases of its "
                          f"answers cover {members_covered}")
    shortfalls += _label_shortfalls(method, accesses, events, unprotected)
    if accesses.image_reads.any() and not covers_images:
        shortfalls.append(f"method {method!r} read the private images, but no release covers them: record "
                          "PrivateImagesRelease (the relation becomes label) or a mechanism on them")
    return shortfalls


def _label_shortfalls(method: str, accesses: Accesses, events: list[PrivacyEvent], unprotected: bool) -> list[str]:
    shortfalls = []
    recorded = _merged(events)
    for event, count in _merged(accesses.consumed).items():
        if recorded[event] < count:
            shortfalls.append(f"method {method!r}: a mechanism consumed the private labels ({event[0]}, {count} "
                              f"release{'s' if count > 1 else ''}), but the ledger records {recorded[event]} of it: "
                              "record the event the mechanism returned")
    raw = accesses.label_reads.copy()
    if raw.any() and accesses.partitions and _counts(events, ANSWER_RELEASES, "teacher_partition"):
        # under teacher_partition the records outside every partition are the public pool: their reads are free
        pool = np.ones(len(raw), dtype=bool)
        pool[[i for part in accesses.partitions for i in part]] = False
        raw[pool] = 0
    records = any(isinstance(event, SubsampledGaussianRelease) for event in events)
    if raw.any() and not (records or unprotected):
        shortfalls.append(f"method {method!r} read {int((raw > 0).sum())} private labels as they are, through no "
                          "mechanism: draw them with WatchedSplit.sealed_labels() into a label mechanism "
                          "(dpsd.privacy.mechanisms), or record an UnprotectedRelease")
    return shortfalls


def _described(events: list[PrivacyEvent]) -> str:
    return ", ".join(f"{kind} x{count}" for (kind, _), count in _merged(events).items()) or "no release"


def zero_epsilon_shortfall(method: str, accesses: Accesses, eps_rigorous: float) -> list[str]:
    """A run that touched the private data and would publish eps_rigorous = 0: refused (nothing about the data is
    released only where nothing of it was touched)."""
    if accesses.touched and eps_rigorous == 0:
        return [f"method {method!r} touched the private data but its releases give eps_rigorous = 0"]
    return []


_WATCHING: ContextVar[Accesses | None] = ContextVar("dpsd_boundary", default=None)


@contextmanager
def watching(accesses: Accesses) -> Iterator[Accesses]:
    """The runner's boundary around a method's ``fit``: teachers made during it are counted into ``accesses``."""
    token = _WATCHING.set(accesses)
    try:
        yield accesses
    finally:
        _WATCHING.reset(token)


def counted_members(members: list[nn.Module], parts: list[list[int]], names: list[str]) -> list[nn.Module]:
    """Ensemble members trained on ``parts`` of the private split, as a method inside the runner's boundary holds
    them: each counted under its name, the partitions kept as the facts their relation is checked against.
    Outside a boundary (a benchmark, a test) they are returned as they are."""
    accesses = _WATCHING.get()
    if accesses is None:
        return members
    accesses.partitions.extend(list(part) for part in parts)
    return [CountedTeacher(member, accesses, member=name) for member, name in zip(members, names)]
