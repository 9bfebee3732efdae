"""How far accuracy moves across each searched parameter's range: a study's trials binned by value, and the studies
of several methods on the parameters they share, each normalised to [0, 1] over its search range.

A numeric range is normalised linearly, or on a log scale where the search draws it log-uniformly
(:func:`normalise`), so a learning rate searched over 1e-4 to 1e-2 by one method and 1e-4 to 0.1 by another is
compared where each sits in its own range. A range is cut into :data:`BINS` equal parts of that scale; an integer
range with at most :data:`BINS` values, and a choice, by value. The accuracy is the selection half's of the search
trials (the repeats run the best configurations again, and would weigh them twice)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from dpsd.report.tables import DASH, fmt_number, markdown_table
from dpsd.sweep.study import SELECTION, search_block
from dpsd.sweep.spec import Spec, base_value

BINS = 3  # equal parts of a numeric range's (normalised) scale
NUMERIC = ("loguniform", "uniform", "int")


def normalise(value: float, kind: str, args: Sequence[float]) -> float:
    """``value`` as a fraction of its search range ``args`` ([low, high]): on a log scale for ``loguniform``, else
    linear; a choice has no order, so it is refused."""
    if kind not in NUMERIC:
        raise ValueError(f"a {kind} range has no order to normalise")
    low, high = float(args[0]), float(args[1])
    if kind == "loguniform":
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (float(value) - low) / (high - low)


def _bin_of(value, kind: str, args: list) -> tuple[int, str]:
    """The bin a sampled value falls in: (its order, its label)."""
    if kind == "choice":
        return args.index(value) if value in args else len(args), str(value)
    if kind == "int" and args[1] - args[0] + 1 <= BINS:
        return int(value) - args[0], str(int(value))
    index = min(BINS - 1, int(normalise(value, kind, args) * BINS))
    edges = [_denormalise(i / BINS, kind, args) for i in (index, index + 1)]
    return index, f"[{edges[0]:.3g}, {edges[1]:.3g}{']' if index == BINS - 1 else ')'}"


def _denormalise(fraction: float, kind: str, args: list) -> float:
    low, high = float(args[0]), float(args[1])
    if kind == "loguniform":
        return math.exp(math.log(low) + fraction * (math.log(high) - math.log(low)))
    return low + fraction * (high - low)


def binned(spec: Spec, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (parameter, bin) of the search trials among ``runs`` (:func:`dpsd.report.study.study_runs`):
    its trials and their selection accuracy's min, max, max − min and mean; parameters in the spec's order, bins in
    value order."""
    search = runs[runs["phase"] == "search"]
    params = [json.loads(text) for text in search["params"]]
    rows = []
    for key, (kind, args) in search_block(spec).items():
        cells: dict[tuple[int, str], list[float]] = {}
        for values, accuracy in zip(params, search[SELECTION]):
            if key in values:
                cells.setdefault(_bin_of(values[key], kind, args), []).append(float(accuracy))
        for (order, label), accuracies in sorted(cells.items()):
            rows.append({"parameter": key, "bin": label, "order": order, "trials": len(accuracies),
                         "min": min(accuracies), "max": max(accuracies), "mean": sum(accuracies) / len(accuracies)})
    return pd.DataFrame(rows, columns=["parameter", "bin", "order", "trials", "min", "max", "mean"])


def spread(bins: pd.DataFrame) -> pd.DataFrame:
    """Per parameter: how many bins hold trials, and the spread of their mean accuracies (largest − smallest bin
    mean, in points): the parameters that move accuracy most first."""
    rows = [{"parameter": key, "bins": len(at), "spread": at["mean"].max() - at["mean"].min()}
            for key, at in bins.groupby("parameter", sort=False)]
    return pd.DataFrame(rows, columns=["parameter", "bins", "spread"]).sort_values(
        "spread", ascending=False, kind="stable").reset_index(drop=True)


def range_lines(spec: Spec, runs: pd.DataFrame) -> list[str]:
    """The study page's section on accuracy across each parameter's range: the spread of bin means per parameter
    (most first), then every bin's min, max, max − min and mean."""
    bins = binned(spec, runs)
    if bins.empty:
        return ["No search trial to bin.", ""]
    summary = spread(bins)
    top = summary.iloc[0]
    order = pd.DataFrame({"Parameter": summary["parameter"].map(lambda k: f"`{k}`"), "Bins with trials": summary["bins"],
                          "Spread of bin means (points)": summary["spread"].map(fmt_number)})
    detail = pd.DataFrame({"Parameter": bins["parameter"].map(lambda k: f"`{k}`"), "Bin": bins["bin"],
                           "Trials": bins["trials"], "Min (%)": bins["min"].map(fmt_number),
                           "Max (%)": bins["max"].map(fmt_number),
                           "Max − min (points)": (bins["max"] - bins["min"]).map(fmt_number),
                           "Mean (%)": bins["mean"].map(fmt_number)})
    lead = (f"Across its range, `{top['parameter']}` moves the mean selection accuracy most: "
            f"{fmt_number(top['spread'])} points between its best and worst bin."
            if top["spread"] > 0 else "No parameter moves the mean selection accuracy between its bins: every bin "
            "scores alike.")
    return ["Each parameter's search range cut into bins (numeric: three equal parts, on a log scale where the search "
            "is log-uniform; an integer range of three values or fewer, and a choice, by value), with the selection "
            "accuracy of the search trials in each. One bin's trials differ in every other parameter too, so a "
            "spread is a hint of what moves accuracy, read beside the importances above.", "", lead, "",
            markdown_table(order.astype(str)), "", markdown_table(detail.astype(str)), ""]


def shared_parameters(studies: Sequence[tuple[Spec, pd.DataFrame]]) -> dict[str, list[str]]:
    """The numeric parameters (override keys) two or more of the studies search, each with the studies that do, in
    the order the studies are given."""
    holders: dict[str, list[str]] = {}
    for spec, _ in studies:
        for key, (kind, _) in search_block(spec).items():
            if kind in NUMERIC:
                holders.setdefault(key, []).append(spec.name)
    return {key: names for key, names in holders.items() if len(names) > 1}


def shared_points(studies: Sequence[tuple[Spec, pd.DataFrame]]) -> pd.DataFrame:
    """One row per search trial and shared parameter (:func:`shared_parameters`): the study, its method, the
    parameter, its value normalised over the study's own range (:func:`normalise`) and the selection accuracy."""
    shared = shared_parameters(studies)
    rows = []
    for spec, runs in studies:
        space = search_block(spec)
        method = base_value(spec, "method", DASH)
        search = runs[runs["phase"] == "search"]
        for text, accuracy in zip(search["params"], search[SELECTION]):
            values = json.loads(text)
            for key in shared:
                if key in space and key in values:
                    rows.append({"study": spec.name, "method": method, "parameter": key,
                                 "normalised": normalise(values[key], *space[key]), SELECTION: float(accuracy)})
    return pd.DataFrame(rows, columns=["study", "method", "parameter", "normalised", SELECTION])


def shared_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per shared parameter and study: the trials and the mean selection accuracy in each third of the normalised
    range (a dash where no trial fell), and the spread of those means."""
    thirds = ["low third", "middle third", "high third"]
    rows = []
    ordered = points.sort_values("parameter", kind="stable", key=lambda keys: keys.map(list(dict.fromkeys(keys)).index))
    for (key, study), at in ordered.groupby(["parameter", "study"], sort=False):
        part = (at["normalised"] * BINS).astype(int).clip(upper=BINS - 1)
        means = at.groupby(part)[SELECTION].mean()
        rows.append({"Parameter": f"`{key}`", "Study": study, "Method": at["method"].iloc[0], "Trials": len(at),
                     **{f"Mean (%), {name}": fmt_number(means[i]) if i in means.index else DASH
                        for i, name in enumerate(thirds)},
                     "Spread (points)": fmt_number(means.max() - means.min()) if len(means) > 1 else DASH})
    return pd.DataFrame(rows)


def shared_figure(points: pd.DataFrame, path: Path) -> Path:
    """Selection accuracy against each shared parameter's normalised value, one panel per parameter, one series
    (colour) per study's method, as a PNG at ``path``."""
    from matplotlib.figure import Figure

    from dpsd.report.figures import PNG_METADATA

    keys = list(dict.fromkeys(points["parameter"]))
    figure = Figure(figsize=(4.6 * len(keys), 3.8), dpi=100)
    for index, key in enumerate(keys):
        axes = figure.add_subplot(1, len(keys), index + 1)
        here = points[points["parameter"] == key]
        for study, at in here.groupby("study", sort=False):
            axes.plot(at["normalised"], at[SELECTION], "o", alpha=0.75, label=f"{at['method'].iloc[0]} ({study})")
        axes.set_xlim(-0.05, 1.05)
        axes.set_ylim(0, 105)
        axes.set_xlabel(f"{key} (0: low end of its range, 1: high end)", fontsize=8)
        axes.set_ylabel("selection accuracy (%)")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7, loc="best")
    figure.suptitle("Accuracy on the parameters the studies share, each normalised over its own search range",
                    fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", metadata=PNG_METADATA)
    return path


def shared_lines(studies: Sequence[tuple[Spec, pd.DataFrame]], folder: Path | None, stem: str) -> list[str]:
    """The cross-method page's section on the shared parameter space: a table, and where ``folder`` is given a
    figure ``<stem>_shared.png`` in it (linked as ``figures/<name>``); one line where the studies share no numeric
    parameter, or no shared parameter has a search trial yet."""
    shared = shared_parameters(studies)
    if not shared:
        return ["The studies share no numeric parameter: their accuracies cannot be set on one parameter space.", ""]
    points = shared_points(studies)
    named = "; ".join(f"`{key}` ({', '.join(names)})" for key, names in shared.items())
    if points.empty:
        return [f"Shared parameters: {named}. No search trial of them has run yet.", ""]
    lines = [f"The parameters two or more studies search: {named}. Each value is normalised over its own study's "
             "search range (on a log scale where the search is log-uniform), so 0 is the low end of the range the "
             "study searched and 1 the high end; the accuracy is the selection half's, search trials only.", "",
             markdown_table(shared_table(points).astype(str)), ""]
    if folder is not None:
        path = shared_figure(points, Path(folder) / f"{stem}_shared.png")
        lines += [f"![{path.stem}](figures/{path.name})", ""]
    return lines
