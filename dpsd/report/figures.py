"""Figures: privacy–accuracy curves, hyper-parameter sensitivity plots and synthetic sample grids.

Plots use matplotlib's object API (``Figure``, rendered by Agg; no pyplot state, no display) and
are saved without a timestamp, so rendering twice writes the same bytes. Every plotted number is a
run's figure or a papers.csv value.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Callable

import mlflow
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullFormatter

from dpsd.report.cells import ENSEMBLE, RUN

PNG_METADATA = {"Software": None}  # no version string: the same plot gives the same bytes


def _numeric(values: pd.Series) -> bool:
    try:
        [float(v) for v in values if v is not None]
    except (TypeError, ValueError):
        return False
    return True


def _log_scale(xs: list[float]) -> bool:
    positive = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return len(positive) == len([x for x in xs if x is not None]) and len(positive) > 1 and max(positive) / min(positive) >= 20


def deltas(groups: pd.DataFrame) -> str:
    found = sorted({float(d) for d in groups.get("delta", pd.Series(dtype=float)).dropna()})
    return ", ".join(f"{d:g}" for d in found) or "—"


MARKERS = ("D", "s", "^", "v", "P", "X", "*", "h")


def panels(groups: pd.DataFrame) -> list[tuple[str, str | None]]:
    """The figure's panels: one per dataset and neighbouring relation of its finished runs, so that no
    curve or ε axis mixes two relations (an ε is only meaningful with its relation: DESIGN.md); a dataset
    without finished runs (or with runs that state no relation) keeps one panel,
    relation ``None``. A group whose seeds stated two relations (``"label replace_record"``) is a
    relation of its own."""
    found = []
    for dataset in dict.fromkeys(groups["dataset"]):
        mine = groups[(groups["dataset"] == dataset) & (groups["status"] == RUN)]
        relations = list(dict.fromkeys(r for r in mine.get("neighbouring", pd.Series(dtype=str)) if r))
        found += [(dataset, relation) for relation in relations] or [(dataset, None)]
    return found


def _in_panel(groups: pd.DataFrame, dataset: str, relation: str | None) -> pd.DataFrame:
    """The finished groups plotted in panel (``dataset``, ``relation``)."""
    done = groups[(groups["status"] == RUN) & groups["x"].notna() & (groups["dataset"] == dataset)]
    if relation is not None:
        done = done[done["neighbouring"] == relation]
    return done.copy()


def panel_title(dataset: str, relation: str | None) -> str:
    return dataset if relation is None else f"{dataset} · ε w.r.t. {relation}"


def _panel(axes, groups: pd.DataFrame, dataset: str, relation: str | None, numeric: bool, teacher_line: bool,
           reference: pd.DataFrame | None, reference_x: Callable[[pd.Series], float | None]) -> list[float]:
    """One panel's lines (:func:`panels`: one dataset, one relation; one line per series, error bars =
    sample std over seeds; a teacher ensemble's accuracy dotted: :func:`_ensemble_lines`), the non-private
    teacher dashed and the paper's numbers as hollow markers
    (in a dataset split by relation, only beside the paper's own method); returns the plotted x values."""
    done = _in_panel(groups, dataset, relation)
    if numeric:
        done["x"] = done["x"].astype(float)
    colors = {}
    for series, points in done.groupby("series", sort=False):
        points = points.sort_values("x") if numeric else points
        errors = points["accuracy_std"].where(points["accuracy_std"].notna(), 0.0)
        line = axes.errorbar(points["x"], points["accuracy"], yerr=errors, marker="o", capsize=3, label=str(series))
        colors[series] = line.lines[0].get_color()
    _ensemble_lines(axes, done, colors, numeric)
    teacher = groups[(groups["dataset"] == dataset) & groups["teacher_accuracy"].notna()]["teacher_accuracy"]
    if teacher_line and len(teacher):
        axes.axhline(float(teacher.mean()), color="black", linestyle="--", linewidth=1, label="non-private teacher")
    if reference is not None and numeric:
        rows = reference[(reference["dataset"] == dataset) & reference["value_number"].notna()]
        if relation is not None and len([p for p in panels(groups) if p[0] == dataset]) > 1:
            rows = rows[rows["method"].isin(set(done["series"]) | set(done.get("method", [])))]
        names = list(dict.fromkeys(rows["row"]))
        for _, ref in rows.iterrows():
            x = reference_x(ref)
            if x is None or pd.isna(x):
                continue
            axes.plot([x], [ref["value_number"]], linestyle="none", markerfacecolor="none",
                      marker=MARKERS[names.index(ref["row"]) % len(MARKERS)], color=colors.get(ref["method"], "gray"),
                      label=f"paper: {ref['row']}")
    if done.empty:
        statuses = set(groups[groups["dataset"] == dataset]["status"])
        axes.text(0.5, 0.5, "data absent" if statuses == {"data absent"} else "no finished runs",
                  ha="center", va="center", transform=axes.transAxes)
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        axes.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    axes.set_title(panel_title(dataset, relation), fontsize=9)
    axes.grid(True, alpha=0.3)
    return list(done["x"]) if numeric else []


ENSEMBLE_LABEL = "teacher ensemble (clean vote)"


def _ensemble_lines(axes, done: pd.DataFrame, colors: dict, numeric: bool) -> None:
    """The teacher ensemble's clean-vote test accuracy (DGD's runs log it; DGD Fig. 8 plots it), dotted in its
    series' colour beside the students' line: a figure whose trend is read on the ensemble shows the ensemble. Series
    with the same ensemble at every x (one ensemble, two aggregations) share one line."""
    if ENSEMBLE not in done:
        return
    lines = {}
    for series, points in done[done[ENSEMBLE].notna()].groupby("series", sort=False):
        points = points.sort_values("x") if numeric else points
        key = (tuple(points["x"]), tuple(round(100.0 * float(v), 6) for v in points[ENSEMBLE]))
        lines.setdefault(key, []).append(series)
    for (xs, values), names in lines.items():
        label = ENSEMBLE_LABEL if len(lines) == 1 else f"{', '.join(map(str, names))}: {ENSEMBLE_LABEL}"
        axes.plot(list(xs), list(values), linestyle=":", marker=".", color=colors.get(names[0], "gray"), label=label)


def _privacy_panel(axes, groups: pd.DataFrame, dataset: str, relation: str | None, numeric: bool) -> None:
    """Both ledgers against the x key (log y), one relation (:func:`panels`): ε claimed dashed, ε
    rigorous solid; an infinite ε is left out of the plot (the table shows it as ∞) and named in the legend, which
    matplotlib places clear of the points (in the panel's corner where no ε is finite)."""
    done = _in_panel(groups, dataset, relation)
    if numeric:
        done["x"] = done["x"].astype(float)
    plotted, unbounded = False, []
    for series, points in done.groupby("series", sort=False):
        points = points.sort_values("x") if numeric else points
        for column, style, name in (("eps_claimed", "--", "ε claimed"), ("eps_rigorous", "-", "ε rigorous")):
            finite = points[points[column].map(lambda v: v is not None and math.isfinite(v) and v > 0)]
            if len(finite):
                axes.plot(finite["x"], finite[column], linestyle=style, marker="o", label=f"{series}: {name}")
                plotted = True
            infinite = points[points[column].map(lambda v: v is not None and v == math.inf)]
            if len(infinite):
                every = "every point" if len(infinite) == len(points) else f"{len(infinite)} of {len(points)} points"
                unbounded.append(f"{series}: {name} ∞ at {every}")
    if plotted:
        axes.set_yscale("log")  # labelled as plain numbers ("30", not "3×10¹"), on matplotlib's log ticks
        axes.yaxis.set_major_formatter(PlainLogFormatter())
        axes.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))
        handles, labels = axes.get_legend_handles_labels()
        notes = [Line2D([], [], linestyle="none") for _ in unbounded]  # legend lines without a mark: placed clear of the points
        axes.legend(handles + notes, labels + unbounded, fontsize=7, loc="best")
    else:
        axes.text(0.5, 0.5, "no finite ε", ha="center", va="center", transform=axes.transAxes)
        if unbounded:
            axes.text(0.02, 0.02, "\n".join(unbounded), transform=axes.transAxes, fontsize=7, ha="left", va="bottom")
    axes.set_ylabel("ε" if relation is None else f"ε ({relation})")
    axes.grid(True, alpha=0.3)


class PlainLogFormatter(LogFormatter):
    """matplotlib's choice of which log ticks to label, written as ``%g`` ("0.1", "30"; not
    "1e−01" or "3×10¹")."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def _label_log_axis(axes, xs: list[float]) -> None:
    """A log x axis labelled at the plotted values, written as ``%g`` and slanted so that close values
    stay legible; matplotlib's own minor-tick labels ("2×10⁻²") are left off, since within a decade
    or two they overlap."""
    axes.set_xscale("log")
    values = sorted({x for x in xs if x > 0 and math.isfinite(x)})
    if values:  # with nothing plotted, matplotlib's decade ticks stay
        axes.xaxis.set_major_locator(FixedLocator(values))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        margin = (values[-1] / values[0]) ** 0.05 if values[-1] > values[0] else 1.5
        axes.set_xlim(values[0] / margin, values[-1] * margin)  # every panel, a dataset without runs too
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.tick_params(axis="x", labelrotation=45, labelsize=8)


def line_figure(groups: pd.DataFrame, x_label: str, title: str, caption: str,
                reference: pd.DataFrame | None = None, reference_x: Callable[[pd.Series], float | None] | None = None,
                log_x: bool | None = None, teacher_line: bool = True, privacy_panel: bool = False) -> Figure:
    """Accuracy against the x key, one panel per dataset and neighbouring relation (:func:`panels`,
    :func:`_panel`), and with ``privacy_panel`` both ε ledgers below each. ``reference_x`` places a
    paper row on the x axis (None: not plotted). ``log_x=None`` chooses a log axis when the x values
    span more than a factor of 20."""
    numeric = _numeric(groups["x"].dropna())
    found = panels(groups)
    columns = min(len(found), 3)
    rows = math.ceil(len(found) / columns) * (2 if privacy_panel else 1)
    height = 3.6 * rows + 0.6
    width = 4.6 * columns
    figure = Figure(figsize=(width, height), dpi=100)
    xs = []
    for index, (dataset, relation) in enumerate(found):
        row, column = divmod(index, columns)
        first_row = 2 * row if privacy_panel else row
        axes = figure.add_subplot(rows, columns, first_row * columns + column + 1)
        xs += _panel(axes, groups, dataset, relation, numeric, teacher_line, reference, reference_x or (lambda ref: None))
        axes.set_xlabel(x_label)
        axes.set_ylabel("student test accuracy (%)")
        if privacy_panel:
            below = figure.add_subplot(rows, columns, (first_row + 1) * columns + column + 1, sharex=axes)
            _privacy_panel(below, groups, dataset, relation, numeric)
            below.set_xlabel(x_label)
    if numeric and (log_x if log_x is not None else _log_scale(xs)):
        for axes in figure.axes:
            _label_log_axis(axes, xs)
    figure.suptitle(textwrap.fill(title, width=int(11 * width)), fontsize=10)  # ~11 characters an inch
    figure.text(0.01, 0.01, caption, fontsize=7, ha="left", va="bottom", wrap=True)
    figure.tight_layout(rect=(0, 0.5 / height, 1, 1))
    return figure


def line_plot(groups: pd.DataFrame, x_label: str, title: str, caption: str, path: Path, **options) -> Path:
    """:func:`line_figure` (same options) saved as a PNG at ``path``."""
    return save_png(line_figure(groups, x_label, title, caption, **options), path)


def save_png(figure: Figure, path: Path) -> Path:
    """``figure`` written as a PNG at ``path`` (its folder made), with :data:`PNG_METADATA`; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", metadata=PNG_METADATA)
    return path


def copy_sample_grid(artifact_uri: str, tracking_uri: str, path: Path) -> Path | None:
    """Copy a run's ``samples.png`` artifact to ``path``; None when the run logged none."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = mlflow.artifacts.download_artifacts(artifact_uri=f"{artifact_uri}/samples.png", dst_path=tmp,
                                                        tracking_uri=tracking_uri)
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, path)
    except (OSError, mlflow.exceptions.MlflowException):
        return None
    return path
