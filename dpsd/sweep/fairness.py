"""Fair comparisons: the cells one table compares share the budget their spec does not vary.

A new method without a ``method_scale/<scale>/<name>.yaml`` runs its YAML's budget against its
neighbours' scaled one (as once happened: 10 epochs against LP-1ST's 1 at smoke scale, a 46-point "win").
:func:`budget_differences` finds such cells from their resolved configs: for every budget key in
:data:`BUDGET_KEYS` that the spec does not vary (its grid, its cells' overrides), cells that set the
key must agree; where they do not, each such cell gets a note naming the key and the values.
``dpsd sweep`` prints the notes before it runs, and the report marks the rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

BUDGET_KEYS = ("method.iterations", "method.epochs", "method.batch_size", "method.queries", "method.num_teachers",
               "model.student.arch", "model.teacher.arch")
"""What a run's budget is made of: its length, its batch, the teacher queries it may make (PATE's, DGD's), the
teachers the private split is divided among, the student it trains and the teacher it learns from. A method
without a key (DPSD has no epochs, LP-1ST no iterations) is not compared on it."""


def _varies(varied: set[str], key: str) -> bool:
    """Whether a varied override key (``model/student``, ``method.epochs``) covers ``key``; choosing
    ``method`` is what a comparison compares, not a budget it varies."""
    return any(key == v or key.startswith(v + ".") for v in varied if v != "method")


def budget_differences(varied: set[str], cells: Sequence[tuple[str, DictConfig]]) -> dict[str, str]:
    """``{cell label: note}`` for the cells whose budget differs from another cell's on a key the spec
    does not vary. ``varied``: the override keys the spec varies, ``/`` or ``.`` separated; ``cells``:
    (label, resolved config), seeds of one cell given once or more (same values)."""
    varied = {v.replace("/", ".") for v in varied}
    notes: dict[str, list[str]] = defaultdict(list)
    for key in BUDGET_KEYS:
        if _varies(varied, key):
            continue
        values = {label: OmegaConf.select(cfg, key) for label, cfg in cells}
        values = {label: value for label, value in values.items() if value is not None}
        if len(set(values.values())) < 2:
            continue
        for label, value in values.items():
            others = sorted({str(v) for v in values.values() if v != value})
            notes[label].append(f"{key}={value} (others: {', '.join(others)})")
    return {label: "; ".join(parts) for label, parts in notes.items()}
