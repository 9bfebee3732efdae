"""HTML pages: a standalone page per table and ``index.html`` with every table and figure inline.

The index carries a small script that, once the page has loaded, records on ``<body>`` how many of its
images decoded (``data-images-loaded`` / ``data-images-total``): the headless-browser test reads it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
div.scroll { overflow-x: auto; max-width: 100%; }
table.paper-table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
table.paper-table th, table.paper-table td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: left; }
table.paper-table th { background: #eee; }
div.settings-grid { display: flex; flex-wrap: wrap; gap: 0.8em; align-items: flex-start; }
table.settings-table { border-collapse: collapse; font-size: 0.8em; max-width: 590px; }
table.settings-table caption { text-align: left; padding: 0.2em 0; }
table.settings-table th, table.settings-table td { border: 1px solid #bbb; padding: 0.2em 0.4em; text-align: left;
  vertical-align: top; }
table.settings-table th { background: #eee; }
table.settings-table td:first-child { white-space: nowrap; }
ol.settings-sources { font-size: 0.75em; color: #444; columns: 2; }
p.legend, ol.notes, p.scale { font-size: 0.8em; color: #444; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.8em; max-width: 1100px; }
nav a { margin-right: 0.8em; }
""".strip()

IMAGES_LOADED = """
<script>
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  document.body.setAttribute("data-images-total", String(images.length));
  document.body.setAttribute("data-images-loaded",
    String(images.filter(function (im) { return im.complete && im.naturalWidth > 0; }).length));
});
</script>
""".strip()


@dataclass
class Section:
    """One spec's part of the index: its table fragment, figures and links to its files."""

    name: str
    heading: str
    summary: str
    table_html: str
    figures: list[tuple[str, str]] = field(default_factory=list)   # (relative path, caption)
    links: list[tuple[str, str]] = field(default_factory=list)     # (relative path, text)
    markdown: str = ""  # the section of ``dpsd report --markdown`` (table, ladder and query-budget specs)
    finished: int = 0   # cell groups with a finished run (0: the section's tables are empty)
    verdict: str = ""   # a spec with ``feeds.frontier``: the verdict table and frontier figure (README's block)
    verdict_figures: list[str] = field(default_factory=list)  # the frontier's files (relative paths) the block links


def page(title: str, body: str, script: str = "") -> str:
    return "\n".join(["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                      f"<title>{html.escape(title)}</title>", f"<style>\n{STYLE}\n</style>", "</head>",
                      "<body>", body, script, "</body>", "</html>", ""])


def figure_html(src: str, text: str) -> str:
    return (f'<figure><img src="{html.escape(src)}" alt="{html.escape(text)}">'
            f"<figcaption>{html.escape(text)}</figcaption></figure>")


def index_page(title: str, intro: list[str], sections: list[Section], scoreboard_html: str = "") -> str:
    """The index: the title, the scoreboard a reviewer reads first, the intro, then every section."""
    nav = " ".join(f'<a href="#{html.escape(s.name)}">{html.escape(s.name)}</a>' for s in sections)
    parts = [f"<h1>{html.escape(title)}</h1>", scoreboard_html, *[f"<p>{html.escape(line)}</p>" for line in intro],
             f"<nav>{nav}</nav>"]
    for section in sections:
        links = " · ".join(f'<a href="{html.escape(href)}">{html.escape(text)}</a>' for href, text in section.links)
        parts += [f'<div class="spec" id="{html.escape(section.name)}">', f"<h2>{html.escape(section.heading)}</h2>",
                  f"<p>{html.escape(section.summary)}</p>", f"<p>{links}</p>", section.table_html,
                  *[figure_html(src, text) for src, text in section.figures], "</div>"]
    if not sections:
        parts.append("<p>No sweep specs found.</p>")
    return page(title, "\n".join(parts), IMAGES_LOADED)
