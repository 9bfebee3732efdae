"""``dpsd report``: every spec's table and figures from the runs, into ``reports/`` (``--out``).

Per spec ``sweeps/<name>.yaml`` (sweeps/README.md), whatever ``feeds.kind`` is:
``tables/<name>_<scale>.{md,tex,html}`` (reported / reproduced / difference, both ε ledgers); kind ``curve``
adds ``figures/<name>_<scale>.png`` (ε on a log x axis, the non-private teacher dashed, the paper's numbers
as hollow markers), kind ``sensitivity`` the same against ``feeds.x`` (β, σ, k, T, ...) with both
ε ledgers in a panel below, kind
``samples`` the runs' ``samples.png`` grids under ``samples/<name>_<scale>/``. ``index.html`` shows them all.
Every file is named for the spec *and* the scale (:func:`~dpsd.report.output_files.artifact_stem`): a spec rendered
at two scales into one ``out`` (and its figures copied into one ``results/figures/``) keeps both. What a kind adds
beyond the table (a ladder's ladders, a sensitivity spec's trend sentences, the verdict) is written by
:mod:`dpsd.report.sections`; each spec's Markdown ends with its cells whose current run moved under a code change
(:mod:`dpsd.report.moves`).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

import pandas as pd
from omegaconf import DictConfig

from dpsd.cell_identity import identity_content
from dpsd.config import resolve_paths
from dpsd.errors import ConfigError
from dpsd.report import figures, formats, readings_design, site, verdict
from dpsd.report.cells import RUN, cell_frame, group_frame
from dpsd.sweep.fairness import declared_groups, unequal_budgets
from dpsd.report.output_files import artifact_stem, slug, write_file
from dpsd.report.moves import moved_markdown, moved_runs
from dpsd.report.reference import load_reference, rows_for_table
from dpsd.report.scoreboard import Scoreboard
from dpsd.report.sections import (render_ladders, render_query_budget, render_readings, render_sensitivity,
                                   render_verdict)
from dpsd.report.settings import load_settings, settings_block, settings_html, settings_path
from dpsd.report.runs import absolute_artifact_uri, load_history, latest_per_cell, store_words, write_archive
from dpsd.report.tables import page_scale_line, paper_table, scale_line, switches
from dpsd.report.trends import claims_for, claims_path, load_claims
from dpsd.sweep.spec import (Cell, Spec, composed, expand_cells, expand_configs, group_label, identity_hash, load_spec,
                             varied_keys)
from dpsd.tracking import tracking_uri

DEFAULT_SPECS = Path("sweeps")
DEFAULT_REFERENCE = Path("results/reference/papers.csv")
DEFAULT_OUT = Path("reports")
# study: a spec's search: ranges, rendered by dpsd report --study (dpsd.report.study), not with the cells of the rest
KINDS = ("table", "curve", "sensitivity", "samples", "ladder", "query_budget", "readings", "study")


def spec_paths(specs_dir: Path = DEFAULT_SPECS, only: Sequence[str] = ()) -> list[Path]:
    """The spec files to render, by name order; ``only`` names specs by stem or path. A folder without
    specs is a ConfigError (``dpsd reproduce`` started outside the repository would otherwise run and
    render nothing, and exit 0)."""
    if only:
        return [Path(name) if name.endswith((".yaml", ".yml")) else Path(specs_dir) / f"{name}.yaml" for name in only]
    paths = sorted(Path(specs_dir).glob("*.yaml"))
    if not paths:
        raise ConfigError(f"no sweep specs (*.yaml) in {Path(specs_dir).resolve()}: run from the repository root, "
                          "or pass --specs FOLDER")
    return paths


def _summary(groups) -> str:
    counts = Counter(groups["status"]) if len(groups) else Counter()
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in (RUN, "not run", "data absent")) + " (cells, seeds pooled)"


def _reference_x(kind: str, x_key: str):
    """Where a paper row sits on a figure's x axis: its ε on a curve; on a sensitivity plot, the value
    its ``switch:`` note gives the x key (rows without one are not plotted)."""
    if kind == "curve":
        return lambda ref: ref["epsilon_value"]

    def from_switch(ref):
        value = switches(ref["note"]).get(x_key.lstrip("+~"))
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    return from_switch


def reference_rows(reference, feeds: dict, name: str):
    """The reference rows a spec's table sets beside its cells: those of ``feeds.id`` (one table, or a
    list of them: the headline), restricted to ``feeds.datasets`` when given; none with ``reference: none``."""
    if feeds.get("reference") == "none":
        return rows_for_table(reference, "")
    ids = feeds.get("id", name)
    refs = pd.concat([rows_for_table(reference, str(i)) for i in (ids if isinstance(ids, list) else [ids])],
                     ignore_index=True)
    datasets = feeds.get("datasets")
    return refs[refs["dataset"].isin(datasets)].reset_index(drop=True) if datasets else refs


def render_spec(spec: Spec, scale: str, overrides: Sequence[str], runs, reference, out: Path,
                uri: str, scoreboard: Scoreboard | None = None, settings=None,
                searched: dict | None = None, verdicts: dict[str, str] | None = None,
                results_dir: Path | None = None, claims=None, datasets: Sequence[str] | None = None,
                settings_seen: dict[str, str] | None = None, history: pd.DataFrame | None = None) -> site.Section:
    """One spec's table, figure and sample grids; returns its part of the index (``verdicts``: the per-method
    verdicts a ladder's sections open with; ``results_dir``: what archived artifact locations are relative to).
    ``claims``: the papers' trend statements (:mod:`dpsd.report.trends`); a sensitivity spec, or one they name,
    gets their section. ``datasets``: only the cells of these datasets (a page's panels). ``settings_seen``: the
    setting blocks earlier sensitivity sections of the page showed (block -> title), so a repeat is one line.
    ``history``: every archived and stored run (:func:`~dpsd.report.runs.load_history`); the section's Markdown then
    ends with its cells whose current run moved under a code change (:mod:`dpsd.report.moves`)."""
    feeds = dict(spec.feeds)
    kind = feeds.get("kind", "table")
    stem = artifact_stem(spec, scale)
    pairs = expand_configs(spec, scale, list(overrides), shared=True)
    left_out: list[str] = []
    if datasets:
        left_out = list(dict.fromkeys(str(cfg.dataset.name) for _, cfg in pairs if cfg.dataset.name not in datasets))
        pairs = [(cell, cfg) for cell, cfg in pairs if cfg.dataset.name in datasets]
    frame = cell_frame([cell for cell, _ in pairs], [cfg for _, cfg in pairs], runs, x=feeds.get("x"),
                       series=feeds.get("series"))
    groups = group_frame(frame)
    if not groups.empty:  # cells whose budget differs from a comparable cell's on a key the spec does not vary
        unequal = unequal_budgets(varied_keys(spec), [(group_label(cell.label), cfg) for cell, cfg in pairs],
                                  declared_groups(feeds, spec.name))
        groups["budget"] = [unequal.get(label, "") for label in groups["group"]]
    # `reference: none`: the paper prints no numbers for this study (the id only names the figure)
    refs = reference_rows(reference, feeds, spec.name)
    if scoreboard is not None:
        scoreboard.add(refs, groups)
    table = paper_table(spec.name, feeds, scale_line(spec, scale), groups, refs)
    for suffix, text in (("md", formats.to_markdown(table)), ("tex", formats.to_latex(table)),
                         ("html", site.page(formats.caption(table), formats.to_html(table)))):
        write_file(out / "tables" / f"{stem}.{suffix}", text)
    section = site.Section(name=spec.name, heading=f"{spec.name} ({', '.join(filter(None, (kind, spec.paper)))})",
                           summary=_summary(groups), table_html=formats.to_html(table),
                           links=[(f"tables/{stem}.{s}", s.upper()) for s in ("md", "tex", "html")],
                           markdown=formats.to_markdown(table),  # a ladder or query budget writes its own
                           finished=int((groups["status"] == RUN).sum()) if len(groups) else 0)
    caption = f"{formats.caption(table)}. δ = {figures.deltas(groups)}; {table.scale_line}."
    claimed = claims is not None and len(claims_for(claims, spec.name)) > 0
    plotted = refs
    if kind == "sensitivity" or claimed:  # the accuracy panel: the paper's accuracies, one legend entry a table
        plotted = refs[refs["metric"].isin(["", "accuracy"])].assign(row=lambda rows: rows["table"])
    if kind in ("curve", "sensitivity") and len(groups):
        x_key = str(feeds.get("x", "privacy.epsilon"))
        x_label = f"ε (target, {x_key})" if kind == "curve" else x_key
        png = figures.line_plot(groups, x_label, formats.caption(table), caption, out / "figures" / f"{stem}.png",
                                reference=plotted, reference_x=_reference_x(kind, x_key),
                                log_x=True if kind == "curve" else None, privacy_panel=kind == "sensitivity")
        section.figures.append((png.relative_to(out).as_posix(), caption))
        section.links.append((png.relative_to(out).as_posix(), "PNG"))
    if kind == "sensitivity" or claimed:
        render_sensitivity(spec, stem, groups, refs, claims, table.scale_line, out, section, left_out)
    if kind == "ladder" and len(groups):
        render_ladders(spec, stem, groups, table.scale_line, out, section, verdicts)
    if kind == "query_budget" and len(groups):
        render_query_budget(spec, stem, groups, table.scale_line, out, section)
    if kind == "readings" and (frame["status"] == RUN).any():
        render_readings(spec, stem, frame, table.scale_line, out, section)
    block = settings_block(groups, settings) if settings is not None and kind != "samples" else ""
    if block and (kind == "sensitivity" or claimed) and settings_seen is not None:  # one page: each block once
        title = str(spec.feeds.get("title", spec.name))
        first = settings_seen.setdefault(block, title)
        if first != title:
            block = f"*As in the setting-vs-paper table of “{first}” above.*"
    if block:  # the section opens with what the paper states beside what our cells ran with
        section.markdown = "\n".join([f"## Setting vs paper: {spec.feeds.get('title', spec.name)}", "", block, "",
                                      section.markdown])
        section.table_html = settings_html(groups, settings) + section.table_html
    if feeds.get("frontier") and len(groups):
        by_scale = {scale: groups}  # each verdict row at paper scale where a run exists, else at the page's scale
        other = verdict.PAPER_SCALE if scale != verdict.PAPER_SCALE else str(feeds.get("scale", scale))
        if other != scale:
            paired = expand_configs(spec, other, list(overrides), shared=True)
            found = group_frame(cell_frame([cell for cell, _ in paired], [cfg for _, cfg in paired], runs))
            by_scale = {other: found, scale: groups} if other == verdict.PAPER_SCALE else {scale: groups, other: found}
        render_verdict(spec, stem, groups, refs, table.scale_line, out, section, searched, reference, by_scale,
                       settings, page_scale=scale)
    moved = moved_markdown(moved_runs(frame, history)) if history is not None else ""
    if moved:
        section.markdown = "\n".join([section.markdown, moved])
    if kind == "samples":
        for _, group in groups[groups["status"] == RUN].iterrows():
            label = group["group"] or "base"  # a spec without grid or cells has one cell: its base
            target = out / "samples" / stem / f"{slug(label)}.png"
            location = group["artifact_uris"][0]
            location = absolute_artifact_uri(location, results_dir) if results_dir is not None else location
            if figures.copy_sample_grid(location, uri, target):
                section.figures.append((target.relative_to(out).as_posix(),
                                        f"{label}: synthetic samples of the first seed's run ({table.scale_line})"))
    return section


def cell_overrides(cells: list[Cell], recorded_by: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The archive's ``overrides`` of each cell by config hash, as two maps: ``recorded``, those of the spec whose
    sweep recorded its runs (``recorded_by``: hash -> sweep) where that spec is among ``cells``' (a budget's first
    point is a confirmation's run, the same config); ``unrecorded``, for every other cell, those of the first spec
    that has it, which :func:`~dpsd.report.runs.write_archive` uses only where the archive names the cell no other
    way, so that which page is rendered last never renames a cell (and never moves its ``superseded`` flag)."""
    recorded: dict[str, str] = {}
    unrecorded: dict[str, str] = {}
    for cell in cells:
        text = " ".join(cell.overrides)
        if recorded_by.get(cell.config_hash) == cell.spec:
            recorded.setdefault(cell.config_hash, text)
        else:
            unrecorded.setdefault(cell.config_hash, text)
    return recorded, {digest: text for digest, text in unrecorded.items() if digest not in recorded}


def render_report(specs: Sequence[Path], scale: str = "smoke", overrides: Sequence[str] = (),
                  reference_csv: Path = DEFAULT_REFERENCE, out: Path = DEFAULT_OUT,
                  markdown: Path | None = None, archive: Path | None = None, update_archive: bool = False,
                  title: str | None = None, readme: Path | None = None,
                  datasets: Sequence[str] | None = None) -> Path:
    """Render every spec in ``specs`` for ``scale`` and write ``out/index.html``; returns its path.

    ``overrides`` are those the sweeps ran with (they decide the cells' config hashes and where the
    MLflow store is: ``results_dir``, ``tracking.uri``, ``tracking.experiment``). ``markdown``: also
    write the table, ladder and query-budget sections as one Markdown page there, titled ``title`` (default:
    its specs' titles), its figure links relative to ``out``. ``archive``: a runs archive CSV (tracked in
    git) read beside the store, so a fresh checkout renders what it holds; ``update_archive``: rewrite it
    with every run the report read, so the numbers outlive the store. ``readme``: splice the verdict
    table and frontier figure of the spec with ``feeds.frontier`` into that file (:func:`verdict.splice`).
    A spec whose cells have no run at all is rendered, and said so on stderr with the command that fills it.
    ``datasets``: only the cells of these datasets (a page of the MNIST panels), the others named as left off.
    """
    loaded = [load_spec(path) for path in specs]  # a bad spec name stops before anything is composed
    loaded = [spec for spec in loaded if spec.feeds.get("kind") != "study"]  # a study's page is its own
    given = composed(list(overrides))
    shown_results = str(given.results_dir)  # as the command line gave it: a page names no machine's path
    cfg: DictConfig = resolve_paths(given)
    uri = tracking_uri(cfg)
    archive = Path(archive) if archive is not None else None
    history = load_history(uri, str(cfg.tracking.experiment), archive if archive and archive.exists() else None)
    runs = latest_per_cell(history) if len(history) else history.set_index("config_hash")
    if archive is not None and update_archive:
        recorded_by = dict(zip(history["config_hash"], history["sweep"])) if len(history) else {}
        recorded, unrecorded = cell_overrides(
            [cell for spec in loaded for cell in expand_cells(spec, scale, list(overrides))], recorded_by)
        write_archive(history, archive, recorded, Path(cfg.results_dir), unrecorded)
    for needed in (Path(reference_csv), settings_path(reference_csv)):
        if not needed.is_file():
            print(f"warning: no file {needed} (run from the repository root, or pass --reference): the pages will "
                  "show none of the papers' numbers or settings", file=sys.stderr)
    reference = load_reference(Path(reference_csv))
    out = Path(out)
    scoreboard = Scoreboard()
    settings = load_settings(settings_path(reference_csv))
    kinds = {spec.feeds.get("kind") for spec in loaded}
    searched = (readings_searched(Path(specs[0]).parent, overrides, runs)
                if any(spec.feeds.get("frontier") for spec in loaded) or "ladder" in kinds else {})
    verdicts = headline_verdicts(Path(specs[0]).parent, overrides, runs, reference, searched) if "ladder" in kinds else {}
    claims = load_claims(claims_path(reference_csv))
    settings_seen: dict[str, str] = {}
    sections = [render_spec(spec, scale, overrides, runs, reference, out, uri, scoreboard, settings, searched, verdicts,
                            Path(cfg.results_dir), claims, datasets, settings_seen, history) for spec in loaded]
    read = f"{uri}" + (f" or {archive}" if archive is not None and archive.exists() else "")
    for spec, section in zip(loaded, sections):
        if not section.finished:
            print(f"warning: spec {spec.name}: no cell has a finished run in {read}, so its tables are empty; "
                  f"fill them with `{' '.join(['dpsd sweep', spec.name, f'scale={scale}', *overrides])}`",
                  file=sys.stderr)
    intro = [f"Scale: {scale} — {page_scale_line(loaded, scale)}.",
             f"Reproduced numbers: MLflow runs in {store_words(uri, Path(cfg.results_dir), shown_results)} "
             f"(experiment {cfg.tracking.experiment!r}); reported numbers: "
             f"{reference_csv}. No number on this page is typed by hand."]
    if archive is not None and archive.exists():
        intro.insert(2, f"Runs archived in {archive} (read beside the store"
                        + (", then rewritten with the merged runs)." if update_archive else ")."))
    if markdown is not None:
        page_title = title or "; ".join(str(spec.feeds.get("title", spec.name)) for spec in loaded)
        _write_markdown(Path(markdown), out, intro, sections, page_title)
    if readme is not None:
        blocks = [section for section in sections if section.verdict]
        if not blocks:
            raise ConfigError("--readme needs a spec with feeds.frontier (the headline: --only headline) and its runs")
        for name in blocks[0].verdict_figures:  # this render's frontier only, not another scale's left in ``out``
            target = Path(readme).parent / "results" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / name, target)
        verdict.splice(Path(readme), blocks[0].verdict)
    board = scoreboard.html(scale, {section.name for section in sections})
    return write_file(out / "index.html", site.index_page("dpsd: reported vs reproduced", intro, sections, board))


def headline_verdicts(specs_dir: Path, overrides: Sequence[str], runs, reference, searched: dict) -> dict[str, str]:
    """The README's verdict per paper method (:func:`dpsd.report.verdict.method_verdicts`): the cells of the spec in
    ``specs_dir`` with ``feeds.frontier`` (the headline) at the scale its ``feeds.scale`` names; empty without one."""
    for path in sorted(Path(specs_dir).glob("*.yaml")):
        spec = load_spec(path)
        if spec.feeds.get("frontier"):
            pairs = expand_configs(spec, str(spec.feeds.get("scale", "laptop")), list(overrides),
                                   shared=True)
            groups = group_frame(cell_frame([cell for cell, _ in pairs], [cfg for _, cfg in pairs], runs))
            return verdict.method_verdicts(reference_rows(reference, dict(spec.feeds), spec.name), groups, searched)
    return {}


def readings_searched(specs_dir: Path, overrides: Sequence[str], runs) -> dict:
    """What the readings specs in ``specs_dir`` (``feeds.kind: readings``, run at their own budget; not one whose
    ``feeds.axis`` names a budget axis of one reading) covered per seed method, for the verdict sentences
    (:func:`dpsd.report.readings_design.searched`); empty where none has run."""
    rows = []
    for path in sorted(Path(specs_dir).glob("*.yaml")):
        spec = load_spec(path)
        if spec.feeds.get("kind") != "readings" or spec.feeds.get("axis"):  # an axis of one reading is no search
            continue
        pairs = expand_configs(spec, "smoke", list(overrides), shared=True)
        frame = cell_frame([cell for cell, _ in pairs], [cfg for _, cfg in pairs], runs)
        frame["group"] = [run_hash(cfg) for _, cfg in pairs]
        rows.append(readings_design.seed_rows(frame, readings_design.spec_rung(spec.feeds)))
    # a run two designs share (the centre of a one-at-a-time design is a factorial cell, a fraction's run a full
    # factorial's) counts once, with every seed either ran
    return (readings_design.searched(pd.concat(rows, ignore_index=True).drop_duplicates(["config_hash", "seed"]))
            if rows else {})


def run_hash(cfg: DictConfig) -> str:
    """A run's identity over its seeds: the hash of its config with the seed left out. Two designs name one run by
    different cell labels (and two runs by one label where their bases differ); their configs tell them apart.
    ``cfg`` is resolved (as every composed config is), so no other value follows the seed."""
    content = identity_content(cfg)
    content["seed"] = 0
    return identity_hash(content)


def _write_markdown(path: Path, out: Path, intro: list[str], sections: list[site.Section], title: str) -> Path:
    """The sections' Markdown beside a ``figures/`` folder of its own: each figure it links is copied
    there from ``out/figures`` (``reports/`` is not tracked; ``results/`` is, so the links work in the
    repository)."""
    body = [section.markdown for section in sections if section.markdown]
    for name in sorted({m for text in body for m in re.findall(r"\]\(figures/([^)]+)\)", text)}):
        source, target = out / "figures" / name, path.parent / "figures" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not (target.exists() and target.samefile(source)):  # a page written inside ``out`` links its figures there
            shutil.copyfile(source, target)
    head = [f"# {title}", "", "Generated by `dpsd report --markdown` from the tracked runs; do not edit.", "",
            *[f"{line}  " for line in intro], ""]
    if not body:
        body = ["No table, ladder or query-budget spec was rendered."]
    return write_file(path, "\n".join([*head, *body]).rstrip() + "\n")
