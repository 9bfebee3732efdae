"""What each kind of spec adds to its section beyond the reported / reproduced table (:mod:`dpsd.report.render`):
``feeds.frontier`` the verdict (:func:`render_verdict`), kind ``sensitivity`` or a spec the papers state trends for
the trend sentences, table and figure (:func:`render_sensitivity`), kind ``ladder`` the ladders
(:func:`render_ladders`), ``readings`` the readings tables (:func:`render_readings`) and ``query_budget`` the
query-budget line plot (:func:`render_query_budget`). Each writes its files under ``out`` and fills ``section``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from dpsd.report import ladder, readings, readings_design, readings_page, sensitivity, site, verdict
from dpsd.report.figures import save_png
from dpsd.report.output_files import slug, write_file
from dpsd.report.tables import markdown_table
from dpsd.report.trends import no_claims
from dpsd.sweep.spec import Spec

LADDER_PAGE = "results/ladder.md"  # the page README's verdict links a method's section on


def render_verdict(spec: Spec, stem: str, groups, refs, scale_line: str, out: Path, section: site.Section,
                   searched: dict | None = None, reference=None, by_scale: dict | None = None,
                   settings=None, page_scale: str | None = None) -> None:
    """``feeds.frontier``: the privacy–accuracy frontier (PNG and SVG), the verdict table and one verdict
    sentence per method (``searched``: what the readings specs covered), kept as the section's ``verdict``
    block for ``--readme``; that table reads each row at the first scale of ``by_scale`` (paper scale first) with a
    run for it, and says beside it what that run set otherwise than the paper (``settings``). The page's own table
    reads each row at the page's scale (``page_scale``) first, so a page keeps its own rows (the laptop rows stay
    on the laptop page while the README reads the paper-scale ones). The figure is named
    for the spec and the scale (``stem``): the headline rendered at paper scale beside the laptop one
    (results/headline_paper.md, results/headline_laptop.md) must not overwrite the frontier the README shows."""
    caption = (f"{spec.feeds.get('title', spec.name)}; {scale_line}. Points: mean over seeds (error bars: sample "
               f"std); ∞ at the right edge: a release no mechanism covers, or no privacy.")
    paths = verdict.save_frontier(verdict.frontier_figure(groups, refs, caption), out / "figures",
                                  f"{stem}_frontier")
    section.figures.append((paths[0].relative_to(out).as_posix(), caption))
    section.links += [(p.relative_to(out).as_posix(), p.suffix[1:].upper()) for p in paths]
    section.verdict_figures = [p.relative_to(out).as_posix() for p in paths]
    rows = verdict.verdict_rows(refs, by_scale or groups, LADDER_PAGE, reference, settings)
    table = verdict.verdict_markdown(rows, "the runs archived in results/runs.csv")
    bullets = verdict.verdict_bullets(verdict.method_verdicts(refs, groups, searched))
    mixed = bool(by_scale) and len(by_scale) > 1 and page_scale in by_scale
    lead = (f"*Each row is read at {next(iter(by_scale))} scale where it ran there, else at {scale_line} (its Run "
            f"at column).*" if mixed else f"*{scale_line}.*")
    runs = f"the {page_scale}-scale runs" if mixed else "the same runs"
    sentence = f"Per method, from {runs} and the readings searches ([results/readings.md](results/readings.md)):"
    section.verdict = "\n".join([lead, "", table, "", sentence, "", *bullets, "",
                                  f"![The privacy–accuracy frontier](results/figures/{paths[0].name})", ""])
    page_order = {page_scale: by_scale[page_scale], **by_scale} if by_scale and page_scale in by_scale else None
    page_rows = verdict.verdict_rows(refs, page_order, LADDER_PAGE, reference, settings) if page_order else rows
    page_rows = page_rows.assign(Section=page_rows["Section"].str.replace(
        f"]({LADDER_PAGE}", f"]({Path(LADDER_PAGE).name}", regex=False))  # the page lies beside the ladder's
    run_at = verdict.PAGE_FIRST if page_order else verdict.PAPER_FIRST
    section.markdown = "\n".join([section.markdown, "### Verdict per paper row", "",
                                   verdict.verdict_markdown(page_rows, "the runs archived in results/runs.csv", run_at),
                                   "",
                                   "### Verdict per method", "", *bullets, "",
                                   f"![The privacy–accuracy frontier](figures/{paths[0].name})", ""])


def render_sensitivity(spec: Spec, stem: str, groups, refs, claims, scale_line: str, out: Path,
                       section: site.Section, left_out: Sequence[str]) -> None:
    """A sensitivity spec, or one whose trends the papers state (:mod:`dpsd.report.sensitivity`): the trend
    sentences, one row per cell beside the paper's numbers, and the figure (for an x axis the line plot
    :func:`~dpsd.report.render.render_spec` drew; bars for a table's cells)."""
    claims = claims if claims is not None else no_claims()
    png = out / "figures" / f"{stem}.png"
    if not spec.feeds.get("x") and len(groups):
        caption = (f"{spec.feeds.get('title', spec.name)}: ours, mean ± sample std over seeds (bars), the paper's "
                   f"number (hollow diamond); {scale_line}.")
        save_png(sensitivity.bars_figure(groups, refs, str(spec.feeds.get("id", spec.name)), caption), png)
        section.figures.append((png.relative_to(out).as_posix(), caption))
        section.links.append((png.relative_to(out).as_posix(), "PNG"))
    drawn = png.relative_to(out).as_posix()
    figure = drawn if any(path == drawn for path, _ in section.figures) else None
    section.markdown = sensitivity.section_markdown(spec, dict(spec.feeds), groups, refs, claims, scale_line, figure,
                                                    left_out)


def render_ladders(spec: Spec, stem: str, groups, scale_line: str, out: Path, section: site.Section,
                   verdicts: dict[str, str] | None = None) -> None:
    """Kind ``ladder``: per ladder a table (``tables/<stem>_<ladder>.md``) and a bar figure, and one
    diagnosis sentence each, also gathered as the section's Markdown, each ladder of a paper method headed by
    its verdict (``verdicts``: :func:`~dpsd.report.render.headline_verdicts`)."""
    tables, sentences, pngs = {}, [], []
    for name, rows in ladder.ladders(groups).items():
        body = ladder.ladder_table(name, rows)
        sentence = ladder.diagnosis(name, rows)
        ladder_stem = slug(f"{stem}_{name}")
        write_file(out / "tables" / f"{ladder_stem}.md",
                   f"## Ladder: {name}\n\n{sentence}\n\n{markdown_table(body)}\n")
        caption = (f"{name}: best run per rung R0..R5; ε labels are claimed / rigorous. {sentence} {scale_line}.")
        png = ladder.ladder_figure(name, rows, caption, out / "figures" / f"{ladder_stem}.png")
        section.figures.append((png.relative_to(out).as_posix(), caption))
        section.links.append((f"tables/{ladder_stem}.md", f"{name} MD"))
        tables[name], pngs = body, [*pngs, png.relative_to(out).as_posix()]
        sentences.append(sentence)
    section.markdown = ladder.ladder_markdown(f"{spec.feeds.get('title', spec.name)} ({scale_line})", tables, sentences,
                                              pngs, verdicts)


def render_readings(spec: Spec, stem: str, frame, scale_line: str, out: Path, section: site.Section) -> None:
    """Kind ``readings``: the readings tables per method (:mod:`dpsd.report.readings_page`) and the main-effects plot."""
    rung = readings_design.spec_rung(spec.feeds)
    axis = spec.feeds.get("axis")
    rows = readings_design.seed_rows(frame, rung, axis)
    title = f"{spec.feeds.get('title', spec.name)} ({scale_line})"
    if axis:  # one reading over a budget: a curve, not a search
        caption = f"{spec.feeds.get('title', spec.name)}: mean {rung} over {axis} (error bars: sample std over seeds); {scale_line}."
        png = (readings_page.budget_figure(rows, axis, caption, out / "figures" / f"{stem}.png")
               if rows[axis].nunique() > 1 else None)
        if png is not None:
            section.figures.append((png.relative_to(out).as_posix(), caption))
        section.markdown = readings_page.budget_markdown(title, rows, str(spec.feeds.get("design", "")), axis,
                                                         png.relative_to(out).as_posix() if png is not None else None)
        return
    caption = (f"{spec.feeds.get('title', spec.name)}: mean {rung} at each value of each switch (error bars: sample std over "
               f"the runs and seeds at that value, which differ in the other switches); {scale_line}.")
    design = rows[rows["method"].isin(readings.READ_METHODS)]
    one_at_a_time = spec.feeds.get("layout") == "one_at_a_time"
    png = (readings_page.effects_figure(design, caption, out / "figures" / f"{stem}.png")
           if readings_design.varied(design) and not one_at_a_time else None)  # no effects before a switch varies
    if png is not None:
        section.figures.append((png.relative_to(out).as_posix(), caption))
    section.markdown = readings_page.readings_markdown(title, rows, str(spec.feeds.get("design", "")),
                                                       png.relative_to(out).as_posix() if png is not None else None,
                                                       one_at_a_time)


def render_query_budget(spec: Spec, stem: str, groups, scale_line: str, out: Path, section: site.Section) -> None:
    """Kind ``query_budget``: accuracy against the teacher queries made, one line per rung, and its table."""
    body = ladder.query_table(groups)
    caption = f"{spec.feeds.get('title', spec.name)}: points labelled ε claimed / ε rigorous; {scale_line}."
    png = ladder.query_figure(groups, caption, out / "figures" / f"{stem}.png")
    section.figures.append((png.relative_to(out).as_posix(), caption))
    section.markdown = "\n".join([f"## {spec.feeds.get('title', spec.name)} ({scale_line})", "",
                                   markdown_table(body), "", f"![{spec.name}]({png.relative_to(out).as_posix()})", ""])
