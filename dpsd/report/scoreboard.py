"""The scoreboard ``index.html`` opens with: per paper, at the rendered scale, how many of the paper's
numbers for a method we implement are matched within 2 points, exceeded, fallen short of, not run, or
have no data here. A row whose runs all have fewer than :data:`MIN_SEEDS` seeds is counted "one seed", never
matched, above or short: one draw is not a verdict (a DP-DFD cell moved by 20 points between seeds). A paper's
sanity rows (:data:`SANITY_METHODS`: its teacher, and KD on the real data, the ladder's R0 and R1) check the setting,
not the paper's method: they are listed apart and never counted as reproductions.

Counted over reference rows that name one of our methods and give a number, each joined to its cell
groups exactly as the paper tables join them (:func:`dpsd.report.tables.matching_groups`); a row that
several specs compare with counts once, with its best reproduction. A shortfall links the method's
ladder section when the report has one (a spec named ``ladder`` or ``ladder_<method>``).
"""

from __future__ import annotations

import html
import math
from collections import defaultdict

import pandas as pd

from dpsd.report.cells import DATA_ABSENT, RUN
from dpsd.report.tables import matching_groups, reproduced_value

WITHIN = 2.0  # points (percentage points of accuracy)
MIN_SEEDS = 2  # seeds a cell needs before its mean can match, exceed or fall short of a paper's number
COLUMNS = ("within 2 points", "above", "short", "one seed", "not run", "data absent")
SANITY_METHODS = ("teacher", "kd_data")
"""Methods whose rows are sanity checks of the setting (the teacher, KD on the private data: the ladder's R0 and R1,
:func:`dpsd.report.ladder.rung`), not reproductions of a paper's method."""


def is_sanity(method: str) -> bool:
    """Whether a reference row or cell of ``method`` is a sanity check (:data:`SANITY_METHODS`), not a reproduction."""
    return method in SANITY_METHODS


def deciding_group(ref: pd.Series, groups: pd.DataFrame) -> pd.Series | None:
    """The cell group that answers a reference row: among the matching groups with a run, those with at least
    :data:`MIN_SEEDS` seeds if any, the best reproduced value of them; None where none ran."""
    run = matching_groups(ref, groups)
    run = run[run["status"] == RUN]
    if run.empty:
        return None
    seeded = run[run["seeds"] >= MIN_SEEDS]
    pool = seeded if len(seeded) else run
    values = [reproduced_value(group, ref["metric"]) for _, group in pool.iterrows()]
    return pool.iloc[max(range(len(values)), key=lambda i: -math.inf if math.isnan(values[i]) else values[i])]


def row_outcome(ref: pd.Series, groups: pd.DataFrame) -> tuple[str, float]:
    """``(column, reproduced - reported)`` for one reference row against a spec's cell groups: the
    :func:`deciding_group` decides; one with fewer than :data:`MIN_SEEDS` seeds gives "one seed" (and the one
    draw's difference)."""
    candidates = matching_groups(ref, groups)
    if candidates.empty:
        return "not run", math.nan
    group = deciding_group(ref, candidates)
    if group is None:
        return ("data absent" if (candidates["status"] == DATA_ABSENT).any() else "not run"), math.nan
    difference = reproduced_value(group, ref["metric"]) - ref["value_number"]
    if math.isnan(difference):
        return "not run", math.nan
    if group["seeds"] < MIN_SEEDS:
        return "one seed", difference
    if abs(difference) <= WITHIN:
        return "within 2 points", difference
    return ("above" if difference > 0 else "short"), difference


class Scoreboard:
    """Outcomes collected spec by spec while the report renders, then one HTML table."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple, tuple[str, float]] = {}
        self.paper_of: dict[tuple, str] = {}

    def add(self, refs: pd.DataFrame, groups: pd.DataFrame) -> None:
        order = {name: i for i, name in enumerate(COLUMNS)}
        for _, ref in refs.iterrows():
            if not ref["method"] or math.isnan(ref["value_number"]):
                continue
            key = (ref["paper"], ref["table"], ref["row"], ref["method"], ref["dataset"], ref["epsilon"], ref["metric"])
            outcome = row_outcome(ref, groups)
            kept = self.outcomes.get(key)
            if kept is None or order[outcome[0]] < order[kept[0]]:
                self.outcomes[key] = outcome
            self.paper_of[key] = ref["paper"]

    def counts(self) -> dict[str, dict[str, list[str]]]:
        """``paper -> column -> the methods of the rows counted there`` (one entry per row); sanity rows
        (:func:`is_sanity`) are left out (:meth:`sanity`)."""
        # a paper with sanity rows only still gets its line of zeros
        table = {paper: {c: [] for c in COLUMNS} for paper in sorted({key[0] for key in self.outcomes})}
        for key, (column, _) in sorted(self.outcomes.items()):
            if not is_sanity(key[3]):
                table[key[0]][column].append(key[3])
        return table

    def sanity(self) -> dict[str, list[str]]:
        """``paper -> ["<method>: <column>", ...]``: the sanity rows' outcomes, shown apart from the counts."""
        found: dict[str, list[str]] = defaultdict(list)
        for key, (column, _) in sorted(self.outcomes.items()):
            if is_sanity(key[3]):
                found[key[0]].append(f"{key[3]}: {column}")
        return dict(found)

    def html(self, scale: str, sections: set[str]) -> str:
        counts = self.counts()
        if not counts:
            return "<p>Scoreboard: no paper number for one of our methods is in these specs.</p>"
        head = "".join(f"<th>{html.escape(c)}</th>" for c in ("paper", "scale", *COLUMNS, "sanity rows (not counted)"))
        sanity = self.sanity()
        body = []
        for paper, columns in counts.items():
            cells = [html.escape(paper), html.escape(scale)]
            for column in COLUMNS:
                methods = columns[column]
                text = str(len(methods))
                if column == "short" and methods:
                    links = [_ladder_link(m, sections) for m in sorted(set(methods))]
                    text += f" ({', '.join(links)})"
                cells.append(text)
            cells.append(html.escape("; ".join(sanity.get(paper, [])) or "none"))
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return ("<h2>Scoreboard</h2><p>Each paper number for a method we implement, against our runs at this "
                f"scale: within {WITHIN:g} points of the paper, above it, short of it (the method's ladder "
                f"says where the points were lost), run with fewer than {MIN_SEEDS} seeds (not counted either way), "
                "not run, or no data here. The sanity rows (the teacher, KD on the real data) check the setting and "
                "are not counted as reproductions.</p>"
                f'<table class="paper-table" id="scoreboard"><tr>{head}</tr>{"".join(body)}</table>')


def _ladder_link(method: str, sections: set[str]) -> str:
    for name in (f"ladder_{method}", "ladder"):
        if name in sections:
            return f'<a href="#{html.escape(name)}">{html.escape(method)}</a>'
    return html.escape(method)
