"""The verdict a reviewer reads first: per paper method and ε, the paper's number beside ours, both
ledgers, the teacher used and one word, and the privacy–accuracy frontier behind it.

Both are built from the headline spec's cell groups and reference rows, joined as the paper tables
join them (:func:`dpsd.report.tables.matching_groups`) and judged as the scoreboard judges them
(:func:`dpsd.report.scoreboard.row_outcome`: within 2 points, above, short). A cell with fewer than two
seeds gets no verdict ("one seed, no verdict"): one draw is not a verdict; one recorded by other code of its method
than this checkout's says ``stale``. ``README.md`` carries the table and
the figure between its ``<!-- verdict -->`` and ``<!-- /verdict -->`` lines, written by
``dpsd report --readme README.md`` (:func:`splice`), never typed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dpsd.report.cells import RUN
from dpsd.report.figures import PNG_METADATA, panel_title, panels
from dpsd.report.scoreboard import deciding_group, is_sanity, row_outcome
from dpsd.report.settings import differences
from dpsd.report.tables import (DASH, fmt_eps, fmt_target, is_stale, missing, normalization_words,
                                reproduced_text, switches)

BEGIN, END = "<!-- verdict -->", "<!-- /verdict -->"
WORDS = {"within 2 points": "reproduces", "above": "exceeds", "short": "short", "one seed": "one seed, no verdict",
         "not run": "not run", "data absent": "data absent"}
COLUMNS = ("Method", "Paper table", "ε (paper)", "Paper", "Ours (%)", "n", "Runs", "Run at", "ε claimed", "ε rigorous (relation)",
           "Teacher", "Differs from the paper", "Verdict", "Section")
PAPER_SCALE = "paper"  # the scale whose runs a row shows where one exists (dpsd/conf/scale/paper.yaml)
RUN_ID_CHARS = 8  # a run id's prefix in the table: enough to find its row in results/runs.csv


def runs_text(group: pd.Series | None) -> str:
    """The runs a row reads, one per seed: each run id's first :data:`RUN_ID_CHARS` characters (``640d98fa``)."""
    if group is None or not isinstance(group.get("run_ids"), list) or not group["run_ids"]:
        return DASH
    return " ".join(str(run)[:RUN_ID_CHARS] for run in group["run_ids"])


def teacher_text(cfg) -> str:
    """The teacher a cell used: its architecture and input convention (``small_cnn, [-1, 1]``)."""
    teacher = cfg.model.teacher
    return f"{teacher.arch}, {normalization_words(teacher.get('input', {}).get('normalization'))}"


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading (``dpsd (label)`` -> ``dpsd-label``)."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def disagreeing(ref: pd.Series, reference: pd.DataFrame | None) -> pd.DataFrame:
    """The rows of other paper tables in ``reference`` (results/reference/papers.csv) that give ``ref``'s method,
    dataset, ε, metric and switches (``switch:`` notes: an ablation is another cell), and no other architecture where
    both state one, another number (DPDFD Table 2's DGD at ε 1 beside DPSD Table I's)."""
    if reference is None or reference.empty or not ref["method"]:
        return reference.iloc[0:0] if reference is not None else pd.DataFrame()
    wanted, epsilon = switches(ref["note"]), fmt_target(ref["epsilon_value"], "∞")
    return reference.loc[[
        index for index, row in reference.iterrows()
        if row["method"] == ref["method"] and row["dataset"] == ref["dataset"] and row["metric"] == ref["metric"]
        and row["table"] != ref["table"] and fmt_target(row["epsilon_value"], "∞") == epsilon
        and switches(row["note"]) == wanted
        and (not row["architecture"] or not ref["architecture"] or row["architecture"] == ref["architecture"])
        and not math.isnan(row["value_number"]) and not math.isclose(row["value_number"], ref["value_number"])]]


def paper_text(ref: pd.Series, reference: pd.DataFrame | None = None) -> str:
    """The paper's number as printed; where another table prints another number for the same cell
    (:func:`disagreeing`), also where this one comes from (table, the file and line of ``source``, and the placement
    its ``note`` states for a sparse row) and what the other prints."""
    others = disagreeing(ref, reference)
    if others.empty:
        return ref["value"]
    where = [ref["table"], str(ref["source"]).split(" ", 1)[0]]
    sparse = re.search(r"sparse row(?: \([^)]*\))?", str(ref["note"]))
    where += [f"a {sparse.group(0)}"] if sparse else []
    said = "; ".join(f"{row['table']} prints {row['value']} ({str(row['source']).split(' ', 1)[0]})"
                     for _, row in others.iterrows())
    return f"{ref['value']} ({', '.join(where)}; {said})"


def scale_groups(ref: pd.Series, by_scale: dict[str, pd.DataFrame]) -> tuple[str, pd.DataFrame]:
    """The scale a verdict row is read at and its cell groups: the first of ``by_scale`` (paper scale first) with a
    finished run for ``ref`` recorded by this checkout's code (a stale one is not a current result at that setting);
    else the last (the page's own scale: a row nothing ran says "not run" there)."""
    for scale, groups in by_scale.items():  # (a frame with no group of the row's method has no run for it)
        group = (deciding_group(ref, groups) if len(groups) and (groups["method"] == ref["method"]).any() else None)
        if group is not None and not is_stale(group.get("code_version", "")):
            return scale, groups
    return list(by_scale.items())[-1]


def differs_text(ref: pd.Series, group: pd.Series | None, settings: pd.DataFrame | None) -> str:
    """What the row's run set otherwise than its paper states (results/reference/settings.csv, read by
    :func:`dpsd.report.settings.differences` against the run's resolved config): ``teacher small CNN (paper
    ResNet-34); b 128 (256)``; "nothing stated differs" where every value the paper states is ours; "no settings
    stated" for a method the file has no row of."""
    if group is None or settings is None:
        return DASH
    if settings.empty or not (settings["method"] == ref["method"]).any():
        return "no settings stated"
    phrases = differences(settings, ref["method"], group["config"], str(ref.get("architecture", "") or ""),
                          str(ref["dataset"]))
    return "; ".join(phrases) if phrases else "nothing stated differs"


def verdict_rows(refs: pd.DataFrame, groups: pd.DataFrame | dict[str, pd.DataFrame], ladder_page: str,
                 reference: pd.DataFrame | None = None, settings: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per reference row that names one of our methods and prints a number; rows of two tables
    with the same method, ε and number are one (DPSD's "Teacher" and DP-DFD's "Baseline"); the paper
    methods first, by name and ε, the non-private rows last. ``reference``: every paper's rows, so a number another
    table contradicts names its source and the other (:func:`paper_text`). ``groups``: the cell groups, or per scale
    name the groups of that scale, paper scale first: each row is read at the first scale with a run for it
    (:func:`scale_groups`), said in its "Run at" column. ``settings``: the papers' settings, for the "Differs from the
    paper" column (:func:`differs_text`)."""
    by_scale = groups if isinstance(groups, dict) else {"": groups}
    rows, keys = [], {}
    for _, ref in refs.iterrows():
        if not ref["method"] or math.isnan(ref["value_number"]):
            continue
        scale, groups = scale_groups(ref, by_scale)
        outcome, _ = row_outcome(ref, groups)
        group = deciding_group(ref, groups)
        word = WORDS[outcome] + (" (sanity check, not counted)" if is_sanity(ref["method"]) else "")
        caveats = [] if group is None else [
            *(["stale"] if is_stale(group.get("code_version", "")) else [])]
        if caveats:
            word = f"{word} ({', '.join(caveats)})"
        mode = group["config"].privacy.mode if group is not None else ""
        ladder = f"{ref['method']} ({mode})" if mode and mode != "none" else ""
        key = (ref["method"], fmt_target(ref["epsilon_value"], "∞"), ref["value"])
        if key in keys:
            kept = rows[keys[key]]
            kept["Method"], kept["Paper table"] = f"{kept['Method']} / {ref['row']}", f"{kept['Paper table']} / {ref['table']}"
            continue
        keys[key] = len(rows)
        rows.append({
            "Method": ref["row"], "Paper table": ref["table"], "ε (paper)": fmt_target(ref["epsilon_value"], "∞"),
            "Paper": paper_text(ref, reference),
            "Ours (%)": reproduced_text(group, ref["metric"]) if group is not None else DASH,
            "n": str(group["seeds"]) if group is not None else "0",
            "Runs": runs_text(group),
            "Run at": f"{scale} scale" if scale and group is not None else DASH,
            "ε claimed": fmt_eps(group["eps_claimed"]) if group is not None else DASH,
            "ε rigorous (relation)": (f"{fmt_eps(group['eps_rigorous'])} ({group['neighbouring'] or '?'})"
                                      if group is not None else DASH),
            "Teacher": teacher_text(group["config"]) if group is not None else DASH,
            "Differs from the paper": differs_text(ref, group, settings),
            "Verdict": word,
            "Section": f"[ladder]({ladder_page}#{anchor(ladder)})" if ladder else DASH,
        })
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    order = frame.assign(_private=frame["ε (paper)"] == "∞", _eps=pd.to_numeric(frame["ε (paper)"], errors="coerce"))
    return frame.loc[order.sort_values(["_private", "Method", "_eps"], kind="stable").index].reset_index(drop=True)


PAPER_FIRST = ("paper scale (each paper's own settings, dpsd/conf/method_scale/paper/) where one exists, else the "
               "page's")
PAGE_FIRST = ("this page's scale where it has a current run, else paper scale (each paper's own settings, "
              "dpsd/conf/method_scale/paper/)")


def verdict_markdown(rows: pd.DataFrame, source: str, run_at: str = PAPER_FIRST) -> str:
    """The verdict table as Markdown, with what its words and columns mean (``run_at``: which scale its rows
    were read at first, :data:`PAPER_FIRST` or :data:`PAGE_FIRST`)."""
    def cell(text: object) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(rows.columns) + " |", "|" + "|".join(" --- " for _ in rows.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows.itertuples(index=False)]
    lines += ["", f"Generated by `dpsd report` from {source}; do not edit. Ours: student test "
              "accuracy, mean ± sample std over n seeds. Verdict: reproduces (within 2 points), exceeds, short; "
              "one seed, no verdict: a cell with fewer than 2 seeds is never counted as reproducing or short; Runs: each seed's run "
              "(the first 8 characters of its run_id in results/runs.csv), chosen by one rule: per cell, the latest "
              "finished run recorded by this checkout's code of the method (every other run of it is kept, marked "
              "superseded; dpsd/report/runs.py); of the cells that answer a paper row, those with 2 seeds or more if any, "
              "and of them the best mean (dpsd/report/scoreboard.py deciding_group); (stale): recorded by other code of the method than this checkout's "
              f"(docs/reproducing.md), to re-run with --rerun-stale. Run at: the scale of the run shown, {run_at}. "
              "Differs from the paper: "
              "what that run set otherwise than its paper states, ours (paper's), read from results/reference/settings.csv "
              "against the run's resolved config. ε rigorous: a standard accountant over every teacher query, "
              "under the relation named (docs/privacy.md); ∞: a release no mechanism covers."]
    return "\n".join(lines)


def _stated(ref: pd.Series, group: pd.Series | None) -> str:
    """Ours beside the paper's number for one reference row: ``16.31 ± 0.81% (n = 3) at ε claimed 1 against ...``."""
    ours = reproduced_text(group, ref["metric"]) if group is not None else DASH
    seeds = group["seeds"] if group is not None else 0
    return f"{ours}% (n = {seeds}) at ε claimed {fmt_target(ref['epsilon_value'], '∞')} against the paper's {ref['value']}%"


def method_verdicts(refs: pd.DataFrame, groups: pd.DataFrame, searched: dict[str, dict] | None = None) -> dict[str, str]:
    """One verdict per paper method and privacy mode, keyed ``method (mode)`` as the ladder names
    its sections (:func:`verdict_bullets` lists them), from the runs, each row judged as the
    scoreboard judges it (:func:`dpsd.report.scoreboard.row_outcome`): "reproduces" where a row is met within 2
    points (or exceeded) with at least two seeds; "does not reproduce under any of N of M faithful readings run at
    teacher T (K teachers in all, S seeds each)" (N of the M faithful combinations of the method's switches, at the
    search's teacher) with the closest row where every seeded row falls short (``searched``:
    :func:`dpsd.report.readings_design.searched`; without it, the harness's one reading); "one seed so far" where no row
    has two seeds; "not run" where nothing ran."""
    found: dict[tuple[str, str], list] = {}
    for _, ref in refs.iterrows():
        if not ref["method"] or math.isnan(ref["value_number"]) or ref["epsilon_value"] is None \
                or math.isnan(ref["epsilon_value"]):
            continue
        outcome, difference = row_outcome(ref, groups)
        group = deciding_group(ref, groups)
        mode = group["config"].privacy.mode if group is not None else ""
        found.setdefault((ref["method"], mode), []).append((ref, outcome, difference, group))
    verdicts = {}
    for (method, mode), items in found.items():
        name = f"{method} ({mode})" if mode and mode != "none" else method
        met = [item for item in items if item[1] in ("within 2 points", "above")]
        short = [item for item in items if item[1] == "short"]
        single = [item for item in items if item[1] == "one seed"]
        if met:
            ref, outcome, _, group = met[0]
            text = ("reproduces (within 2 points)" if outcome == "within 2 points" else "exceeds the paper") \
                + f": {_stated(ref, group)}"
        elif short:
            ref, _, _, group = max(short, key=lambda item: item[2])
            search = (searched or {}).get(method)
            coverage = (f"any of {search['combinations']} of {count_noun(search['space'], 'faithful reading')} run at "
                        f"teacher {search['teacher']} ({count_noun(search['teachers'], 'teacher')} in all, "
                        f"{count_noun(search['seeds'], 'seed')} each)"
                        if search else "the harness's one reading (no readings search run for it)")
            text = f"does not reproduce under {coverage}; closest {_stated(ref, group)}"
            if search:
                text += f"; {search['where']} its best current faithful reading reaches {search['best']}"
                if search.get("stale"):
                    text += (f" ({count_noun(search['stale'], 'run')} of the search stale: recorded by other code "
                             "of the method, to re-run)")
        elif single:
            text = f"one seed so far, no verdict: {_stated(single[0][0], single[0][3])}"
        else:
            text = "not run"
        verdicts[name] = text
    return verdicts


def verdict_bullets(verdicts: dict[str, str]) -> list[str]:
    """The verdicts of :func:`method_verdicts` as Markdown bullets, one sentence each."""
    return [f"- **{name}**: {text}." for name, text in verdicts.items()]


def count_noun(n: int, noun: str) -> str:
    """``n noun`` with the noun's plural where n is not 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _x(value: float, infinity: float) -> float:
    return infinity if math.isinf(value) else value


# One colour a method: matplotlib's ten (tab10, named by value so that a style another library sets, e.g. Optuna's
# ggplot, cannot change them), then five more of distinct hue (the headline plots eleven methods; with ten colours the
# eleventh shared the first's).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
           "black", "gold", "navy", "magenta", "teal")


def paper_relation(ref: pd.Series, done: pd.DataFrame) -> str | None:
    """The neighbouring relation a paper's point is stated under: a row with an ε and no δ states pure ε-label-DP
    (results/reference/README.md: δ is empty for pure-ε label-DP), so ``label``; any other row the relation of our
    runs of its method on its dataset (the paper's (ε, δ)-DP is over the records, as our ledger's for the same
    releases; a non-private row sits beside our runs), else the dataset's first panel's (None without runs)."""
    if not missing(ref["epsilon_value"]) and not str(ref.get("delta", "")).strip():
        return "label"
    mine = done[(done["dataset"] == ref["dataset"]) & (done["method"] == ref["method"])] if len(done) else done
    relations = [r for r in (mine.get("neighbouring", pd.Series(dtype=str)) if len(mine) else []) if r]
    if relations:
        return relations[0]
    others = [relation for dataset, relation in (panels(done) if len(done) else []) if dataset == ref["dataset"]]
    return others[0] if others else None


def _paper_points(refs: pd.DataFrame, done: pd.DataFrame) -> pd.DataFrame:
    """The reference rows the frontier draws (a method of ours, a number), each with its panel's relation."""
    if refs.empty:
        return refs.assign(relation=None)
    points = refs[(refs["method"] != "") & refs["value_number"].notna()]
    return points.assign(relation=[paper_relation(ref, done) for _, ref in points.iterrows()])


READS_PRIVATE_DATA = frozenset({"dpsgd", "pate", "lp1st", "kd_data", "teacher"})
"""The methods whose fit reads private records (DP-SGD and LP-1ST train on the private images, PATE labels a held-out
part of the private split, KD on the data and the teacher read it as they are); every other method reads none after
its teachers are trained (the privacy boundary's image and label reads in each run say so). The frontier draws the two
kinds with different markers."""


def frontier_marker(method: str) -> str:
    """The frontier's marker for ``method``: a square where its fit reads private data, a disc where it is data-free."""
    return "s" if method in READS_PRIVATE_DATA else "o"


def frontier_series(method: str, overrides: dict) -> str:
    """The series a frontier point is drawn in: its method, and where its cell sets the method's own switches or its
    teacher (``method.*``, ``model/teacher``), those settings: a recipe beside a method's defaults is its own colour,
    named by what it sets."""
    own = [f"{key.rsplit('/', 1)[-1].rsplit('.', 1)[-1]}={value}" for key, value in overrides.items()
           if key.startswith("method.") or key == "model/teacher"]
    return f"{method} ({', '.join(own)})" if own else method


def frontier_figure(groups: pd.DataFrame, refs: pd.DataFrame, caption: str) -> Figure:
    """Student accuracy against ε rigorous (log axis, ∞ drawn at the right edge), one panel per dataset
    and relation: a filled marker per cell group (error bar: sample std over seeds), its ε claimed as a
    hollow marker joined to it, and the papers' reported points of our methods as crosses, each in the panel of the
    relation its paper states it under (:func:`paper_relation`). A method whose fit reads private data is drawn with
    squares, a data-free one with discs (:func:`frontier_marker`). One legend below the panels, never over a point:
    every method's colour and what each marker means; the y axis runs past 100% so a point at 100 is not cut."""
    done = groups[groups["status"] == RUN] if len(groups) else groups
    points = _paper_points(refs, done)
    found = panels(done) if len(done) else []
    found += [key for key in dict.fromkeys(zip(points.get("dataset", []), points.get("relation", [])))
              if key not in found and any(key[0] == dataset for dataset, _ in found)]
    finite = [v for column in ("eps_rigorous", "eps_claimed") for v in done.get(column, []) if v > 0 and math.isfinite(v)]
    finite += [v for v in refs.get("epsilon_value", []) if v is not None and v > 0 and math.isfinite(v)]
    low = 10 ** math.floor(math.log10(min(finite))) if finite else 0.1
    infinity = 10 ** (math.ceil(math.log10(max(finite))) + 1) if finite else 100.0
    overrides = done["overrides"] if "overrides" in done else [{}] * len(done)
    done = done.assign(series=[frontier_series(m, o) for m, o in zip(done["method"], overrides)] if len(done) else [])
    methods = list(dict.fromkeys([*(done["method"] if len(done) else []), *points.get("method", [])]))
    marker_of = {**dict(zip(done["series"], done["method"])), **{m: m for m in methods}}
    series = list(dict.fromkeys([*(done["series"] if len(done) else []), *points.get("method", [])]))
    colours = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(series)}
    columns = min(2, max(1, len(found)))
    rows_of_panels = math.ceil(max(1, len(found)) / columns)
    legend_rows = math.ceil((len(series) + 3) / 6)
    height = 4.6 * rows_of_panels + 0.6 + 0.25 * legend_rows
    figure = Figure(figsize=(6.6 * columns, height), dpi=100)
    for index, (dataset, relation) in enumerate(found or [("none", None)]):
        axes = figure.add_subplot(rows_of_panels, columns, index + 1)
        mine = done[(done["dataset"] == dataset) & ((done["neighbouring"] == relation) if relation else True)]
        for name in dict.fromkeys(mine["series"]):
            rows = mine[mine["series"] == name]
            for _, group in rows.iterrows():
                x, y = _x(group["eps_rigorous"], infinity), group["accuracy"]
                std = group.get("accuracy_std", math.nan)
                marker = frontier_marker(group["method"])
                axes.errorbar([x], [y], yerr=None if math.isnan(std) else [std], fmt=marker, color=colours[name],
                              capsize=3, label=name if group.name == rows.index[0] else None)
                claimed = group["eps_claimed"]
                if not math.isnan(claimed) and _x(claimed, infinity) != x:
                    axes.plot([_x(claimed, infinity), x], [y, y], color=colours[name], linewidth=0.8, alpha=0.6)
                    axes.plot([_x(claimed, infinity)], [y], marker, markerfacecolor="none", color=colours[name])
        here = points[(points["dataset"] == dataset) & (points["relation"].map(lambda r: r == relation))] \
            if len(points) else points
        for _, ref in here.iterrows():
            axes.plot([_x(ref["epsilon_value"] if not missing(ref["epsilon_value"]) else math.inf, infinity)],
                      [ref["value_number"]], "x", color=colours[ref["method"]], markersize=8, markeredgewidth=1.5)
        axes.set_xscale("log")
        axes.set_xlim(low / 2, infinity * 2)
        ticks = [t for t in axes.get_xticks() if low / 2 <= t < infinity / 5] + [infinity]
        axes.set_xticks(ticks, [f"{t:g}" for t in ticks[:-1]] + ["∞"])
        axes.axvline(infinity / 3, color="#999", linestyle=":", linewidth=0.8)
        axes.set_ylim(0, 105)  # a point at 100% is drawn whole, inside the axes
        axes.set_yticks(range(0, 101, 20))
        axes.set_xlabel("ε (log; ∞: no guarantee)")
        axes.set_ylabel("student test accuracy (%)")
        axes.set_title(panel_title(dataset, relation), fontsize=9)
        axes.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=colours[m], marker=frontier_marker(marker_of[m]), linestyle="none", label=m)
               for m in series]
    if any(m in READS_PRIVATE_DATA for m in methods):
        handles += [Line2D([], [], color="#444", marker="o", linestyle="none", label="data-free (disc)"),
                    Line2D([], [], color="#444", marker="s", linestyle="none", label="reads private data (square)")]
    handles += [Line2D([], [], color="#444", marker="o", linestyle="none", label="ours at ε rigorous"),
                Line2D([], [], color="#444", marker="o", markerfacecolor="none", linestyle="none",
                       label="ours at ε claimed"),
                Line2D([], [], color="#444", marker="x", markersize=8, markeredgewidth=1.5, linestyle="none",
                       label="the paper's reported point")]
    legend = figure.legend(handles=handles, loc="lower center", ncol=6, fontsize=8, frameon=False,
                           bbox_to_anchor=(0.5, 0.35 / height))
    figure.suptitle("Privacy–accuracy frontier. Filled: ours at ε rigorous (every teacher query), joined to "
                    "hollow: ours at ε claimed; ×: the papers' reported points, under the relation each paper states",
                    fontsize=10)
    figure.text(0.01, 0.01, caption, fontsize=7, ha="left", va="bottom", wrap=True)
    figure.tight_layout(rect=(0, (0.5 + 0.25 * legend_rows) / height, 1, 1))
    legend.set_bbox_to_anchor((0.5, 0.35 / height))
    return figure


def save_frontier(figure: Figure, folder: Path, name: str = "frontier") -> list[Path]:
    """The frontier as PNG and SVG (no timestamp, and the SVG's element ids salted by a constant instead of at
    random, so rendering twice writes the same bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    figure.savefig(png, format="png", metadata=PNG_METADATA)
    with matplotlib.rc_context({"svg.hashsalt": name}):
        figure.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    return [png, svg]


def splice(path: Path, block: str) -> Path:
    """Replace what lies between ``path``'s verdict markers by ``block``; a file without both markers is
    an error naming them (the README is never rewritten elsewhere)."""
    text = Path(path).read_text(encoding="utf-8")
    if BEGIN not in text or END not in text or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{path}: no '{BEGIN}' ... '{END}' lines to put the verdict between")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    Path(path).write_text(f"{head}{BEGIN}\n{block.strip()}\n{END}{tail}", encoding="utf-8")
    return Path(path)
