"""The reviewer's page: README's verdict and the headline page are regenerated from the archive alone (a fresh
clone with an empty store), the frontier is drawn, and an empty table says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dpsd.report import render_report
from dpsd.report.verdict import BEGIN, END, splice

REPO = Path(__file__).resolve().parents[1]


def _block(text: str) -> str:
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def _table(lines: list[str]) -> list[dict[str, str]]:
    """A Markdown table's rows (``lines``: its header, then its rows, no separator) as dicts keyed by column."""
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")))) for line in lines[1:]]


def _reproduced(page: str) -> list[str]:
    """The headline page's Row and Reproduced columns, in order (its comparison table)."""
    table = page.split("| Row | Cell |", 1)[1].split("Context:")[0]
    lines = ["| Row | Cell |" + table.splitlines()[0], *[line for line in table.splitlines()[1:]
                                                        if line.startswith("| ") and "---" not in line]]
    return [f"{r['Row']} {r['Reproduced']}" for r in _table(lines)]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``dpsd report --scale laptop --only headline`` on a fresh clone: an empty store, the tracked archive."""
    root = tmp_path_factory.mktemp("fresh")
    shutil.copyfile(REPO / "README.md", root / "README.md")
    render_report([REPO / "sweeps" / "headline.yaml"], "laptop",
                  [f"results_dir={root / 'results'}", f"data.root={REPO.parent / 'shared' / 'data'}"],
                  REPO / "results" / "reference" / "papers.csv", root / "reports", markdown=root / "headline.md",
                  archive=REPO / "results" / "runs.csv", readme=root / "README.md")
    return root


def test_a_fresh_clone_renders_the_committed_verdict_and_headline_from_the_archive(fresh):
    assert _block((fresh / "README.md").read_text()) == _block((REPO / "README.md").read_text()), (
        "README.md's verdict is not what the archive renders: run `dpsd report --scale laptop --only headline "
        "--markdown results/headline_laptop.md --readme README.md --archive results/runs.csv` and commit both")
    assert "| Method | Paper table |" in _block((REPO / "README.md").read_text())  # the README carries a table
    committed = (REPO / "results" / "headline_laptop.md").read_text()
    assert _reproduced((fresh / "headline.md").read_text()) == _reproduced(committed)
    assert committed.startswith("# Headline")  # its own title, not a shared one


def _run_at(table: str) -> dict[tuple[str, str], str]:
    """A verdict table's "Run at" per (Method, ε (paper))."""
    rows = _table([line for line in table.splitlines() if line.startswith("| ") and "---" not in line])
    return {(r["Method"], r["ε (paper)"]): r["Run at"] for r in rows}


def test_the_readme_reads_the_paper_rows_first_and_the_laptop_page_its_own(fresh):
    """DGD ran at both scales: the README's verdict shows its paper-scale run, the laptop page's own verdict table
    its laptop run (the laptop rows stay on their page), and each table's footnote says which it reads first."""
    readme = _block((fresh / "README.md").read_text())
    page = (fresh / "headline.md").read_text().split("### Verdict per paper row", 1)[1].split("### Verdict per method")[0]
    assert _run_at(readme)[("DGD", "10")] == "paper scale"
    assert _run_at(page)[("DGD", "10")] == "laptop scale"
    assert "Run at: the scale of the run shown, paper scale" in readme
    assert "Run at: the scale of the run shown, this page's scale where it has a current run" in page


def test_the_frontier_is_drawn_as_png_and_svg_and_linked_from_the_readme(fresh):
    for suffix in ("png", "svg"):
        assert (fresh / "results" / "figures" / f"headline_laptop_frontier.{suffix}").stat().st_size > 10_000
        assert (REPO / "results" / "figures" / f"headline_laptop_frontier.{suffix}").exists()
    assert "](results/figures/headline_laptop_frontier.png)" in _block((REPO / "README.md").read_text())
    assert 'src="figures/headline_laptop_frontier.png"' in (fresh / "reports" / "index.html").read_text()


def test_the_frontier_of_each_scale_has_its_own_file_and_the_readme_gets_its_own_scales(tmp_path):
    """results/headline_paper.md is rendered into the same results/figures/ as the laptop page whose frontier the
    README shows: one scale's frontier must not overwrite the other's, and ``--readme`` copies only the frontier of
    the render it splices in (not another scale's left in ``reports/``)."""
    reference = REPO / "results" / "reference" / "papers.csv"
    readme = tmp_path / "clone" / "README.md"
    readme.parent.mkdir()
    readme.write_text(f"# dpsd\n{BEGIN}\n{END}\n")
    for scale in ("paper", "laptop"):
        render_report([REPO / "sweeps" / "headline.yaml"], scale, [f"results_dir={tmp_path}"], reference,
                      tmp_path / "reports", archive=None, readme=readme if scale == "laptop" else None)
    drawn = sorted(path.name for path in (tmp_path / "reports" / "figures").glob("*_frontier.png"))
    assert drawn == ["headline_laptop_frontier.png", "headline_paper_frontier.png"]
    copied = sorted(path.name for path in (readme.parent / "results" / "figures").iterdir())
    assert copied == ["headline_laptop_frontier.png", "headline_laptop_frontier.svg"]
    assert "](results/figures/headline_laptop_frontier.png)" in readme.read_text()


def test_a_spec_without_runs_is_named_on_stderr_with_the_command_that_fills_it(tmp_path, capsys):
    render_report([REPO / "sweeps" / "dafl_table1.yaml"], "laptop", [f"results_dir={tmp_path}"],
                  REPO / "results" / "reference" / "papers.csv", tmp_path / "reports", archive=None)
    err = capsys.readouterr().err
    assert "warning: spec dafl_table1: no cell has a finished run" in err
    assert "dpsd sweep dafl_table1 scale=laptop" in err


def test_the_verdict_is_spliced_only_between_its_markers(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(f"# t\n{BEGIN}\nold\n{END}\nkept\n")
    splice(page, "new")
    assert page.read_text() == f"# t\n{BEGIN}\nnew\n{END}\nkept\n"
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match="no '<!-- verdict -->'"):
        splice(page, "new")


def test_one_verdict_sentence_per_method_says_what_was_searched_and_never_judges_one_seed():
    import math

    import pandas as pd

    from dpsd.config import compose
    from dpsd.report.verdict import method_verdicts, verdict_bullets

    def ref(method, eps, value):
        return {"paper": "dpsd", "table": "T", "row": method, "method": method, "dataset": "mnist", "epsilon": str(eps),
                "epsilon_value": float(eps), "metric": "accuracy", "value": f"{value:.2f}", "value_number": value,
                "note": "", "source": ""}

    label = compose(["method=dpsd", "dataset=digits", "privacy=label"])
    teacher = compose(["method=dpdfd", "dataset=digits"])

    def group(method, eps, accuracy, seeds, cfg):
        return {"method": method, "dataset": "mnist", "epsilon": float(eps), "status": "run", "accuracy": accuracy,
                "accuracy_std": 1.0 if seeds > 1 else math.nan, "seeds": seeds, "overrides": {}, "config": cfg}

    refs = pd.DataFrame([ref("dpsd", 1, 97.62), ref("dpdfd", 1, 95.12), ref("dp_dfd", 10, 98.56), ref("dgd", 1, 88.20)])
    groups = pd.DataFrame([group("dpsd", 1, 16.31, 3, label), group("dpdfd", 1, 96.0, 2, teacher),
                           group("dp_dfd", 10, 98.0, 1, compose(["method=dp_dfd", "dataset=digits"])),
                           group("dgd", 1, 20.0, 3, compose(["method=dgd", "dataset=digits"]))])
    searched = {"dpsd": {"readings": 5, "teachers": 2, "seeds": 1, "where": "without privacy (R3)",
                         "combinations": 3, "space": 48, "teacher": "lenet5, mean/std", "best": "20.64% (n = 1)"}}
    sentences = verdict_bullets(method_verdicts(refs, groups, searched))
    assert sentences[0].startswith("- **dpsd (label)**: does not reproduce under any of 3 of 48 faithful readings run "
                                   "at teacher lenet5, mean/std (2 teachers in all, 1 seed each); closest 16.31 ± 1.00% "
                                   "(n = 3)")
    assert sentences[0].endswith("; without privacy (R3) its best current faithful reading reaches 20.64% (n = 1).")
    searched["dpsd"]["stale"] = 2  # runs recorded by other code of the method are named, not counted as current
    assert method_verdicts(refs, groups, searched)["dpsd (label)"].endswith(
        "reaches 20.64% (n = 1) (2 runs of the search stale: recorded by other code of the method, to re-run)")
    assert "reproduces (reproduces)" not in sentences[1] and "**dpdfd (data)**: reproduces" in sentences[1]
    assert "one seed so far, no verdict" in sentences[2]
    # no readings search for a method: the sentence claims no count of readings or teachers it was not given
    assert "does not reproduce under the harness's one reading (no readings search run for it)" in sentences[3]
    assert "teacher" not in sentences[3]


def test_saving_the_frontier_twice_writes_the_same_bytes(tmp_path):
    from matplotlib.figure import Figure

    from dpsd.report.verdict import save_frontier

    def drawn() -> Figure:
        figure = Figure()
        axes = figure.add_subplot()
        axes.plot([1, 10], [20, 80], "o-", label="dpsd")
        axes.legend()
        return figure

    first, second = save_frontier(drawn(), tmp_path / "a"), save_frontier(drawn(), tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_every_method_of_the_frontier_has_its_own_colour():
    """The headline plots eleven methods in one panel: with matplotlib's ten colours cycled, the eleventh (the
    teacher) was drawn in the first's (DP-DFD's) blue."""
    import pandas as pd
    from matplotlib.colors import to_rgba

    from dpsd.report.cells import RUN
    from dpsd.report.verdict import frontier_figure

    methods = [f"method{i}" for i in range(12)]
    groups = pd.DataFrame({"method": methods, "status": RUN, "dataset": "mnist", "neighbouring": "replace_record",
                           "accuracy": range(12), "accuracy_std": 0.5, "eps_rigorous": 1.0, "eps_claimed": 1.0})
    axes = frontier_figure(groups, pd.DataFrame(), "caption").axes[0]
    handles, labels = axes.get_legend_handles_labels()
    assert sorted(labels) == sorted(methods)
    colours = {to_rgba(handle.lines[0].get_color()) for handle in handles}
    assert len(colours) == len(methods)



def test_a_recipe_beside_a_methods_defaults_is_its_own_series_named_by_what_it_sets():
    import pandas as pd
    from matplotlib.colors import to_rgba

    from dpsd.report.cells import RUN
    from dpsd.report.verdict import frontier_figure

    recipe = {"method": "dfpate", "model/teacher": "scattering_mlp", "method.target": "regress",
              "privacy.epsilon": "1"}
    groups = pd.DataFrame({"method": ["dfpate", "dfpate", "dpsgd"], "status": RUN, "dataset": "mnist",
                           "neighbouring": "teacher_partition", "accuracy": [68.0, 84.0, 90.0], "accuracy_std": 1.0,
                           "eps_rigorous": 1.0, "eps_claimed": 1.0,
                           "overrides": [{"method": "dfpate", "privacy.epsilon": "1"}, recipe, {"method": "dpsgd"}]})
    handles, labels = frontier_figure(groups, pd.DataFrame(), "caption").axes[0].get_legend_handles_labels()
    assert labels == ["dfpate", "dfpate (teacher=scattering_mlp, target=regress)", "dpsgd"]
    assert len({to_rgba(handle.lines[0].get_color()) for handle in handles}) == 3
    assert [handle.lines[0].get_marker() for handle in handles] == ["o", "o", "s"]

def _reference(rows):
    import pandas as pd

    from dpsd.report.reference import COLUMNS, parse_epsilon

    frame = pd.DataFrame([{**dict.fromkeys(COLUMNS, ""), **row} for row in rows])
    return frame.assign(epsilon_value=frame["epsilon"].map(parse_epsilon),
                        value_number=pd.to_numeric(frame["value"], errors="coerce"))


def test_the_papers_points_are_in_the_legend_inside_the_axes_and_in_their_own_relations_panel():
    """DP-DFD's label-DP points (an ε, no δ) go to the label panel, not to the replace_record one our runs of it
    are stated under; a point at 100% is drawn whole; the legend lies below the panels and names the markers."""
    import pandas as pd

    from dpsd.report.cells import RUN
    from dpsd.report.verdict import frontier_figure

    groups = pd.DataFrame({"method": ["dp_dfd", "lp1st"], "status": RUN, "dataset": "mnist",
                           "neighbouring": ["replace_record", "label"], "accuracy": [89.0, 99.0],
                           "accuracy_std": 1.0, "eps_rigorous": [float("inf"), 10.0], "eps_claimed": 10.0})
    refs = _reference([{"method": "dp_dfd", "dataset": "mnist", "epsilon": "10", "value": "98.56"},
                       {"method": "dpsgd", "dataset": "mnist", "epsilon": "10", "delta": "1e-05", "value": "100"}])
    figure = frontier_figure(groups, refs, "caption")
    panels = {axes.get_title(): axes for axes in figure.axes}
    crosses = {title: [tuple(line.get_ydata()) for line in axes.lines if line.get_marker() == "x"]
               for title, axes in panels.items()}
    assert crosses["mnist · ε w.r.t. label"] == [(98.56,)]
    assert crosses["mnist · ε w.r.t. replace_record"] == [(100.0,)]  # with a δ, and no run of its method: first panel
    assert all(axes.get_ylim()[1] > 100 for axes in figure.axes)
    texts = [text.get_text() for legend in figure.legends for text in legend.get_texts()]
    assert "the paper's reported point" in texts and {"dp_dfd", "lp1st", "dpsgd"} <= set(texts)
    assert not any(axes.get_legend() for axes in figure.axes)  # no legend over a panel's points


def test_a_number_another_paper_table_contradicts_names_its_source_and_the_other():
    import pandas as pd

    from dpsd.report.verdict import verdict_rows

    dgd = {"method": "dgd", "dataset": "mnist", "epsilon": "1", "delta": "1e-05", "metric": "accuracy", "row": "DGD"}
    reference = _reference([
        {**dgd, "paper": "dpsd", "table": "DPSD Table I", "value": "88.20", "source": 'dpsd.txt:173 "DGD [28]"',
         "note": "CONTRADICTION: ...; sparse row (4 values under 8 columns): read as MNIST/FMNIST"},
        {**dgd, "paper": "dpdfd", "table": "DPDFD Table 2", "value": "73.60", "source": 'dpdfd.md:193 "DGD"'},
        {**dgd, "paper": "dpdfd", "table": "DPDFD Table 6", "value": "50.00", "note": "switch: method.queries=750"},
        {**dgd, "epsilon": "10", "paper": "dpsd", "table": "DPSD Table I", "value": "97.40"},
        {**dgd, "epsilon": "10", "paper": "dgd", "table": "DGD Fig. 9", "value": "97.4"},
    ])
    refs = reference[reference["table"] == "DPSD Table I"].reset_index(drop=True)
    groups = pd.DataFrame([{"method": "dgd", "dataset": "mnist", "epsilon": eps, "status": "not run", "seeds": 0,
                            "overrides": {}, "config": None, "accuracy": float("nan")} for eps in (1.0, 10.0)])
    rows = verdict_rows(refs, groups, "results/ladder.md", reference)
    assert rows.set_index("ε (paper)").loc["1", "Paper"] == (
        "88.20 (DPSD Table I, dpsd.txt:173, a sparse row (4 values under 8 columns); "
        "DPDFD Table 2 prints 73.60 (dpdfd.md:193))")
    assert rows.set_index("ε (paper)").loc["10", "Paper"] == "97.40"  # another table agreeing is not named


def test_each_verdict_row_names_the_runs_it_reads():
    """The Runs column: each seed's run id (its first 8 characters) of the group the row reads; a row nothing ran
    names none."""
    import pandas as pd

    from dpsd.config import compose
    from dpsd.report.cells import RUN
    from dpsd.report.verdict import verdict_rows

    dgd = {"method": "dgd", "dataset": "mnist", "delta": "1e-05", "metric": "accuracy", "row": "DGD", "paper": "dpsd",
           "table": "DPSD Table I"}
    refs = _reference([{**dgd, "epsilon": "1", "value": "88.20"}, {**dgd, "epsilon": "10", "value": "97.40"}])
    cfg = compose(["method=dgd", "dataset=mnist"])
    groups = pd.DataFrame([
        {"method": "dgd", "dataset": "mnist", "epsilon": 1.0, "status": RUN, "seeds": 2, "overrides": {}, "config": cfg,
         "accuracy": 50.0, "accuracy_std": 1.0, "eps_claimed": 1.0, "eps_rigorous": float("inf"),
         "neighbouring": "teacher_partition", "code_version": "", "run_ids": ["640d98fa0123", "54234b6f4567"]},
        {"method": "dgd", "dataset": "mnist", "epsilon": 10.0, "status": "not run", "seeds": 0, "overrides": {},
         "config": None, "accuracy": float("nan"), "run_ids": []}])
    rows = verdict_rows(refs, groups, "results/ladder.md").set_index("ε (paper)")
    assert rows.loc["1", "Runs"] == "640d98fa 54234b6f"
    assert rows.loc["10", "Runs"] == "—"
