"""Every run id and every number cited as "in results/runs.csv" is in the archive."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import load_tool

REPO = Path(__file__).resolve().parents[1]
citations = load_tool("check_citations")


def test_every_citation_in_the_readme_docs_and_yaml_comments_is_in_the_archive():
    assert citations.check(REPO) == []


def test_a_planted_citation_of_a_run_or_number_the_archive_lacks_is_found(tmp_path):
    (tmp_path / "results").mkdir()
    shutil.copyfile(REPO / "results" / "runs.csv", tmp_path / "results" / "runs.csv")
    ids, _ = citations.archive_holdings(tmp_path / "results" / "runs.csv")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        f"A real run: {ids[0]}. Its short form: run {ids[0][:8]}.\n\n"
        "A planted one: run 0123456789abcdef0123456789abcdef.\n\n"
        f"A list with one planted: runs {ids[1][:8]}, 0badc0de and {ids[2][:8]}.\n\n"
        "A one-off run its summary holds: run 5ca1ab1e.\n\n"
        "Measured (results/runs.csv, MNIST): 12.34% at eps 1.\n")
    (tmp_path / "results" / "summaries").mkdir()
    (tmp_path / "results" / "summaries" / "one_off.json").write_text('{"run_id": "5ca1ab1e%s"}' % ("0" * 24))
    (tmp_path / "README.md").write_text("nothing cited\n")
    found = citations.check(tmp_path)
    assert len(found) == 3, found
    assert "0123456789abcdef0123456789abcdef" in found[0] and "0badc0de" in found[1] and "12.34%" in found[2]
    assert all(ids[0] not in line for line in found)  # the archived run and its prefix pass


def test_a_docs_percentage_only_a_superseded_run_has_is_found_unless_the_sentence_says_so(tmp_path):
    import csv

    (tmp_path / "results").mkdir()
    shutil.copyfile(REPO / "results" / "runs.csv", tmp_path / "results" / "runs.csv")
    with open(tmp_path / "results" / "runs.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    _, current = citations.archive_holdings(tmp_path / "results" / "runs.csv", current_only=True)
    old = next(f"{float(r['accuracy']):.2f}" for r in rows
               if r["superseded"] == "True" and r["accuracy"] and f"{float(r['accuracy']):.2f}" not in current)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        f"The cell reads {old}% (results/runs.csv).\n\nIt read {old}% (a superseded row of results/runs.csv).\n")
    (tmp_path / "README.md").write_text(f"The README may cite it: {old}% (results/runs.csv).\n")
    found = citations.check(tmp_path)
    assert len(found) == 1 and "only a superseded run" in found[0] and found[0].startswith("docs/page.md"), found
