"""What a sweep did: each cell's status, and the text ``dpsd sweep`` prints."""

from __future__ import annotations

from typing import Any

from dpsd.sweep.spec import Cell


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
                          for c in cells])
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
    lines += [f"error: {e}" for e in summary.get("errors", [])]
    if summary.get("parent_run_id"):
        lines.append(f"MLflow parent run {summary['parent_run_id']} in {summary['tracking_uri']}")
    return "\n".join(lines)
