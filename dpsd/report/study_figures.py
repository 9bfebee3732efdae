"""A study page's figures, drawn by Optuna's own matplotlib plots on the study its journal keeps
(:func:`dpsd.report.study.optuna_study`): the optimisation history, a slice per hyper-parameter, the contour over the
two that matter most, and the parallel coordinates of every trial, each a PNG the page links. A study too flat to rank
(every trial at one accuracy) still gets its history and slices, which show it flat; its contour and parallel
coordinates, which would only colour one value, are left out."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

from dpsd.report.figures import PNG_METADATA

TARGET = "selection accuracy (%)"


def study_figures(study, pair: Sequence[str], folder: Path, stem: str, flat: bool = False) -> list[Path]:
    """``<stem>_history.png``, ``<stem>_slice.png`` and, unless ``flat``, ``<stem>_parallel.png`` and
    ``<stem>_pair.png`` (the contour over ``pair``, the two most important hyper-parameters; none with fewer than
    two) in ``folder``; returns the files written, in that order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as plots

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    with warnings.catch_warnings(), matplotlib.rc_context():  # Optuna's plots set the ggplot style: kept to them
        warnings.simplefilter("ignore", ExperimentalWarning)
        drawn = [("history", lambda: plots.plot_optimization_history(study, target_name=TARGET)),
                 ("slice", lambda: plots.plot_slice(study, target_name=TARGET))]
        if not flat:
            drawn.append(("parallel", lambda: plots.plot_parallel_coordinate(study, target_name=TARGET)))
            if len(pair) >= 2:
                drawn.append(("pair", lambda: plots.plot_contour(study, params=list(pair[:2]), target_name=TARGET)))
        for kind, draw in drawn:
            axes = draw()
            figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
            path = folder / f"{stem}_{kind}.png"
            figure.savefig(path, dpi=110, bbox_inches="tight", metadata=PNG_METADATA)
            plt.close(figure)
            out.append(path)
    return out
