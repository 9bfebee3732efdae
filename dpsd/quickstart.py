"""``dpsd quickstart``: the benchmark a new user runs first.

It runs ``sweeps/quickstart.yaml`` (every kind of method on the embedded digits at one epsilon) like
``dpsd reproduce --only quickstart`` does, at laptop scale (Ray Tune, MLflow, cells already done are
skipped), renders ``reports/index.html``, and returns one comparison row per cell read back from the
recorded runs: method, student accuracy, both epsilons and what each is a guarantee of.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from dpsd.config import resolve_paths
from dpsd.reproduce import reproduce
from dpsd.report.render import DEFAULT_OUT, DEFAULT_REFERENCE, DEFAULT_SPECS
from dpsd.report.runs import SETUP_SWEEP
from dpsd.sweep.spec import expand_configs
from dpsd.sweep.store import DONE, client_for

SPEC = SETUP_SWEEP
SCALE = "laptop"


def quickstart(overrides: Sequence[str] = (), specs_dir: Path = DEFAULT_SPECS, out: Path = DEFAULT_OUT,
               reference_csv: Path = DEFAULT_REFERENCE) -> dict[str, Any]:
    """Run the quickstart cells that are not done, render the report; returns ``{"rows", "index", "sweep"}``."""
    result = reproduce(SCALE, [SPEC], False, overrides, specs_dir, reference_csv, out)
    return {"rows": comparison_rows(specs_dir / f"{SPEC}.yaml", overrides), "index": result["index"],
            "sweep": result["sweeps"][0]}


def comparison_rows(spec_path: Path, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per quickstart cell, from its latest finished run (cells without one are left out)."""
    expanded = expand_configs(spec_path, SCALE, overrides)
    client, experiment_id = client_for(resolve_paths(expanded[0][1]))
    rows = []
    for cell, cfg in expanded:
        found = client.search_runs([experiment_id], f"tags.config_hash = '{cell.config_hash}' and "
                                   f"tags.cell_status = '{DONE}' and attributes.status = 'FINISHED'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        if not found:
            continue
        run = found[0]
        tags, metrics = run.data.tags, run.data.metrics
        rows.append({
            "method": cell.method, "run_id": run.info.run_id,
            "student_accuracy": metrics.get("student_test_accuracy", math.nan),
            "eps_claimed": float(tags.get("eps_claimed", "nan")),
            "claimed": claim_text(tags, private=cfg.privacy.mode != "none"),
            "eps_rigorous": float(tags.get("eps_rigorous", "nan")),
            "rigorous": ", ".join(filter(None, [_tag(tags, "neighbouring"), _tag(tags, "accountant")])),
            "time_total_s": metrics.get("time_total_s", math.nan),
            "metrics": dict(metrics),
        })
    return rows


def _tag(tags: dict[str, str], key: str) -> str:
    """A run tag, with the ``"None"`` that runs recorded for an absent value read as absent."""
    value = tags.get(key, "")
    return "" if value in ("", "None") else value


def claim_text(tags: dict[str, str], private: bool) -> str:
    """What ``eps_claimed`` is a guarantee of: the paper's notion and source, else "non-private" for a
    cell run without privacy, else "no privacy claimed" (a private method whose paper claims none)."""
    if _tag(tags, "claimed_source"):
        return ", ".join(filter(None, (_tag(tags, "claimed_notion"), _tag(tags, "claimed_source"))))
    return "no privacy claimed" if private else "non-private"


def _eps(value: float) -> str:
    return "inf" if math.isinf(value) else ("-" if math.isnan(value) else f"{value:.3g}")


def format_rows(rows: list[dict[str, Any]]) -> str:
    """The comparison table as aligned text."""
    header = ["method", "student acc.", "eps_claimed", "(notion, source)", "eps_rigorous", "(unit: accountant)", "run s"]
    lines = [header] + [[row["method"], f"{100 * row['student_accuracy']:.1f}%", _eps(row["eps_claimed"]),
                         row["claimed"], _eps(row["eps_rigorous"]), row["rigorous"] or "-",
                         f"{row['time_total_s']:.0f}"] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
