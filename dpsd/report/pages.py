"""The committed pages: every Markdown page under ``results/`` and the README's verdict, as one command renders them.

``results/pages.yaml`` lists each page with the specs it is rendered from, its scale, its title and (the laptop
headline) the README it splices its verdict into. ``dpsd pages`` renders them all, in the manifest's order, each
through :func:`dpsd.report.render.render_report` reading the MLflow store beside the runs archive and rewriting the
archive with what it read: the same sequence every time, so a reviewer regenerates every committed table and figure
with one command, and a page whose spec list lives only in someone's shell history cannot drift from the others.

A page of hyper-parameter studies (specs with ``feeds.kind: study``, and no other) is rendered by the study report
instead (:func:`dpsd.report.study.render_study_page`), from the same store and archive: a page of one study is its
page, a page of several the cross-method ``sensitivity`` page (or, where every one is a trade-off study, the page
of every method's Pareto front), linking each study's page the manifest lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml

from dpsd.errors import ConfigError
from dpsd.report.render import DEFAULT_OUT, DEFAULT_REFERENCE, DEFAULT_SPECS, render_report, spec_paths
from dpsd.sweep.spec import SCALES, load_spec
from dpsd.sweep.store import DEFAULT_ARCHIVE

DEFAULT_PAGES = Path("results/pages.yaml")
KEYS = ("markdown", "only", "scale", "title", "readme", "datasets")  # a page's keys in the manifest


@dataclass(frozen=True)
class Page:
    """One committed page: where it is written, the specs it renders, at which scale, its title and README, and the
    datasets whose cells it shows (None: all)."""

    markdown: Path
    only: tuple[str, ...]
    scale: str = "smoke"
    title: str | None = None
    readme: Path | None = None
    datasets: tuple[str, ...] | None = None


def load_pages(path: Path = DEFAULT_PAGES, specs_dir: Path = DEFAULT_SPECS) -> list[Page]:
    """The manifest's pages, checked before anything renders: known keys, a known scale, specs that exist and
    no page written twice (each a one-line :class:`ConfigError` naming what is accepted)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no pages manifest at {path}: run from the repository root, or pass --manifest FILE")
    entries = (yaml.safe_load(path.read_text()) or {}).get("pages")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a list under 'pages:', each with keys {', '.join(KEYS)}")
    pages, seen = [], set()
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not {"markdown", "only"} <= set(entry) or set(entry) - set(KEYS):
            raise ConfigError(f"{path}: page {number} must have 'markdown' and 'only' and no keys but {', '.join(KEYS)}")
        only = [entry["only"]] if isinstance(entry["only"], str) else entry["only"]  # one spec, or a list of them
        datasets = entry.get("datasets")
        datasets = [datasets] if isinstance(datasets, str) else datasets  # one dataset, or a list of them
        page = Page(Path(entry["markdown"]), tuple(map(str, only)), str(entry.get("scale", "smoke")), entry.get("title"),
                    Path(entry["readme"]) if entry.get("readme") else None,
                    tuple(map(str, datasets)) if datasets else None)
        if page.scale not in SCALES:
            raise ConfigError(f"{path}: page {page.markdown}: scale {page.scale!r} is not one of {', '.join(SCALES)}")
        missing = [p.stem for p in spec_paths(specs_dir, page.only) if not p.is_file()]
        if missing:
            raise ConfigError(f"{path}: page {page.markdown}: no spec {', '.join(missing)} in {specs_dir}")
        studies = [load_spec(p).feeds.get("kind") == "study" for p in spec_paths(specs_dir, page.only)]
        if any(studies) and (not all(studies) or page.readme or page.datasets):
            raise ConfigError(f"{path}: page {page.markdown}: a page of studies (feeds.kind: study) renders studies "
                              "alone, without readme or datasets")
        if page.markdown in seen:
            raise ConfigError(f"{path}: page {page.markdown} is listed twice")
        seen.add(page.markdown)
        pages.append(page)
    return pages


def is_study_page(page: Page, specs_dir: Path = DEFAULT_SPECS) -> bool:
    """Whether ``page`` renders hyper-parameter studies (its specs' ``feeds.kind: study``; :func:`load_pages` checks
    that a page's specs are all studies or none)."""
    return all(load_spec(path).feeds.get("kind") == "study" for path in spec_paths(specs_dir, page.only))


def study_pages(pages: Sequence[Page], specs_dir: Path = DEFAULT_SPECS) -> dict[str, Path]:
    """Each study's own page among ``pages`` (a study page of one spec), by spec name."""
    return {page.only[0]: page.markdown for page in pages if len(page.only) == 1 and is_study_page(page, specs_dir)}


def render_pages(pages: Sequence[Page], overrides: Sequence[str] = (), specs_dir: Path = DEFAULT_SPECS,
                 archive: Path = DEFAULT_ARCHIVE, reference: Path = DEFAULT_REFERENCE, out: Path = DEFAULT_OUT,
                 log=print, every: Sequence[Page] | None = None) -> list[Path]:
    """Render ``pages`` in order, each from the store ``overrides`` name and ``archive`` (rewritten by each);
    returns the pages written. ``log`` gets one line a page, before it renders. ``every``: the manifest's pages
    (default ``pages``), where a sensitivity page finds the pages of its studies to link."""
    from dpsd.report.study import render_study_page

    links = study_pages(every if every is not None else pages, specs_dir)
    written = []
    for number, page in enumerate(pages, 1):
        log(f"pages: [{number}/{len(pages)}] {page.markdown} ({page.scale}: {' '.join(page.only)})")
        if is_study_page(page, specs_dir):
            render_study_page(spec_paths(specs_dir, page.only), page.scale, overrides, page.markdown, archive,
                              update_archive=True, title=page.title, links=links)
        else:
            render_report(spec_paths(specs_dir, page.only), page.scale, overrides, reference, out, page.markdown,
                          archive, update_archive=True, title=page.title, readme=page.readme, datasets=page.datasets)
        written.append(page.markdown)
    return written
