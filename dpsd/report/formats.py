"""A :class:`~dpsd.report.tables.PaperTable` as Markdown, LaTeX (booktabs) and an HTML fragment.

Every writer is a pure function of the table, so rendering twice gives byte-identical files.
"""

from __future__ import annotations

import html

from dpsd.report.tables import PaperTable

LEGEND = ("Reported: the paper's number (results/reference/papers.csv). Reproduced: this harness's runs, "
          "student test accuracy (%) unless the row names another metric, mean ± sample std over the seeds "
          "that finished. Difference: reproduced − reported. ε claimed: the paper's own theorem; ε rigorous: "
          "a standard accountant over every teacher query, (ε, δ)-DP w.r.t. the private training set. "
          "— : not run; data absent: the dataset files were not found.")
CONTEXT = ("Context: the paper's rows for methods this harness does not implement (its numbers as printed; "
           "no comparison).")


def caption(table: PaperTable) -> str:
    return f"{table.table_id}: {table.title}" if table.title else table.table_id


def to_markdown(table: PaperTable) -> str:
    """A GitHub-flavoured Markdown table with its caption, scale line, legend and footnotes."""
    def cell(text: object) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    header = list(table.body.columns)
    lines = [f"## {caption(table)}", "", f"*{table.scale_line}.*", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.body.itertuples(index=False)]
    lines += ["", LEGEND, ""]
    if len(table.context):
        lines += [CONTEXT, "", "| " + " | ".join(table.context.columns) + " |",
                  "|" + "|".join(" --- " for _ in table.context.columns) + "|"]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.context.itertuples(index=False)]
        lines += [""]
    lines += [f"[{i}] {cell(note)}  " for i, note in enumerate(table.notes, 1)]
    return "\n".join(lines).rstrip() + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_UNICODE = {"ε": r"$\varepsilon$", "δ": r"$\delta$", "±": r"$\pm$", "∞": r"$\infty$", "—": "---",
                  "−": "$-$", "σ": r"$\sigma$", "β": r"$\beta$"}


def latex_text(text: object) -> str:
    """Escape LaTeX's special characters, then spell the Unicode symbols the tables use."""
    out = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    for symbol, command in _LATEX_UNICODE.items():
        out = out.replace(symbol, command)
    return out


def to_latex(table: PaperTable) -> str:
    """A ``table`` float with a booktabs ``tabular`` (pandas Styler), caption, label and notes."""
    body = table.body.map(latex_text)
    body.columns = [latex_text(c) for c in body.columns]
    tabular = body.style.hide(axis="index").to_latex(hrules=True, column_format="l" * len(body.columns))
    notes = " ".join(f"[{i}] {latex_text(n)}" for i, n in enumerate(table.notes, 1))
    context = "; ".join(f"{latex_text(r.Row)} {latex_text(r.Dataset)} ε {latex_text(r.ε)}: {latex_text(r.Reported)}"
                        for r in table.context.itertuples(index=False))
    if context:
        notes = f"{latex_text(CONTEXT)} {context}. {notes}"
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\scriptsize",
        rf"\caption{{{latex_text(caption(table))} ({latex_text(table.scale_line)})}}",
        rf"\label{{tab:{table.name}}}", tabular.rstrip(),
        rf"\par\raggedright {latex_text(LEGEND)} {notes}".rstrip(), r"\end{table}", ""])


def frame_html(frame, uuid: str) -> str:
    """A table as HTML (pandas Styler, fixed uuid so the output is stable) in a box that scrolls
    sideways instead of being cut off."""
    styler = (frame.style.hide(axis="index").set_uuid(uuid)
              .set_table_attributes('class="paper-table"').format(escape="html")
              .format_index(escape="html", axis=1))
    return f'<div class="scroll">{styler.to_html()}</div>'


def to_html(table: PaperTable) -> str:
    """An HTML fragment: ``<section>`` with the heading, scale line, the table, its context and the
    footnotes."""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in table.notes)
    context = (f'<p class="legend">{html.escape(CONTEXT)}</p>' + frame_html(table.context, f"{table.name}_context")
               if len(table.context) else "")
    return "\n".join([
        f'<section class="table" id="{html.escape(table.name)}">',
        f"<h3>{html.escape(caption(table))}</h3>",
        f'<p class="scale"><em>{html.escape(table.scale_line)}.</em></p>',
        frame_html(table.body, table.name),
        f'<p class="legend">{html.escape(LEGEND)}</p>',
        context,
        f'<ol class="notes">{notes}</ol>' if notes else "",
        "</section>", ""])
