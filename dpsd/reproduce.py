"""``dpsd reproduce``: run every sweep spec (whatever is missing), then render the report.

Cells whose config hash already has a finished run are skipped by the sweep itself, so a second
``dpsd reproduce`` runs nothing new and renders the same report. A cell whose runs were all recorded
by another code version (:mod:`dpsd.version`) is stale: listed by ``--dry-run``, marked STALE in the
report, and re-run only with ``--rerun-stale`` (by default a commit that fixes a README typo costs no
re-runs). ``--dry-run`` runs nothing: it lists each spec's cells that would run, those stale and those
already done. The specs' cells run as one Tune experiment (:func:`~dpsd.sweep.runner.run_sweeps`), so
no core waits while one spec ends and the next starts. Without ``--only`` it leaves out the specs
marked ``on_demand`` (experiments at their own budget, such as the ladder): they run when named, and
the report still renders whatever they recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dpsd.report import render_report, spec_paths
from dpsd.report.render import DEFAULT_OUT, DEFAULT_REFERENCE, DEFAULT_SPECS
from dpsd.sweep.runner import run_sweeps
from dpsd.sweep.spec import load_spec


def reproduce(scale: str = "smoke", only: Sequence[str] = (), dry_run: bool = False,
              overrides: Sequence[str] = (), specs_dir: Path = DEFAULT_SPECS,
              reference_csv: Path = DEFAULT_REFERENCE, out: Path = DEFAULT_OUT,
              address: str | None = None, rerun_stale: bool = False, cpus_per_trial: float | None = None,
              gpus_per_trial: float | None = None, archive: Path | None = None) -> dict[str, Any]:
    """The sweeps of ``only`` (default: every spec in ``specs_dir``) at ``scale``, then the report
    over the same specs; returns the sweeps' summaries, the on-demand specs left out (their names) and
    the index path (None on a dry run). ``archive``: a runs archive read beside the store (the
    quickstart passes none: it shows what this machine ran)."""
    paths = spec_paths(specs_dir, only)
    on_demand = [] if only else [path for path in paths if load_spec(path).on_demand]
    summaries = run_sweeps([path for path in paths if path not in on_demand], scale=scale, overrides=list(overrides),
                           address=address, dry_run=dry_run, cpus_per_trial=cpus_per_trial,
                           gpus_per_trial=gpus_per_trial, rerun_stale=rerun_stale, archive=archive)
    index = None if dry_run else render_report(paths, scale, overrides, reference_csv, out, archive=archive)
    return {"sweeps": summaries, "on_demand": [load_spec(path).name for path in on_demand], "index": index}
