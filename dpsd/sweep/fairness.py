"""Fair comparisons: the cells a spec declares comparable share the budget the spec does not vary.

A new method without a ``method_scale/<scale>/<name>.yaml`` runs its YAML's budget against its
neighbours' scaled one (as once happened: 10 epochs against LP-1ST's 1 at smoke scale, a 46-point "win").
:func:`budget_differences` finds such cells from their resolved configs: for every budget key in
:data:`BUDGET_KEYS` that the spec does not vary (its grid, its cells' overrides), cells that set the
key must agree; where they do not, each such cell gets a note naming the key and the values.

Comparing every cell of a table with every other would flag almost every row, since each paper method runs at the
budget its own paper (or its own laptop file) sets: DGD's 400 iterations against DPSD's 200 is no unfairness of
ours, the papers chose them. :func:`unequal_budgets` compares a spec's cells within a *comparison group* only:

* each method with itself: one method across ε, across readings, across whatever else the spec varies;
* each group the spec declares under ``feeds.comparable``: a list of groups, each a list of method names whose
  cells claim to share one budget (a study that pits two methods against each other, e.g.
  ``comparable: [[dpsd, dpsd_t]]``: the same loop with the student or the teacher as discriminator).

A cell in several groups gets each group's notes once (sweeps/README.md, "Fields"). ``dpsd sweep`` prints the
notes before it runs, and the report marks the same rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from dpsd.errors import ConfigError

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


KEY = "comparable"  # the optional key of a spec's ``feeds`` naming its comparison groups


def declared_groups(feeds: dict, spec_name: str = "") -> list[tuple[str, ...]]:
    """The comparison groups a spec's ``feeds.comparable`` declares (each a tuple of method names); none without
    the key. A malformed value is a one-line :class:`ConfigError` naming the accepted form."""
    value = feeds.get(KEY)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(group, (list, tuple)) and len(group) >= 2 and all(isinstance(m, str) for m in group)
            for group in value):
        raise ConfigError(f"spec {spec_name}: feeds.{KEY} must be a list of groups, each a list of two or more "
                          f"method names (e.g. {KEY}: [[dpsd, dpsd_t]]); got {value!r}")
    return [tuple(group) for group in value]


def comparison_groups(cells: Sequence[tuple[str, DictConfig]],
                      declared: Sequence[Sequence[str]] = ()) -> list[list[tuple[str, DictConfig]]]:
    """``cells`` (label, resolved config) split into the groups whose budgets must agree: one per method, then one
    per ``declared`` group of methods (its methods' cells together)."""
    methods = list(dict.fromkeys(str(cfg.method.name) for _, cfg in cells))
    groups = [[(label, cfg) for label, cfg in cells if str(cfg.method.name) == method] for method in methods]
    for names in declared:
        groups.append([(label, cfg) for label, cfg in cells if str(cfg.method.name) in set(names)])
    return [group for group in groups if len(group) > 1]


def unequal_budgets(varied: set[str], cells: Sequence[tuple[str, DictConfig]],
                    declared: Sequence[Sequence[str]] = ()) -> dict[str, str]:
    """``{cell label: note}`` for the cells whose budget differs, on a key the spec does not vary (``varied``), from
    another cell of one of its comparison groups (:func:`comparison_groups`); different methods' own budgets are
    not compared unless a group declares them comparable."""
    notes: dict[str, list[str]] = {}
    for group in comparison_groups(cells, declared):
        for label, note in budget_differences(varied, group).items():
            parts = notes.setdefault(label, [])
            parts += [part for part in note.split("; ") if part not in parts]
    return {label: "; ".join(parts) for label, parts in notes.items()}
