"""Trend claims: what the papers say a figure's line or an ablation table's cells do, checked against our runs.

The papers print few of their figures' points; what they do state is a trend ("accuracy gets better as σ
increases from 20 to 100"). ``results/reference/sensitivity.csv`` (beside ``papers.csv``: :func:`claims_path`) holds
those statements, one row per claim, each naming the spec that reproduces its panel:

* a *trend* over the spec's x axis: ``trend`` ``up`` | ``down`` | ``flat`` (the net change from the first to the last
  point of ``[x_from, x_to]``; an empty bound is the axis's end), ``above`` | ``below`` (every point of the range
  above or below zero: a difference series), or a *shape*, several of them (``up down up``: the step directions with
  the flat steps left out, over the whole axis, where the text does not say where it turns);
* a *comparison* of two cells (an ablation table): ``cell`` the overrides of the cells compared, ``versus`` the
  overrides that replace them in the cell they are compared with (empty: the same cell without the ``cell`` keys),
  ``trend`` ``above`` | ``below`` | ``same``.

``series`` picks one line of the spec (its ``feeds.series`` value), ``A - B`` the difference of two, empty every
line; ``dataset`` empty is every dataset; ``metric`` ``accuracy`` (the student's, %), ``ensemble_test_accuracy`` (%),
``eps_claimed`` or ``eps_rigorous``. ``points`` says where the paper's direction comes from: ``papers.csv`` (derived
from its printed points by :func:`direction`, the same rule as ours: ``tests/test_sensitivity_pages.py`` holds the two
together) or ``none`` (its words only; the figure's points are not transcribable).

A change counts as a rise or a fall only beyond :data:`FLAT_POINTS` percentage points (1 % of the larger ε for an
ε) and beyond the seeds' spread (the two points' sample std combined); a smaller one is flat. Each claim checked
(:func:`check_trend`, :func:`check_versus`) is a :class:`Check`: the paper's words, ours, and whether they agree;
:func:`verdict` sums a line's checks up. The sensitivity pages (:mod:`dpsd.report.sensitivity`) write them as
sentences.

A student at chance has learned nothing a trend could be read from: a line (both lines of a difference), or every cell
of an ablation table, whose finished points all lie within :data:`CHANCE_POINTS` of chance (100 / classes) says so
(:func:`chance_ceiling`, :func:`at_chance`) in place of a verdict: a flat line at 10% does not "hold" the paper's
plateau at 98%, and two one-class students do not compare. So for each pair of an ablation table (:func:`check_versus`
given ``chance``): a pair whose two students are both at chance is not read, and the verdict counts the parts read.
Likewise an ε line infinite at every point (:func:`unbounded`) is not read: the ledger bounds nothing there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from dpsd.report.cells import ENSEMBLE, RUN, SURVIVAL
from dpsd.report.tables import DASH, fmt_eps, switches

CLAIMS_NAME = "sensitivity.csv"
CLAIM_COLUMNS = ("paper", "table", "panel", "spec", "dataset", "metric", "series", "x_from", "x_to", "cell", "versus",
                 "trend", "points", "paper_row", "paper_versus", "source", "note")
FLAT_POINTS = 1.0  # percentage points: a smaller change of an accuracy is flat
FLAT_EPS = 0.01    # a relative change of an ε below this is flat
CHANCE_POINTS = 5.0  # percentage points above chance (100 / classes) within which a student is at chance
METRICS = {  # claim metric -> (group column, factor to percent, words)
    "accuracy": ("accuracy", 1.0, "student accuracy"),
    "ensemble_test_accuracy": (ENSEMBLE, 100.0, "teacher-ensemble accuracy"),
    "topk_survival": (SURVIVAL, 100.0, "top-k survival"),  # the teacher's class inside the student's top-k
    "eps_claimed": ("eps_claimed", 1.0, "ε claimed"),
    "eps_rigorous": ("eps_rigorous", 1.0, "ε rigorous"),
}
STEP_WORDS = {"up": "rises", "down": "falls", "flat": "is flat"}
SIGN_WORDS = {"above": "above", "below": "below", "same": "level with"}
NOT_RUN_TEXT = "not run"
AT_CHANCE_TEXT = "at chance"
UNBOUNDED_TEXT = "infinite"
UNREADABLE = (AT_CHANCE_TEXT, UNBOUNDED_TEXT)
"""How ours begins where a line cannot be read: its students at chance (:func:`at_chance`), or its ledger infinite at
every point (:func:`unbounded`)."""
UNREADABLE_VERDICT = "the paper's trend cannot be read here"
IGNORED_KEYS = ("seed", "scale", "data.root", "results_dir")  # overrides that do not tell two cells of a table apart


def claims_path(reference_csv: Path) -> Path:
    """The papers' trend statements: ``sensitivity.csv`` in the folder of the papers' numbers."""
    return Path(reference_csv).with_name(CLAIMS_NAME)


def no_claims() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CLAIM_COLUMNS))


def load_claims(path: Path) -> pd.DataFrame:
    """The claims (all columns text); empty without the file."""
    path = Path(path)
    if not path.is_file():
        return no_claims()
    frame = pd.read_csv(path, dtype=str, keep_default_na=False).map(str.strip)
    missing = [c for c in CLAIM_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {', '.join(missing)}; expected {', '.join(CLAIM_COLUMNS)}")
    return frame


def claims_for(claims: pd.DataFrame, spec_name: str) -> pd.DataFrame:
    """The claims a spec checks: its rows that state a trend."""
    return claims[(claims["spec"] == spec_name) & (claims["trend"] != "")].reset_index(drop=True)


@dataclass(frozen=True)
class Point:
    """One point of a line: x, the mean over its seeds (None: no finished run), their sample std, seeds done and planned."""

    x: float
    y: float | None
    std: float = math.nan
    seeds: int = 0
    planned: int = 0
    status: str = RUN


def as_number(value: object) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _is_eps(metric: str) -> bool:
    return metric.startswith("eps_")


def threshold(metric: str, a: Point, b: Point | None = None) -> float:
    """How far apart two points (or a point from zero) must be to differ: :data:`FLAT_POINTS` or the seeds' spread,
    whichever is larger (an ε: :data:`FLAT_EPS` of the larger)."""
    if _is_eps(metric):
        return FLAT_EPS * max(abs(a.y), abs(b.y) if b is not None else 0.0)
    spread = math.hypot(*(0.0 if math.isnan(p.std) else p.std for p in (a, b) if p is not None))
    return max(FLAT_POINTS, spread)


def direction(a: Point, b: Point, metric: str = "accuracy") -> str:
    """``up``, ``down`` or ``flat`` from ``a`` to ``b`` (:func:`threshold`); an infinite ε above any finite one."""
    if math.isinf(a.y) or math.isinf(b.y):
        return "flat" if a.y == b.y else ("up" if b.y > a.y else "down")
    change = b.y - a.y
    limit = threshold(metric, a, b)
    return "up" if change > limit else "down" if change < -limit else "flat"


def sign(point: Point, metric: str = "accuracy") -> str:
    """``above``, ``below`` or ``same``: a point of a difference against zero (:func:`threshold`)."""
    limit = threshold(metric, point)
    return "above" if point.y > limit else "below" if point.y < -limit else "same"


def shape(points: Sequence[Point], metric: str = "accuracy") -> list[str]:
    """The step directions along ``points`` (in x order) with the flat steps left out and repeats merged:
    ``["up", "down", "up"]``; ``[]`` for a flat line."""
    steps = [direction(a, b, metric) for a, b in zip(points, points[1:])]
    found: list[str] = []
    for step in steps:
        if step != "flat" and (not found or found[-1] != step):
            found.append(step)
    return found


def segments(points: Sequence[Point], metric: str = "accuracy") -> list[tuple[float, float, str]]:
    """``(x_from, x_to, direction)`` runs of equal step direction along ``points`` (flat steps included): how a
    paper's printed points read as a trend."""
    runs: list[tuple[float, float, str]] = []
    for a, b in zip(points, points[1:]):
        step = direction(a, b, metric)
        if runs and runs[-1][2] == step:
            runs[-1] = (runs[-1][0], b.x, step)
        else:
            runs.append((a.x, b.x, step))
    return runs


# --- our points --------------------------------------------------------------------------------------------------


def _value(group: pd.Series, metric: str) -> tuple[float | None, float]:
    column, factor, _ = METRICS[metric]
    if group["status"] != RUN:
        return None, math.nan
    value = as_number(group.get(column))
    std = as_number(group.get("accuracy_std")) if metric == "accuracy" else None
    return (None if value is None else value * factor), (math.nan if std is None else std)


def _line(groups: pd.DataFrame, dataset: str, series: str, metric: str) -> list[Point]:
    mine = groups[(groups["dataset"] == dataset) & (groups["series"] == series) & groups["x"].notna()]
    points = []
    for _, group in mine.iterrows():
        x = as_number(group["x"])
        if x is None:
            continue
        y, std = _value(group, metric)
        points.append(Point(x, y, std, int(group["seeds"]), int(group["planned_seeds"]), group["status"]))
    return sorted(points, key=lambda p: p.x)


def group_points(groups: pd.DataFrame, dataset: str, metric: str) -> list[Point]:
    """Every cell of ``groups`` on ``dataset`` as a point (x 0): what an ablation table's comparisons are made of."""
    return [Point(0.0, *_value(group, metric)) for _, group in groups[groups["dataset"] == dataset].iterrows()]


def line(groups: pd.DataFrame, dataset: str, series: str, metric: str) -> list[Point]:
    """Our points of one line of ``groups`` (:func:`~dpsd.report.cells.group_frame` rows with ``x`` and ``series``),
    in x order; ``"A - B"`` the difference of two lines at the x values both have (its std: the two combined)."""
    if " - " not in series:
        return _line(groups, dataset, series, metric)
    left, right = (_line(groups, dataset, name.strip(), metric) for name in series.split(" - ", 1))
    by_x = {p.x: p for p in right}
    points = []
    for a in left:
        b = by_x.get(a.x)
        if b is None:
            continue
        done = a.y is not None and b.y is not None
        std = math.hypot(*(0.0 if math.isnan(s) else s for s in (a.std, b.std))) if done else math.nan
        points.append(Point(a.x, a.y - b.y if done else None, std, min(a.seeds, b.seeds), min(a.planned, b.planned),
                            RUN if done else (a.status if a.status != RUN else b.status)))
    return points


# --- the checks ---------------------------------------------------------------------------------------------------


def fmt_x(value: float | None) -> str:
    return DASH if value is None else f"{value:g}"


def _in_range(points: Sequence[Point], low: float | None, high: float | None) -> list[Point]:
    def inside(x: float) -> bool:
        return ((low is None or x >= low - 1e-12 * abs(low)) and (high is None or x <= high + 1e-12 * abs(high)))

    return [p for p in points if inside(p.x)]


def _change(a: Point, b: Point, metric: str) -> str:
    if _is_eps(metric):
        return f"{fmt_eps(a.y)} to {fmt_eps(b.y)}"
    return f"{b.y - a.y:+.2f}"


@dataclass(frozen=True)
class Check:
    """One claim against our points: what the paper says, what ours show, and whether they agree (None: not known)."""

    paper: str
    ours: str
    holds: bool | None


def check_trend(claim: pd.Series, points: Sequence[Point], x_name: str) -> Check:
    """A trend claim (:mod:`module docstring <dpsd.report.trends>`) against one of our lines."""
    metric, tokens = claim["metric"], claim["trend"].split()
    low, high = as_number(claim["x_from"]), as_number(claim["x_to"])
    planned = _in_range(points, low, high)
    done = [p for p in planned if p.y is not None]
    start = fmt_x(low if low is not None else (planned[0].x if planned else None))
    end = fmt_x(high if high is not None else (planned[-1].x if planned else None))
    if len(tokens) > 1:  # a shape over the whole axis
        paper = ", then ".join(STEP_WORDS[t] for t in tokens) + f" as {x_name} grows"
        if len(done) < 2:
            return Check(paper, _too_few(done, planned), None)
        found = shape(done, metric)
        ours = (", then ".join(STEP_WORDS[t] for t in found) if found else "is flat") + _partial(done, planned)
        return Check(paper, ours, found == tokens)
    token = tokens[0]
    where = f"from {x_name} = {start} to {end}"
    if token in SIGN_WORDS:
        paper = f"is {SIGN_WORDS[token]} zero {where}"
        if not done:
            return Check(paper, _too_few(done, planned), None)
        signs = [sign(p, metric) for p in done]
        agree = sum(s == token for s in signs)
        values = ", ".join(f"{p.y:+.2f}" for p in done)
        return Check(paper, f"{SIGN_WORDS[token]} zero at {agree} of {len(done)} points ({values})"
                     + _partial(done, planned), agree == len(done))
    paper = f"{STEP_WORDS[token]} {where}"
    if len(done) < 2:
        return Check(paper, _too_few(done, planned), None)
    found = direction(done[0], done[-1], metric)
    ours = (f"{STEP_WORDS[found]} from {fmt_x(done[0].x)} to {fmt_x(done[-1].x)} "
            f"({_change(done[0], done[-1], metric)})" + _partial(done, planned))
    return Check(paper, ours, found == token)


def _too_few(done: Sequence[Point], planned: Sequence[Point]) -> str:
    return NOT_RUN_TEXT if not done else f"too few points run ({len(done)} of {len(planned)})"


def _partial(done: Sequence[Point], planned: Sequence[Point]) -> str:
    return "" if len(done) == len(planned) else f"; {len(done)} of {len(planned)} points run"


def _pairs(overrides: dict[str, str]) -> dict[str, str]:
    return {k: str(v) for k, v in overrides.items() if k not in IGNORED_KEYS}


def _same(a: dict[str, str], b: dict[str, str]) -> bool:
    if set(a) != set(b):
        return False
    for key, value in a.items():
        try:
            if not math.isclose(float(value), float(b[key]), rel_tol=1e-9):
                return False
        except ValueError:
            if value != b[key]:
                return False
    return True


def pairs(groups: pd.DataFrame, cell: str, versus: str, dataset: str = "") -> list[tuple[pd.Series, pd.Series]]:
    """The ``(cell, compared)`` group pairs of a comparison claim: each group whose overrides hold every ``cell``
    override, beside the group whose overrides are its own with those replaced by ``versus``'s."""
    wanted, instead = switches(f"switch: {cell}"), switches(f"switch: {versus}") if versus else {}
    found = []
    for _, group in groups.iterrows():
        own = _pairs(group["overrides"])
        if dataset and group["dataset"] != dataset:
            continue
        if not all(key in own and _same({key: own[key]}, {key: value}) for key, value in wanted.items()):
            continue
        target = {**{k: v for k, v in own.items() if k not in wanted}, **instead}
        partner = [other for _, other in groups.iterrows() if _same(_pairs(other["overrides"]), target)]
        if partner:
            found.append((group, partner[0]))
    return found


def check_versus(claim: pd.Series, groups: pd.DataFrame, dataset: str,
                 beside: dict[int, list[pd.Series]] | None = None, chance: float | None = None) -> list[Check]:
    """A comparison claim against each pair of our cells it names (:func:`pairs`); ``beside``: the paper's rows by
    group (:func:`~dpsd.report.sensitivity.paper_numbers`), whose numbers the sentence quotes for each pair;
    ``chance`` (%, accuracy claims): a pair whose two students are both within :data:`CHANCE_POINTS` of it is not
    read (no verdict for it)."""
    metric, token = claim["metric"] or "accuracy", claim["trend"]
    if claim["paper_row"]:  # the paper's own names for the two rows
        compared = f"{claim['paper_row']} vs {claim['paper_versus']}"
    else:
        compared = f"{_keys(claim['cell'])} vs {_keys(claim['versus']) if claim['versus'] else 'the cell without it'}"
    found_pairs = pairs(groups, claim["cell"], claim["versus"], dataset)
    checks = []
    for left, right in found_pairs:
        printed = [_printed(beside, side.name) for side in (left, right)]
        numbers = f" ({printed[0]} vs {printed[1]})" if all(printed) else ""
        context = _context(left, claim) if len(found_pairs) > 1 else ""
        paper = f"{context}{compared}: {SIGN_WORDS[token]}{numbers}"
        (a, sa), (b, sb) = _value(left, metric), _value(right, metric)
        if a is None or b is None:
            checks.append(Check(paper, NOT_RUN_TEXT, None))
            continue
        if metric == "accuracy" and chance_ceiling([Point(0.0, a), Point(0.0, b)], chance) is not None:
            checks.append(Check(paper, f"{AT_CHANCE_TEXT}, both ({a:.2f} vs {b:.2f}; chance {chance:g}%)", None))
            continue
        difference = Point(0.0, a - b, math.hypot(*(0.0 if math.isnan(s) else s for s in (sa, sb))))
        found = sign(difference, metric)
        checks.append(Check(paper, f"{SIGN_WORDS[found]} ({a:.2f} vs {b:.2f})", found == token))
    return checks


def _printed(beside: dict[int, list[pd.Series]] | None, index: int) -> str:
    """The paper's printed accuracy for a group, or ``""``."""
    found = [r["value"] for r in (beside or {}).get(index, []) if r["metric"] in ("", "accuracy")]
    return found[0] if found else ""


def _keys(overrides: str) -> str:
    return " ".join(overrides.split())


def _context(group: pd.Series, claim: pd.Series) -> str:
    """What tells this pair apart from the claim's other pairs (an ε, a privacy mode), in brackets."""
    named = set(switches(f"switch: {claim['cell']}")) | set(switches(f"switch: {claim['versus']}"))
    rest = {k: v for k, v in _pairs(group["overrides"]).items() if k not in named and k in ("privacy", "privacy.epsilon")}
    return f"[{' '.join(f'{k}={v}' for k, v in rest.items())}] " if rest else ""


def chance_ceiling(points: Sequence[Point], chance: float | None) -> float | None:
    """The highest finished point (%) when every finished one of ``points`` lies within :data:`CHANCE_POINTS` of
    ``chance`` (%); None otherwise, without a finished point, or where chance is not known."""
    done = [p.y for p in points if p.y is not None]
    if chance is None or not done or max(done) > chance + CHANCE_POINTS:
        return None
    return max(done)


def at_chance(checks: Sequence[Check], points: Sequence[Point], chance: float | None) -> list[Check]:
    """``checks`` as they are, or, where every finished point of ``points`` is at chance (:func:`chance_ceiling`), each
    with ours saying so and no verdict."""
    top = chance_ceiling(points, chance)
    if top is None:
        return list(checks)
    ours = f"{AT_CHANCE_TEXT} at every point run (at most {top:.2f}%; chance {chance:g}%)"
    return [Check(c.paper, ours, None) for c in checks]


def unbounded(checks: Sequence[Check], points: Sequence[Point]) -> list[Check]:
    """``checks`` of an ε line as they are, or, where every finished point of ``points`` is infinite (the ledger bounds
    nothing there: a release it does not cover), each with ours saying so and no verdict: ∞ to ∞ is neither the
    paper's rise nor its fall."""
    done = [p.y for p in points if p.y is not None]
    if not done or not all(math.isinf(y) for y in done):
        return list(checks)
    return [Check(c.paper, f"{UNBOUNDED_TEXT} at every point run (the ledger bounds nothing here)", None)
            for c in checks]


def verdict(checks: Sequence[Check]) -> str:
    """The sentence's ending: holds, holds in part, does not hold, cannot be read (at chance, or an infinite ledger), or
    not run yet."""
    known = [c for c in checks if c.holds is not None]
    if not known:
        if all(c.ours == NOT_RUN_TEXT for c in checks):
            return "not run yet"
        if all(c.ours.startswith(UNREADABLE) for c in checks):
            return UNREADABLE_VERDICT
        return "too few points run to say"
    held = sum(c.holds for c in known)
    if held == len(checks):
        return "the paper's trend holds here"
    if held == 0 and len(known) == len(checks):
        return "the paper's trend does not hold here"
    unread = {text: sum(c.ours.startswith(text) for c in checks) for text in UNREADABLE}  # counted over the parts read
    left = len(checks) - len(known) - sum(unread.values())
    notes = [f"{left} not run yet"] * bool(left) + [f"{n} {text}, not read" for text, n in unread.items() if n]
    read = f"the {len(known)} parts read" if len(known) > 1 else "the one part read"
    parts = read if any(unread.values()) else f"{len(checks)} parts"
    return f"the paper's trend holds in {held} of {parts}" + (f" ({', '.join(notes)})" if notes else "")
