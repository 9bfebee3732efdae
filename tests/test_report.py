"""`dpsd report` and `dpsd reproduce`: tables, curves and index.html from real tiny digits runs.

The module fixture runs four real DPSD cells (digits, 2 iterations, ε ∈ {1, 10}, seeds 0 and 1)
through ``run_experiment`` and tags them as a sweep trial would (SWEEP_SCHEMA); a fifth cell
(ε = 100) is left unrun and a sixth (MNIST) is recorded as ``data_absent``. The reference numbers
come from a tiny CSV written here.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from PIL import Image

from conftest import spec_folder
from dpsd.cli import main
from dpsd.errors import ConfigError
from dpsd.experiment import run_experiment
from dpsd.report import output_files, render_report
from dpsd.report.runs import load_runs, write_archive
from dpsd.sweep.spec import expand_cells, load_spec

REPO = Path(__file__).resolve().parents[1]

TINY = ["device=cpu", "++method.iterations=2", "++method.batch_size=16", "model.teacher.recipe.steps=30"]
SPEC = """
name: tiny_curve
paper: dpsd
feeds: {kind: curve, id: "Tiny Table", title: "DPSD on digits", x: privacy.epsilon}
base: [method=dpsd, privacy=label]
grid:
  privacy.epsilon: [1, 10, 100]
cells:
  - [dataset=mnist, privacy.epsilon=1]
seeds: [0, 1]
check: [%s]
""" % ", ".join(TINY)
SAMPLES_SPEC = """
name: tiny_samples
feeds: {kind: samples, id: "Tiny Fig", title: "synthetic digits"}
base: [method=dpsd, privacy=label, privacy.epsilon=10]
check: [%s]
""" % ", ".join(TINY)
SENSITIVITY_SPEC = """
name: tiny_sensitivity
feeds: {kind: sensitivity, id: "Tiny Fig", reference: none, title: "per-query epsilon", x: privacy.query_epsilon}
base: [method=dpsd, privacy=label]
grid:
  privacy.epsilon: [1, 10]
seeds: [0, 1]
check: [%s]
""" % ", ".join(TINY)
REFERENCE = '''paper,table,row,method,dataset,architecture,epsilon,delta,metric,value,source,note
dpsd,Tiny Table,DPSD (label),dpsd,digits,,1,1e-05,accuracy,97.62,"paper.txt:1 ""Our DPSD""",switch: privacy=label
dpsd,Tiny Table,DPSD (label),dpsd,digits,,10,1e-05,accuracy,98.40,paper.txt:2,
dpsd,Tiny Table,DPSD (data),dpsd,digits,,10,1e-05,accuracy,91.50,paper.txt:3,switch: privacy=data
dpsd,Tiny Table,DP-GAN,,digits,,1,1e-05,accuracy,40.36,paper.txt:4,
dpsd,Tiny Table,DPSD (label),dpsd,mnist,,1,1e-05,accuracy,96.00,paper.txt:5,
dpsd,Other Table,DPSD (label),dpsd,digits,,1,1e-05,accuracy,11.11,paper.txt:6,
'''


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Specs, reference CSV and an MLflow store with four finished cells and one data-absent cell."""
    root = tmp_path_factory.mktemp("report")
    spec_folder(root / "sweeps")
    (root / "sweeps" / "tiny_curve.yaml").write_text(SPEC)
    (root / "sweeps" / "tiny_samples.yaml").write_text(SAMPLES_SPEC)  # their cells are tiny_curve cells
    (root / "sweeps" / "tiny_sensitivity.yaml").write_text(SENSITIVITY_SPEC)
    (root / "papers.csv").write_text(REFERENCE)
    shutil.copyfile(REPO / "results" / "reference" / "settings.csv", root / "settings.csv")  # read beside papers.csv
    overrides = [f"results_dir={root / 'results'}"]
    cells = expand_cells(load_spec(root / "sweeps" / "tiny_curve.yaml"), "check", overrides)
    accuracy, run_ids = {}, {}
    for cell in cells:
        if cell.dataset != "digits" or "privacy.epsilon=100" in cell.label:
            continue
        summary = run_experiment(cell.compose(), show_progress=False)
        client = mlflow.MlflowClient(summary["tracking_uri"])
        tags = {"sweep": cell.spec, "cell": cell.label, "config_hash": cell.config_hash, "cell_status": "done"}
        for key, value in tags.items():
            client.set_tag(summary["run_id"], key, value)
        accuracy[cell.label] = 100 * summary["metrics"]["student_test_accuracy"]
        run_ids[cell.label] = summary["run_id"]
    absent = next(c for c in cells if c.dataset == "mnist" and c.label.endswith("seed=0"))
    experiment = client.get_experiment_by_name("dpsd")
    run = client.create_run(experiment.experiment_id, tags={"sweep": absent.spec, "cell": absent.label,
                                                            "config_hash": absent.config_hash,
                                                            "cell_status": "data_absent"})
    client.set_terminated(run.info.run_id, "FINISHED")
    return {"root": root, "overrides": overrides, "accuracy": accuracy, "uri": summary["tracking_uri"],
            "run_ids": run_ids}


def render(study, out_name):
    root = study["root"]
    return render_report(sorted((root / "sweeps").glob("*.yaml")), "check", study["overrides"],
                         root / "papers.csv", root / out_name)


@pytest.fixture(scope="module")
def report(study):
    """The report rendered once (``index.html``'s folder)."""
    return render(study, "reports").parent


def table_rows(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_runs_are_read_by_config_hash_with_percent_accuracy_and_both_ledgers(study):
    runs = load_runs(study["uri"], "dpsd")
    assert len(runs) == 5
    done = runs[runs["cell_status"] == "done"]
    assert sorted(done["accuracy"].round(6)) == sorted(round(a, 6) for a in study["accuracy"].values())
    assert (done["eps_claimed"].isin([1.0, 10.0])).all()
    assert (done["eps_rigorous"] > done["eps_claimed"]).all()
    assert (runs["cell_status"] == "data_absent").sum() == 1


def test_the_markdown_page_carries_each_specs_table_with_both_ledgers(study, tmp_path):
    root = study["root"]
    page = tmp_path / "what.md"
    render_report([root / "sweeps" / "tiny_curve.yaml"], "check", study["overrides"], root / "papers.csv",
                  tmp_path / "reports", page)
    text = page.read_text()
    assert text.startswith("# DPSD on digits\n")  # the page's title is its spec's (one title per question)
    assert (tmp_path / "reports" / "tables" / "tiny_curve_check.md").read_text() in text  # the table's own Markdown, whole
    assert text.index("## Setting vs paper") < text.index("## Tiny Table")  # the section opens with its setting
    header, *rows = table_rows(text.split("## Tiny Table", 1)[1])
    assert "ε claimed" in header and "ε rigorous" in header
    # each cell's "Reproduced" is the mean over its seeds' accuracies
    by_cell: dict[str, list[float]] = {}
    for label, accuracy in study["accuracy"].items():
        by_cell.setdefault(label.split(" seed=")[0], []).append(accuracy)
    for cell, accuracies in by_cell.items():
        row = next(row for row in rows if row[1] == cell)
        assert row[5].startswith(f"{sum(accuracies) / len(accuracies):.2f} ± "), (cell, row)


def test_a_runs_archive_keeps_every_cell_when_the_store_is_lost_and_a_newer_run_replaces_its_row(study, tmp_path):
    stored = load_runs(study["uri"], "dpsd")
    archive = write_archive(stored, tmp_path / "runs.csv")
    empty_store = f"sqlite:///{tmp_path / 'lost' / 'mlflow.db'}"
    restored = load_runs(empty_store, "dpsd", archive)  # a new machine: no store, only the tracked file
    assert sorted(restored.index) == sorted(stored.index)
    columns = ["accuracy", "eps_claimed", "eps_rigorous", "cell_status", "run_id", "code_version"]
    pd.testing.assert_frame_equal(restored.loc[stored.index, columns], stored[columns], check_dtype=False)
    done = stored[stored["cell_status"] == "done"].index[0]
    older = pd.read_csv(archive).assign(start_time="2000-01-01T00:00:00+00:00", accuracy=-1.0, run_id="old")
    older.to_csv(archive, index=False)
    merged = load_runs(study["uri"], "dpsd", archive)
    assert merged.loc[done, "run_id"] == stored.loc[done, "run_id"]  # the store's later run wins
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a runs archive"):
        load_runs(empty_store, "dpsd", tmp_path / "bad.csv")


def test_table_shows_reported_numbers_from_the_csv_and_reproduced_ones_from_the_runs(study, report):
    markdown = (report / "tables" / "tiny_curve_check.md").read_text()
    assert "check scale: a pipeline check, its students near chance by design" in markdown
    comparison, context = markdown.split("Context: the paper's rows for methods this harness does not implement")
    header, *rows = table_rows(comparison)
    by_row = {(r[header.index("Row")], r[header.index("Dataset")], r[header.index("ε (target)")]): dict(zip(header, r))
              for r in rows}
    acc = study["accuracy"]
    for eps, reported in (("1", 97.62), ("10", 98.40)):
        key = next(k for k in by_row if k[0].startswith("DPSD (label)") and k[1] == "digits" and k[2] == eps)
        row = by_row[key]
        seeds = [acc[f"privacy.epsilon={eps} seed={s}"] for s in (0, 1)]
        mean, std = sum(seeds) / 2, abs(seeds[0] - seeds[1]) / math.sqrt(2)
        assert row["Reported"] == f"{reported:.2f}"
        assert row["Reproduced"] == f"{mean:.2f} ± {std:.2f}"
        assert row["Difference"] == f"{mean - reported:+.2f}"
        assert row["ε claimed"] == eps and row["Seeds"] == "2/2"
        client = mlflow.MlflowClient(study["uri"])
        minutes = [client.get_run(study["run_ids"][f"privacy.epsilon={eps} seed={s}"]).data.metrics["time_total_s"] / 60
                   for s in (0, 1)]
        assert row["Minutes"] == f"{sum(minutes) / 2:.1f}"
        assert float(row["ε rigorous"]) > float(eps)
        assert row["δ"] == "1e-05"
    data_row = next(v for k, v in by_row.items() if k[0].startswith("DPSD (data)"))
    assert data_row["Reproduced"] == "—"  # the label cells do not stand in for the data-sensitive row
    # a method the harness does not implement is context, never a comparison row
    assert not any(k[0].startswith("DP-GAN") for k in by_row)
    context_header, *context_rows = table_rows(context)
    assert context_header == ["Row", "Dataset", "ε", "Reported"]
    assert any(row[0].startswith("DP-GAN") and row[3] not in ("—", "") for row in context_rows)
    assert next(v for k, v in by_row.items() if k[1] == "mnist")["Reproduced"] == "data absent"
    unrun = next(v for k, v in by_row.items() if k[2] == "100")
    assert unrun["Reproduced"] == "—" and unrun["Reported"] == "—" and unrun["Seeds"] == "0/2" and unrun["Minutes"] == "—"
    assert "11.11" not in markdown  # another table's row
    assert 'paper.txt:1 "Our DPSD"; switch: privacy=label' in markdown


def test_a_report_without_the_papers_files_says_which_file_it_expected(study, tmp_path, capsys):
    """Run from another folder, the default ``results/reference/papers.csv`` (and ``settings.csv`` beside it) is not
    found: the page renders without the papers' numbers, and stderr names each file it expected."""
    root = study["root"]
    render_report(sorted((root / "sweeps").glob("*.yaml")), "check", study["overrides"], tmp_path / "none" / "papers.csv",
                  tmp_path / "out")
    warned = capsys.readouterr().err
    assert f"no file {tmp_path / 'none' / 'papers.csv'}" in warned
    assert f"no file {tmp_path / 'none' / 'settings.csv'}" in warned
    render(study, "reports_with_both")  # the study's papers.csv with settings.csv beside it
    assert "no file" not in capsys.readouterr().err


def test_a_spec_rendered_at_two_scales_into_one_folder_keeps_both(study, tmp_path):
    """Every file a render writes is named for the spec and the scale: the laptop render of a spec does not overwrite
    the check render's table (whose runs it does not have) in the same ``out``."""
    root, out = study["root"], tmp_path / "reports"
    for scale in ("check", "laptop"):
        render_report([root / "sweeps" / "tiny_curve.yaml"], scale, study["overrides"], root / "papers.csv", out)
    check, laptop = (table_rows((out / "tables" / f"tiny_curve_{scale}.md").read_text()) for scale in ("check", "laptop"))
    assert any("±" in cell for row in check for cell in row)  # the check cells' runs
    assert not any("±" in cell for row in laptop for cell in row)  # none at laptop scale
    assert (out / "figures" / "tiny_curve_check.png").is_file()


def test_long_file_names_are_cut_with_a_hash_of_the_whole():
    short = "ladder_smoke_dpsd_label"
    assert output_files.slug(short) == short and output_files.slug("a b/c") == "a_b_c"
    first, second = (output_files.slug("x" * 200 + tail) for tail in ("_default", "_variant"))
    assert len(first) == len(second) == output_files.SLUG_LENGTH and first != second
    assert first.startswith("x" * 100) and first == output_files.slug("x" * 200 + "_default")


def test_latex_and_html_carry_the_same_numbers(report):
    tables = report / "tables"
    latex = (tables / "tiny_curve_check.tex").read_text()
    page = (tables / "tiny_curve_check.html").read_text()
    reproduced = [r[5] for r in table_rows((tables / "tiny_curve_check.md").read_text())[1:] if len(r) > 5 and "±" in r[5]]
    assert len(reproduced) == 2
    for text in reproduced:
        assert text.replace("±", r"$\pm$") in latex and text in page
    assert r"\begin{tabular}" in latex and r"\toprule" in latex and "98.40" in latex and "98.40" in page


def test_curve_png_is_written_and_the_report_command_renders_identical_files_again(study, report, capsys):
    png = report / "figures" / "tiny_curve_check.png"
    with Image.open(png) as image:
        assert image.size[0] > 100 and len(image.convert("L").getcolors(maxcolors=256)) > 10  # a plot, not a blank
    with Image.open(report / "figures" / "tiny_sensitivity_check.png") as image:
        assert image.size[1] > 700  # accuracy above, both ε ledgers below
    root, again = study["root"], study["root"] / "again"
    assert main(["report", "--scale", "check", "--no-archive", "--specs", str(root / "sweeps"), "--reference",
                 str(root / "papers.csv"), "--out", str(again), *study["overrides"]]) == 0
    assert str(again / "index.html") in capsys.readouterr().out
    names = sorted(p.relative_to(report) for p in report.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for name in names:
        assert (report / name).read_bytes() == (again / name).read_bytes(), name


def test_index_links_every_table_format_and_figure(report):
    index = (report / "index.html").read_text()
    for href in ("tables/tiny_curve_check.md", "tables/tiny_curve_check.tex", "tables/tiny_curve_check.html", "figures/tiny_curve_check.png"):
        assert f'href="{href}"' in index, href
    assert 'src="figures/tiny_curve_check.png"' in index and '<table id="T_tiny_curve"' in index
    assert 'href="tables/tiny_samples_check.md"' in index and '<table id="T_tiny_samples"' in index


def test_sample_grid_is_the_runs_samples_artifact(study, report):
    grid = report / "samples" / "tiny_samples_check" / "base.png"
    assert f'src="samples/tiny_samples_check/{grid.name}"' in (report / "index.html").read_text()
    artifact = mlflow.artifacts.download_artifacts(run_id=study["run_ids"]["privacy.epsilon=10 seed=0"],
                                                   artifact_path="samples.png", tracking_uri=study["uri"])
    assert grid.read_bytes() == open(artifact, "rb").read()


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_index_renders_in_headless_chromium_with_its_tables_and_figures(study, report):
    index = report / "index.html"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--virtual-time-budget=5000", "--hide-scrollbars"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", index.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    # the scoreboard's table, then the spec's three, the curve's context (the paper's other methods) and the setting
    # beside the paper's, a table of its own
    assert dom.count("<table") == 6 and "<h2>Scoreboard</h2>" in dom and dom.count('<div class="scroll">') == 4
    assert dom.count('<table class="settings-table"') == 1
    assert "DPSD (label)" in dom and "synthetic digits" in dom
    loaded = re.search(r'data-images-loaded="(\d+)"', dom)
    total = re.search(r'data-images-total="(\d+)"', dom)
    assert total and int(total.group(1)) == 3 and loaded and loaded.group(1) == total.group(1)
    shot = study["root"] / "screenshot.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=1280,2000", f"--screenshot={shot}", index.as_uri()],
                   capture_output=True, timeout=120, check=True)
    with Image.open(shot) as image:
        assert image.size == (1280, 2000)
        assert len(image.convert("L").getcolors(maxcolors=256)) > 20  # text, table rules and the plot, not a blank page


@pytest.mark.slow
def test_reproduce_runs_the_sweep_then_the_report_and_a_second_time_runs_nothing(tmp_path, capsys):
    """The real path: ``dpsd reproduce`` -> Ray Tune sweep (dpsd/sweep/) -> MLflow -> report."""
    spec_folder(tmp_path / "sweeps")
    (tmp_path / "sweeps" / "tiny_samples.yaml").write_text(SAMPLES_SPEC)
    (tmp_path / "papers.csv").write_text(REFERENCE)
    args = ["--specs", str(tmp_path / "sweeps"), "--reference", str(tmp_path / "papers.csv"),
            "--out", str(tmp_path / "reports"), "--no-archive", f"results_dir={tmp_path / 'results'}"]
    assert main(["reproduce", "--dry-run", *args]) == 0
    assert "to run: 1" in capsys.readouterr().out and not (tmp_path / "reports").exists()
    assert main(["reproduce", *args]) == 0
    assert "ran: 1" in capsys.readouterr().out
    first = (tmp_path / "reports" / "tables" / "tiny_samples_check.md").read_text()
    reproduced = table_rows(first)[1][5]
    runs = load_runs(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}", "dpsd")
    assert reproduced == f"{runs['accuracy'].iloc[0]:.2f}" and len(runs) == 1
    assert (tmp_path / "reports" / "samples" / "tiny_samples_check" / "base.png").is_file()
    assert main(["reproduce", *args]) == 0
    printed = capsys.readouterr().out
    assert "done (a FINISHED run exists): 1" in printed and "ran:" not in printed
    assert (tmp_path / "reports" / "tables" / "tiny_samples_check.md").read_text() == first


def test_a_bare_reproduce_leaves_out_on_demand_specs_and_runs_them_when_named(tmp_path, capsys):
    """The ladder and the query budget are experiments at their own budget: a bare ``dpsd reproduce``
    (the pipeline check, its default scale check) must not start them, and ``--only`` must; the line that names one
    gives the scale of its budget, smoke, and so does a line under one named at scale check, whose cells there are a
    pipeline check (a dry run there would list every cell as to run beside its archived runs at smoke)."""
    spec_folder(tmp_path / "sweeps")
    (tmp_path / "sweeps" / "tiny_samples.yaml").write_text(SAMPLES_SPEC)
    (tmp_path / "sweeps" / "tiny_ladder.yaml").write_text(SAMPLES_SPEC.replace("tiny_samples", "tiny_ladder")
                                                         + "on_demand: true\n")
    args = ["--dry-run", "--specs", str(tmp_path / "sweeps"), f"results_dir={tmp_path / 'results'}"]
    assert main(["reproduce", *args]) == 0
    printed = capsys.readouterr().out
    assert "sweep tiny_samples" in printed and "sweep tiny_ladder (" not in printed
    assert ("sweep tiny_ladder: on demand (an experiment at its own budget), not run; run it with --scale smoke "
            "--only tiny_ladder") in printed
    assert "sweep tiny_samples (scale=check) — dry run" in printed
    assert main(["reproduce", *args, "--only", "tiny_ladder"]) == 0
    printed = capsys.readouterr().out
    assert "sweep tiny_ladder (scale=check) — dry run" in printed
    assert ("sweep tiny_ladder: on demand, planned at --scale check (a pipeline check of its cells, not its runs); "
            "its own budget: --scale smoke --only tiny_ladder") in printed
    assert main(["reproduce", *args, "--scale", "smoke", "--only", "tiny_ladder"]) == 0
    printed = capsys.readouterr().out
    assert "sweep tiny_ladder (scale=smoke) — dry run" in printed and "planned at --scale check" not in printed
    assert main(["reproduce", *args, "--scale", "laptop"]) == 0
    assert "run it with --scale laptop --only tiny_ladder" in capsys.readouterr().out
    (tmp_path / "sweeps" / "tiny_ladder.yaml").write_text(SAMPLES_SPEC + "on_demand: sometimes\n")
    with pytest.raises(ConfigError, match="on_demand must be true or false"):
        load_spec(tmp_path / "sweeps" / "tiny_ladder.yaml")


@pytest.mark.parametrize("command", ["reproduce", "report"])
def test_a_folder_without_specs_is_a_one_line_error_not_an_empty_success(tmp_path, capsys, command):
    """Started outside the repository (no ``sweeps/`` there), reproduce ran and rendered nothing and exited 0."""
    dry = ["--dry-run"] if command == "reproduce" else []
    assert main([command, *dry, "--specs", str(tmp_path), f"results_dir={tmp_path / 'results'}"]) == 2
    error = capsys.readouterr().err
    assert error == f"dpsd {command}: error: no sweep specs (*.yaml) in {tmp_path}: run from the repository root, or pass --specs FOLDER\n"
    assert not (tmp_path / "results").exists()


def test_a_series_that_names_a_config_group_is_labelled_by_the_groups_name():
    """``feeds.series: method`` must label a line ``dgd``, not with the method's whole config node."""
    from dpsd.config import compose
    from dpsd.report.cells import cell_values

    cfg = compose(["method=dgd", "privacy=label"])
    assert cell_values(cfg, "privacy.epsilon", "method")["series"] == "dgd"
    assert cell_values(cfg, "privacy.epsilon", "dataset")["series"] == "digits"
    assert cell_values(cfg, "privacy.epsilon", "privacy.k")["series"] == str(cfg.privacy.k)


def test_a_log_x_axis_is_labelled_at_the_plotted_values_without_overlapping_minor_labels():
    """ε₀ from 0.02 to 0.4 spans little more than a decade, where matplotlib labels its minor ticks
    ("2×10⁻²", "3×10⁻²", …) into one another; the axis must instead name each plotted x once."""

    from dpsd.report.cells import RUN
    from dpsd.report.figures import line_figure

    xs = [0.02, 0.05, 0.066667, 0.1, 0.4]
    ran = pd.DataFrame({"status": RUN, "dataset": "mnist", "series": "dgd", "x": xs,
                        "accuracy": [10.0, 15.0, 17.5, 21.8, 10.3], "accuracy_std": None, "teacher_accuracy": 99.0,
                        "eps_claimed": [0.021, 0.058, 0.082, 0.136, 1.024], "eps_rigorous": [0.015, 0.043, 0.06, 0.097, 0.585]})
    absent = pd.DataFrame({"status": "data absent", "dataset": "fmnist", "series": "dgd", "x": xs, "accuracy": None,
                           "accuracy_std": None, "teacher_accuracy": None, "eps_claimed": None, "eps_rigorous": None})
    figure = line_figure(pd.concat([ran, absent], ignore_index=True), "privacy.query_epsilon", "title", "caption",
                         privacy_panel=True)
    figure.canvas.draw()
    assert len(figure.axes) == 4  # accuracy and ε panels for mnist and for fmnist (data absent)
    for axes in figure.axes:
        assert axes.get_xscale() == "log"
        assert [label.get_text() for label in axes.get_xticklabels()] == ["0.02", "0.05", "0.066667", "0.1", "0.4"]
        assert not any(label.get_text() for label in axes.get_xticklabels(minor=True))
        assert axes.get_xlim() == figure.axes[0].get_xlim()  # the panel without runs spans the same x values
    epsilon_labels = [label.get_text() for label in figure.axes[1].get_yticklabels() if label.get_text()]
    assert "0.1" in epsilon_labels and not any("e" in label or "×" in label for label in epsilon_labels)


def test_a_curve_never_mixes_two_neighbouring_relations():
    """Runs under two relations on one dataset give two panels (accuracy and ε), each
    titled with its relation and holding only that relation's lines; the paper's point goes beside
    its own method only. A dataset whose runs state one relation keeps a single panel."""

    from dpsd.report.cells import RUN
    from dpsd.report.figures import line_figure, panels

    def rows(series, relation, dataset="mnist"):
        return pd.DataFrame({"status": RUN, "dataset": dataset, "series": series, "method": series, "x": [1.0, 10.0],
                             "accuracy": [50.0, 80.0], "accuracy_std": None, "teacher_accuracy": 99.0,
                             "eps_claimed": [1.0, 10.0], "eps_rigorous": [2.0, 20.0], "neighbouring": relation})

    groups = pd.concat([rows("dpsd", "replace_record"), rows("dpsgd", "add_remove_record"),
                        rows("dpsd_t", "replace_record"), rows("dpsd", "replace_record", "fmnist")], ignore_index=True)
    assert panels(groups) == [("mnist", "replace_record"), ("mnist", "add_remove_record"), ("fmnist", "replace_record")]
    reference = pd.DataFrame({"dataset": "mnist", "method": ["dpsgd"], "row": ["DP-SGD (paper)"], "value_number": [90.0],
                              "epsilon_value": [1.0]})
    figure = line_figure(groups, "ε (target)", "title", "caption", reference=reference,
                         reference_x=lambda ref: ref["epsilon_value"], privacy_panel=True)
    titles = [axes.get_title() for axes in figure.axes[0::2]]  # each accuracy panel, its ε panel after it
    assert titles == ["mnist · ε w.r.t. replace_record", "mnist · ε w.r.t. add_remove_record",
                          "fmnist · ε w.r.t. replace_record"]
    accuracy = {axes.get_title(): set(axes.get_legend_handles_labels()[1]) for axes in figure.axes[0::2]}
    assert accuracy["mnist · ε w.r.t. replace_record"] == {"dpsd", "dpsd_t", "non-private teacher"}
    assert accuracy["mnist · ε w.r.t. add_remove_record"] == {"dpsgd", "non-private teacher", "paper: DP-SGD (paper)"}
    epsilon = figure.axes[1::2]
    assert [axes.get_ylabel() for axes in epsilon] == ["ε (replace_record)", "ε (add_remove_record)", "ε (replace_record)"]
    assert set(epsilon[1].get_legend_handles_labels()[1]) == {"dpsgd: ε claimed", "dpsgd: ε rigorous"}
    single = groups[groups["dataset"] == "fmnist"]
    assert panels(single.drop(columns="neighbouring")) == [("fmnist", None)]
    assert line_figure(single.drop(columns="neighbouring"), "x", "t", "c").axes[0].get_title() == "fmnist"


def test_an_infinite_ledger_is_named_in_its_panel_and_a_long_title_wraps_inside_the_figure():
    """ε rigorous = ∞ cannot sit on a log axis: the ε panel names it (at every point, or at how many) instead of
    dropping it unseen; a title wider than the figure is wrapped, not cut at its edges."""

    from dpsd.report.cells import RUN
    from dpsd.report.figures import line_figure

    groups = pd.DataFrame({"status": RUN, "dataset": "mnist", "series": "mnist", "x": [1000.0, 5000.0],
                           "accuracy": [16.0, 24.6], "accuracy_std": None, "teacher_accuracy": 99.0,
                           "eps_claimed": [1.0, 1.0], "eps_rigorous": [math.inf, math.inf]})
    title = "DP-DFD Fig. 2: DP-DFD: amount of synthetic data (stages x samples per stage), eps = 1"
    figure = line_figure(groups, "method.samples_per_stage", title, "caption", privacy_panel=True)
    legend = [text.get_text() for text in figure.axes[1].get_legend().get_texts()]
    assert legend == ["mnist: ε claimed", "mnist: ε rigorous ∞ at every point"]  # in the legend, clear of the points
    assert [text.get_text() for text in figure.axes[1].texts] == []
    suptitle = figure._suptitle.get_text()
    assert "\n" in suptitle and suptitle.replace("\n", " ") == title
    one_infinite = groups.assign(eps_rigorous=[math.inf, 3.0])
    legend = line_figure(one_infinite, "x", "t", "c", privacy_panel=True).axes[1].get_legend().get_texts()
    assert [t.get_text() for t in legend][-1] == "mnist: ε rigorous ∞ at 1 of 2 points"
    nothing_finite = groups.assign(eps_claimed=[math.inf, math.inf])
    notes = [t.get_text() for t in line_figure(nothing_finite, "x", "t", "c", privacy_panel=True).axes[1].texts]
    assert notes == ["no finite ε", "mnist: ε claimed ∞ at every point\nmnist: ε rigorous ∞ at every point"]


def test_a_teacher_ensembles_accuracy_is_drawn_dotted_beside_the_students_and_shared_lines_are_drawn_once():
    """DGD Fig. 8's teacher-count trend is read on the ensemble's clean vote: the figure must show it, not only the
    students near chance; two aggregations of one ensemble (the same accuracy at every x) share one line."""

    from dpsd.report.cells import RUN
    from dpsd.report.figures import ENSEMBLE_LABEL, line_figure

    def rows(series, ensemble):
        return pd.DataFrame({"status": RUN, "dataset": "mnist", "series": series, "x": [2.0, 5.0, 40.0],
                             "accuracy": [11.8, 12.5, 14.6], "accuracy_std": None, "teacher_accuracy": 99.0,
                             "eps_claimed": [8.2, 8.2, 8.2], "eps_rigorous": [math.inf] * 3,
                             "metrics.ensemble_test_accuracy": ensemble})

    figure = line_figure(rows("mnist", [0.6285, 0.7572, 0.7947]), "method.num_teachers", "t", "c")
    dotted = [line for line in figure.axes[0].get_lines() if line.get_label() == ENSEMBLE_LABEL]
    assert len(dotted) == 1 and dotted[0].get_linestyle() == ":"
    assert list(dotted[0].get_ydata()) == pytest.approx([62.85, 75.72, 79.47])
    both = pd.concat([rows("dgd", [0.79] * 3), rows("dgd_plus", [0.79] * 3)], ignore_index=True)
    labels = line_figure(both, "x", "t", "c").axes[0].get_legend_handles_labels()[1]
    assert labels.count(ENSEMBLE_LABEL) == 1 and {"dgd", "dgd_plus"} <= set(labels)
    apart = pd.concat([rows("dgd", [0.79] * 3), rows("dgd_plus", [0.70] * 3)], ignore_index=True)
    labels = line_figure(apart, "x", "t", "c").axes[0].get_legend_handles_labels()[1]
    assert {f"dgd: {ENSEMBLE_LABEL}", f"dgd_plus: {ENSEMBLE_LABEL}"} <= set(labels)
    without = rows("dpsd", [None] * 3).drop(columns="metrics.ensemble_test_accuracy")
    assert not any(ENSEMBLE_LABEL in label for label in
                   line_figure(without, "x", "t", "c").axes[0].get_legend_handles_labels()[1])


def test_a_resumed_runs_minutes_count_the_training_before_its_resume():
    """A run resumed from a checkpoint records its last process's wall seconds and the training before the resume
    apart; the tables' Minutes add them (a 13-hour run resumed at its end is not a 20-minute run)."""
    from dpsd.report.cells import wall_seconds

    assert wall_seconds(pd.Series({"metrics.time_total_s": 1200.0, "metrics.train_s_before_resume": 48000.0})) == 49200.0
    assert wall_seconds(pd.Series({"metrics.time_total_s": 1200.0, "metrics.train_s_before_resume": float("nan")})) == 1200.0
    assert wall_seconds(pd.Series({"metrics.time_total_s": 1200.0})) == 1200.0
    # a run recorded since time_total_s counts the training before its resume: read as it is
    assert wall_seconds(pd.Series({"metrics.time_total_s": 49200.0, "metrics.train_s_before_resume": 48000.0,
                                   "metrics.time_since_resume_s": 1200.0})) == 49200.0
