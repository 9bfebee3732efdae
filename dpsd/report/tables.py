"""Paper tables: the reported number (papers.csv) beside the reproduced one (the runs).

Rows follow the paper: every reference row of the table that names one of our methods, in the CSV's
order, joined to the spec's cell groups on (method, dataset, epsilon) (sweeps/README.md); cell groups the
paper has no row for follow. Two reference rows that the paper prints with the same number for the same
cell group (DPSD's "Teacher" and DP-DFD's "Baseline") are one row, both names kept. The paper's rows for
methods this harness does not implement are no comparison: they go to the table's compact *context*
(row, dataset, ε, reported, source). Each row shows reported / reproduced / difference, both epsilon ledgers, the neighbouring
relation eps_rigorous is stated under (rows of one table may differ: the column says so), delta, the
number of seeds, the mean wall minutes of a run (a resumed run's whole: :func:`~dpsd.report.cells.wall_seconds`) and
the code version that recorded the runs, ``STALE`` when it is not this
checkout's (:mod:`dpsd.version`). A cell with no run shows "—", one whose data files are absent
"data absent".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from omegaconf import OmegaConf

from dpsd.report.cells import DATA_ABSENT, NOT_RUN
from dpsd.sweep.spec import Spec
from dpsd.version import is_current

DASH = "—"
NO_METHOD = "n/a"
_SWITCH = re.compile(r"(?:^|;)\s*switch:\s*([^;]*)")
CONTEXT_COLUMNS = ("Row", "Dataset", "ε", "Reported")
COLUMNS = ("Row", "Cell", "Dataset", "ε (target)", "Reported", "Reproduced", "Difference",
           "ε claimed", "ε rigorous", "Neighbouring", "δ", "Seeds", "Minutes", "Code")
SCALE_LINES = {
    "check": "check scale: a pipeline check, its students near chance by design; not comparable to the paper's "
             "hyper-parameters",
    "smoke": "smoke scale: not comparable to the paper's hyper-parameters",
    "laptop": "laptop scale: the smallest sizes at which the methods learn on 2 CPU cores, not the papers'",
    "paper": "paper scale: each paper's hyper-parameters for its own methods",
}
OWN_BUDGET = "its spec's own budget ({}'s smoke list, the same for every cell), not the papers' hyper-parameters"
OWN_BUDGETS = ("each spec's own budget (the smoke lists of {}, the same for every cell of a spec), not the "
               "papers' hyper-parameters")


@dataclass
class PaperTable:
    """A rendered table's content: every cell already a string, plus its caption lines."""

    name: str              # the spec's name: file stem of every output
    table_id: str          # the paper's table (papers.csv `table`)
    title: str
    scale_line: str
    body: pd.DataFrame     # COLUMNS, strings
    notes: list[str] = field(default_factory=list)  # footnotes: the reference rows' sources and notes
    context: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(CONTEXT_COLUMNS)))


def fmt_number(value: float, digits: int = 2) -> str:
    return DASH if value is None or math.isnan(value) else f"{value:.{digits}f}"


def fmt_mean_std(mean: float, std: float) -> str:
    """``mean ± std`` (two decimals), the mean alone where there is no std (one seed)."""
    return fmt_number(mean) if std is None or math.isnan(std) else f"{mean:.2f} ± {std:.2f}"


NORMALIZATION_WORDS = {  # each input convention's (dpsd/input_space.py) short name (tables) and its words (settings blocks)
    "minus_one_one": ("[-1, 1]", "pixels in [-1, 1]"),
    "mean_std": ("mean/std", "the dataset's published mean and std"),
}


def normalization_words(normalization: str | None, long: bool = False) -> str:
    """How a report names a teacher's input convention (``None``: the harness's first, ``minus_one_one``)."""
    name = normalization or "minus_one_one"
    return NORMALIZATION_WORDS[name][int(long)] if name in NORMALIZATION_WORDS else name


def fmt_eps(value: float | None, infinity: str = "∞") -> str:
    """Epsilons with four significant digits; infinite is ``infinity`` (no privacy guarantee)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    return infinity if math.isinf(value) else f"{value:.4g}"


def missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_target(value: float | None, absent: str) -> str:
    """A target epsilon; ``absent`` for none (∞ for a non-private cell, — for a row that states none)."""
    return absent if missing(value) else f"{value:g}"


def reproduced_text(group: pd.Series, metric: str) -> str:
    """Mean ± sample std over the seeds that finished (the std only with several seeds)."""
    if group["status"] == DATA_ABSENT:
        return "data absent"
    if group["status"] == NOT_RUN:
        return DASH
    mean = reproduced_value(group, metric)
    if math.isnan(mean):
        return DASH
    return fmt_mean_std(mean, group.get("accuracy_std", math.nan) if metric == "accuracy" else math.nan)


def reproduced_value(group: pd.Series, metric: str) -> float:
    """The run figure a reference metric compares with: ``accuracy`` is the student's test accuracy
    in percent; any other metric name is looked up among the run's metrics as logged."""
    if group is None or group["status"] != "run":
        return math.nan
    column = "accuracy" if metric in ("", "accuracy") else f"metrics.{metric}"
    value = group.get(column, math.nan)
    return math.nan if value is None else float(value)


def switches(note: str) -> dict[str, str]:
    """The overrides a reference row's note names after ``switch:`` (H6's convention: rows that differ
    only by a switch, e.g. ``switch: privacy=data``)."""
    found = _SWITCH.search(note or "")
    return dict(item.split("=", 1) for item in found.group(1).split() if "=" in item) if found else {}


def _same_value(a: object, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(a) == b


def has_switches(group: pd.Series, wanted: dict[str, str]) -> bool:
    """Whether a cell group was run with the switches: its override for the key, else its resolved
    config's value; a key it neither overrides nor resolves to a scalar (a config group left at its
    default) does not exclude it."""
    for key, value in wanted.items():
        if key in group["overrides"]:
            if not _same_value(group["overrides"][key], value):
                return False
            continue
        resolved = OmegaConf.select(group["config"], key, default=None)
        if resolved is not None and not OmegaConf.is_config(resolved) and not _same_value(resolved, value):
            return False
    return True


def matching_groups(ref: pd.Series, groups: pd.DataFrame) -> pd.DataFrame:
    """Cell groups a reference row compares with: same method, dataset and target epsilon, and the
    row's switches (see :func:`switches`). A row without epsilon (non-private) takes the groups
    without one, or else the only group of that method and dataset."""
    if groups.empty or not ref["method"]:
        return groups.iloc[0:0]
    same = groups[(groups["method"] == ref["method"]) & (groups["dataset"] == ref["dataset"])]
    wanted = switches(ref["note"])
    if wanted and len(same):
        same = same[[has_switches(group, wanted) for _, group in same.iterrows()]]
    target = ref["epsilon_value"]
    if missing(target):
        private_free = same[same["epsilon"].isna()]
        return private_free if len(private_free) or len(same) != 1 else same
    return same[same["epsilon"].map(lambda e: not missing(e) and math.isclose(e, target, rel_tol=1e-9))]


def _delta(ref: pd.Series | None, group: pd.Series | None) -> str:
    """The runs' δ (the rigorous ledger's), else the paper's."""
    if group is not None and not math.isnan(group["delta"]):
        return f"{group['delta']:g}"
    return ref["delta"] if ref is not None and ref["delta"] else DASH


def is_stale(versions: str) -> bool:
    """Whether a cell's runs, recorded by the code version(s) ``versions`` (space-separated), are stale: none
    is this checkout's code of its method (:func:`dpsd.version.is_current`)."""
    return not any(map(is_current, str(versions).split()))


def code_cell(versions: str) -> str:
    """The code version(s) of a cell's runs, ``STALE <versions>`` where they are stale (:func:`is_stale`)."""
    if not versions:
        return DASH
    return f"STALE {versions}" if is_stale(versions) else versions


def _row(ref: pd.Series | None, group: pd.Series | None, note: str) -> dict[str, str]:
    metric = ref["metric"] if ref is not None else "accuracy"
    reported = ref["value_number"] if ref is not None else math.nan
    reproduced = reproduced_value(group, metric) if group is not None else math.nan
    difference = reproduced - reported
    name = ref["row"] if ref is not None else group["method"]
    unit = "" if metric in ("", "accuracy") else f" ({metric})"
    unequal = group.get("budget", "") if group is not None else ""
    return {
        "Row": f"{name}{unit}{note}" + (f" [UNEQUAL BUDGET: {unequal}]" if unequal else ""),
        "Cell": (group["group"] or "base") if group is not None else DASH,
        "Dataset": (ref["dataset"] if ref is not None else group["dataset"]) or DASH,
        "ε (target)": fmt_target(group["epsilon"], "∞") if group is not None else fmt_target(ref["epsilon_value"], DASH),
        "Reported": ref["value"] if ref is not None and ref["value"] else DASH,
        "Reproduced": reproduced_text(group, metric) if group is not None else (DASH if ref["method"] else NO_METHOD),
        "Difference": DASH if math.isnan(difference) else f"{difference:+.2f}",
        "ε claimed": fmt_eps(group["eps_claimed"]) if group is not None else DASH,
        "ε rigorous": fmt_eps(group["eps_rigorous"]) if group is not None else DASH,
        "Neighbouring": (group.get("neighbouring") or DASH) if group is not None else DASH,
        "δ": _delta(ref, group),
        "Seeds": f"{group['seeds']}/{group['planned_seeds']}" if group is not None else DASH,
        "Minutes": fmt_number(group.get("wall_s", math.nan) / 60, 1) if group is not None else DASH,
        "Code": code_cell(group.get("code_version", "")) if group is not None else DASH,
    }


def own_budget_file(spec: Spec, scale: str) -> str | None:
    """The file name of an on-demand spec (the ladder, the query axis) whose cells run at ``scale`` at a budget of
    its own, which it sets in its ``smoke`` list; None for every other spec and scale."""
    if scale == "smoke" and spec.on_demand and spec.smoke:
        return Path(spec.path or spec.name).name
    return None


def scale_line(spec: Spec, scale: str) -> str:
    """What ``scale`` means for ``spec``'s cells: at scale=smoke an on-demand spec runs at its own budget
    (:func:`own_budget_file`), not at the smoke scale's sizes alone that "smoke scale" names everywhere else."""
    own = own_budget_file(spec, scale)
    return OWN_BUDGET.format(own) if own else SCALE_LINES.get(scale, f"{scale} scale")


def page_scale_line(specs: Sequence[Spec], scale: str) -> str:
    """What ``scale`` means for a page of ``specs``: each distinct line once, the specs at their own budget named
    together in one line."""
    owns = [own_budget_file(spec, scale) for spec in specs]
    named = [name for name in owns if name]
    together = OWN_BUDGETS.format(", ".join(named[:-1]) + f" and {named[-1]}") if len(named) > 1 else None
    lines = dict.fromkeys(together if own and together else scale_line(spec, scale) for spec, own in zip(specs, owns))
    return "; ".join(lines) or SCALE_LINES.get(scale, f"{scale} scale")


def paper_table(name: str, feeds: dict, scale_line: str, groups: pd.DataFrame, reference: pd.DataFrame) -> PaperTable:
    """Join the reference rows of ``feeds['id']`` to the spec's cell groups; ``scale_line`` (:func:`scale_line`)
    says what scale they ran at."""
    rows, notes, matched, context = [], [], {}, []
    for _, ref in reference.iterrows():
        mark = ""
        text = "; ".join(part for part in (ref["source"], ref["note"]) if part)
        if text:
            if text not in notes:
                notes.append(text)
            mark = f" [{notes.index(text) + 1}]"
        if not ref["method"]:
            context.append({"Row": f"{ref['row']}{mark}", "Dataset": ref["dataset"] or DASH,
                            "ε": fmt_target(ref["epsilon_value"], DASH), "Reported": ref["value"] or DASH})
            continue
        candidates = matching_groups(ref, groups)
        if candidates.empty:
            rows.append(_row(ref, None, mark))
        for index, group in candidates.iterrows():
            same = matched.get((index, ref["value"]))
            if same is not None:  # the same cell and number under another of the papers' names
                same["Row"] = f"{same['Row']} / {ref['row']}{mark}"
                continue
            rows.append(_row(ref, group, mark))
            matched[(index, ref["value"])] = rows[-1]
    done = {index for index, _ in matched}
    for index, group in groups.iterrows():
        if index not in done:
            rows.append(_row(None, group, ""))
    body = pd.DataFrame(rows, columns=list(COLUMNS))
    ids = feeds.get("id", name)
    return PaperTable(name=name, table_id=" + ".join(ids) if isinstance(ids, list) else str(ids), title=str(feeds.get("title", "")),
                      scale_line=scale_line, body=body, notes=notes,
                      context=pd.DataFrame(context, columns=list(CONTEXT_COLUMNS)))


def markdown_table(body: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of string cells."""
    def cell(text: object) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    header = list(body.columns)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in body.itertuples(index=False)]
    return "\n".join(lines)
