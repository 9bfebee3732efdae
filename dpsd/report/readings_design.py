"""The analysis of a readings design: per seed method, its runs' accuracy at the design's rung (R3 unless the spec's
``feeds.rung`` names another: DP-DFD, which learns without its mechanism, is searched at R5) over runs and seeds, read
against the switches of :mod:`dpsd.report.readings`.

A spec of kind ``readings`` searches these switches. "Best faithful reading" is a maximum over the faithful
combinations, which only a search of all of them establishes: the ``sweeps/readings_*_full.yaml`` specs run the full
factorial of a method's faithful switches at one teacher; the earlier ``sweeps/readings_r3.yaml``,
``readings_fed_dpsd_r3.yaml``, ``readings_dpdfd_r3.yaml`` and ``readings_dp_dfd_r5.yaml`` were screening fractions,
whose aliases can hide the combination that wins. :func:`coverage` counts how many of the :func:`faithful_space`
combinations ran. :func:`main_effects` reads each switch's effect off a design as the difference of the mean
accuracy over the runs at each value, and :func:`chosen_defaults` applies the default rule: the faithful run with
the best mean accuracy at the search's teacher (the one its faithful combinations ran at: DAFL's LeNet-5, since the
small CNN labels noise one class and cannot tell readings apart), ties (within :data:`TIE` points) to the run with
the most literal values, then to the current defaults. :func:`searched` is what a method's verdict sentence says
was searched. Everything here computes tables from run figures; no number is typed."""

from __future__ import annotations

import math

import pandas as pd
from omegaconf import OmegaConf

from dpsd.report.cells import RUN
from dpsd.report.readings import (DPSD_SWITCHES, FAITHFUL, READ_METHODS, READERS, SUBSTITUTE, SWITCH_SETS, TEACHER,
                                  Switch, switch_values)
from dpsd.report.tables import DASH, fmt_mean_std, is_stale

TIE = 2.0  # points: run means closer than this are a tie, which goes to the more literal run
DEFAULT_RUNG = "R3"  # where a readings design runs unless its spec's feeds.rung says otherwise
DISCRIMINATOR_METHODS = ("dpsd", "dpsd_t")  # the same loop with the student or the teacher as discriminator


def switches_of(rows: pd.DataFrame) -> tuple[Switch, ...]:
    """The switches of the seed method ``rows`` hold (rows of one paper; DPSD's where none is a seed method)."""
    methods = [m for m in dict.fromkeys(rows["method"]) if m in SWITCH_SETS]
    return SWITCH_SETS[methods[0]].switches if methods else DPSD_SWITCHES


def seed_rows(frame: pd.DataFrame, rung: str = DEFAULT_RUNG, axis: str | None = None) -> pd.DataFrame:
    """One row per finished seed of a readings spec run at ``rung`` (its ``feeds.rung``): method, group, seed,
    accuracy, whether other code of its method than this checkout's recorded it (``stale``), the rung and each
    switch's value; with ``axis`` (a budget spec's ``feeds.axis``, a config key) also that key's value, in a column
    named by it."""
    done = frame[frame["status"] == RUN]
    rows = [{"method": row["method"], "group": row["group"], "seed": row["seed"], "accuracy": row["accuracy"],
             "stale": "code_version" in row and is_stale(row["code_version"]),
             "config_hash": row.get("config_hash", ""), "rung": rung, **switch_values(row["config"]),
             **({axis: OmegaConf.select(row["config"], axis)} if axis else {})}
            for _, row in done.iterrows()]
    return pd.DataFrame(rows, columns=["method", "group", "seed", "accuracy", "stale", "config_hash", "rung", *READERS,
                                       *([axis] if axis else [])])


def budget_table(rows: pd.DataFrame, axis: str) -> pd.DataFrame:
    """A budget spec's table: per method (in the order they ran) and value of ``axis`` (increasing) the accuracy
    mean ± sample std over its seeds (marked stale where other code of the method recorded a seed), the seeds and
    each seed's accuracy. One reading per method: what varies is the budget, not a switch."""
    out = []
    groups = [(method, value, at) for method in dict.fromkeys(rows["method"])
              for value, at in rows[rows["method"] == method].groupby(axis, sort=True)]
    for method, value, at in groups:
        stale = " (stale)" if at["stale"].any() else ""
        out.append({"Method": method, axis: value, accuracy_column(rows): _mean_std(at["accuracy"]) + stale,
                    "Seeds": len(at), "Per seed": ", ".join(f"{a:.2f}" for a in at.sort_values("seed")["accuracy"])})
    return pd.DataFrame(out, columns=["Method", axis, accuracy_column(rows), "Seeds", "Per seed"])


def spec_rung(feeds) -> str:
    """The rung a readings spec's ``feeds`` name (``feeds.rung``; R3 where they name none)."""
    return str(feeds.get("rung", DEFAULT_RUNG))


def rung_of(rows: pd.DataFrame) -> str:
    """The rung ``rows`` ran at (their ``rung`` column; R3 where they have none)."""
    return str(rows["rung"].iloc[0]) if "rung" in rows and len(rows) else DEFAULT_RUNG


def accuracy_column(rows: pd.DataFrame) -> str:
    """The tables' accuracy column, named by the rung: ``R3 (%)``."""
    return f"{rung_of(rows)} (%)"


def rung_words(rung: str) -> str:
    """The rung as a verdict sentence says where a search ran: ``without privacy (R3)``, ``at R5, ...``."""
    return "without privacy (R3)" if rung == DEFAULT_RUNG else f"at {rung}"


def _mean_std(values: pd.Series) -> str:
    """Mean ± sample std of a column of accuracies (the std only with two or more)."""
    values = values.dropna()
    return fmt_mean_std(values.mean(), values.std(ddof=1) if len(values) > 1 else math.nan) if len(values) else DASH


def varied(rows: pd.DataFrame) -> list[Switch]:
    """The switches of ``rows``' method that take more than one value among them."""
    return [s for s in switches_of(rows) if rows[s.name].nunique() > 1]


def _judged(switches) -> list[Switch]:
    """The switches that are readings: all but the teacher, a substitute for the paper's (its ResNet-34)."""
    return [s for s in switches if s.name != TEACHER]


def faithful_space(switches: tuple[Switch, ...]) -> int:
    """How many faithful combinations a paper's switches admit: the product, over its switches but the teacher, of
    each one's number of faithful values (a repair or an ablation is not a reading of the method). The space whose
    maximum is "the best faithful reading" (../shared/DESIGN.md, "Seeds and readings")."""
    return math.prod(sum(r.kind == FAITHFUL for r in s.readings) for s in _judged(switches))


def faithful_combinations(rows: pd.DataFrame) -> dict[str, set[tuple[str, ...]]]:
    """Per teacher, the distinct faithful combinations ``rows`` ran: each run's values of its switches but the
    teacher, kept where every one is a faithful reading (runs that two designs share count once)."""
    judged = _judged(switches_of(rows))
    found: dict[str, set[tuple[str, ...]]] = {}
    for _, first in rows.drop_duplicates("group").iterrows():
        values = tuple(str(first[s.name]) for s in judged)
        if all(s.reading(v).kind == FAITHFUL for s, v in zip(judged, values)):
            found.setdefault(str(first[TEACHER]), set()).add(values)
    return found


def coverage(rows: pd.DataFrame) -> dict[str, object]:
    """How much of its method's :func:`faithful_space` a search of ``rows`` covered: ``combinations`` (N), the
    distinct faithful combinations run at the search's teacher (the teacher with the most of them; a maximum is over
    one teacher's runs), ``space`` (M) and that ``teacher``. N = M: the full factorial, no effect aliased."""
    found = faithful_combinations(rows)
    teacher = max(found, key=lambda t: len(found[t]), default=str(rows[TEACHER].iloc[0]) if len(rows) else DASH)
    return {"combinations": len(found.get(teacher, ())), "space": faithful_space(switches_of(rows)), "teacher": teacher}


def main_effects(rows: pd.DataFrame) -> pd.DataFrame:
    """Per varied switch and value: mean ± sample std of the accuracy over the cells (runs x seeds) at that value,
    the runs and cells it rests on, and the effect: the value's mean minus the switch's first value's."""
    accuracy = accuracy_column(rows)
    out = []
    for switch in varied(rows):
        values = [r.value for r in switch.readings if (rows[switch.name] == r.value).any()]
        values += sorted(set(rows[switch.name]) - set(values))
        base = rows.loc[rows[switch.name] == values[0], "accuracy"].mean()
        for value in values:
            at = rows[rows[switch.name] == value]
            reading = switch.reading(value)
            out.append({"Switch": switch.name, "Config": switch.key, "Value": value, "Reading": reading.kind,
                        "Paper's words": reading.words, accuracy: _mean_std(at["accuracy"]),
                        "Runs × seeds": f"{at['group'].nunique()} × {at.groupby('group').size().max()}",
                        "Effect (points)": DASH if value == values[0] else f"{at['accuracy'].mean() - base:+.2f}",
                        "_mean": at["accuracy"].mean()})
    return pd.DataFrame(out, columns=["Switch", "Config", "Value", "Reading", "Paper's words", accuracy, "Runs × seeds",
                                      "Effect (points)", "_mean"])


def run_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the design: its switch values, accuracy mean ± sample std over its seeds, and the seeds."""
    shown, accuracy = varied(rows), accuracy_column(rows)
    out = []
    for group, at in rows.groupby("group", sort=False):
        first = at.iloc[0]
        kinds = {switch.reading(first[switch.name]).kind for switch in shown}
        stale = " (stale)" if "stale" in at and at["stale"].any() else ""
        out.append({**{switch.name: first[switch.name] for switch in shown},
                    accuracy: _mean_std(at["accuracy"]) + stale, "Seeds": len(at),
                    "Per seed": ", ".join(f"{a:.2f}" for a in at.sort_values("seed")["accuracy"]),
                    "All faithful": "yes" if kinds <= {FAITHFUL, SUBSTITUTE} else "no", "_mean": at["accuracy"].mean()})
    return pd.DataFrame(out).sort_values("_mean", ascending=False, kind="stable").reset_index(drop=True)


def chosen_defaults(rows: pd.DataFrame, teacher: str, current: dict[str, str] | None = None) -> dict[str, str]:
    """The default rule, on runs: the faithful run (every switch at a faithful value) with the best mean
    accuracy among the runs at ``teacher`` (the search's teacher: the teacher is a substitute, not a reading, and the
    method's default teacher is chosen apart from its readings); of the runs within :data:`TIE` points of it, the one
    with the most literal values (the letter of the algorithm box); of equally literal ones, the run at the
    ``current`` defaults (the method's switch values now), so that defaults move only for a run better by more than a
    tie or more literal, not for a difference among runs that tie (FedDPSD's small-CNN runs, all at chance); then the
    best mean. Returns that
    run's value of each varied switch but the teacher ({} without a faithful run there).

    Runs, not main effects: a value is chosen only with the values it was run with. In a resolution III
    fraction a main effect carries two-factor interactions, so the best value of each switch on its own can
    make a combination that was never run (on MNIST, resample's +26 points came from the runs with five
    student steps, a repair)."""
    judged = _judged(switches_of(rows))
    shown = _judged(varied(rows))
    runs = []
    for _, at in rows[rows[TEACHER] == teacher].groupby("group", sort=False):
        first = at.iloc[0]
        readings = [s.reading(first[s.name]) for s in judged]
        if all(r.kind == FAITHFUL for r in readings):
            runs.append({"values": {s.name: first[s.name] for s in shown}, "mean": at["accuracy"].mean(),
                         "literal": sum(r.literal for r in readings),
                         "current": current is not None and all(first[s.name] == current[s.name] for s in judged)})
    if not runs:
        return {}
    top = max(r["mean"] for r in runs)
    return max((r for r in runs if top - r["mean"] < TIE),
               key=lambda r: (r["literal"], r["current"], r["mean"]))["values"]


def interaction_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Each switch's effect with the student and with the teacher as discriminator (DPSD, DPSD-T), and their
    difference: the switch x discriminator interaction (twice the usual half-difference contrast)."""
    effects = {m: main_effects(rows[rows["method"] == m]) for m in DISCRIMINATOR_METHODS if (rows["method"] == m).any()}
    if len(effects) < 2:
        return pd.DataFrame()
    student, teacher = (effects[m] for m in DISCRIMINATOR_METHODS)
    out = []
    for _, row in student[student["Effect (points)"] != DASH].iterrows():
        other = teacher[(teacher["Switch"] == row["Switch"]) & (teacher["Value"] == row["Value"])]
        if other.empty:
            continue
        a, b = float(row["Effect (points)"]), float(other.iloc[0]["Effect (points)"])
        out.append({"Switch": row["Switch"], "Value": row["Value"], "Effect with the student (DPSD)": f"{a:+.2f}",
                    "Effect with the teacher (DPSD-T)": f"{b:+.2f}", "Difference (points)": f"{a - b:+.2f}"})
    return pd.DataFrame(out)


def search_summary(rows: pd.DataFrame) -> dict[str, object]:
    """What a method's readings search covered: its faithful runs (all values faithful or substitutes), the
    teachers, the least seeds a run has, where it ran (:func:`rung_words`), how much of the faithful space
    (:func:`coverage`: N ``combinations`` of M, the ``space``, at its ``teacher``), how many runs are ``stale``
    (recorded by other code of their method: not current evidence), and the best current faithful run at the
    search's teacher among those with the most seeds (a :func:`run_table` row, or None): the confirmed best, not a
    one-seed maximum that a twin reading computing the same run at seed 0 would carry above its own three-seed mean."""
    runs, covered = run_table(rows), coverage(rows)
    faithful = runs[runs["All faithful"] == "yes"]
    current = faithful[~faithful[accuracy_column(rows)].astype(str).str.endswith("(stale)")] if len(faithful) else faithful
    if TEACHER in current:  # the maximum is over the search's teacher's runs, as its coverage is
        current = current[current[TEACHER] == covered["teacher"]]
    confirmed = current[current["Seeds"] == current["Seeds"].max()]
    stale = rows[rows["stale"].astype(bool)]["group"].nunique() if "stale" in rows else 0
    return {"readings": len(faithful), "teachers": rows[TEACHER].nunique(), "where": rung_words(rung_of(rows)),
            "seeds": int(rows.groupby("group").size().min()) if len(rows) else 0, **covered,
            "stale": stale, "best_run": confirmed.iloc[0] if len(confirmed) else None}


def centre_table(rows: pd.DataFrame) -> pd.DataFrame:
    """A one-switch-at-a-time design: the centre (the first group) and, per other group, the switch it flips,
    its value and reading, accuracy mean ± std over its seeds, and its change against the centre over the seeds
    both ran (no alias: nothing else differs)."""
    order, accuracy = list(dict.fromkeys(rows["group"])), accuracy_column(rows)
    centre = rows[rows["group"] == order[0]]
    values = centre.iloc[0]
    out = [{"Flipped": "none (the centre)", "Value": DASH, "Reading": DASH, accuracy: _mean_std(centre["accuracy"]),
            "Seeds": len(centre), "Change (points)": DASH}]
    for group in order[1:]:
        at = rows[rows["group"] == group]
        first = at.iloc[0]
        changed = [switch for switch in switches_of(rows) if first[switch.name] != values[switch.name]]
        common = set(at["seed"]) & set(centre["seed"])
        change = (at[at["seed"].isin(common)]["accuracy"].mean() - centre[centre["seed"].isin(common)]["accuracy"].mean()
                  if common else math.nan)
        out.append({"Flipped": ", ".join(switch.name for switch in changed) or "none",
                    "Value": ", ".join(str(first[switch.name]) for switch in changed) or DASH,
                    "Reading": ", ".join(switch.reading(first[switch.name]).kind for switch in changed) or DASH,
                    accuracy: _mean_std(at["accuracy"]), "Seeds": len(at),
                    "Change (points)": DASH if math.isnan(change) else f"{change:+.2f}"})
    return pd.DataFrame(out)


def control_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The control methods' cells (not a reading of the seed methods): teacher, accuracy mean ± std, seeds."""
    accuracy = accuracy_column(rows)
    out = [{"Method": at.iloc[0]["method"], "Teacher": at.iloc[0]["teacher"], accuracy: _mean_std(at["accuracy"]),
            "Seeds": len(at), "Per seed": ", ".join(f"{a:.2f}" for a in at.sort_values("seed")["accuracy"])}
           for _, at in rows.groupby("group", sort=False)]
    return pd.DataFrame(out, columns=["Method", "Teacher", accuracy, "Seeds", "Per seed"])


def searched(rows: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Per seed method of a readings design: the faithful readings run, teachers, least seeds per run, the rung,
    N of M faithful combinations run at the search's teacher (:func:`coverage`), and its best faithful run's accuracy
    there (mean ± std, n): what a method's verdict sentence says was searched."""
    out: dict[str, dict[str, object]] = {}
    for method in READ_METHODS:
        at = rows[rows["method"] == method]
        if at.empty:
            continue
        summary = search_summary(at)
        best = summary.pop("best_run")
        out[method] = {**summary, "best": DASH if best is None else f"{best[accuracy_column(at)]}% (n = {best['Seeds']})"}
    return out
