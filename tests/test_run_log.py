"""`dpsd run` keeps its progress lines in <results_dir>/logs/run-<time>-<pid>.log, interactive or not: a run in a
terminal once printed only a bar, and kept nothing to read after the terminal closed."""

import sys

import pytest

from dpsd import progress
from dpsd.cli import main
from dpsd.progress import read_line

TINY = ["method.iterations=4", "method.batch_size=32", "model.teacher.recipe.steps=30", "tracking=none", "device=cpu"]


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "piped"])
def test_a_run_keeps_its_progress_lines_in_a_log_under_results_dir(tmp_path, capsys, monkeypatch, terminal):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal, raising=False)
    assert main(["run", *TINY, f"results_dir={tmp_path}"]) == 0
    logs = sorted((tmp_path / "logs").glob("run-*.log"))
    assert len(logs) == 1
    printed = capsys.readouterr().out
    assert printed.count(f"progress log: {logs[0]}") == 1  # its path, once, before anything else
    kept = logs[0].read_text().splitlines()
    assert kept[0] == " ".join(["dpsd run", *TINY, f"results_dir={tmp_path}"])
    steps = [line.step for line in map(read_line, kept) if line is not None and line.desc == "dpsd"]
    assert steps == [1, 2, 3, 4]  # every line of the run, readable by the tools that read logs
    assert any(line.startswith("student test accuracy") for line in kept)  # and its summary
    assert progress.log_file() is None and not progress.is_terminal(open(__file__))  # the file is the run's alone
