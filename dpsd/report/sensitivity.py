"""Sensitivity pages: each figure or ablation table of a paper beside ours, with a sentence on its trend.

The trends the papers state, and whether ours follow them, are :mod:`dpsd.report.trends`'s (its docstring gives
``results/reference/sensitivity.csv``'s columns and the rule for a rise or a fall). The section a spec gets
(:func:`section_markdown`): the sentences (:func:`sentences`), one table row per cell (ours mean ± sample std over its
seeds, both ε ledgers, the paper's number beside it where it prints one; a cell without a run says "not run") and
the figure.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd
from matplotlib.figure import Figure

from dpsd.data import dataset_info
from dpsd.errors import ConfigError
from dpsd.report.cells import DATA_ABSENT, ENSEMBLE, NOT_RUN, RUN
from dpsd.report.tables import (DASH, fmt_eps, fmt_mean_std, has_switches, is_stale, markdown_table,
                                matching_groups, switches)
from dpsd.report.trends import (FLAT_EPS, FLAT_POINTS, METRICS, NOT_RUN_TEXT, UNREADABLE_VERDICT, Check, as_number,
                                at_chance, check_trend, check_versus, claims_for, fmt_x, group_points, line, unbounded,
                                verdict)


# --- the sentences ------------------------------------------------------------------------------------------------


def _what(metric: str, series: str, dataset: str) -> str:
    words = METRICS[metric][2]
    if " - " in series:
        return f"{words}, {series.replace(' - ', ' − ')}"
    return f"{words} of {series}" if series and series != dataset else words


def chance(dataset: str) -> float | None:
    """Chance accuracy (%) on ``dataset``: 100 / its classes (None for a dataset the harness does not know)."""
    try:
        return 100.0 / dataset_info(dataset)[0]
    except ConfigError:
        return None


def sentences(spec_name: str, feeds: dict, claims: pd.DataFrame, groups: pd.DataFrame,
              datasets: Sequence[str], refs: pd.DataFrame | None = None) -> list[str]:
    """One sentence per line the paper states a trend for, and one per dataset for its comparisons, on the datasets
    shown: what the paper says, what ours show, and whether the paper's trend holds (where our students are at chance,
    that it cannot be read: :func:`~dpsd.report.trends.at_chance`)."""
    mine = claims_for(claims, spec_name)
    x_name = str(feeds.get("x", "x")).split(".")[-1]
    beside = paper_numbers(groups, refs, None) if refs is not None and not feeds.get("x") else {}
    out = []
    for dataset in datasets:
        here = mine[mine["dataset"].isin(["", dataset])]
        trends, versus = here[here["cell"] == ""], here[here["cell"] != ""]
        for (series, metric), rows in trends.groupby(["series", "metric"], sort=False):
            names = [series] if series else list(dict.fromkeys(groups[groups["dataset"] == dataset]["series"]))
            for name in names:
                checks = [check_trend(row, line(groups, dataset, name, metric), x_name) for _, row in rows.iterrows()]
                if metric == "accuracy":  # the lines themselves, both of a difference
                    points = [p for part in name.split(" - ") for p in line(groups, dataset, part.strip(), metric)]
                    checks = at_chance(checks, points, chance(dataset))
                else:  # an ε line (never infinite elsewhere)
                    checks = unbounded(checks, line(groups, dataset, name, metric))
                out.append(_sentence(dataset, _what(metric, name, dataset), rows, checks, groups))
        for metric, rows in versus.groupby("metric", sort=False):
            checks = [c for _, row in rows.iterrows()
                      for c in check_versus(row, groups, dataset, beside, chance(dataset))]
            if (metric or "accuracy") == "accuracy":
                checks = at_chance(checks, group_points(groups, dataset, "accuracy"), chance(dataset))
            if checks:
                out.append(_sentence(dataset, METRICS[metric or "accuracy"][2], rows, checks, groups))
    return out


def _sentence(dataset: str, what: str, rows: pd.DataFrame, checks: Sequence[Check], groups: pd.DataFrame) -> str:
    """``**dataset, what.** The paper (table, where its direction comes from) → here (seeds a point): each claim →
    ours; the verdict.`` (``Here: not run yet`` while no cell of it has run)."""
    mine = groups[groups["dataset"] == dataset]
    planned = _seeds_a_point(mine["seeds"][mine["seeds"] > 0], mine["planned_seeds"])
    source = ("from its printed points (papers.csv)" if (rows["points"] == "papers.csv").all()
              else "in its words; the points are not in the text")
    head = f"**{dataset}, {what}.** The paper ({rows['table'].iloc[0]}, {source})"
    ending = verdict(checks)
    if ending == "not run yet":
        return f"{head}: {'; '.join(c.paper for c in checks)}. Here: not run yet."
    if ending == UNREADABLE_VERDICT:
        return f"{head}: {'; '.join(c.paper for c in checks)}. Here ({planned}): {checks[0].ours}: {ending}."
    return f"{head} → here ({planned}): {'; '.join(f'{c.paper} → {c.ours}' for c in checks)}: {ending}."


def _seeds_a_point(done: pd.Series, planned: pd.Series) -> str:
    """``3 seeds a point`` where every point run has its planned seeds, else what ran: ``1 to 3 of 3 seeds a point``
    (a reading from fewer seeds than planned is said to be one)."""
    if not len(planned):
        return "no cell"
    most = int(planned.max())
    low, high = (int(done.min()), int(done.max())) if len(done) else (0, 0)
    if low == high == most:
        return f"{most} seed{'s' if most != 1 else ''} a point"
    ran = f"{low}" if low == high else f"{low} to {high}"
    return f"{ran} of {most} seeds a point"


# --- the table and the figure -------------------------------------------------------------------------------------


def _x_of(ref: pd.Series, x_key: str) -> float | None:
    """Where a paper row sits on the x axis: its ε on an ε axis, else the value its ``switch:`` note gives the key."""
    if x_key == "privacy.epsilon":
        return as_number(ref["epsilon_value"])
    return as_number(switches(ref["note"]).get(x_key.lstrip("+~")))


def paper_numbers(groups: pd.DataFrame, refs: pd.DataFrame, x_key: str | None) -> dict[int, list[pd.Series]]:
    """The reference rows beside each cell group (by index). On an x axis: the rows of the group's dataset and method
    (or line) at its x (:func:`_x_of`) whose other switches it was run with. In a table: the rows that match it
    (:func:`~dpsd.report.tables.matching_groups`), a row that names no switch the table's other rows name (an
    ablation table's full-loss row) kept off the groups that override one."""
    found: dict[int, list[pd.Series]] = {}
    if refs is None or refs.empty or groups.empty:
        return found
    refs = refs[refs["method"] != ""]
    named = set().union(*(set(switches(note)) for note in refs["note"])) if len(refs) else set()
    for _, ref in refs.iterrows():
        if x_key:
            at = _x_of(ref, x_key)
            if at is None:
                continue
            rest = {k: v for k, v in switches(ref["note"]).items() if k != x_key.lstrip("+~")}
            hits = [index for index, group in groups.iterrows()
                    if group["dataset"] == ref["dataset"] and ref["method"] in (group["method"], group["series"])
                    and as_number(group["x"]) is not None and math.isclose(float(group["x"]), at, rel_tol=1e-9)
                    and has_switches(group, rest)]
        else:
            candidates = matching_groups(ref, groups)
            others = named - set(switches(ref["note"]))
            narrowed = [i for i, g in candidates.iterrows() if not others & set(g["overrides"])]
            hits = narrowed or list(candidates.index)
        for index in hits:
            found.setdefault(index, []).append(ref)
    return found


def _paper_text(refs: Sequence[pd.Series], named: bool = False) -> tuple[str, str]:
    """The paper's numbers for a cell (its metric named where not accuracy; ``named``: each row's name first) and
    their ε."""
    values = [(f"{r['row']}: " if named else "")
              + (r["value"] if r["metric"] in ("", "accuracy") else f"{METRICS.get(r['metric'], (0, 0, r['metric']))[2]} "
                 f"{r['value']}") for r in refs]
    epsilons = list(dict.fromkeys(r["epsilon"] or DASH for r in refs))
    return (" / ".join(values) or DASH), (" / ".join(epsilons) or DASH)


def _ours(group: pd.Series) -> str:
    if group["status"] == DATA_ABSENT:
        return "data absent"
    if group["status"] == NOT_RUN:
        return NOT_RUN_TEXT
    mean = as_number(group.get("accuracy"))
    stale = " STALE" if group.get("code_version") and is_stale(group["code_version"]) else ""
    return DASH if mean is None else fmt_mean_std(mean, group.get("accuracy_std", math.nan)) + stale


def _metric_text(group: pd.Series, metric: str) -> str:
    """A run metric of :data:`~dpsd.report.trends.METRICS` as a percentage, mean ± sample std over the seeds that
    recorded it (a dash where none did: not run, or run by code that did not record it)."""
    column, factor, _ = METRICS[metric]
    mean = as_number(group.get(column)) if group["status"] == RUN else None
    if mean is None:
        return DASH
    std = as_number(group.get(f"{column}_std"))
    return fmt_mean_std(factor * mean, math.nan if std is None else factor * std)


def point_table(groups: pd.DataFrame, refs: pd.DataFrame, feeds: dict) -> pd.DataFrame:
    """One row per cell group: dataset, line, x (on an x axis; else the cell), ours (mean ± sample std, or "not
    run"), each run metric ``feeds.metrics`` names (in percent, mean ± sample std), seeds done / planned, both ε
    ledgers (the runs' means), and the paper's number and ε beside it."""
    x_key = feeds.get("x")
    rows = []
    ordered = groups.assign(_x=groups["x"].map(as_number)) if x_key else groups.assign(_x=0.0)
    ordered = ordered.sort_values(["dataset", "series", "_x", "order"], kind="stable") if x_key else ordered
    beside = paper_numbers(groups, refs, x_key)
    for index, group in ordered.iterrows():
        paper, paper_eps = _paper_text(beside.get(index, []), named=not x_key)
        done = group["status"] == RUN
        row = {"Dataset": group["dataset"]}
        if x_key:
            at = as_number(group["x"])  # a cell off the axis (a teacher's) is named by its overrides
            row |= {"Line": group["series"], str(x_key).split(".")[-1]: fmt_x(at) if at is not None else group["group"]}
        else:
            row |= {"Cell": group["group"] or "base"}
        row |= {"Ours (%)": _ours(group)}
        row |= {f"{METRICS[m][2].capitalize()} (%)": _metric_text(group, m) for m in feeds.get("metrics", [])}
        row |= {"Seeds": f"{group['seeds']}/{group['planned_seeds']}",
                "ε claimed": fmt_eps(group["eps_claimed"]) if done else DASH,
                "ε rigorous": fmt_eps(group["eps_rigorous"]) if done else DASH,
                "Paper": paper, "Paper's ε": paper_eps}
        if ENSEMBLE in group and done:  # DGD's teacher ensemble (its Fig. 8, top left)
            value = as_number(group[ENSEMBLE])
            row["Ours (%)"] += f" (ensemble {100 * value:.2f})" if value is not None else ""
        rows.append(row)
    return pd.DataFrame(rows)


def bars_figure(groups: pd.DataFrame, refs: pd.DataFrame, title: str, caption: str) -> Figure:
    """A table spec's cells as horizontal bars (ours: mean, sample std as error bars; "not run" written in), the
    paper's number as a hollow diamond, each bar labelled with both ε ledgers."""
    labels = [str(g["group"] or "base") for _, g in groups.iterrows()]
    height = 0.45 * len(labels) + 1.8
    figure = Figure(figsize=(10, height), dpi=100)
    axes = figure.add_subplot(1, 1, 1)
    beside = paper_numbers(groups, refs, None)
    for index, (position, group) in enumerate(groups.iterrows()):
        mean = as_number(group.get("accuracy")) if group["status"] == RUN else None
        if mean is None:
            axes.text(1, index, _ours(group), va="center", fontsize=7, color="gray")
        else:
            std = as_number(group.get("accuracy_std"))
            axes.barh(index, mean, xerr=std or 0.0, color="C0", alpha=0.7, capsize=3)
            axes.text(102, index, f"ε {fmt_eps(group['eps_claimed'])} / {fmt_eps(group['eps_rigorous'])}",
                      va="center", fontsize=7)  # right of the 100% line: clear of the bar, its error and the paper
        accuracy = [r for r in beside.get(position, []) if r["metric"] in ("", "accuracy")]
        paper_value = as_number(accuracy[0]["value_number"]) if accuracy else None
        if paper_value is not None:
            axes.plot([paper_value], [index], marker="D", markerfacecolor="none", color="C3", linestyle="none",
                      label="paper")
    axes.set_yticks(range(len(labels)))
    axes.set_yticklabels(labels, fontsize=6)
    axes.invert_yaxis()
    axes.set_xlim(0, 125)
    axes.axvline(100, color="gray", linewidth=0.5)
    axes.set_xlabel("student test accuracy (%); labels: ε claimed / ε rigorous")
    handles, names = axes.get_legend_handles_labels()
    if handles:
        unique = dict(zip(names, handles))
        axes.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    axes.grid(True, axis="x", alpha=0.3)
    figure.suptitle(title, fontsize=10)
    figure.text(0.01, 0.01, caption, fontsize=7, ha="left", va="bottom", wrap=True)
    figure.tight_layout(rect=(0, 0.5 / height, 1, 1))
    return figure


LEGEND = ("Ours: student test accuracy (%), mean ± sample std over the seeds that finished (Seeds: done / planned); "
          "\"not run\": no finished run yet, never a number; STALE: recorded by other code of its method than this checkout's. "
          "ε claimed: the paper's own theorem; ε rigorous: a standard "
          "accountant over every teacher query (the runs' means). Paper: its printed number for the cell, where it "
          "prints one. A change within {} point(s), or within the seeds' spread (the two points' sample std combined), "
          "is flat (an ε: within {:.0%}).").format(f"{FLAT_POINTS:g}", FLAT_EPS)


def section_markdown(spec, feeds: dict, groups: pd.DataFrame, refs: pd.DataFrame, claims: pd.DataFrame,
                     scale_line: str, figure: str | None, left_out: Sequence[str] = ()) -> str:
    """A spec's section of a sensitivity page: heading, the trend sentences, the table, the figure (``figure``: its
    path relative to the page), the paper's numbers no cell stands beside, and where the paper states each trend;
    ``left_out`` names the datasets whose cells the page leaves off."""
    ids = feeds.get("id", spec.name)
    table_id = " + ".join(ids) if isinstance(ids, list) else str(ids)
    title = feeds.get("title", spec.name)
    datasets = list(dict.fromkeys(groups["dataset"])) if len(groups) else []
    said = sentences(spec.name, feeds, claims, groups, datasets, refs)
    lines = [f"## {table_id}: {title}", "", f"*{scale_line}; spec `{spec.name}`.*", ""]
    if said:
        lines += ["Does the paper's trend hold here?", "", *[f"* {s}" for s in said], ""]
    else:
        lines += [f"The paper states no trend for {', '.join(datasets) or 'these cells'} that this page checks.", ""]
    if len(groups):
        lines += [markdown_table(point_table(groups, refs, feeds)), "", LEGEND, ""]
        lines += [f"{METRICS[m][2].capitalize()} (%): each run's `{m}`, mean ± sample std over the seeds that "
                  "recorded it (—: none did)." for m in feeds.get("metrics", [])] + ([""] if feeds.get("metrics") else [])
    if figure:
        lines += [f"![{table_id}: {title}]({figure})", ""]
    beside = {(r["row"], r["dataset"], r["epsilon"], r["metric"]) for found in
              paper_numbers(groups, refs, feeds.get("x")).values() for r in found}
    other = [r for _, r in (refs if refs is not None else pd.DataFrame()).iterrows()
             if (r["row"], r["dataset"], r["epsilon"], r["metric"]) not in beside
             and (not datasets or r["dataset"] in ("", *datasets))]
    if other:
        lines += ["The paper's numbers no cell above stands beside: " + "; ".join(
            f"{r['row']} ({r['dataset'] or 'no dataset named'}{', ε ' + r['epsilon'] if r['epsilon'] else ''}): "
            f"{'' if r['metric'] in ('', 'accuracy') else r['metric'] + ' '}{r['value']} [{r['source']}]"
            for r in other) + ".", ""]
    mine = claims_for(claims, spec.name)
    mine = mine[mine["dataset"].isin(["", *datasets])]
    sources = list(dict.fromkeys(f"{r['source']} ({r['note']})" if r["note"] else r["source"]
                                 for _, r in mine.iterrows()))
    if sources:
        lines += ["Where the paper says it (results/reference/sensitivity.csv): " + "; ".join(sources) + ".", ""]
    if left_out:
        lines += [f"Left off this page: its {', '.join(left_out)} cells.", ""]
    return "\n".join(lines)
