"""The verdict table reads each paper row at paper scale where a run at the papers' settings exists, else at the
page's (laptop) scale, says which, and says beside it what that run set otherwise than the paper states
(results/reference/settings.csv against the run's resolved config)."""

from __future__ import annotations

import math

import pandas as pd

from dpsd.config import compose
from dpsd.report.reference import COLUMNS, parse_epsilon
from dpsd.report.settings import differences
from dpsd.report.verdict import verdict_markdown, verdict_rows

SETTINGS = pd.DataFrame([
    {"paper": "p", "method": "dpsd", "dataset": "mnist", "key": "teacher", "value": "ResNet34", "source": "p.txt:1"},
    {"paper": "p", "method": "dpsd", "dataset": "mnist", "key": "batch_size", "value": "b=256", "source": "p.txt:2"},
    {"paper": "p", "method": "dpsd", "dataset": "mnist", "key": "iterations", "value": "T=200 iterations",
     "source": "p.txt:2"},
    {"paper": "p", "method": "dpsd", "dataset": "mnist", "key": "iterations", "value": "T varied from 40 to 320",
     "source": "p.txt:3"},  # a range: no config value
])


def _refs(rows):
    frame = pd.DataFrame([{**dict.fromkeys(COLUMNS, ""), "paper": "p", "dataset": "mnist", "metric": "accuracy", **row}
                          for row in rows])
    return frame.assign(epsilon_value=frame["epsilon"].map(parse_epsilon),
                        value_number=pd.to_numeric(frame["value"], errors="coerce"))


def _group(method, eps, accuracy, cfg, status="run", code_version="current"):
    return {"method": method, "dataset": "mnist", "epsilon": float(eps), "status": status, "accuracy": accuracy,
            "accuracy_std": 1.0, "seeds": 3, "overrides": {}, "config": cfg, "eps_claimed": float(eps),
            "eps_rigorous": math.inf, "neighbouring": "replace_record", "code_version": code_version}


def test_differences_name_ours_and_the_papers_value_and_skip_what_states_no_value():
    laptop = compose(["method=dpsd", "dataset=mnist", "privacy=label", "scale=laptop"])  # small CNN, T 200
    assert differences(SETTINGS, "dpsd", laptop) == ["teacher small CNN (paper ResNet-34)", "b 128 (256)"]
    paper = compose(["method=dpsd", "dataset=mnist", "privacy=label", "model/teacher=torchvision",
                     "model.teacher.arch=resnet34", "scale=paper"])
    assert differences(SETTINGS, "dpsd", paper) == []


def test_each_row_shows_the_paper_scale_run_where_one_exists_else_the_laptop_one_marked(monkeypatch):
    monkeypatch.setattr("dpsd.report.verdict.is_stale", lambda versions: versions == "old")
    refs = _refs([{"table": "T1", "row": "DPSD", "method": "dpsd", "epsilon": "1", "value": "96.03"},
                  {"table": "T1", "row": "DPSD", "method": "dpsd", "epsilon": "10", "value": "97.85"},
                  {"table": "T1", "row": "DGD", "method": "dgd", "epsilon": "1", "value": "88.20"}])
    laptop_cfg = compose(["method=dpsd", "dataset=mnist", "privacy=label", "scale=laptop"])
    paper_cfg = compose(["method=dpsd", "dataset=mnist", "privacy=label", "scale=paper"])
    dgd_cfg = compose(["method=dgd", "dataset=mnist"])
    laptop = pd.DataFrame([_group("dpsd", 1, 10.0, laptop_cfg), _group("dpsd", 10, 11.0, laptop_cfg),
                           _group("dgd", 1, 20.0, dgd_cfg)])
    paper = pd.DataFrame([_group("dpsd", 1, 50.0, paper_cfg),  # paper scale ran at eps 1 only
                          _group("dpsd", 10, math.nan, paper_cfg, status="not run"),
                          _group("dgd", 1, 30.0, dgd_cfg, code_version="old")])  # stale: not a current result
    rows = verdict_rows(refs, {"paper": paper, "laptop": laptop}, "ladder.md", settings=SETTINGS)
    by = rows.set_index(["Method", "ε (paper)"])
    assert by.loc[("DPSD", "1"), "Run at"] == "paper scale"
    assert by.loc[("DPSD", "1"), "Ours (%)"].startswith("50.00")
    assert by.loc[("DPSD", "1"), "Differs from the paper"] == "nothing stated differs"
    assert by.loc[("DPSD", "10"), "Run at"] == "laptop scale"
    assert by.loc[("DPSD", "10"), "Ours (%)"].startswith("11.00")
    assert by.loc[("DPSD", "10"), "Differs from the paper"] == "teacher small CNN (paper ResNet-34); b 128 (256)"
    assert by.loc[("DGD", "1"), "Differs from the paper"] == "no settings stated"
    assert (by.loc[("DGD", "1"), "Run at"], by.loc[("DGD", "1"), "Ours (%)"][:5]) == ("laptop scale", "20.00")
    table = verdict_markdown(rows, "made-up runs")
    assert "| Run at |" in table and "| Differs from the paper |" in table
