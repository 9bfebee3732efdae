"""tools/run_cells.py (a spec's cells without Ray, for a machine that has none): the cells it would start, in
priority order (the specs as given, each spec's lowest seed first), less those --skip names; --dry-run runs none; a second
call on the same --stores starts only what the first left."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_tool

from dpsd.allocator import available
from dpsd.errors import ConfigError

SPEC = """name: tiny_cells
on_demand: true
base: [dataset=digits, privacy=none]
seeds: [0, 1, 2]
cells:
  - [method=teacher]
  - [method=kd_data]
  - [method=dfkd]
"""


def test_the_dry_run_lists_the_cells_seed_by_seed_and_leaves_out_the_skipped(tmp_path, capsys):
    spec = tmp_path / "tiny_cells.yaml"
    spec.write_text(SPEC)
    code = load_tool("run_cells").main([str(spec), "--dry-run", "--no-archive", "--skip", "method=teacher ",
                                        f"results_dir={tmp_path / 'results'}"])
    assert code == 0
    listed = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  tiny_cells: ")]
    assert len(listed) == 6  # 3 seeds x 2 cells: the teacher cells skipped
    assert [line.rsplit("seed=", 1)[1] for line in listed] == ["0", "0", "1", "1", "2", "2"]
    assert not any("method=teacher " in line for line in listed)
    assert not list(tmp_path.glob("**/*.pt"))  # nothing trained


def test_a_second_call_on_the_same_stores_starts_only_what_the_first_left(tmp_path, capsys):
    """A driver stopped midway (a time limit, a kill) is started again with the same command: the cells its stores
    hold are done. (The first call also starts its worker under jemalloc where one can be preloaded, which the
    worker confirms.)"""
    spec = tmp_path / "tiny_cells.yaml"
    spec.write_text(SPEC.replace("seeds: [0, 1, 2]", "seeds: [0]"))
    common = [str(spec), "--no-archive", "--stores", str(tmp_path / "stores"), f"results_dir={tmp_path / 'results'}"]
    tool = Path(__file__).resolve().parents[1] / "tools" / "run_cells.py"  # its own process: its workers import it
    jemalloc = ["--jemalloc"] if available() else []
    first = subprocess.run([sys.executable, str(tool), *common, "--match", "method=kd_data", *jemalloc],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"run_cells: a worker under {'jemalloc' if jemalloc else 'malloc'}" in first.stdout
    assert "kd_data [method=kd_data seed=0]: step 400/400 (100%)" in first.stdout  # each line names its cell
    assert load_tool("run_cells").main([*common, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "run_cells: 2 cells to run" in out  # the teacher and dfkd; the recorded kd_data cell is done
    assert "method=kd_data" not in out


def test_a_skipped_cell_is_not_checked_against_a_setting_only_the_others_accept(tmp_path, capsys):
    """checkpoint.every_steps suits DAFL, not the teacher: --skip the teacher's cells and the call is accepted."""
    spec = tmp_path / "mixed_cells.yaml"
    spec.write_text("name: mixed_cells\non_demand: true\nbase: [dataset=digits, privacy=none]\nseeds: [0]\n"
                    "cells:\n  - [method=teacher]\n  - [method=dafl]\n")
    argv = [str(spec), "--dry-run", "--no-archive", "checkpoint.every_steps=2", f"results_dir={tmp_path / 'results'}"]
    with pytest.raises(ConfigError, match="mixed_cells cell 'method=teacher seed=0': .*'teacher' with these settings "
                                          "cannot resume.*--match or --skip chooses"):
        load_tool("run_cells").main(argv)
    tool = Path(__file__).resolve().parents[1] / "tools" / "run_cells.py"
    refused = subprocess.run([sys.executable, str(tool), *argv], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and refused.stderr.strip().startswith("run_cells: mixed_cells cell")
    assert len(refused.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert load_tool("run_cells").main([*argv, "--skip", "method=teacher "]) == 0
    assert [line.strip() for line in capsys.readouterr().out.splitlines()
            if line.startswith("  mixed_cells: ")] == ["mixed_cells: method=dafl seed=0"]


def test_a_dry_run_records_nothing_even_for_cells_whose_data_is_absent(tmp_path, capsys):
    """A dry run reads: a cell whose dataset is not there is listed, not recorded as a data_absent run in the store."""
    import mlflow

    spec = tmp_path / "absent_cells.yaml"
    spec.write_text("name: absent_cells\non_demand: true\nbase: [dataset=mnist, privacy=none]\nseeds: [0]\n"
                    "cells:\n  - [method=kd_data]\n")
    results = tmp_path / "results"
    assert load_tool("run_cells").main([str(spec), "--dry-run", "--no-archive", f"data.root={tmp_path / 'no_data'}",
                                        f"results_dir={results}"]) == 0
    if (results / "mlflow.db").exists():
        mlflow.set_tracking_uri(f"sqlite:///{results / 'mlflow.db'}")
        assert mlflow.search_runs(search_all_experiments=True).empty


def test_a_worker_ends_when_its_driver_is_killed(tmp_path):
    """Killing the driver alone (SIGKILL: no handler runs) leaves no worker running a cell beside the driver started
    again: each worker watches its driver and ends once it is gone."""
    import os
    import signal
    import time

    tools = Path(__file__).resolve().parents[1] / "tools"
    driver = tmp_path / "driver.py"
    driver.write_text(f"""import multiprocessing, os, sys, time
sys.path.insert(0, {str(tools)!r})
import run_cells
from concurrent.futures import ProcessPoolExecutor
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=run_cells._init_worker,
                             initargs=(None, context.Value("i", 0))) as pool:
        print(pool.submit(os.getpid).result(), flush=True)
        pool.submit(time.sleep, 300).result()
""")
    process = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True)
    worker = int(next(line for line in process.stdout if line.strip().isdigit()))

    def running(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return False
        return state != "Z"

    assert running(worker)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    deadline = time.time() + 60
    while running(worker) and time.time() < deadline:
        time.sleep(0.5)
    alive = running(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive
