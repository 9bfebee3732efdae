"""What a hyper-parameter study optimises, and which of its trials no other beats.

A study spec (:mod:`dpsd.sweep.study`) optimises the selection half's accuracy alone unless its ``directions:`` block
names more objectives, each with its direction::

    directions:
      selection_accuracy: maximize
      eps_rigorous: minimize

The privacy objective is one ledger's ε (:data:`PRIVACY`): ``eps_rigorous``, the standard accountant's over every
teacher query, or ``eps_claimed``, the paper's own, for a method whose ε rigorous is infinite at every setting (it
releases what no guarantee covers), so that its trade-off can be drawn at all, on the ledger that says so.

A study with two objectives is a multi-objective search (Optuna's multi-objective TPE through Ray Tune): it finds
a Pareto front, the trials no other trial beats on every objective at once (:func:`pareto_front`), rather than one
best trial. The accuracy is always an objective; the order of the block is the order of Optuna's values."""

from __future__ import annotations

from typing import Sequence

from dpsd.errors import ConfigError

SELECTION = "selection_accuracy"
PRIVACY = ("eps_rigorous", "eps_claimed")  # the ledgers whose ε a study may minimise (one at a time)
OBJECTIVES = (SELECTION, *PRIVACY)  # what a trial reports that a study may optimise
DIRECTIONS = ("maximize", "minimize")
SINGLE = ((SELECTION, "maximize"),)  # a study without a directions: block


def study_directions(name: str, raw: dict | None) -> tuple[tuple[str, str], ...]:
    """A spec's ``directions:`` block (``raw``; empty: :data:`SINGLE`) as ``((objective, direction), ...)``; a
    ConfigError of one line names what is wrong (not a mapping, an unknown objective or direction, no accuracy)."""
    if not raw:
        return SINGLE
    if not isinstance(raw, dict):
        raise ConfigError(f"sweep {name}: directions must map objectives ({', '.join(OBJECTIVES)}) to "
                          f"{' or '.join(DIRECTIONS)}, got {raw!r}")
    for objective, direction in raw.items():
        if objective not in OBJECTIVES:
            raise ConfigError(f"sweep {name}: directions: unknown objective {objective!r}; accepted: "
                              f"{', '.join(OBJECTIVES)}")
        if direction not in DIRECTIONS:
            raise ConfigError(f"sweep {name}: directions.{objective} must be {' or '.join(DIRECTIONS)}, got "
                              f"{direction!r}")
    if SELECTION not in raw:
        raise ConfigError(f"sweep {name}: directions must include {SELECTION} (a study scores its students)")
    if len([objective for objective in raw if objective in PRIVACY]) > 1:
        raise ConfigError(f"sweep {name}: directions may name one ledger's epsilon ({' or '.join(PRIVACY)}), "
                          f"got {', '.join(o for o in raw if o in PRIVACY)}")
    return tuple((str(objective), str(direction)) for objective, direction in raw.items())


def privacy_objective(directions: Sequence[tuple[str, str]]) -> str:
    """The ledger whose ε a study minimises (its ``directions``' one :data:`PRIVACY` objective); ``eps_rigorous``
    where it names none."""
    return next((objective for objective, _ in directions if objective in PRIVACY), PRIVACY[0])


def is_multi_objective(directions: Sequence[tuple[str, str]]) -> bool:
    """Whether a study has more than one objective (its search finds a Pareto front)."""
    return len(directions) > 1


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[tuple[str, str]]) -> bool:
    """Whether point ``a`` is at least as good as ``b`` on every objective and better on one."""
    signed = [(x, y) if direction == "maximize" else (-x, -y) for (x, y), (_, direction) in
              zip(zip(a, b), directions)]
    return all(x >= y for x, y in signed) and any(x > y for x, y in signed)


def pareto_front(points: Sequence[Sequence[float]], directions: Sequence[tuple[str, str]]) -> list[int]:
    """The indices of ``points`` (one value per objective, in ``directions``' order) that no other point dominates
    (:func:`dominates`), in the order given; two equal points are both on the front."""
    return [i for i, point in enumerate(points)
            if not any(dominates(other, point, directions) for j, other in enumerate(points) if j != i)]
