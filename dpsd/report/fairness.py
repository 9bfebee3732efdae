"""Which cells of a spec a table may call unequal in budget: only cells the spec declares comparable.

:func:`dpsd.sweep.fairness.budget_differences` compares the budget keys of the cells it is given. Comparing every
cell of a table with every other flags almost every row, since each paper method runs at the budget its own paper
(or its own laptop file) sets: DGD's 400 iterations against DPSD's 200 is no unfairness of ours, the papers chose
them. A spec's cells are compared within a *comparison group* only:

* each method with itself: one method across ε, across readings, across whatever else the spec varies (a cell of
  a method whose budget differs from another cell of the same method on a key the spec does not vary is flagged);
* each group the spec declares under ``feeds.comparable``: a list of groups, each a list of method names whose
  cells claim to share one budget (a study that pits two methods against each other, e.g.
  ``comparable: [[dpsd, dpsd_t]]``: the same loop with the student or the teacher as discriminator).

A cell in several groups gets each group's notes once (sweeps/README.md, "Fields").
"""

from __future__ import annotations

from typing import Sequence

from omegaconf import DictConfig

from dpsd.errors import ConfigError
from dpsd.sweep.fairness import budget_differences

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
