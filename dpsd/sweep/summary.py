"""What a sweep did: each cell's status, and the text ``dpsd sweep`` prints."""

from __future__ import annotations

import math
import statistics
from typing import Any

from dpsd.sweep.spec import Cell, group_label


def results(cells: list[Cell], figures: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per cell over its seeds that have a recorded run: the method, the cell's label, the
    accuracy's mean and sample std (n > 1) in percent, and each ledger's ε as the mean over those seeds, as the pages
    state it (a data-dependent ledger, such as PATE's Confident-GNMax, spends a different ε at each seed)."""
    groups: dict[str, list[tuple[Cell, dict]]] = {}
    for cell in cells:
        if cell.config_hash in figures:
            groups.setdefault(group_label(cell.label), []).append((cell, figures[cell.config_hash]))
    rows = []
    for label, members in groups.items():
        accuracies = [100 * f["accuracy"] for _, f in members if not math.isnan(f["accuracy"])]
        rows.append({"cell": label or "base", "method": members[0][0].method, "seeds": len(accuracies),
                     "accuracy": statistics.fmean(accuracies) if accuracies else math.nan,
                     "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else math.nan,
                     **{ledger: _mean([f[ledger] for _, f in members]) for ledger in ("eps_claimed", "eps_rigorous")}})
    return rows


def _mean(values: list[float]) -> float:
    """The mean of ``values`` that are not NaN (∞ where one is ∞), NaN where none is."""
    present = [v for v in values if not math.isnan(v)]
    return statistics.fmean(present) if present else math.nan


def _result_line(row: dict[str, Any]) -> str:
    spread = f" ± {row['accuracy_std']:.2f}" if not math.isnan(row["accuracy_std"]) else ""
    return (f"  {row['method']:<12} {row['cell']:<40} accuracy {row['accuracy']:.2f}{spread}% (n = {row['seeds']})  "
            f"ε claimed {row['eps_claimed']:.4g}  ε rigorous {row['eps_rigorous']:.4g}")


def summarize(summary: dict[str, Any], cells: list[Cell], status: dict[str, str],
              reasons: dict[str, str] | None = None) -> dict[str, Any]:
    """Each status's cell labels; ``failure_reasons``: the one-line reason of each failed cell."""
    labels = lambda wanted: [c.label for c in cells if status[c.config_hash] == wanted]  # noqa: E731
    failed = labels("failed")
    summary.update(done=labels("done"), skipped=labels("done"), ran=labels("ran"), to_run=labels("to_run"),
                   data_absent=labels("data_absent"), failed=failed,
                   failure_reasons={label: (reasons or {}).get(label, "") for label in failed},
                   stale=labels("stale"), left_out=labels("left_out"),
                   cells=[{"label": c.label, "config_hash": c.config_hash, "status": status[c.config_hash]}
                          for c in cells],
                   results=results(cells, summary.get("figures", {})))
    return summary


def format_summary(summary: dict[str, Any], dry_run: bool = False) -> str:
    """The sweep's cells, one line each, grouped by status, then counts."""
    failed = "failed (retried by the next run)" if dry_run else "failed (recorded; the next run retries them)"
    titles = [("done", "done (a FINISHED run exists)"),
              ("stale", "stale (recorded by other code only; not re-run without --rerun-stale)"),
              ("to_run", "to run"), ("ran", "ran"),
              ("data_absent", "data absent (listed, not run)"), ("left_out", "left out by --match (not run)"),
              ("failed", failed)]
    lines = [f"sweep {summary['spec']} (scale={summary['scale']}){' — dry run' if dry_run else ''}"]
    reasons = summary.get("failure_reasons", {})
    for key, title in titles:
        if summary.get(key):
            lines.append(f"{title}: {len(summary[key])}")
            lines += [f"  {label}" + (f": {reasons[label]}" if reasons.get(label) else "") for label in summary[key]]
    if summary.get("results"):
        lines.append("results (recorded runs; accuracy mean ± sample std, each ε the mean, over the seeds):")
        lines += [_result_line(row) for row in summary["results"]]
    if summary.get("unequal_budgets"):
        lines.append("unequal budgets (the report marks these rows):")
        lines += [f"  {label or 'base'}: {note}" for label, note in summary["unequal_budgets"].items()]
    lines += [f"error: {e}" for e in summary.get("errors", [])]
    if summary.get("parent_run_id"):
        lines.append(f"MLflow parent run {summary['parent_run_id']} in {summary['tracking_uri']}")
    return "\n".join(lines)
