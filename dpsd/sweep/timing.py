"""How long a sweep will take, from the runs' own timings, and how far it has got (``dpsd reproduce``).

:func:`estimate` prices each cell to run from the recorded runs (the runs archive and the MLflow store: metric
``time_total_s``, tag ``hardware``) measured on this machine's class of hardware (:func:`dpsd.tracking.hardware_class`:
the CPU, its logical cores and the GPU, less the thread count a trial was given): the cell's own earlier runs (a stale
or failed-before cell), else the runs of the same cell at its other seeds, else the same cell's runs on another class
of hardware scaled by the two classes' ratio over the spec's cells both ran at its scale
(:func:`scaled_from_elsewhere`), else its spec's runs of its method at its scale, else its method's runs at its scale,
else the same cell's runs elsewhere scaled by the ratio over every spec's cells both classes ran at its scale, else
over every cell both ran at any scale (rougher: a GPU gains more on a paper-scale network than on a laptop one, so
these come after this hardware's own runs of the method); each the median of those runs. Method runs of an on-demand
spec (the ladder, the readings: their own budget at the scale called smoke) price only other on-demand specs' cells,
and the others only the others.
A cell none of those price whose method trains a teacher ensemble (PATE, DGD: :func:`dpsd.member_rates.member_work`)
is priced by its members alone at the ensemble benchmark's rate on this class of hardware
(:mod:`dpsd.member_rates`), each shared ensemble once: a lower bound, said so; else it has no timing.
A full-data teacher the cells read that this machine's cache lacks (:func:`dpsd.member_rates.teacher_work`) is trained
before its cells, a time no recorded cell's holds: each such teacher is priced once, over its recipe's full steps at
the teacher benchmark's rate (``python -m dpsd.bench --teacher-paths --record``), and the line says how many there are
and what they add. The sum is divided by the trials that run at once here.

:class:`Progress` prints one line per finished trial (cells done / total, elapsed, what is left by the estimate)
to the terminal and appends it to a log file beside Tune's experiments (``<results_dir>/ray/``).
"""

from __future__ import annotations

import csv
import functools
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from dpsd.errors import ConfigError
from dpsd.member_rates import MemberRate, MemberWork, member_work
from dpsd.sweep.spec import Cell, group_label, load_spec
from dpsd.tracking import hardware_class

TIME_METRIC = "time_total_s"

def gpu_classes(timings: Iterable["Timing"], besides: str) -> list[str]:
    """The GPU classes of hardware (a tag naming no ``no GPU``) that ``timings`` were recorded on, other than
    ``besides`` (this machine's), most runs first: where a dry run also prices the cells (a GPU, for a machine without
    one)."""
    counts: dict[str, int] = {}
    for timing in timings:
        if timing.hardware and "no GPU" not in timing.hardware and timing.hardware != besides:
            counts[timing.hardware] = counts.get(timing.hardware, 0) + 1
    return sorted(counts, key=lambda hardware: -counts[hardware])


@dataclass(frozen=True)
class Timing:
    """One recorded run's wall time and what it is compared on."""

    run_id: str
    config_hash: str
    sweep: str
    method: str
    scale: str
    hardware: str
    seconds: float
    cell: str = ""  # the cell's label less its seed (dpsd.sweep.spec.group_label)


def _method_of(overrides: str) -> str:
    """The ``method=`` an archived run's overrides chose (the last one wins, as in Hydra; config.yaml's default
    is dpsd)."""
    chosen = [o.split("=", 1)[1] for o in overrides.split() if o.startswith("method=")]
    return chosen[-1] if chosen else "dpsd"


def archived_timings(path: Path | None) -> list[Timing]:
    """The finished runs of a runs archive (``results/runs.csv``) with a wall time."""
    if path is None or not Path(path).is_file():
        return []
    timings = []
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            seconds = _seconds(row.get(f"metrics.{TIME_METRIC}"))
            if row.get("status") == "FINISHED" and seconds is not None and row.get("hardware"):
                timings.append(Timing(row.get("run_id", ""), row.get("config_hash", ""), row.get("sweep", ""),
                                      _method_of(row.get("overrides", "")), row.get("scale", ""),
                                      hardware_class(row["hardware"]), seconds, group_label(row.get("cell", ""))))
    return timings


def stored_timings(runs: Iterable[Any]) -> list[Timing]:
    """The MLflow runs (:func:`dpsd.sweep.store.done_runs`) with a wall time."""
    timings = []
    for run in runs:
        tags, seconds = run.data.tags, _seconds(run.data.metrics.get(TIME_METRIC))
        if seconds is not None and tags.get("hardware"):
            timings.append(Timing(run.info.run_id, tags.get("config_hash", ""), tags.get("sweep", ""),
                                  tags.get("method", ""), tags.get("scale", ""), hardware_class(tags["hardware"]),
                                  seconds, group_label(tags.get("cell", ""))))
    return timings


def _seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


SCALED = "its runs on another class of hardware, times that class's ratio to this one over {}"
AMONG = {"spec": "its spec's cells both ran at its scale", "scale": "every spec's cells both ran at its scale",
         "any": "every cell both ran, at any scale"}
"""What :func:`scaled_from_elsewhere`'s ratio is taken over, narrowest first."""
LEVELS = ("its own earlier runs", "its other seeds' runs", SCALED.format(AMONG["spec"]), "its spec's runs of its method",
          "its method's runs at its scale", SCALED.format(AMONG["scale"]), SCALED.format(AMONG["any"]))
MEMBERS_LEVEL = "its members alone at the ensemble benchmark's rate"


@functools.lru_cache(maxsize=None)
def on_demand(sweep: str) -> bool:
    """Whether the spec named ``sweep`` (``sweeps/<name>.yaml``) is on demand; a spec not found there (a study
    elsewhere on disk, a spec since removed) is taken for one that is not."""
    try:
        return load_spec(sweep).on_demand
    except ConfigError:
        return False


@dataclass
class Estimate:
    """:func:`estimate`'s answer: ``seconds`` of wall time (None when no cell has a timing), ``per_cell``
    (config_hash -> seconds of one trial), the runs it rests on, the cells priced at each level and those with no
    timing."""

    seconds: float | None
    per_cell: dict[str, float]
    runs: int
    by_level: dict[str, int]
    untimed: int
    cells: int
    hardware: str
    concurrent: int
    where: str = "this machine's"
    other_hardware: int = 0  # untimed cells that have runs on another class of hardware
    members_only: int = 0  # cells priced by MEMBERS_LEVEL (the estimate is then a lower bound)
    teachers_absent: int = 0  # distinct teachers the cells read that this machine's cache lacks
    teachers_unpriced: int = 0  # of those, the ones no teacher benchmark rate on this hardware prices
    teacher_seconds: float = 0.0  # what the priced ones add (in ``seconds``)

    def line(self) -> str:
        """``estimate: ≈ 3.1 h on this machine's class of hardware (...) from 412 archived runs; ...``."""
        if not self.cells:
            return "estimate: nothing to run"
        at_once = f"{self.concurrent} trial{'s' if self.concurrent != 1 else ''} at a time"
        if self.where == "the driver's":
            at_once += "; the cluster's nodes may differ"
        if self.seconds is None:
            text = (f"estimate: none: no recorded run of these cells' methods on {self.where} class of hardware "
                    f"({self.hardware}; {at_once})")
        else:
            levels = ", ".join(f"{level} for {n}" for level, n in self.by_level.items() if n)
            parts = [f"the median of {levels}"] if levels else []
            if self.members_only:
                parts.append(f"{MEMBERS_LEVEL} for {self.members_only}, each shared ensemble once")
            bound = "≥" if self.members_only else "≈"
            sources = [f"{self.runs} recorded runs"] if self.runs or not self.members_only else []
            sources += ["the ensemble benchmark's rate"] if self.members_only else []
            text = (f"estimate: {bound} {duration(self.seconds)} for {self.cells - self.untimed} of {self.cells} cells "
                    f"on {self.where} class of hardware ({self.hardware}; {at_once}), from {' and '.join(sources)} "
                    f"(a cell's time: {'; '.join(parts)})")
            if self.members_only:
                text += (f"; a lower bound: {self.members_only} cell{'s are' if self.members_only != 1 else ' is'} "
                         "priced by training their members only, from an empty cache")
        if self.teachers_absent:
            text += self._teachers()
        if self.untimed:
            text += f"; {self.untimed} cell{'s have' if self.untimed != 1 else ' has'} no timing"
            if self.other_hardware:
                text += f" ({self.other_hardware} timed on other hardware only)"
        return text


    def _teachers(self) -> str:
        absent = self.teachers_absent
        text = f"; {absent} teacher{'s' if absent != 1 else ''} absent from this machine's cache, trained first"
        priced = absent - self.teachers_unpriced
        if priced:
            text += (f", adding {duration(self.teacher_seconds)} for {priced} at the teacher benchmark's rate over "
                     "each recipe's full steps (a teacher that reaches its target stops sooner)")
        if self.teachers_unpriced:
            text += (f"; {self.teachers_unpriced} not priced (no teacher benchmark rate on this hardware: "
                     "python -m dpsd.bench --teacher-paths --record, with the cells' teacher settings)")
        return text


def estimate(cells: Sequence[tuple[Cell, str]], timings: Sequence[Timing], hardware: str, concurrent: int,
             where: str = "this machine's", rates: Sequence[MemberRate] = (),
             teachers: Sequence[MemberWork] = ()) -> Estimate:
    """The wall time of running ``cells`` (each with its scale) ``concurrent`` at a time on ``hardware``, from
    ``timings`` and, for a cell they do not price, the ensemble benchmark's ``rates``; plus the ``teachers``
    absent here (:func:`dpsd.member_rates.teacher_work`) at the teacher benchmark's rate (module docstring)."""
    unique = list({t.run_id or id(t): t for t in timings}.values())
    keys = (lambda t: t.config_hash, lambda t: (t.sweep, t.cell, t.scale), lambda t: (t.sweep, t.method, t.scale),
            lambda t: (t.method, t.scale, on_demand(t.sweep)))
    grouped: list[dict] = [{} for _ in keys]
    for timing in (t for t in unique if t.hardware == hardware):
        for index, key in zip(grouped, keys):
            index.setdefault(key(timing), []).append(timing)
    here = [{key: _priced(found) for key, found in index.items()} for index in grouped]
    scaled = {among: scaled_from_elsewhere(unique, hardware, among) for among in AMONG}
    indexes = [*here[:2], scaled["spec"], *here[2:], scaled["scale"], scaled["any"]]  # in the order of LEVELS
    elsewhere = {t.config_hash for t in timings if t.hardware != hardware} | {
        (t.method, t.scale, on_demand(t.sweep)) for t in timings if t.hardware != hardware}
    per_cell, used, by_level = {}, set(), dict.fromkeys(LEVELS, 0)
    members = MemberPricing(hardware, rates)
    untimed = other = 0
    for cell, scale in cells:
        group, method = (cell.spec, group_label(cell.label), scale), (cell.method, scale, on_demand(cell.spec))
        wanted = (cell.config_hash, group, group, (cell.spec, cell.method, scale), method, group, group)
        for level, index, key in zip(LEVELS, indexes, wanted):
            priced = index.get(key)
            if priced:
                per_cell[cell.config_hash] = priced.seconds
                used.update(priced.run_ids)
                by_level[level] += 1
                break
        else:
            seconds = members.price(cell)
            if seconds is not None:
                per_cell[cell.config_hash] = seconds
                continue
            untimed += 1
            other += cell.config_hash in elsewhere or method in elsewhere
    absent = {work.ensemble: work for work in teachers}
    teacher_seconds = [members.cost(work) for work in absent.values()]
    priced_teachers = [seconds for seconds in teacher_seconds if seconds is not None]
    total = (sum(per_cell.values()) + sum(priced_teachers)) / max(1, concurrent) if per_cell else None
    return Estimate(total, per_cell, len(used), by_level, untimed, len(cells), hardware, max(1, concurrent), where,
                    other, members.priced, len(absent), len(absent) - len(priced_teachers),
                    sum(priced_teachers) / max(1, concurrent))


@dataclass(frozen=True)
class Priced:
    """A cell's price (seconds) and the runs it rests on."""

    seconds: float
    run_ids: frozenset[str]


def _priced(found: Sequence[Timing]) -> Priced:
    """The median of ``found``'s times."""
    return Priced(statistics.median(t.seconds for t in found), frozenset(t.run_id for t in found))


def scaled_from_elsewhere(timings: Sequence[Timing], hardware: str,
                          among: str = "spec") -> dict[tuple[str, str, str], Priced]:
    """Each cell group (spec, cell less its seed, scale) that ``hardware`` has not run but another class has, priced
    here: its median there times the median, over the groups of its spec at its scale both classes ran, of the ratio
    of the two medians (here over there; a GPU's gain differs from one scale's networks to another's); none where the
    classes share no such group. A new machine's first run of a spec's cell then prices the cells that ran elsewhere
    at their own cost, not at the median of its other cells (a ladder's R3 trains for longer than its R5). The class
    sharing most groups with this one prices first. ``among`` (:data:`AMONG`): ``"scale"``, the ratio over the groups
    of every spec at its scale both classes ran (for a spec of which this class has run nothing yet); ``"any"``, over
    every group both ran at any scale (for a scale this class has run nothing of: a rougher ratio, since a GPU's gain
    grows with the networks; the levels after the spec's own)."""
    grouped: dict[str, dict[tuple[str, str, str], list[Timing]]] = {}
    for timing in timings:
        grouped.setdefault(timing.hardware, {}).setdefault((timing.sweep, timing.cell, timing.scale), []).append(timing)
    runs = {other: {group: _priced(found) for group, found in groups.items()} for other, groups in grouped.items()}
    mine = runs.get(hardware, {})
    others = sorted((other for other in runs if other != hardware),
                    key=lambda other: (-len(runs[other].keys() & mine.keys()), other))

    def pool(group: tuple[str, str, str]) -> tuple[str, ...]:  # the groups a ratio is taken over
        return {"spec": (group[0], group[2]), "scale": (group[2],), "any": ()}[among]

    priced: dict[tuple[str, str, str], Priced] = {}
    for other in others:
        theirs, pools = runs[other], {}
        for shared in theirs.keys() & mine.keys():
            pools.setdefault(pool(shared), []).append(shared)
        ratios = {key: (statistics.median(mine[g].seconds / theirs[g].seconds for g in shared),
                        frozenset().union(*(mine[g].run_ids | theirs[g].run_ids for g in shared)))
                  for key, shared in pools.items()}  # pool -> (here over there, the runs it rests on)
        for group, there in theirs.items():
            if group not in mine and group not in priced and pool(group) in ratios:
                ratio, rests_on = ratios[pool(group)]
                priced[group] = Priced(there.seconds * ratio, there.run_ids | rests_on)
    return priced


@dataclass
class MemberPricing:
    """Prices a cell by its members alone at the benchmark's rate on ``hardware`` (:mod:`dpsd.member_rates`): the
    first cell of a shared ensemble carries its members' seconds, the others none (they load what it trained)."""

    hardware: str
    rates: Sequence[MemberRate]
    seen: set[str] = field(default_factory=set)
    priced: int = 0

    def __post_init__(self) -> None:
        self.rated = {rate.key: rate for rate in self.rates if rate.hardware == self.hardware}

    def cost(self, work: MemberWork) -> float | None:
        """``work``'s seconds at its rate on this hardware; None where no rate prices it."""
        rate = self.rated.get(work.rate_key(self.hardware))
        return work.count * work.steps * rate.seconds_per_step if rate is not None else None

    def price(self, cell: Cell) -> float | None:
        work = member_work(cell.compose()) if self.rated else None  # composed only where a rate could price it
        seconds = self.cost(work) if work is not None else None
        if seconds is None:
            return None
        self.priced += 1
        if work.ensemble in self.seen:
            return 0.0
        self.seen.add(work.ensemble)
        return seconds


def duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.1 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def clock(seconds: float) -> str:
    """``1:02:03``: elapsed wall time."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass
class Progress:
    """Cells done / total and elapsed, one line per finished trial, on the terminal and in ``log_path`` (both as
    they happen). Started (:meth:`start`) once the cells to run are known; :meth:`finished` is called by the Tune
    callback (:func:`tune_callback`) in the driver."""

    echo: bool = True
    log_path: Path | None = None
    total: int = 0
    done: int = 0
    began: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)  # config_hash -> "spec: label"
    per_cell: dict[str, float] = field(default_factory=dict)  # config_hash -> estimated seconds of a trial
    concurrent: int = 1
    left: set[str] = field(default_factory=set)
    estimate_line: str | None = None

    def say(self, line: str) -> None:
        if self.echo:
            print(line, flush=True)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def start(self, labels: dict[str, str], estimated: Estimate | None, log_dir: Path | None) -> None:
        self.labels, self.total, self.done, self.began = dict(labels), len(labels), 0, time.time()
        self.left = set(labels)
        if estimated is not None:
            self.per_cell, self.concurrent = estimated.per_cell, estimated.concurrent
        if log_dir is not None:
            self.log_path = Path(log_dir) / f"reproduce-{time.strftime('%Y%m%d-%H%M%S')}.log"
        self.say(f"progress: {self.total} cells to run"
                 + (f"; log {self.log_path}" if self.log_path is not None else ""))
        if self.estimate_line:
            self.say(self.estimate_line)

    def note(self, line: str) -> None:
        """A step between the trials (the teachers), with the elapsed time."""
        self.say(f"progress: {line} (elapsed {clock(time.time() - self.began)})")

    def finished(self, digest: str, outcome: str, seconds: float | None = None) -> None:
        if digest not in self.left:  # a trial reported twice (a restored experiment): counted once
            return
        self.left.discard(digest)
        self.done += 1
        took = f" in {duration(seconds)}" if seconds else ""
        left = [self.per_cell[d] for d in self.left if d in self.per_cell]
        ahead = f"; ≈ {duration(sum(left) / self.concurrent)} left by the estimate" if left else ""
        self.say(f"progress: [{self.done}/{self.total}] {outcome} {self.labels.get(digest, digest)}{took}; "
                 f"elapsed {clock(time.time() - self.began)}{ahead}")

    def end(self) -> None:
        if self.total:
            self.say(f"progress: {self.done}/{self.total} cells finished a trial; elapsed {clock(time.time() - self.began)}")


_LIVE: dict[str, Progress] = {}  # Tune experiment name -> the driver's Progress (see tune_callback)


def live_progress(experiment: str) -> Progress | None:
    return _LIVE.get(experiment)


def tune_callback(experiment: str, progress: Progress):
    """A Tune callback (run in the driver) that hands each trial's reported outcome to ``progress``. It holds the
    experiment's name, not ``progress``: Tune pickles it with the experiment, and a driver that restores a killed
    driver's experiment gets the callback back from that pickle, so each driver registers its own ``progress``
    under the name (:func:`register`) and the callback looks it up when a trial reports."""
    from ray import tune

    register(experiment, progress)

    class ToProgress(tune.Callback):
        def __init__(self, name: str) -> None:
            self.name = name

        def _progress(self) -> Progress | None:
            from dpsd.sweep.timing import live_progress  # the module's registry, not a pickled copy of it

            return live_progress(self.name)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            progress, digest = self._progress(), (trial.config or {}).get("config_hash")
            if progress is not None and digest and "outcome" in result:
                progress.finished(digest, str(result["outcome"]), result.get("time_total_s"))

        def on_trial_error(self, iteration, trials, trial, **info):
            progress, digest = self._progress(), (trial.config or {}).get("config_hash")
            if progress is not None and digest:
                progress.finished(digest, "error")

    return ToProgress(experiment)


def register(experiment: str, progress: Progress | None) -> None:
    """``progress`` receives the trials of the Tune experiment ``experiment`` (None: nothing does)."""
    if progress is None:
        _LIVE.pop(experiment, None)
    else:
        _LIVE[experiment] = progress
