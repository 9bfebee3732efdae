"""The privacy–accuracy trade-off as a study: the page of a study with two objectives (selection accuracy up, one
ledger's eps down: :mod:`dpsd.sweep.objectives`; eps rigorous, or eps claimed for a method whose eps rigorous is
infinite everywhere), its Pareto front drawn beside the frontier page's points on the same ledger.

The front is the search trials no other search trial beats on both objectives at once
(:func:`dpsd.sweep.objectives.pareto_front`, the rule the search used to pick the configurations it ran again). The
frontier page's points are the cell groups of the frontier spec (:data:`FRONTIER`) at the scale its page in
``results/pages.yaml`` is rendered at, read from the same runs: each method's accuracy mean over seeds at its
mean eps on each ledger (:func:`frontier_points`). The two panels share the accuracy axis and the eps axis's scale; they
are not one experiment (the page says which dataset and budget each is), so the frontier is beside the front, not
on it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from dpsd.report.cells import RUN, cell_frame, group_frame
from dpsd.report.figures import PNG_METADATA
from dpsd.report.runs import latest_per_cell
from dpsd.report.tables import DASH, fmt_eps, fmt_mean_std, fmt_number, markdown_table
from dpsd.report.verdict import frontier_marker
from dpsd.sweep.objectives import PRIVACY, pareto_front, privacy_objective, study_directions
from dpsd.sweep.spec import Spec, base_value, expand_configs, load_spec
from dpsd.sweep.study import HELD_OUT, SELECTION

LEDGER_WORDS = {"eps_rigorous": "ε rigorous", "eps_claimed": "ε claimed"}  # a privacy objective as a page names it


def front_trials(spec: Spec, runs: pd.DataFrame) -> pd.DataFrame:
    """The search trials among ``runs`` (:func:`dpsd.report.study.study_runs`) with a column ``front``: whether the
    trial is on the Pareto front of the spec's objectives; ordered by the eps the study minimises."""
    search = runs[runs["phase"] == "search"].reset_index(drop=True)
    directions = study_directions(spec.name, spec.directions)
    values = [[row[objective] for objective, _ in directions] for _, row in search.iterrows()]
    on = set(pareto_front(values, directions))
    eps = privacy_objective(directions)
    return search.assign(front=[i in on for i in range(len(search))]).sort_values([eps, SELECTION]).reset_index(
        drop=True)


FRONTIER = "frontier"
"""The frontier page's spec (``sweeps/frontier.yaml``: every method's accuracy against eps rigorous, the page
``results/frontier.md``); the headline shares its ``feeds.frontier`` switch but is the papers' tables."""


def frontier_points(history: pd.DataFrame, manifest: Path, specs_dir: Path,
                    overrides: Sequence[str] = ()) -> tuple[pd.DataFrame, str]:
    """The frontier page's points: the finished cell groups (method, dataset, accuracy mean and sample std over
    seeds, mean eps on each ledger, seeds) of the :data:`FRONTIER` spec at the scale of its page in ``manifest``
    (``results/pages.yaml``), read from ``history``; and the words naming them. Empty where the manifest lists no
    such page or no run of it is there."""
    from dpsd.report.pages import load_pages

    empty = pd.DataFrame(columns=["method", "dataset", "accuracy", "accuracy_std", *PRIVACY, "seeds"])
    pages = [page for page in (load_pages(manifest, specs_dir) if Path(manifest).is_file() else [])
             if page.only == (FRONTIER,)]
    if not pages:
        return empty, "no frontier page"
    page, spec = pages[0], load_spec(Path(specs_dir) / f"{FRONTIER}.yaml")
    datasets = ", ".join(spec.feeds.get("datasets", [])) or "every dataset"
    words = f"the frontier page ({page.markdown.as_posix()}: {datasets} at {page.scale} sizes)"
    if history.empty:
        return empty, words
    pairs = expand_configs(spec, page.scale, list(overrides), shared=True)
    groups = group_frame(cell_frame([cell for cell, _ in pairs], [cfg for _, cfg in pairs], latest_per_cell(history)))
    done = groups[groups["status"] == RUN] if len(groups) else groups
    if done.empty:
        return empty, words
    return done.assign(seeds=done["seeds"].astype(int))[empty.columns].reset_index(drop=True), words


def pareto_figure(trials: pd.DataFrame, frontier: pd.DataFrame, method: str, frontier_words: str,
                  study_words: str, path: Path, eps: str = PRIVACY[0]) -> Path:
    """Two panels, accuracy against the ledger ``eps`` (:data:`LEDGER_WORDS`) on a log axis: left, every search trial
    and the Pareto front joined in order of eps; right, the frontier page's points (``method``'s drawn large, every other method's small and
    grey), each with its sample std over seeds. A PNG at ``path``."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    figure = Figure(figsize=(11, 4.4), dpi=100)
    left = figure.add_subplot(1, 2, 1)
    others = trials[~trials["front"]]
    front = trials[trials["front"]]
    left.plot(others[eps], others[SELECTION], "o", color="#999", label="search trial")
    left.plot(front[eps], front[SELECTION], "o-", color="#c44e52", label="Pareto front")
    left.set_title(f"The study: {study_words}", fontsize=9)
    left.set_ylabel("selection accuracy (%)")
    right = figure.add_subplot(1, 2, 2, sharey=left)
    for _, point in frontier.iterrows():
        mine = point["method"] == method
        std = point["accuracy_std"]
        right.errorbar([point[eps]], [point["accuracy"]], yerr=None if math.isnan(std) else [std],
                       fmt=frontier_marker(point["method"]), color="#4c72b0" if mine else "#bbb",
                       markersize=8 if mine else 5, capsize=3)
    right.set_title(f"Beside it: {frontier_words}", fontsize=9)
    right.set_ylabel("student test accuracy (%), mean over seeds")
    right.legend(handles=[Line2D([], [], color="#4c72b0", marker=frontier_marker(method), linestyle="none",
                                 label=method),
                          Line2D([], [], color="#bbb", marker="o", linestyle="none", label="every other method")],
                 fontsize=8, loc="lower right")
    finite = [v for v in [*trials[eps], *frontier[eps]] if v > 0 and math.isfinite(v)]
    if not any(v > 0 and math.isfinite(v) for v in trials[eps]):
        left.text(0.5, 0.5, f"every trial at {LEDGER_WORDS[eps]} ∞:\nnothing to draw on this axis",
                  transform=left.transAxes, ha="center", va="center", fontsize=9, color="#c44e52")
    for axes in (left, right):
        axes.set_xscale("log")
        axes.set_xlim(*((min(finite) / 2, max(finite) * 2) if finite else (0.1, 10.0)))
        axes.set_ylim(0, 105)
        axes.set_xlabel(f"{LEDGER_WORDS[eps]} (log)")
        axes.grid(True, alpha=0.3)
    left.legend(fontsize=8, loc="lower right")
    figure.suptitle(f"Privacy–accuracy trade-off: the study's Pareto front (accuracy up, {LEDGER_WORDS[eps]} down) "
                    "beside the frontier page's points", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", metadata=PNG_METADATA)
    return path


def front_table(trials: pd.DataFrame, runs: pd.DataFrame) -> str:
    """The Pareto front's trials in ``trials``' order (:func:`front_trials`): their sampled values, both ledgers' eps,
    selection accuracy, and the held-out accuracy mean ± sample std over every seed its configuration ran at (the
    repeats included), n shown."""
    rows = []
    for _, trial in trials[trials["front"]].iterrows():
        seeds = runs[runs["params"] == trial["params"]]
        held = seeds[HELD_OUT]
        rows.append({**{f"`{k}`": f"{v:.4g}" if isinstance(v, float) else str(v)
                        for k, v in json.loads(trial["params"]).items()},
                     **{LEDGER_WORDS[eps]: fmt_eps(trial[eps]) for eps in reversed(PRIVACY)},
                     "Selection (%)": fmt_number(trial[SELECTION]),
                     "Held-out (%), all seeds": fmt_mean_std(held.mean(), held.std(ddof=1)) if len(held) > 1
                     else fmt_number(held.iloc[0]), "n": len(held), "Run": trial["run_id"]})
    return markdown_table(pd.DataFrame(rows).fillna(DASH).astype(str))


def infinite_trials(trials: pd.DataFrame) -> int:
    """How many of ``trials`` are at eps rigorous infinity (no guarantee covers what they release)."""
    return int(trials["eps_rigorous"].map(math.isinf).sum())


def ledger_lines(trials: pd.DataFrame, eps: str) -> list[str]:
    """What the page must say of the ledgers (none where the study minimises eps rigorous and some is finite): a study
    on the claimed ledger is drawn there because its method's eps rigorous is infinite (the count says at how many
    trials); one on the rigorous ledger whose every trial is infinite has no trade-off to draw."""
    infinite = infinite_trials(trials)
    if eps == "eps_claimed":
        return [f"This trade-off is on the paper's ledger (ε claimed), not a guarantee: ε rigorous, the standard "
                f"accountant's over every teacher query, is infinite at {infinite} of its {len(trials)} search trials "
                "(the method releases what no guarantee covers), so the rigorous ledger has no trade-off to draw.", ""]
    if len(trials) and infinite == len(trials):
        return [f"Every one of its {len(trials)} search trials is at ε rigorous ∞: on the standard ledger this method "
                "has no trade-off, only its most accurate trial.", ""]
    return []


def pareto_lines(spec: Spec, runs: pd.DataFrame, history: pd.DataFrame, out: Path, stem: str, scale: str,
                 manifest: Path, specs_dir: Path, overrides: Sequence[str] = ()) -> list[str]:
    """The trade-off page's body (after its head): what was searched, the Pareto front's table, and the figure
    ``<stem>_pareto.png`` under ``out/figures`` beside the frontier page's points (:func:`frontier_points`)."""
    trials = front_trials(spec, runs)
    dataset = base_value(spec, "dataset", DASH)
    method = base_value(spec, "method", DASH)
    frontier, words = frontier_points(history, manifest, specs_dir, overrides)
    study_words = f"{method} on {dataset} at {scale} budgets"
    directions = study_directions(spec.name, spec.directions)
    eps = privacy_objective(directions)
    ledger = LEDGER_WORDS[eps]
    path = pareto_figure(trials, frontier, method, words, study_words, Path(out) / "figures" / f"{stem}_pareto.png",
                         eps)
    front = trials[trials["front"]]
    goals = ", ".join(f"{d} {o}" for o, d in directions)
    mine = frontier[frontier["method"] == method]
    beside = (f"Beside it, {words}: {method}'s {len(mine)} point(s) "
              + "; ".join(f"{fmt_mean_std(p['accuracy'], p['accuracy_std'])}% at {ledger} {fmt_eps(p[eps])} "
                          f"(n = {p['seeds']}, {p['dataset']})" for _, p in mine.iterrows())
              + ". The frontier is another dataset and budget than this study: the two are set side by side, "
              "not on one curve." if len(mine) else f"Beside it, {words}: no point of {method} there.")
    budget = "the spec's own smoke list" if spec.smoke else f"the {scale} scale's sizes"
    return [f"This is {dataset} at {scale} budgets ({budget}), a check that the trade-off search works, not a result "
            f"about {method} on a real task.", "",
            f"The search ({len(trials)} trials, Optuna's multi-objective TPE through Ray Tune) is to {goals}. "
            f"{len(front)} of its trials are on the Pareto front: no other trial is both more accurate on the "
            f"selection half and lower in {ledger}. Its configurations, most accurate first, were run again at the "
            "spec's other seeds; the held-out column counts every seed.", "", *ledger_lines(trials, eps),
            "## The Pareto front", "", front_table(trials, runs), "", beside, "",
            f"![{path.stem}](figures/{path.name})", ""]


def trade_off_row(spec: Spec, runs: pd.DataFrame, link: str | None, scale: str) -> dict:
    """One study's line on the trade-offs page: its method, the ledger it minimises, its search trials, how many
    are at eps rigorous infinity, and its front (accuracy on the selection half at each eps, lowest eps first)."""
    from dpsd.report.study import study_command

    directions = study_directions(spec.name, spec.directions)
    eps = privacy_objective(directions)
    trials = front_trials(spec, runs) if len(runs) else runs
    front = trials[trials["front"]] if len(trials) else trials
    method = base_value(spec, "method", DASH)
    points = "; ".join(f"{fmt_number(t[SELECTION])} at {fmt_eps(t[eps])}" for _, t in front.iterrows())
    return {"Study": f"[{spec.name}]({link})" if link else spec.name, "Method": method, "Ledger": LEDGER_WORDS[eps],
            "Trials": len(trials), "At ε rigorous ∞": infinite_trials(trials) if len(trials) else DASH,
            "Front: selection accuracy (%) at ε": points or f"not run yet: `{study_command(spec, scale)}`"}


def fronts_figure(studies: Sequence[tuple[Spec, pd.DataFrame]], path: Path) -> Path:
    """Every study's Pareto front, accuracy against its ledger's eps on a log axis: the studies on eps rigorous in
    the left panel, those on eps claimed (the paper's ledger, their eps rigorous infinite) in the right; each method's
    marker the frontier's (:func:`dpsd.report.verdict.frontier_marker`: private-data or data-free). A PNG."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.4), dpi=100)
    panels = {eps: figure.add_subplot(1, 2, i + 1) for i, eps in enumerate(PRIVACY)}
    for spec, runs in studies:
        if runs.empty:
            continue
        eps = privacy_objective(study_directions(spec.name, spec.directions))
        front = front_trials(spec, runs)
        front = front[front["front"] & front[eps].map(math.isfinite)]
        method = base_value(spec, "method", spec.name)
        panels[eps].plot(front[eps], front[SELECTION], marker=frontier_marker(method), linestyle="-", label=method)
    for eps, axes in panels.items():
        axes.set_xscale("log")
        axes.set_ylim(0, 105)
        axes.set_xlabel(f"{LEDGER_WORDS[eps]} (log)")
        axes.set_ylabel("selection accuracy (%)")
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8, loc="center right")  # the fronts rise to the upper left and run low to the right
        else:
            axes.text(0.5, 0.5, "no study on this ledger has run", transform=axes.transAxes, ha="center")
    panels["eps_rigorous"].set_title("On the standard ledger (ε rigorous)", fontsize=9)
    panels["eps_claimed"].set_title("On the paper's ledger only (ε claimed; ε rigorous ∞ at every trial)", fontsize=9)
    figure.suptitle("Every method's Pareto front: the trade-off studies side by side (squares: the method reads "
                    "private data; discs: data-free after its teachers)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", metadata=PNG_METADATA)
    return path


def trade_offs_lines(studies: Sequence[tuple[Spec, pd.DataFrame]], links: dict[str, str] | None, scale: str,
                     out: Path | None, stem: str) -> list[str]:
    """The page that sets the trade-off studies side by side: a row per study (:func:`trade_off_row`), then every
    front in one figure (:func:`fronts_figure`, ``<stem>_<scale>_fronts.png`` under ``out/figures`` where ``out`` is
    given). ``links``: each study's page by name, relative to this one (default: each ``<name>.md``)."""
    rows = [trade_off_row(spec, runs, f"{spec.name}.md" if links is None else links.get(spec.name), scale)
            for spec, runs in studies]
    lines = ["Each row is a trade-off study (`dpsd sweep SPEC --search optuna`; its page has every trial, the front's "
             "held-out accuracy over seeds and the frontier page's points beside it): Optuna's multi-objective TPE "
             "searching for the most accurate student at the least ε. Its front is the trials no other trial beats "
             "on both. A method whose ε rigorous is infinite at every setting is searched on the paper's ledger, "
             "ε claimed, and is drawn apart: its ε is a claim, not a guarantee. These are small budgets on a small "
             "public dataset, for comparing how each method trades, not for its accuracy on a real task.", "",
             markdown_table(pd.DataFrame(rows).astype(str)), ""]
    if out is not None:
        path = fronts_figure(studies, Path(out) / "figures" / f"{stem}_{scale}_fronts.png")
        lines += [f"![{path.stem}](figures/{path.name})", ""]
    return lines
