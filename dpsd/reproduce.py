"""``dpsd reproduce``: run every sweep spec (whatever is missing), then render the report.

Cells whose config hash already has a finished run are skipped by the sweep itself, so a second
``dpsd reproduce`` runs nothing new and renders the same report. A cell whose runs were all recorded
by another code version (:mod:`dpsd.version`) is stale: listed by ``--dry-run``, marked STALE in the
report, and re-run only with ``--rerun-stale`` (by default a commit that fixes a README typo costs no
re-runs). ``--dry-run`` runs nothing: it lists each spec's cells that would run, those stale and those
already done. The specs' cells run as one Tune experiment (:func:`~dpsd.sweep.runner.run_sweeps`), so
no core waits while one spec ends and the next starts. Its default scale is ``check``: the pipeline check (smoke's
sizes shrunk further by ``sweeps/common/check.yaml`` and each spec's own ``check`` list; students near chance by
design). Without ``--only`` it leaves out the specs marked ``on_demand`` (experiments at their own budget, which
they take at scale smoke: the ladder, the readings): they run when named, and the report still renders whatever
they recorded at its scale. ``--scale pages`` runs each spec at the scale of the page that renders it
(:data:`PAGES`). A hyper-parameter study (``feeds.kind: study``) is searched by ``dpsd sweep SPEC --search optuna``,
not run cell by cell: reproduce names it with that command and runs none of it. It prints how long the cells to run
should take, from the recorded runs' own timings on this class of hardware, and, while they run, cells done /
total and the time elapsed, also in a log file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dpsd.errors import ConfigError
from dpsd.report import render_report, spec_paths
from dpsd.report.pages import DEFAULT_PAGES, load_pages
from dpsd.report.render import DEFAULT_OUT, DEFAULT_REFERENCE, DEFAULT_SPECS
from dpsd.report.study import study_command
from dpsd.sweep.runner import run_sweeps
from dpsd.sweep.spec import CHECK, load_spec
from dpsd.sweep.timing import Progress

PAGES = "pages"
"""``--scale pages``: each spec at the scale of the page that renders it (``results/pages.yaml``; a spec on two
pages at two scales, as the headline's laptop and paper pages, at both). The pages name on-demand specs (the
ladder, the readings) explicitly, so they run too; a spec on no page does not."""


def page_jobs(manifest: Path, specs_dir: Path, only: Sequence[str] = ()) -> tuple[list[tuple[Path, str]], list[str]]:
    """``(spec file, scale)`` of every page of ``manifest`` in its order, each pair once (of the specs ``only``
    names, if any), and the names of the specs ``only`` names (default: every spec in ``specs_dir``) on no page."""
    wanted = {path.stem for path in spec_paths(specs_dir, only)}
    jobs: list[tuple[Path, str]] = []
    for page in load_pages(manifest, specs_dir):
        for path in spec_paths(specs_dir, page.only):
            if path.stem in wanted and (path, page.scale) not in jobs:
                jobs.append((path, page.scale))
    paged = {path.stem for path, _ in jobs}
    return jobs, sorted(wanted - paged)


def reproduce(scale: str = CHECK, only: Sequence[str] = (), dry_run: bool = False,
              overrides: Sequence[str] = (), specs_dir: Path = DEFAULT_SPECS,
              reference_csv: Path = DEFAULT_REFERENCE, out: Path = DEFAULT_OUT,
              address: str | None = None, rerun_stale: bool = False, cpus_per_trial: float | None = None,
              gpus_per_trial: float | None = None, archive: Path | None = None,
              pages: Path = DEFAULT_PAGES, echo: bool = True) -> dict[str, Any]:
    """The sweeps of ``only`` (default: every spec in ``specs_dir``) at ``scale``, then the report
    over the same specs; returns the sweeps' summaries, the on-demand specs left out (their names) and those named
    but planned at scale check (``checked_on_demand``: a pipeline check of their cells, not their own budget), the
    index paths (none on a dry run), ``estimate`` (the line saying how long the cells to run take, from the
    recorded runs' timings: :func:`dpsd.sweep.timing.estimate`) and, at ``scale`` :data:`PAGES`, the specs on no
    page of ``pages``; ``studies``: the command that runs each hyper-parameter study named, which reproduce does not
    run (:func:`dpsd.report.study.study_command`). ``archive``: a runs archive read beside the store (the quickstart
    passes none: it shows what this machine ran). ``echo``: print the estimate and, while cells run, one progress line
    per finished trial (also appended to ``<results_dir>/ray/reproduce-<time>.log``)."""
    if scale == PAGES:
        jobs, not_on_a_page = page_jobs(Path(pages), specs_dir, only)
        if not jobs:
            raise ConfigError(f"--scale {PAGES}: none of the specs named is on a page of {pages}")
        every, on_demand = [path for path, _ in jobs], []
    else:
        every = spec_paths(specs_dir, only)
        on_demand = [] if only else [path for path in every if load_spec(path).on_demand]
        jobs, not_on_a_page = [(path, scale) for path in every if path not in on_demand], []
    checked_on_demand = [load_spec(path).name for path, at in jobs if at == CHECK and load_spec(path).on_demand]
    studies = [(path, at) for path, at in jobs if load_spec(path).feeds.get("kind") == "study"]
    jobs = [job for job in jobs if job not in studies]
    progress = Progress(echo=echo)
    summaries = run_sweeps([path for path, _ in jobs], scale=[at for _, at in jobs], overrides=list(overrides),
                           address=address, dry_run=dry_run, cpus_per_trial=cpus_per_trial,
                           gpus_per_trial=gpus_per_trial, rerun_stale=rerun_stale, archive=archive, progress=progress)
    indexes = []
    if not dry_run and scale == PAGES:  # one report a page, each at its scale, under out/<page>/
        for page in load_pages(Path(pages), specs_dir):
            rendered = [path for path in spec_paths(specs_dir, page.only) if (path, page.scale) in jobs]
            if rendered:
                indexes.append(render_report(rendered, page.scale, overrides, reference_csv,
                                             Path(out) / page.markdown.stem, archive=archive, datasets=page.datasets))
    elif not dry_run:  # the on-demand specs too: the report renders whatever they recorded
        indexes.append(render_report(every, scale, overrides, reference_csv, out, archive=archive))
    return {"sweeps": summaries, "on_demand": [load_spec(path).name for path in on_demand],
            "checked_on_demand": checked_on_demand,
            "index": indexes[0] if indexes else None, "indexes": indexes, "estimate": progress.estimate_line,
            "not_on_a_page": not_on_a_page, "studies": [study_command(load_spec(path), at) for path, at in studies]}
