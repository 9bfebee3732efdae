"""Every run id and every number cited as "in results/runs.csv" must be in the archive.

Reads README.md, docs/*.md and the YAML comments under dpsd/conf/ and sweeps/, and lists each citation the
runs archive does not hold:
* a run id (32 hex digits, ``run <8+ hex digits>``, or each id of a list after "run" or "runs") that no archived
  run's id starts with, nor any run id a tracked run summary holds (``results/summaries/*.json``, one-off runs);
* a percentage ``NN.NN%`` in a sentence that names ``results/runs.csv``, which is no archived run's
  accuracy or metric (rounded to two decimals, current or superseded);
* in docs/*.md, such a percentage that is no *current* run's figure (a row not ``superseded``): a page of docs/ states
  what the archive holds now, so a number a later run set superseded is found, unless its sentence says it cites a
  superseded row (the word "superseded").

``python tools/check_citations.py`` prints them and exits 1 if there are any; ``tests/test_citations.py``
runs it on the repository and on planted citations.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
RUN_LIST = re.compile(r"\bruns?:? ((?:`?[0-9a-f]{8,32}\b`?(?:,? and |, |,? )?)+)")
"""A list of run ids after "run" or "runs" ("runs 4e74c971 f70f5707, 65a1441a and 72bd9020"): every id in it is cited."""
HEX_ID = re.compile(r"\b[0-9a-f]{8,32}\b")
PERCENT = re.compile(r"(?<![\d.])(\d{1,3}\.\d{2})\s*%")
SENTENCE = re.compile(r"(?<=[.;:])\s+(?=[A-Z*(`])")
ARCHIVE_NAME = "results/runs.csv"


def archive_holdings(path: Path, current_only: bool = False) -> tuple[list[str], set[str]]:
    """The archive's run ids, and its figures as two-decimal strings: accuracies (percent) and every
    metric, as logged and as a percentage (fractions such as the share of answers that kept the vote);
    ``current_only``: the figures of the rows not flagged ``superseded`` only."""
    ids, figures = [], set()
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            ids.append(row["run_id"])
            if current_only and row.get("superseded", "").lower() == "true":
                continue
            for name, value in row.items():
                if value and (name in ("accuracy", "teacher_accuracy") or name.startswith("metrics.")):
                    try:
                        number = float(value)
                    except ValueError:
                        continue
                    figures.update({f"{number:.2f}", f"{100 * number:.2f}"})
    return ids, figures


def paragraphs(path: Path) -> list[str]:
    """The file's paragraphs (blank-line separated), YAML files by their comment lines only."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix in (".yaml", ".yml"):
        lines = [line.split("#", 1)[1] if "#" in line else "" for line in lines]
    text = "\n".join(lines)
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def problems(text: str, ids: list[str], accuracies: set[str], current: set[str] | None = None) -> list[str]:
    """The citations in ``text`` the archive does not hold; with ``current`` (the current rows' figures), also each
    percentage cited as in the archive that no current row has, unless its sentence says "superseded"."""
    found = []
    cited_ids = RUN_ID.findall(text)
    cited_ids += [cited for match in RUN_LIST.finditer(text) for cited in HEX_ID.findall(match.group(1))]
    for cited in dict.fromkeys(cited_ids):
        if not any(run_id.startswith(cited) for run_id in ids):
            found.append(f"run id {cited} is not in {ARCHIVE_NAME}")
    for sentence in SENTENCE.split(text):
        if ARCHIVE_NAME in sentence:
            found += [f"{number}% is cited as in {ARCHIVE_NAME} and no archived run has that figure: "
                      f"{sentence[:160]}" for number in PERCENT.findall(sentence) if number not in accuracies]
            if current is not None and "superseded" not in sentence:
                found += [f"{number}% is cited as in {ARCHIVE_NAME} and only a superseded run has that figure: "
                          f"{sentence[:160]}" for number in PERCENT.findall(sentence)
                          if number in accuracies and number not in current]
    return found


def summary_run_ids(folder: Path) -> list[str]:
    """The run ids (32 hex digits) the tracked run summaries under ``folder`` hold."""
    return sorted({run_id for path in folder.glob("*.json")
                   for run_id in re.findall(r"\b[0-9a-f]{32}\b", path.read_text(encoding="utf-8"))})


def cited_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "dpsd" / "conf").rglob("*.yaml")),
            *sorted((root / "sweeps").rglob("*.yaml"))]


def check(root: Path) -> list[str]:
    ids, accuracies = archive_holdings(root / ARCHIVE_NAME)
    ids += summary_run_ids(root / "results" / "summaries")
    _, current = archive_holdings(root / ARCHIVE_NAME, current_only=True)
    docs = root / "docs"
    return [f"{path.relative_to(root)}: {problem}" for path in cited_files(root) if path.exists()
            for paragraph in paragraphs(path)
            for problem in problems(paragraph, ids, accuracies, current if path.parent == docs else None)]


if __name__ == "__main__":
    found = check(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
    print("\n".join(found) or "every citation is in the archive")
    sys.exit(1 if found else 0)
