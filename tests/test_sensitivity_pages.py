"""The sensitivity pages (dpsd/report/sensitivity.py; the trend checks: dpsd/report/trends.py): each figure or
ablation table of a paper beside ours, with a sentence saying whether the paper's trend holds here, read from
results/reference/sensitivity.csv.

The page tests render from a small fake runs archive (rows written here, keyed by the cells' config hashes, no run
made) beside an empty MLflow store; the reference tests hold sensitivity.csv to papers.csv and to the specs it names.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from conftest import spec_folder
from dpsd.report import render_report
from dpsd.report.cells import RUN
from dpsd.report.pages import load_pages
from dpsd.report.reference import load_reference
from dpsd.report.tables import switches
from dpsd.report.trends import (UNREADABLE_VERDICT, CLAIM_COLUMNS, CHANCE_POINTS, METRICS, Point, at_chance,
                                chance_ceiling, check_trend, check_versus, claims_path, direction, load_claims, pairs,
                                segments, shape, sign, unbounded, verdict)
from dpsd.sweep.spec import expand_cells, group_label, load_spec
from dpsd.version import method_code_version

REPO = Path(__file__).resolve().parents[1]
PAPERS = REPO / "results" / "reference" / "papers.csv"

# --- the trend rule ------------------------------------------------------------------------------------------------


def _points(ys, std=math.nan, xs=None):
    return [Point(float(x), None if y is None else float(y), std, 3, 3) for x, y in zip(xs or range(len(ys)), ys)]


def test_a_change_is_a_rise_or_fall_only_beyond_a_point_and_the_seeds_spread():
    a, b = _points([50.0, 50.9])
    assert direction(a, b) == "flat"
    a, b = _points([50.0, 51.5])
    assert direction(a, b) == "up" and direction(b, a) == "down"
    a, b = _points([50.0, 53.0], std=2.5)  # sqrt(2.5^2 + 2.5^2) = 3.54: within the seeds' spread
    assert direction(a, b) == "flat"
    eps = _points([10.0, 10.05])
    assert direction(*eps, metric="eps_rigorous") == "flat"
    assert direction(*_points([10.0, math.inf]), metric="eps_rigorous") == "up"
    assert sign(Point(0.0, 2.0)) == "above" and sign(Point(0.0, -0.5)) == "same" and sign(Point(0.0, -3.0)) == "below"


def test_shape_and_segments_read_the_steps_between_points():
    points = _points([40, 60, 55, 70, 70.5], xs=[2, 3, 4, 5, 7])
    assert shape(points) == ["up", "down", "up"]
    assert segments(points) == [(2.0, 3.0, "up"), (3.0, 4.0, "down"), (4.0, 5.0, "up"), (5.0, 7.0, "flat")]


def _claim(**values):
    row = {column: "" for column in CLAIM_COLUMNS}
    row.update(metric="accuracy", points="none", table="Tiny Fig. 1")
    row.update(values)
    return pd.Series(row)


def test_a_trend_is_checked_over_its_range_and_says_how_many_points_ran():
    points = _points([40.0, 60.0, None, 59.5], xs=[20, 50, 100, 500])
    rising = check_trend(_claim(trend="up", x_from="20", x_to="100"), points, "sigma")
    assert rising.holds is True and "rises from 20 to 50 (+20.00)" in rising.ours and "2 of 3 points run" in rising.ours
    falling = check_trend(_claim(trend="down", x_from="100"), points, "sigma")
    assert falling.holds is None and falling.ours == "too few points run (1 of 2)"
    flat = check_trend(_claim(trend="flat", x_from="50"), points, "sigma")
    assert flat.holds is True and "is flat from 50 to 500 (-0.50)" in flat.ours
    assert check_trend(_claim(trend="up"), _points([None, None]), "x").ours == "not run"
    assert verdict([rising, flat]) == "the paper's trend holds here"
    assert verdict([rising, check_trend(_claim(trend="down", x_from="20", x_to="50"), points, "s")]) == \
        "the paper's trend holds in 1 of 2 parts"


def test_a_line_at_chance_gets_no_verdict_and_one_point_above_it_gets_one():
    flat_at_ten = _points([9.8, 10.3, None, 10.5])
    assert chance_ceiling(flat_at_ten, 10.0) == 10.5
    assert chance_ceiling(flat_at_ten, None) is None and chance_ceiling(_points([None]), 10.0) is None
    learned = _points([9.8, 10.0 + CHANCE_POINTS + 0.1])
    assert chance_ceiling(learned, 10.0) is None
    flat = check_trend(_claim(trend="flat"), flat_at_ten, "sigma")
    assert flat.holds is True  # the rule alone reads a line at chance as the paper's plateau
    unread = at_chance([flat], flat_at_ten, 10.0)
    assert unread[0].holds is None and unread[0].ours == "at chance at every point run (at most 10.50%; chance 10%)"
    assert verdict(unread) == UNREADABLE_VERDICT
    assert at_chance([flat], learned, 10.0) == [flat]


def test_an_epsilon_line_infinite_at_every_point_gets_no_verdict_and_one_finite_point_gives_one():
    infinite = _points([math.inf, None, math.inf])
    rise = check_trend(_claim(metric="eps_rigorous", trend="up"), infinite, "eps_0")
    assert rise.holds is False  # the rule alone reads ∞ to ∞ as flat: not the paper's rise
    unread = unbounded([rise], infinite)
    assert unread[0].holds is None and unread[0].ours.startswith("infinite at every point run")
    assert verdict(unread) == UNREADABLE_VERDICT
    partly = _points([5.0, math.inf])
    assert unbounded([rise], partly) == [rise] and unbounded([rise], _points([None])) == [rise]
    held = check_trend(_claim(trend="up"), _points([40.0, 60.0]), "eps_0")
    assert verdict([held, *unread]) == "the paper's trend holds in 1 of the one part read (1 infinite, not read)"


def test_an_ablation_pair_whose_two_students_are_at_chance_is_not_read_and_the_verdict_counts_the_parts_read():
    def group(overrides, accuracy):
        return {"overrides": overrides, "dataset": "mnist", "status": RUN, "accuracy": accuracy, "accuracy_std": 1.0}

    groups = pd.DataFrame([group({"loss.ce": "1", "loss.ie": "1"}, 9.74), group({"loss.ce": "0", "loss.ie": "1"}, 9.74),
                           group({"loss.ce": "1", "loss.ie": "0"}, 15.5), group({"loss.ce": "0", "loss.ie": "0"}, 9.74)])
    claim = _claim(cell="loss.ce=0", versus="loss.ce=1", trend="below")
    checks = check_versus(claim, groups, "mnist", chance=10.0)
    assert [c.holds for c in checks] == [None, True]  # 9.74 vs 9.74: not read | 9.74 vs 15.50: read, below
    assert checks[0].ours == "at chance, both (9.74 vs 9.74; chance 10%)"
    assert verdict(checks) == "the paper's trend holds in 1 of the one part read (1 at chance, not read)"
    assert [c.holds for c in check_versus(claim, groups, "mnist")] == [False, True]  # chance unknown: both read
    level = check_versus(_claim(cell="loss.ce=0", versus="loss.ce=1", trend="same"), groups, "mnist", chance=10.0)
    assert verdict([*checks, *level]) == "the paper's trend holds in 1 of the 2 parts read (2 at chance, not read)"


# --- the page, from a fake runs archive ----------------------------------------------------------------------------

BASE = "[method=dpsd, privacy=label, dataset=digits, privacy.epsilon=10]"
RISING = f"""name: tiny_rising
paper: dpsd
feeds: {{kind: sensitivity, id: Tiny Fig. 1, title: "iterations, rising", x: method.iterations, series: dataset}}
base: {BASE}
seeds: [0, 1, 2]
grid:
  method.iterations: [2, 4, 8]
"""
UNRUN = (RISING.replace("tiny_rising", "tiny_unrun").replace("Tiny Fig. 1", "Tiny Fig. 2").replace("rising", "unrun")
         .replace("[2, 4, 8]", "[3, 5, 7]"))  # other cells than tiny_rising's, none of them in the archive
ABLATION = f"""name: tiny_ablation
paper: dpsd
feeds: {{kind: table, id: Tiny Table 1, title: "loss terms"}}
base: {BASE}
seeds: [0, 1, 2]
cells:
  - []
  - [method.generator_loss.entropy=0]
"""
CLAIMS_HEAD = ",".join(CLAIM_COLUMNS)
PAPER_HEAD = "paper,table,row,method,dataset,architecture,epsilon,delta,metric,value,source,note"
PAPER_ROWS = """dpsd,Tiny Table 1,Tiny all terms,dpsd,digits,,10,,accuracy,97.00,tiny.txt:1,switch: privacy=label
dpsd,Tiny Table 1,Tiny w/o IE,dpsd,digits,,10,,accuracy,60.00,tiny.txt:2,switch: privacy=label method.generator_loss.entropy=0
dpsd,Tiny Fig. 1,Tiny at 8 iterations,dpsd,digits,,10,,accuracy,90.00,tiny.txt:3,switch: method.iterations=8
"""
# accuracy per (cell label without its seed, seed): rising over the iterations; the ablation lowers it
ACCURACY = {
    "method.iterations=2": (40.0, 42.0, 44.0),
    "method.iterations=4": (60.0, 61.0, 62.0),
    "method.iterations=8": (80.0, 80.0, 83.0),
    "": (90.0, 91.0, 92.0),  # the ablation table's full-loss cell (no cell overrides: its label is empty)
    "method.generator_loss.entropy=0": (50.0, 52.0, 54.0),
}


def _claims_csv(rising_trend: str) -> str:
    rows = [
        f"dpsd,Tiny Fig. 1,iterations,tiny_rising,digits,accuracy,,,,,,{rising_trend},none,,,tiny.txt:4 \"better\",",
        "dpsd,Tiny Fig. 2,iterations,tiny_unrun,,accuracy,,,,,,up,none,,,tiny.txt:5,",
        "dpsd,Tiny Table 1,loss terms,tiny_ablation,digits,accuracy,,,,method.generator_loss.entropy=0,,below,"
        "papers.csv,Tiny w/o IE,Tiny all terms,tiny.txt:1-2,",
    ]
    return "\n".join([CLAIMS_HEAD, *rows]) + "\n"


def _archive(root: Path, overrides: list[str], accuracy: dict = ACCURACY) -> Path:
    """A runs archive holding three finished seeds of every cell of tiny_rising and tiny_ablation (none of
    tiny_unrun), each with both ledgers, by the current code of its method (so none is STALE)."""
    version = method_code_version("dpsd")
    rows = []
    for name in ("tiny_rising", "tiny_ablation"):
        for cell in expand_cells(load_spec(root / "sweeps" / f"{name}.yaml"), "smoke", overrides):
            label = group_label(cell.label)
            seed = int(cell.label.rsplit("seed=", 1)[1])
            rows.append({"config_hash": cell.config_hash, "run_id": f"run-{cell.config_hash}", "status": "FINISHED",
                         "cell_status": "done", "sweep": name, "cell": cell.label, "scale": "smoke",
                         "start_time": "2026-11-28T00:00:00+00:00", "artifact_uri": "", "accuracy":
                         accuracy[label][seed], "teacher_accuracy": 99.0, "eps_claimed": 10.0, "eps_rigorous": 31.5,
                         "delta": 1e-5, "neighbouring": "replace_record", "code_version": version})
    path = root / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _render(tmp_path: Path, rising_trend: str, name: str, accuracy: dict = ACCURACY) -> str:
    root = tmp_path / name
    spec_folder(root / "sweeps")
    for spec_name, text in (("tiny_rising", RISING), ("tiny_unrun", UNRUN), ("tiny_ablation", ABLATION)):
        (root / "sweeps" / f"{spec_name}.yaml").write_text(text)
    (root / "papers.csv").write_text(f"{PAPER_HEAD}\n{PAPER_ROWS}")
    claims_path(root / "papers.csv").write_text(_claims_csv(rising_trend))
    overrides = [f"results_dir={root / 'results'}"]
    archive = _archive(root, overrides, accuracy)
    page = root / "results" / "sensitivity_tiny.md"
    render_report(sorted((root / "sweeps").glob("*.yaml")), "smoke", overrides, root / "papers.csv", root / "reports",
                  markdown=page, archive=archive, title="Tiny sensitivity page")
    return page.read_text()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The tiny page rendered twice from the same runs: once with the paper's rising trend, once with a falling one."""
    tmp = tmp_path_factory.mktemp("sensitivity")
    return {"up": _render(tmp, "up", "up"), "down": _render(tmp, "down", "down"), "root": tmp}


def _section(page: str, heading: str) -> str:
    start = page.index(f"## {heading}")
    end = page.find("\n## ", start + 1)
    return page[start:] if end < 0 else page[start:end]


def _rows(section: str) -> list[list[str]]:
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_a_trend_the_runs_follow_holds_and_one_they_do_not_is_said_not_to(pages):
    rising = _section(pages["up"], "Tiny Fig. 1")
    assert ("**digits, student accuracy.** The paper (Tiny Fig. 1, in its words; the points are not in the text) → "
            "here (3 seeds a point): rises from iterations = 2 to 8 → rises from 2 to 8 (+39.00): the paper's trend "
            "holds here.") in rising
    falling = _section(pages["down"], "Tiny Fig. 1")
    assert "falls from iterations = 2 to 8 → rises from 2 to 8 (+39.00): the paper's trend does not hold here." in falling
    assert "holds here" not in falling.replace("does not hold here", "")


def test_each_point_shows_mean_and_sample_std_over_its_seeds_with_both_ledgers_and_the_papers_number(pages):
    rows = _rows(_section(pages["up"], "Tiny Fig. 1"))
    header, body = rows[0], {row[2]: dict(zip(rows[0], row)) for row in rows[1:]}
    assert header == ["Dataset", "Line", "iterations", "Ours (%)", "Seeds", "ε claimed", "ε rigorous", "Paper",
                      "Paper's ε"]
    assert body["2"]["Ours (%)"] == "42.00 ± 2.00" and body["8"]["Ours (%)"] == "81.00 ± 1.73"  # ddof = 1
    assert body["2"]["Seeds"] == "3/3" and body["2"]["ε claimed"] == "10" and body["2"]["ε rigorous"] == "31.5"
    assert body["8"]["Paper"] == "90.00" and body["8"]["Paper's ε"] == "10" and body["4"]["Paper"] == "—"


def test_cells_without_runs_say_not_run_and_their_trend_is_not_run_yet(pages):
    unrun = _section(pages["up"], "Tiny Fig. 2")
    assert "Here: not run yet." in unrun
    body = _rows(unrun)[1:]
    assert len(body) == 3 and all(row[3] == "not run" and row[4] == "0/3" and row[5] == row[6] == "—" for row in body)
    assert not any(ch.isdigit() for row in body for ch in row[3])  # no number where nothing ran


def test_an_ablation_compares_each_cell_with_the_cell_without_its_switch(pages):
    ablation = _section(pages["up"], "Tiny Table 1")
    assert ("Tiny w/o IE vs Tiny all terms: below (60.00 vs 97.00) → below (52.00 vs 91.00): the paper's trend "
            "holds here.") in ablation
    rows = {row[1]: dict(zip(_rows(ablation)[0], row)) for row in _rows(ablation)[1:]}
    assert rows["base"]["Paper"] == "Tiny all terms: 97.00"  # the full-loss row beside the full-loss cell only
    assert rows["method.generator_loss.entropy=0"]["Paper"] == "Tiny w/o IE: 60.00"
    assert rows["base"]["Ours (%)"] == "91.00 ± 1.00" and rows["base"]["ε rigorous"] == "31.5"


def test_students_at_chance_are_said_to_be_so_in_place_of_a_verdict(tmp_path):
    one_class = {label: (9.8, 10.28, 11.35) for label in ACCURACY}  # every cell, both tables, within two points of chance
    page = _render(tmp_path, "flat", "chance", one_class)
    figure, ablation = _section(page, "Tiny Fig. 1"), _section(page, "Tiny Table 1")
    assert ("is flat from iterations = 2 to 8. Here (3 seeds a point): at chance at every point run (at most 10.48%; "
            "chance 10%): the paper's trend cannot be read here.") in figure
    assert ("Tiny w/o IE vs Tiny all terms: below (60.00 vs 97.00). Here (3 seeds a point): at chance at every point "
            "run (at most 10.48%; chance 10%): the paper's trend cannot be read here.") in ablation
    assert "holds" not in figure + ablation and "does not hold" not in figure + ablation


def test_each_figure_is_drawn_and_linked_from_the_page(pages):
    for name in ("tiny_rising", "tiny_unrun", "tiny_ablation"):
        assert f"](figures/{name}_smoke.png)" in pages["up"]
        assert (pages["root"] / "up" / "results" / "figures" / f"{name}_smoke.png").stat().st_size > 1000


def test_a_page_of_some_datasets_leaves_the_others_off_and_says_so(tmp_path):
    root = spec_folder(tmp_path / "sweeps").parent
    (root / "sweeps" / "tiny_two.yaml").write_text(RISING.replace("tiny_rising", "tiny_two").replace(
        "base: [method=dpsd, privacy=label, dataset=digits, privacy.epsilon=10]",
        "base: [method=dpsd, privacy=label, privacy.epsilon=10]\n").replace("grid:\n", "grid:\n  dataset: [digits, mnist]\n"))
    (root / "papers.csv").write_text(f"{PAPER_HEAD}\n")
    claims_path(root / "papers.csv").write_text(CLAIMS_HEAD + "\n"
                                                + "dpsd,Tiny Fig. 1,iterations,tiny_two,,accuracy,,,,,,up,none,,,t:1,\n")
    page = root / "page.md"
    render_report([root / "sweeps" / "tiny_two.yaml"], "smoke", [f"results_dir={root / 'results'}"],
                  root / "papers.csv", root / "reports", markdown=page, datasets=["digits"])
    text = page.read_text()
    assert "Left off this page: its mnist cells." in text
    assert "| mnist |" not in text and "**mnist" not in text and "**digits, student accuracy.**" in text


# --- the reference file against papers.csv and the specs -----------------------------------------------------------


@pytest.fixture(scope="module")
def claims():
    return load_claims(claims_path(PAPERS))


def test_the_directions_read_from_printed_points_are_what_those_points_give(claims):
    """A claim marked ``points: papers.csv`` states what the printed points give under the same rule as ours."""
    reference = load_reference(PAPERS)
    printed = claims[claims["points"] == "papers.csv"]
    assert len(printed) >= 14
    for _, claim in printed.iterrows():
        rows = reference[(reference["table"] == claim["table"]) & (reference["dataset"] == claim["dataset"])
                         & (reference["metric"] == "accuracy")]
        if claim["cell"]:
            left = rows[rows["row"] == claim["paper_row"]].set_index("epsilon")["value_number"]
            right = rows[rows["row"] == claim["paper_versus"]].set_index("epsilon")["value_number"]
            assert len(left) and set(left.index) == set(right.index), claim["paper_row"]
            found = {sign(Point(0.0, left[e] - right[e])) for e in left.index}
            assert found == {claim["trend"]}, (claim["table"], claim["paper_row"], found)
        else:
            x_key = str(load_spec(REPO / "sweeps" / f"{claim['spec']}.yaml").feeds["x"])
            points = sorted((Point(float(switches(r["note"])[x_key]), r["value_number"]) for _, r in rows.iterrows()
                             if x_key in switches(r["note"])), key=lambda p: p.x)
            low, high = float(claim["x_from"]), float(claim["x_to"])
            assert (low, high, claim["trend"]) in segments(points), (claim["table"], segments(points))


def test_every_claim_names_a_spec_whose_cells_it_can_be_checked_on(claims):
    """Each claim with a spec: the spec exists; a trend's spec has an x axis holding its range and the lines it names;
    a comparison finds at least one pair of the spec's cells; the metric is one the page reads."""
    checked = claims[claims["spec"] != ""]
    assert set(checked["spec"]) >= {"dpsd_fig5_bound", "dpsd_fig5_sigma", "dpsd_fig5_iterations", "dpsd_fig5_topk",
                                    "dpsd_fig5_data_amount", "dgd_queries", "dgd_synthetic_amount", "dgd_teachers",
                                    "dgd_noise_scale", "dp_dfd_fig2", "dp_dfd_fig3", "dpdfd_fig2", "dpdfd_table5",
                                    "dpsd_table6", "dpdfd_table6", "dp_dfd_table3"}
    for name, rows in checked.groupby("spec"):
        spec = load_spec(REPO / "sweeps" / f"{name}.yaml")
        cells = expand_cells(spec, "laptop", [])
        groups = pd.DataFrame([{"group": group_label(c.label), "dataset": c.dataset,
                                "overrides": dict(o.split("=", 1) for o in c.overrides if "=" in o)}
                               for c in cells]).drop_duplicates("group").reset_index(drop=True)
        for _, claim in rows[rows["trend"] != ""].iterrows():
            assert claim["metric"] in METRICS, claim["metric"]
            assert claim["dataset"] == "" or claim["dataset"] in set(groups["dataset"]), (name, claim["dataset"])
            if claim["cell"]:
                assert pairs(groups, claim["cell"], claim["versus"], claim["dataset"]), (name, claim["cell"])
                continue
            x_key = spec.feeds.get("x")
            assert x_key, name
            xs = {float(row["overrides"][x_key]) for _, row in groups.iterrows() if x_key in row["overrides"]}
            for bound in (claim["x_from"], claim["x_to"]):
                assert bound == "" or float(bound) in xs, (name, bound, sorted(xs))


def test_the_sensitivity_pages_are_in_the_manifest_one_per_paper_on_mnist():
    pages = {str(page.markdown): page for page in load_pages(REPO / "results" / "pages.yaml", REPO / "sweeps")}
    for paper in ("dpsd", "dpdfd", "dp_dfd", "dgd"):
        page = pages[f"results/sensitivity_{paper}.md"]
        assert page.scale == "laptop" and page.datasets == ("mnist",)
        assert all(load_spec(REPO / "sweeps" / f"{name}.yaml").paper == paper for name in page.only)
        assert all(load_spec(REPO / "sweeps" / f"{name}.yaml").seeds == (0, 1, 2) for name in page.only), paper


def test_a_sentence_read_from_fewer_seeds_than_planned_says_how_many_ran():
    from dpsd.report.sensitivity import _seeds_a_point

    planned = pd.Series([3, 3, 3])
    assert _seeds_a_point(pd.Series([3, 3, 3]), planned) == "3 seeds a point"
    assert _seeds_a_point(pd.Series([1, 3]), planned) == "1 to 3 of 3 seeds a point"
    assert _seeds_a_point(pd.Series([1, 1]), planned) == "1 of 3 seeds a point"
    assert _seeds_a_point(pd.Series([], dtype=int), pd.Series([], dtype=int)) == "no cell"


def test_a_run_metric_the_spec_names_stands_beside_the_accuracy_as_mean_and_sample_std_over_its_seeds():
    """``feeds.metrics: [topk_survival]``: the share of answers the top-k kept, in %, over the seeds that recorded it;
    a dash where no seed did (a cell not run, or runs by code that did not record it)."""
    from dpsd.report.cells import NOT_RUN, SURVIVAL, group_frame
    from dpsd.report.sensitivity import point_table

    cells = pd.DataFrame({
        "order": [0, 1, 2, 3, 4], "group": ["k=3", "k=3", "k=10", "k=10", "k=5"], "overrides": [{}] * 5,
        "config": [None] * 5, "method": "dpsd", "dataset": "mnist", "epsilon": None, "x": [3, 3, 10, 10, 5],
        "series": "inf", "status": [RUN, RUN, RUN, RUN, NOT_RUN], "run_id": ["a", "b", "c", "d", None],
        "artifact_uri": None, "accuracy": [20.0, 30.0, 70.0, 80.0, math.nan], "eps_claimed": math.inf,
        "eps_rigorous": math.inf, SURVIVAL: [0.2, 0.4, math.nan, math.nan, math.nan], "code_version": ""})
    groups = group_frame(cells)
    assert groups.loc[0, f"{SURVIVAL}_std"] == pytest.approx(0.1414, abs=1e-4)  # ddof = 1
    table = point_table(groups, None, {"x": "privacy.k", "metrics": ["topk_survival"]})
    column = f"{METRICS['topk_survival'][2].capitalize()} (%)"
    assert list(table.columns[:5]) == ["Dataset", "Line", "k", "Ours (%)", column]
    assert list(table[column]) == ["30.00 ± 14.14", "—", "—"]  # k = 3, 5 (not run), 10 (not recorded)
    assert list(table["Ours (%)"]) == ["25.00 ± 7.07", "not run", "75.00 ± 7.07"]
    assert column not in point_table(groups, None, {"x": "privacy.k"}).columns  # only where the spec names it
