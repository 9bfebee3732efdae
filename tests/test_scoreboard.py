"""The scoreboard index.html opens with: each paper number for one of our methods, counted once."""

import math

import pandas as pd

from dpsd.report.scoreboard import Scoreboard


def ref(method, epsilon, value, paper="dpsd", table="T", note=""):
    return {"paper": paper, "table": table, "row": method or "other", "method": method, "dataset": "mnist",
            "epsilon": str(epsilon) if epsilon else "", "epsilon_value": epsilon if epsilon else math.nan,
            "metric": "accuracy", "value": str(value), "value_number": value, "note": note, "source": ""}


def group(method, epsilon, status="run", accuracy=math.nan, seeds=3):
    return {"method": method, "dataset": "mnist", "epsilon": epsilon, "status": status, "accuracy": accuracy,
            "overrides": {}, "config": None, "seeds": seeds if status == "run" else 0}


def test_rows_are_counted_within_above_short_not_run_or_data_absent_per_paper():
    refs = pd.DataFrame([ref("dpsd", 1, 90.0), ref("dpsd", 10, 95.0), ref("dgd", 1, 80.0), ref("dgd", 10, 97.4),
                         ref("lp1st", 1, 95.0), ref("dp_dfd", 1, 90.0, paper="dp_dfd"), ref("", 1, 40.0),
                         ref("pate", 1, 50.0)])
    groups = pd.DataFrame([group("dpsd", 1, accuracy=88.5), group("dpsd", 10, accuracy=60.0),
                           group("dgd", 1, accuracy=85.0), group("dgd", 10, status="data absent"),
                           group("dp_dfd", 1, accuracy=91.0), group("pate", 1, status="not run")])
    board = Scoreboard()
    board.add(refs, groups)
    counts = board.counts()
    assert {k: len(v) for k, v in counts["dpsd"].items()} == {
        "within 2 points": 1, "above": 1, "short": 1, "one seed": 0, "not run": 2, "data absent": 1}
    assert counts["dpsd"]["short"] == ["dpsd"] and counts["dp_dfd"]["within 2 points"] == ["dp_dfd"]
    page = board.html("laptop", {"ladder_dpsd"})
    assert page.index("Scoreboard") < page.index('<a href="#ladder_dpsd">dpsd</a>')


def test_a_row_two_specs_compare_with_counts_once_with_its_best_outcome():
    refs = pd.DataFrame([ref("dpsd", 1, 90.0)])
    board = Scoreboard()
    board.add(refs, pd.DataFrame([group("dpsd", 1, status="not run")]))
    board.add(refs, pd.DataFrame([group("dpsd", 1, accuracy=89.0)]))
    assert {k: len(v) for k, v in board.counts()["dpsd"].items()}["within 2 points"] == 1
    assert sum(len(v) for v in board.counts()["dpsd"].values()) == 1


def test_a_row_with_one_seed_is_never_counted_matched_or_short():
    refs = pd.DataFrame([ref("dpsd", 1, 90.0), ref("dpsd", 10, 95.0), ref("dgd", 1, 80.0)])
    groups = pd.DataFrame([group("dpsd", 1, accuracy=89.5, seeds=1), group("dpsd", 10, accuracy=20.0, seeds=1),
                           group("dgd", 1, accuracy=20.0, seeds=2)])
    board = Scoreboard()
    board.add(refs, groups)
    counts = {k: sorted(v) for k, v in board.counts()["dpsd"].items()}
    assert counts["one seed"] == ["dpsd", "dpsd"] and counts["short"] == ["dgd"] and counts["within 2 points"] == []


def test_sanity_rows_are_listed_apart_and_never_counted_as_reproductions():
    refs = pd.DataFrame([ref("teacher", None, 99.21), ref("kd_data", None, 98.0), ref("dpsd", 1, 90.0)])
    groups = pd.DataFrame([group("teacher", math.nan, accuracy=99.0), group("kd_data", math.nan, accuracy=97.5),
                           group("dpsd", 1, accuracy=20.0)])
    board = Scoreboard()
    board.add(refs, groups)
    counts = board.counts()["dpsd"]
    assert counts["within 2 points"] == [] and counts["short"] == ["dpsd"]
    assert sum(len(v) for v in counts.values()) == 1
    assert board.sanity() == {"dpsd": ["kd_data: within 2 points", "teacher: within 2 points"]}
    assert "teacher: within 2 points" in board.html("laptop", set())


def test_a_paper_with_sanity_rows_only_has_a_line_of_zeros():
    board = Scoreboard()
    board.add(pd.DataFrame([ref("teacher", None, 99.21, paper="dp_dfd")]),
              pd.DataFrame([group("teacher", math.nan, accuracy=99.0)]))
    assert {k: len(v) for k, v in board.counts()["dp_dfd"].items()} == dict.fromkeys(board.counts()["dp_dfd"], 0)
