"""Reports: the runs (MLflow) beside the papers' numbers (results/reference/papers.csv).

``render_report`` (dpsd/report/render.py) renders every sweep spec into ``reports/``: tables as
Markdown, LaTeX and HTML, privacy–accuracy curves, sensitivity plots, sample grids and an
``index.html``. A report never recomputes a number; it reads runs.

Modules: reference.py (papers.csv), runs.py (MLflow -> pandas), cells.py (a spec's cells joined to
their runs), tables.py (the reported/reproduced table), formats.py (Markdown, LaTeX, HTML),
figures.py (matplotlib), site.py (HTML pages), render.py (the command).
"""

from dpsd.report.render import render_report, spec_paths

__all__ = ["render_report", "spec_paths"]
