"""The readings page: per readings spec its section (:func:`readings_markdown`: per seed method how much of its
faithful space ran, the main effects, the runs and the default the rule chooses, or the changes around a
one-at-a-time design's centre; the discriminator interaction and the controls) and its main-effects figure
(:func:`effects_figure`), from the tables of :mod:`dpsd.report.readings_design`. Everything here formats run
figures; no number is typed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from dpsd.report.figures import PNG_METADATA, _label_log_axis, save_png
from dpsd.report.readings import READ_METHODS, SWITCH_SETS, switch_values
from dpsd.report.readings_design import (TIE, accuracy_column, budget_table, centre_table, chosen_defaults,
                                         control_table, coverage, interaction_table, main_effects, rung_of, run_table,
                                         search_summary, switches_of, varied)
from dpsd.report.scoreboard import MIN_SEEDS
from dpsd.report.tables import markdown_table
from dpsd.report.verdict import count_noun
from dpsd.sweep.spec import composed

# Why the default rule judges runs, not main effects: in a fraction a main effect carries the interactions aliased
# with it; in the full factorial it is the average over the other switches' values, not any one combination.
ALIASED, AVERAGED = "a main effect here carries interactions", "a main effect averages over the other switches"


def coverage_sentence(rows: pd.DataFrame) -> str:
    """``48 of 48 faithful combinations run at teacher lenet5, mean/std (full factorial: no effect aliased).``, or a
    fraction's ``(a fraction: the maximum is not established)``: a best reading is a maximum over the whole space."""
    found = coverage(rows)
    design = ("full factorial: no effect aliased" if found["combinations"] == found["space"]
              else "a fraction: the maximum is not established")
    return (f"{found['combinations']} of {found['space']} faithful combinations run at teacher {found['teacher']} "
            f"({design}).")


def effects_figure(rows: pd.DataFrame, caption: str, path: Path) -> Path:
    """Main-effects plot: per switch, the mean accuracy at each value (error bars: sample std over runs x seeds),
    one line per method; a flat line is a switch that does not matter."""
    methods = list(dict.fromkeys(rows["method"]))
    switches = varied(rows)
    fig = Figure(figsize=(2.1 * max(1, len(switches)) + 1, 3.6), layout="constrained")
    axes = fig.subplots(1, max(1, len(switches)), sharey=True, squeeze=False)[0]
    for ax, switch in zip(axes, switches):
        values = [r.value for r in switch.readings if (rows[switch.name] == r.value).any()]
        for method in methods:
            at = rows[rows["method"] == method]
            means = [at.loc[at[switch.name] == v, "accuracy"].mean() for v in values]
            stds = [at.loc[at[switch.name] == v, "accuracy"].std(ddof=1) for v in values]
            ax.errorbar(range(len(values)), means, yerr=stds, marker="o", capsize=3, label=method)
        ax.set_xticks(range(len(values)), [v.replace(", ", "\n", 1) for v in values], fontsize=7)
        ax.set_title(switch.name, fontsize=8)
        ax.set_xlim(-0.5, len(values) - 0.5)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"{rung_of(rows)} student test accuracy (%)")
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(caption, fontsize=8, wrap=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata=PNG_METADATA)
    return path


def budget_figure(rows: pd.DataFrame, axis: str, caption: str, path: Path) -> Path:
    """A budget spec's plot: accuracy against ``axis`` (log scale, labelled at the values run), one line per method
    (error bars: sample std over the seeds); a line still rising at its right end is a method cut short."""
    fig = Figure(figsize=(5.2, 3.6), layout="constrained")
    ax = fig.subplots()
    for method, at in rows.groupby("method", sort=False):
        by_value = at.groupby(axis)["accuracy"]
        ax.errorbar(by_value.mean().index, by_value.mean(), yerr=by_value.std(ddof=1).fillna(0.0), marker="o",
                    capsize=3, label=method)
    ax.set_xscale("log")
    _label_log_axis(ax, sorted(rows[axis].unique()))
    ax.set_xlabel(axis)
    ax.set_ylim(0, 100)  # the whole scale: a plateau far above chance reads as one, and a flat line at 10% too
    ax.set_ylabel(f"{rung_of(rows)} student test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.suptitle(caption, fontsize=8, wrap=True)
    return save_png(fig, path)


def budget_markdown(title: str, rows: pd.DataFrame, design: str, axis: str, figure: str | None) -> str:
    """A budget spec's section: its design, the plot and :func:`~dpsd.report.readings_design.budget_table`."""
    lines = [f"## {title}", "", design, ""]
    if figure:
        lines += [f"![Accuracy over {axis}]({figure})", ""]
    return "\n".join(lines + [_table(budget_table(rows, axis)) if len(rows) else "Not run yet.", ""])


def _table(frame: pd.DataFrame) -> str:
    return markdown_table(frame[[c for c in frame.columns if not c.startswith("_")]])


def readings_markdown(title: str, rows: pd.DataFrame, design: str, figure: str | None,
                      one_at_a_time: bool = False) -> str:
    """The readings page section: per method how many of its faithful combinations ran (:func:`coverage_sentence`),
    and the main effects, the runs and the chosen defaults (a factorial design), or the changes around the centre
    (``one_at_a_time``); then the discriminator interaction (DPSD beside DPSD-T) and the controls (the methods that
    are not a seed method's readings)."""
    controls = control_table(rows[~rows["method"].isin(READ_METHODS)])
    rows = rows[rows["method"].isin(READ_METHODS)]
    lines = [f"## {title}", "", design, ""]
    if figure and not one_at_a_time:
        lines += [f"![Main effects of the readings]({figure})", ""]
    for method in dict.fromkeys(rows["method"]):
        at = rows[rows["method"] == method]
        if at.empty:
            continue
        if one_at_a_time:
            centre = at[at["group"] == at.iloc[0]["group"]].iloc[0]
            lines += [f"### {method}: one switch at a time around the centre", "",
                      "Centre: " + ", ".join(f"{s.name} = {centre[s.name]}" for s in switches_of(at)) + ". "
                      + coverage_sentence(at), "",
                      _table(centre_table(at)), ""]
            continue
        effects = main_effects(at)
        counts = search_summary(at)
        best, seeds = counts["best_run"], counts["seeds"]
        current = switch_values(composed([f"method={method}", "dataset=mnist"]))
        teacher = counts["teacher"]  # the search's teacher: the one its faithful combinations ran at
        chosen = chosen_defaults(at, teacher, current)
        changed = [f"{k} {current[k]} -> {v}" for k, v in chosen.items() if current[k] != v]
        verdict = (f" (differs from conf/method/{method}.yaml in: {'; '.join(changed)})." if changed
                   else f": conf/method/{method}.yaml's defaults as they are.")
        rung = rung_of(at)
        rule = ("Default by the rule: nothing to choose here (the design varies no switch)" if not varied(at) else
                f"Default by the rule (the faithful run with the best mean {rung} at the search's teacher, {teacher}; runs "
                f"within {TIE:g} points of it go to the one with the most literal values, then to the current defaults; "
                f"runs, not main effects, since {ALIASED if counts['combinations'] < counts['space'] else AVERAGED}): "
                + ", ".join(f"{k} = {v}" for k, v in chosen.items()) + verdict
                if seeds >= MIN_SEEDS else
                f"Default by the rule: not chosen yet (a run here has {seeds} seed; the rule needs {MIN_SEEDS} on every "
                f"run). With these runs it would read: " + ", ".join(f"{k} = {v}" for k, v in chosen.items()) + ".")
        if counts["stale"]:
            rule += (f" {count_noun(counts['stale'], 'run')} of these stale (recorded by other code of the method, marked"
                     " (stale), to re-run with --rerun-stale): the rule reads them until they are.")
        lines += [f"### {method}: readings at {rung}", "",
                  f"The paper's words: {SWITCH_SETS[method].pointers} of `../shared/papers/{SWITCH_SETS[method].paper}`. "
                  f"{at['group'].nunique()} runs, {len(at)} finished seeds. Faithful runs: {counts['readings']} "
                  f"(over {count_noun(counts['teachers'], 'teacher')}), at least {count_noun(counts['seeds'], 'seed')} each. "
                  + (f"Best current faithful run: {best[accuracy_column(at)]}% (n = {best['Seeds']}). "
                     if best is not None else "")
                  + coverage_sentence(at),
                  "",
                  _table(effects), "", _table(run_table(at)), "", rule, ""]
    interactions = interaction_table(rows)
    if len(interactions):
        lines += ["### Each switch with the student or the teacher as discriminator", "", _table(interactions), ""]
    if len(controls):
        lines += ["### Controls at the same budget and student", "", _table(controls), ""]
    return "\n".join(lines)
