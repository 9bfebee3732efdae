"""Sweeps: spec expansion and config hashes, dry runs, atomic cell claims, where a local Ray listens,
and (slow: Ray and MLflow servers start up) a sweep killed part-way and resumed, a two-spec sweep
against an `mlflow server` on loopback, one against a two-node Ray cluster, a failing cell, two
drivers at once and a tracking server that dies mid-sweep."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from dpsd.cell_identity import config_hash
from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.sweep.runner import run_sweep, run_sweeps
from dpsd.sweep.spec import REPO_SWEEPS, Spec, base_value, common_check, expand_cells, load_spec, split_scale
from dpsd.report.tables import code_cell
from dpsd.sweep.store import DATA_ABSENT, DONE, recorded_hashes
from dpsd.sweep.summary import format_summary
from dpsd.version import METHOD_CODE_VERSION, code_version, method_code_version

TINY = ["device=cpu", "model.teacher.recipe.steps=30", "++method.iterations=2", "++method.batch_size=16"]


def write_spec(folder: Path, name: str, **fields) -> Path:
    """A spec in ``folder``, with an empty ``common/check.yaml`` beside it unless the folder has one
    (these tests size their cells with TINY, not the package's shared check list)."""
    shared = folder / "common" / "check.yaml"
    if not shared.exists():
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.write_text("{}\n")
    spec = {"name": name, "paper": "dpsd", "feeds": {"kind": "table", "id": f"test {name}"},
            "base": ["method=dpsd", "privacy=label", *TINY], **fields}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def finished_runs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("dpsd")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.cell_status = 'done' and attributes.status = 'FINISHED'")


def sqlite_uri(results: Path) -> str:
    return f"sqlite:///{results / 'mlflow.db'}"


# ---------------------------------------------------------------------------------------------
# Fast: specs, cells, hashes, dry runs


def test_expand_cells_grid_explicit_seeds_and_check(tmp_path):
    path = write_spec(tmp_path, "grid", grid={"privacy.epsilon": [1, 10], "privacy.k": [3, 5]},
                      cells=[["method=dpsd_t", "privacy.epsilon=2"]], seeds=[0, 1],
                      check=["method.iterations=7", "method.batch_size=8"])
    cells = expand_cells(path, "check", ["method.batch_size=4"])
    assert [c.label for c in cells[:3]] == ["privacy.epsilon=1 privacy.k=3 seed=0",
                                            "privacy.epsilon=1 privacy.k=3 seed=1",
                                            "privacy.epsilon=1 privacy.k=5 seed=0"]
    assert len(cells) == (2 * 2 + 1) * 2
    assert cells[-1].label == "method=dpsd_t privacy.epsilon=2 seed=1" and cells[-1].method == "dpsd_t"
    cfg = cells[-1].compose()
    # check overrides apply under scale=check, the command line's overrides win over everything
    assert (cfg.method.iterations, cfg.method.batch_size, cfg.seed, cfg.privacy.epsilon) == (7, 4, 1, 2)
    assert cfg.scale.name == "check" and len({c.config_hash for c in cells}) == len(cells)
    paper = expand_cells(path, "paper", [])
    assert paper[0].compose().method.iterations == 2  # the base's, not check's; scale=paper is set
    assert paper[0].compose().scale.name == "paper" and paper[0].config_hash != cells[0].config_hash
    smoke = expand_cells(path, "smoke", [])  # the smoke scale alone: no check list
    assert smoke[0].compose().method.iterations == 2 and smoke[0].compose().scale.name == "smoke"


def test_seeds_n_runs_every_cell_at_seeds_0_to_n_minus_1_in_place_of_the_specs_list(tmp_path):
    path = write_spec(tmp_path, "seeded", grid={"privacy.epsilon": [1, 10]}, seeds=[5])
    overrides = [f"results_dir={tmp_path / 'results'}", "tracking.uri=null"]
    summary = run_sweep(path, "smoke", overrides, dry_run=True, seeds=3)
    assert summary["to_run"] == [f"privacy.epsilon={e} seed={s}" for e in (1, 10) for s in (0, 1, 2)]
    assert run_sweep(path, "smoke", overrides, dry_run=True)["to_run"] == ["privacy.epsilon=1 seed=5",
                                                                           "privacy.epsilon=10 seed=5"]
    with pytest.raises(ConfigError, match="--seeds must be a positive number"):
        run_sweep(path, "smoke", overrides, dry_run=True, seeds=0)


def test_shared_check_list_yields_to_what_a_spec_varies(tmp_path):
    """common/check.yaml beside the specs applies at check scale only, less the keys a spec's cells
    vary or its own check list sets; the spec's own list comes last."""
    (tmp_path / "common").mkdir(exist_ok=True)
    (tmp_path / "common" / "check.yaml").write_text(yaml.safe_dump(
        {"check": ["method.iterations=3", "method.batch_size=12", "++method.generator_iterations=5", "privacy.k=4"]}))
    path = write_spec(tmp_path, "shared", grid={"method.batch_size": [8, 16]}, check=["privacy.k=2"])
    assert load_spec(path).check == ("method.iterations=3", "++method.generator_iterations=5", "privacy.k=2")
    assert load_spec(path).smoke == ()
    check = [c.compose() for c in expand_cells(path, "check")]
    assert [(c.method.iterations, c.method.batch_size, c.privacy.k) for c in check] == [(3, 8, 2), (3, 16, 2)]
    for scale in ("smoke", "paper"):  # the base's TINY value: neither list applies
        assert expand_cells(path, scale)[0].compose().method.iterations == 2
    (tmp_path / "elsewhere").mkdir()
    alone = tmp_path / "elsewhere" / "alone.yaml"  # no common/ beside it: the package's shared list
    alone.write_text(yaml.safe_dump({"name": "alone", "paper": None, "feeds": {"kind": "table", "id": "alone",
                                     "reference": "none"}, "grid": {"privacy.epsilon": [1]}, "check": ["privacy.k=2"]}))
    assert load_spec(alone).check == (*common_check(REPO_SWEEPS / "any.yaml"), "privacy.k=2")
    assert "model.teacher.recipe.steps=200" in load_spec(alone).check


def test_base_value_reads_a_key_the_base_sets_and_no_key_it_merely_begins():
    spec = Spec(name="s", paper=None, feeds={}, base=("method.k=3", "dataset=digits", "++method=dpsd"), grid={},
                cells=(), seeds=(0,), smoke=())
    assert base_value(spec, "method", "-") == "dpsd" and base_value(spec, "dataset", "-") == "digits"
    assert base_value(spec, "model/teacher", "none") == "none"  # not set: the default
    assert base_value(spec, "method.k", "-") == "3"


def test_a_smoke_list_is_an_on_demand_specs_budget_alone(tmp_path):
    """scale=smoke is the smoke scale wherever it is used: a spec that is not on demand runs there as ``dpsd run
    scale=smoke`` composes it, so a smoke list on it (the pipeline check's list under its old name) is refused in
    one line that names check."""
    path = write_spec(tmp_path, "old", grid={"privacy.epsilon": [1]}, smoke=["method.iterations=3"])
    with pytest.raises(ConfigError, match="not on demand.*check") as caught:
        load_spec(path)
    assert "\n" not in str(caught.value)


def test_a_cells_own_value_beats_the_specs_smoke_list_and_cells_that_collapse_are_refused(tmp_path):
    """The ladder's budget sets ``++method.queries=400`` for every cell; its cell ``method.queries=2000`` must run at
    2,000, not collapse into the 400-query cell under a second label. An override that does collapse two cells (the
    command line's, which comes last) is a one-line error before anything runs."""
    path = write_spec(tmp_path, "own_value", cells=[["privacy.epsilon=1"], ["privacy.epsilon=1", "method.iterations=5"]],
                      smoke=["method.iterations=3"], on_demand=True)
    plain, more = (c.compose() for c in expand_cells(path, "smoke"))
    assert (plain.method.iterations, more.method.iterations) == (3, 5)
    with pytest.raises(ConfigError, match=r"cells 'privacy.epsilon=1 seed=0' and 'privacy.epsilon=1 "
                                          r"method.iterations=5 seed=0' compose to one config") as caught:
        expand_cells(path, "smoke", ["method.iterations=3"])
    assert "\n" not in str(caught.value)


def test_config_hash_ignores_where_not_what(tmp_path):
    base = compose(["privacy.epsilon=1"])
    moved = compose(["privacy.epsilon=1", f"results_dir={tmp_path}", "data.root=/elsewhere", "tracking=none",
                     "tracking.uri=http://127.0.0.1:1"])
    assert config_hash(base) == config_hash(moved)
    assert len(config_hash(base)) == 16
    assert config_hash(compose(["privacy.epsilon=2"])) != config_hash(base)
    assert config_hash(compose(["privacy.epsilon=1", "seed=1"])) != config_hash(base)


def test_cells_recorded_with_the_printed_dkd_keep_their_hash_and_their_runs_are_stale():
    """Runs recorded as distillation_loss=dkd before method.dkd_temperature existed computed Eq. (2) as printed.
    The cell keeps its key at the default temperature (its label-mode and kd runs computed what they compute now),
    and every such run is stale because the loss module is in the method's code version; another
    temperature is another cell."""
    from dpsd.version import DRIVER, _checkout_files, closure, method_module

    cfg = compose(["privacy=data"])
    recorded = OmegaConf.to_container(cfg)
    del recorded["method"]["dkd_temperature"]
    assert cfg.method.distillation_loss == "dkd" and cfg.method.dkd_temperature == 4.0
    assert config_hash(cfg) == config_hash(OmegaConf.create(recorded))
    assert config_hash(compose(["privacy=data", "method.dkd_temperature=1"])) != config_hash(cfg)
    files = _checkout_files()
    for method in ("dpsd", "dpdfd", "fed_dpsd"):
        assert "dpsd/losses.py" in closure([DRIVER, method_module(method, files)], files), method


def test_bad_specs_and_scales_are_one_line_errors(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "grdi": {"privacy.epsilon": [1]}}))
    with pytest.raises(ConfigError, match="unknown key.*grdi"):
        load_spec(path)
    with pytest.raises(ConfigError, match="no sweep spec"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="scale must be one of check, smoke, laptop, paper"):
        split_scale(["scale=huge"])
    assert split_scale(["scale=paper", "seed=3"]) == ("paper", ["seed=3"])
    path = write_spec(tmp_path, "typo", grid={"dataset": ["mnsit"]})
    with pytest.raises(ConfigError, match="cell dataset=mnsit seed=0: unknown dataset 'mnsit'"):
        expand_cells(path)


def test_dry_run_lists_done_to_run_and_data_absent(tmp_path):
    """A cell with a FINISHED done run is listed as done, one whose files are missing as data absent,
    the rest as to run; a dry run starts no trial and records nothing."""
    results = tmp_path / "results"
    path = write_spec(tmp_path, "dry", grid={"privacy.epsilon": [1, 10]},
                      cells=[["dataset=mnist", f"data.root={tmp_path / 'no-data'}"]])
    overrides = [f"results_dir={results}"]
    cells = expand_cells(path, "smoke", overrides)
    results.mkdir()
    client = MlflowClient(sqlite_uri(results))
    experiment = client.create_experiment("dpsd", artifact_location=(results / "mlartifacts").as_uri())
    run = client.create_run(experiment, tags={"sweep": "dry", "cell": cells[0].label,
                                              METHOD_CODE_VERSION: method_code_version(cells[0].method),
                                              "config_hash": cells[0].config_hash, "cell_status": DONE})
    client.set_terminated(run.info.run_id, "FINISHED")
    stale = client.create_run(experiment, tags={"config_hash": cells[1].config_hash, "cell_status": DONE})
    client.set_terminated(stale.info.run_id, "KILLED")  # an interrupted run is not done

    summary = run_sweep(path, "smoke", overrides, dry_run=True)
    assert summary["done"] == ["privacy.epsilon=1 seed=0"]
    assert summary["to_run"] == ["privacy.epsilon=10 seed=0"]
    assert summary["data_absent"] == [f"dataset=mnist data.root={tmp_path / 'no-data'} seed=0"]
    assert summary["ran"] == [] and summary["failed"] == []
    assert [c["status"] for c in summary["cells"]] == ["done", "to_run", "data_absent"]
    assert len(client.search_runs([experiment])) == 2  # nothing recorded
    assert not (results / "ray").exists()


def test_a_cell_recorded_by_other_code_is_stale_listed_and_rerun_only_on_request(tmp_path):
    """A FINISHED cell whose runs carry another code version of its method (or none:
    recorded before method versions were tagged, with the whole tree's only) is stale, not done; the
    default neither re-runs it nor counts it done (a typo fix costs no re-runs); --rerun-stale puts it
    back to run; the report marks it."""
    results = tmp_path / "results"
    path = write_spec(tmp_path, "stale", grid={"privacy.epsilon": [1, 10, 100]})
    overrides = [f"results_dir={results}"]
    cells = expand_cells(path, "smoke", overrides)
    results.mkdir()
    client = MlflowClient(sqlite_uri(results))
    experiment = client.create_experiment("dpsd", artifact_location=(results / "mlartifacts").as_uri())
    current = method_code_version(cells[0].method)
    for cell, version in zip(cells, [current, "0.0.9+dpsd.deadbeef0000", None]):
        tags = {"config_hash": cell.config_hash, "cell_status": DONE, "code_version": code_version(),
                **({METHOD_CODE_VERSION: version} if version else {})}
        client.set_terminated(client.create_run(experiment, tags=tags).info.run_id, "FINISHED")
    summary = run_sweep(path, "smoke", overrides, dry_run=True)
    assert summary["done"] == ["privacy.epsilon=1 seed=0"]
    assert summary["stale"] == ["privacy.epsilon=10 seed=0", "privacy.epsilon=100 seed=0"]
    assert summary["to_run"] == [] and summary["code_versions"] == {cells[0].method: current}
    assert "stale (recorded by other code only" in format_summary(summary, dry_run=True)
    rerun = run_sweep(path, "smoke", overrides, dry_run=True, rerun_stale=True)
    assert rerun["stale"] == [] and rerun["to_run"] == ["privacy.epsilon=10 seed=0", "privacy.epsilon=100 seed=0"]
    assert code_cell("0.0.9+dpsd.deadbeef0000") == "STALE 0.0.9+dpsd.deadbeef0000" and code_cell(current) == current
    assert code_cell(code_version()) == f"STALE {code_version()}"  # the whole tree's version: before method versions


# ---------------------------------------------------------------------------------------------
# Slow: real sweeps (each starts Ray; on a loaded 2-core machine minutes, not seconds)


def test_match_runs_only_the_cells_whose_label_it_matches_and_lists_the_rest_as_left_out(tmp_path):
    """``dpsd sweep --match``: cells the pattern does not match are left out (listed, not run); a
    pattern that is no regular expression, or matches no cell, is a one-line error before any compute."""
    results = tmp_path / "results"
    path = write_spec(tmp_path, "matched", grid={"privacy.epsilon": [1, 10]})
    overrides = [f"results_dir={results}"]
    summary = run_sweep(path, "smoke", overrides, dry_run=True, match=r"epsilon=10 ")
    assert summary["to_run"] == ["privacy.epsilon=10 seed=0"]
    assert summary["left_out"] == ["privacy.epsilon=1 seed=0"]
    assert "left out by --match (not run): 1" in format_summary(summary, dry_run=True)
    with pytest.raises(ConfigError, match="not a regular expression"):
        run_sweep(path, "smoke", overrides, dry_run=True, match="epsilon=(1")
    # a setting only the matched cells accept (DAFL checkpoints, DPSD does not) is checked on those alone
    mixed = write_spec(tmp_path, "mixed", grid={"method": ["dpsd", "dafl"]})
    checkpointed = [*overrides, "checkpoint.every_steps=2"]
    assert run_sweep(mixed, "smoke", checkpointed, dry_run=True, match="method=dafl")["left_out"] == ["method=dpsd seed=0"]
    with pytest.raises(ConfigError, match="method 'dpsd' with these settings cannot resume"):
        run_sweep(mixed, "smoke", checkpointed, dry_run=True)
    with pytest.raises(ConfigError, match="matches none of spec matched's 2 cell labels"):
        run_sweep(path, "smoke", overrides, dry_run=True, match="epsilon=100")


def test_trials_start_one_cell_of_each_method_in_turn():
    """Cells of one method (which may share ensemble members) do not start side by side."""
    from dpsd.sweep.runner import interleaved_by_method
    from dpsd.sweep.spec import Cell

    cells = [Cell("s", f"{method} {i}", (), f"{method}{i}", method=method)
             for method, n in (("pate", 2), ("dgd", 3), ("dpsd", 1)) for i in range(n)]
    assert [c.label for c in interleaved_by_method(cells)] == ["pate 0", "dgd 0", "dpsd 0", "pate 1", "dgd 1", "dgd 2"]


def test_a_second_driver_restores_only_an_experiment_whose_driver_is_gone():
    """A live driver's Tune experiment (its pointer names a running process here) is not restored by
    a second driver; a dead driver's, or one on another host, is."""
    from dpsd.sweep.runner import owned_by_live_driver

    here = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert owned_by_live_driver({"driver": f"{here}:{os.getppid()}"})
    assert not owned_by_live_driver({"driver": f"{here}:{gone.pid}"})
    assert not owned_by_live_driver({"driver": f"{here}:{os.getpid()}"})  # its own
    assert not owned_by_live_driver({"driver": f"another-{here}:{os.getppid()}"})
    assert not owned_by_live_driver({})  # a pointer written before drivers were named


def test_a_rerun_with_nothing_new_leaves_mlflow_as_it_was(tmp_path):
    """Data-absent cells are recorded once (with their sweep's parent run); a second run finds them
    recorded and neither adds a run nor reopens the parent (``dpsd reproduce`` run twice)."""
    results = tmp_path / "results"
    path = write_spec(tmp_path, "absent", cells=[["dataset=mnist", f"data.root={tmp_path / 'no-data'}"]])

    def snapshot() -> list:
        client = MlflowClient(sqlite_uri(results))
        runs = client.search_runs([client.get_experiment_by_name("dpsd").experiment_id])
        return sorted((r.info.run_id, r.info.status, r.info.end_time, r.data.tags.get("cell_status")) for r in runs)

    first = run_sweep(path, "smoke", [f"results_dir={results}"])
    before = snapshot()
    second = run_sweep(path, "smoke", [f"results_dir={results}"])
    assert first["data_absent"] == second["data_absent"] == [f"dataset=mnist data.root={tmp_path / 'no-data'} seed=0"]
    assert first["parent_run_id"] and second["parent_run_id"] is None
    assert Counter(row[3] for row in before) == {None: 1, DATA_ABSENT: 1}  # the parent and the recorded cell
    assert snapshot() == before


def listed(output: str, spec: str, title: str) -> list[str]:
    """The cells a ``dpsd sweep`` summary lists under ``title`` (Tune's own tables come before it)."""
    lines = output[output.rindex(f"sweep {spec} (scale="):].splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(title)]
    items = []
    for line in lines[starts[0] + 1:] if starts else []:
        if not line.startswith("  "):
            break
        items.append(line.strip())
    return items


def _cell_runs(uri: str) -> Counter:
    return Counter(run.data.tags["config_hash"] for run in finished_runs(uri))


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_killed_sweep_resumes_without_rerunning_or_losing_cells(tmp_path):
    results = tmp_path / "results"
    path = write_spec(tmp_path, "killme", grid={"privacy.epsilon": [1, 2, 5, 10]})
    overrides = [f"results_dir={results}"]
    hashes = {c.config_hash for c in expand_cells(path, "smoke", overrides)}
    uri = sqlite_uri(results)
    results.mkdir()  # the store exists before the driver starts, so polling it never races its creation
    MlflowClient(uri).create_experiment("dpsd", artifact_location=(results / "mlartifacts").as_uri())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "dpsd.cli", "sweep", str(path), *overrides],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                              start_new_session=True)
    try:
        deadline = time.time() + 900
        while time.time() < deadline and driver.poll() is None:
            if finished_runs(uri):
                break
            time.sleep(0.5)
        assert driver.poll() is None, "the sweep ended before it could be killed"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, and whatever it started in its session
        driver.wait()
    before = {run.data.tags["config_hash"]: run.info.run_id for run in finished_runs(uri)}
    assert 1 <= len(before) < len(hashes), "kill the sweep part-way"
    assert list((results / "ray").glob("killme-smoke.current")), "the killed driver left its experiment"

    summary = run_sweep(path, "smoke", overrides)
    assert summary["restored"], "the killed driver's experiment is resumed with Tuner.restore"
    assert summary["failed"] == [] and summary["errors"] == []
    done_hashes = {c["config_hash"] for c in summary["cells"] if c["status"] == "done"}
    ran_hashes = {c["config_hash"] for c in summary["cells"] if c["status"] == "ran"}
    # a trial in flight at the kill may still finish in its orphaned Ray worker: then it is done, not ran
    assert set(before) <= done_hashes and ran_hashes and done_hashes | ran_hashes == hashes
    after = {run.data.tags["config_hash"]: run.info.run_id for run in finished_runs(uri)}
    assert _cell_runs(uri) == Counter({h: 1 for h in hashes})  # none lost, none duplicated
    assert all(after[h] == run_id for h, run_id in before.items())  # the finished ones untouched
    assert not list((results / "ray").glob("*.current"))

    again = run_sweep(path, "smoke", overrides)  # a third time: nothing left, Ray not even started
    assert sorted(again["done"]) == sorted(c["label"] for c in summary["cells"]) and again["ran"] == []
    assert _cell_runs(uri) == Counter({h: 1 for h in hashes})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_mlflow_server(folder: Path, port: int) -> tuple[subprocess.Popen, str]:
    """``mlflow server`` on 127.0.0.1:``port`` with its store in ``folder``, once it answers."""
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
               "--artifacts-destination", str(folder / "server-artifacts"), "--workers", "1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=5) as response:
                if response.status == 200:
                    return server, uri
        except OSError:
            pass
        if server.poll() is not None or time.time() > deadline:
            os.killpg(server.pid, signal.SIGKILL)
            raise AssertionError("mlflow server did not come up")
        time.sleep(1)


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    process.wait(timeout=60)


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    server, uri = start_mlflow_server(tmp_path, port)
    try:
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        yield uri, listening
    finally:
        stop(server)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_spec_sweep_against_mlflow_server_on_loopback(tmp_path, mlflow_server):
    """Two specs sharing a cell: the second skips it (same config hash), runs its own, and every
    run lands in the server under its spec's parent run."""
    uri, listening = mlflow_server
    local = [line.split()[3] for line in listening.splitlines() if line.strip()]
    assert local and all(address.startswith("127.0.0.1:") for address in local), listening
    overrides = [f"results_dir={tmp_path / 'results'}", f"tracking.uri={uri}"]
    first = write_spec(tmp_path, "first", grid={"privacy.epsilon": [1]})
    second = write_spec(tmp_path, "second", grid={"privacy.epsilon": [1, 10]})
    one = run_sweep(first, "smoke", overrides)
    two = run_sweep(second, "smoke", overrides)
    assert one["ran"] == ["privacy.epsilon=1 seed=0"] and one["done"] == []
    assert two["done"] == ["privacy.epsilon=1 seed=0"] and two["ran"] == ["privacy.epsilon=10 seed=0"]
    assert one["tracking_uri"] == uri and not (tmp_path / "results" / "mlflow.db").exists()
    runs = finished_runs(uri)
    assert sorted(r.data.tags["sweep"] for r in runs) == ["first", "second"]
    for run in runs:
        parent = one["parent_run_id"] if run.data.tags["sweep"] == "first" else two["parent_run_id"]
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert 0 <= run.data.metrics["student_test_accuracy"] <= 1 and "eps_rigorous" in run.data.tags
    client = MlflowClient(uri)
    assert client.get_run(two["parent_run_id"]).data.tags["sweep_parent"] == "second"
    assert client.get_run(two["parent_run_id"]).info.status == "FINISHED"
    assert {a.path for a in client.list_artifacts(runs[0].info.run_id)} >= {"ledger.json", "student.pt"}


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_several_specs_run_as_one_tune_experiment_and_a_shared_cell_runs_once(tmp_path):
    """``dpsd reproduce``'s path: two specs sharing a cell run in one Tune experiment; the shared cell
    runs once, under the first spec's parent run, and the second spec lists it as done."""
    results = tmp_path / "results"
    overrides = [f"results_dir={results}"]
    first = write_spec(tmp_path, "first", grid={"privacy.epsilon": [1]})
    second = write_spec(tmp_path, "second", grid={"privacy.epsilon": [1, 10]})
    one, two = run_sweeps([first, second], "smoke", overrides)
    assert one["ran"] == ["privacy.epsilon=1 seed=0"] and one["done"] == [] and one["failed"] == []
    assert two["done"] == ["privacy.epsilon=1 seed=0"] and two["ran"] == ["privacy.epsilon=10 seed=0"]
    experiments = [path.name for path in (results / "ray").iterdir() if path.is_dir()]
    assert len(experiments) == 1 and experiments[0].startswith("reproduce-smoke-"), experiments
    runs = finished_runs(sqlite_uri(results))
    assert len(runs) == 2 and set(_cell_runs(sqlite_uri(results)).values()) == {1}
    parents = {run.data.tags["sweep"]: run.data.tags["mlflow.parentRunId"] for run in runs}
    assert parents == {"first": one["parent_run_id"], "second": two["parent_run_id"]}
    client = MlflowClient(sqlite_uri(results))
    assert all(client.get_run(p).info.status == "FINISHED" for p in parents.values())
    assert run_sweeps([first, second], "smoke", overrides)[1]["done"] == sorted(two["done"] + two["ran"])


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_sweep_on_a_two_node_ray_cluster(tmp_path):
    """Two 1-CPU nodes: two trials at once (writing one SQLite store), and a data-absent cell found
    by the cluster's teacher task and recorded as such."""
    from ray.cluster_utils import Cluster

    results = tmp_path / "results"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        absent = f"data.root={tmp_path / 'no-data'}"
        path = write_spec(tmp_path, "cluster", grid={"privacy.epsilon": [1, 10]}, cells=[["dataset=mnist", absent]])
        summary = run_sweep(path, "smoke", [f"results_dir={results}"], address=cluster.address)
    finally:
        cluster.shutdown()
    assert summary["resources"] == {"cpus": 1.0, "gpus": 0.0, "concurrent": 2}
    assert set(summary["ran"]) == {"privacy.epsilon=1 seed=0", "privacy.epsilon=10 seed=0"}
    assert summary["data_absent"] == [f"dataset=mnist {absent} seed=0"] and summary["failed"] == []
    uri = sqlite_uri(results)
    assert set(_cell_runs(uri).values()) == {1} and len(_cell_runs(uri)) == 2
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("dpsd").experiment_id
    assert list(recorded_hashes(client, experiment, DATA_ABSENT)) == [summary["cells"][2]["config_hash"]]


# ---------------------------------------------------------------------------------------------
# Faults: atomic claims, failed cells, two drivers, a tracking server that dies, loopback


def test_claims_are_atomic_and_a_dead_drivers_claim_is_taken_over(tmp_path):
    """Without Ray: of several claimants at once exactly one holds the cell; a claim whose heartbeat
    stops is taken over after the timeout; a failure becomes the cell's FAILED record."""
    import threading

    from dpsd.sweep.store import (ABANDONED, claim_cell, failed_cells, live_claims, record_failure,
                                  release_claim)

    uri = sqlite_uri(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    experiment = MlflowClient(uri).create_experiment("dpsd", artifact_location=(tmp_path / "art").as_uri())
    tags = {"sweep": "s", "cell": "c", "config_hash": "h0"}
    for attempt in range(3):
        digest = f"race{attempt}"
        won, barrier = [], threading.Barrier(4)

        def claimant(owner: str) -> None:
            barrier.wait()
            won.append(claim_cell(MlflowClient(uri), experiment, digest, {**tags, "config_hash": digest}, owner, 60))

        threads = [threading.Thread(target=claimant, args=(f"driver{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        holders = [run_id for run_id in won if run_id]
        assert len(holders) == 1, won
        assert [r.info.run_id for r in live_claims(MlflowClient(uri), experiment, digest, 60)] == holders

    client = MlflowClient(uri)
    dead = claim_cell(client, experiment, "h0", tags, "dead driver", timeout=60)
    assert claim_cell(client, experiment, "h0", tags, "other", timeout=60) is None  # live: left alone
    time.sleep(1.5)
    mine = claim_cell(client, experiment, "h0", tags, "other", timeout=1.0)  # its heartbeat is 1.5 s old
    assert mine and mine != dead
    assert client.get_run(dead).info.status == "KILLED" and client.get_run(dead).data.tags["cell_status"] == ABANDONED
    record_failure(client, mine, "OSError: [Errno 28] No space left on device")
    assert failed_cells(client, experiment) == {"h0": "OSError: [Errno 28] No space left on device"}
    again = claim_cell(client, experiment, "h0", tags, "next", timeout=60)  # a failed cell can be claimed again
    release_claim(client, again)
    assert live_claims(client, experiment, "h0", 60) == []


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_failing_cell_is_recorded_failed_listed_by_the_dry_run_and_retried(tmp_path, capsys):
    from dpsd.cli import main

    results = tmp_path / "results"
    path = write_spec(tmp_path, "failing", cells=[["privacy.epsilon=1"], ["privacy.epsilon=2", "method.student_lr=inf"]])
    overrides = [f"results_dir={results}"]
    good, bad = (c.config_hash for c in expand_cells(path, "smoke", overrides))
    first = run_sweep(path, "smoke", overrides)
    assert first["ran"] == ["privacy.epsilon=1 seed=0"]
    (reason,) = first["failure_reasons"].values()  # the step and terms depend on the method's update order
    assert first["failure_reasons"] == {"privacy.epsilon=2 method.student_lr=inf seed=0": reason}
    assert re.fullmatch(r"step \d+: \w+ = nan(, \w+ = nan)*; the run stopped instead of training on", reason), reason
    client = MlflowClient(sqlite_uri(results))
    experiment = client.get_experiment_by_name("dpsd").experiment_id
    (failed,) = client.search_runs([experiment], f"tags.config_hash = '{bad}'")
    assert failed.info.status == "FAILED" and failed.data.tags["failure_reason"] == reason
    assert failed.data.tags["mlflow.parentRunId"] == first["parent_run_id"]

    capsys.readouterr()
    assert main(["reproduce", "--dry-run", "--scale", "smoke", "--specs", str(tmp_path), "--only", "failing",
                 *overrides]) == 1
    printed = capsys.readouterr().out
    assert ("done (a FINISHED run exists): 1\n  privacy.epsilon=1 seed=0\nfailed (retried by the next run): 1\n"
            f"  privacy.epsilon=2 method.student_lr=inf seed=0: {reason}\n") in printed

    second = run_sweep(path, "smoke", overrides)  # retried (and fails again); the done cell is not rerun
    assert second["done"] == ["privacy.epsilon=1 seed=0"] and second["failed"] == ["privacy.epsilon=2 method.student_lr=inf seed=0"]
    assert len(client.search_runs([experiment], f"tags.config_hash = '{bad}' and attributes.status = 'FAILED'")) == 2
    assert _cell_runs(sqlite_uri(results)) == Counter({good: 1})


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_drivers_on_one_spec_run_no_cell_twice_and_take_over_a_dead_drivers_claim(tmp_path):
    """Two real `dpsd sweep` processes on the same spec and store at once, and a claim left by a
    driver that died (its heartbeat never moves): every cell is done exactly once."""
    results = tmp_path / "results"
    path = write_spec(tmp_path, "twodrivers", grid={"privacy.epsilon": [1, 2, 5, 10]})
    overrides = [f"results_dir={results}"]
    cells = expand_cells(path, "smoke", overrides)
    uri = sqlite_uri(results)
    results.mkdir()
    client = MlflowClient(uri)
    experiment = client.create_experiment("dpsd", artifact_location=(results / "mlartifacts").as_uri())
    from dpsd.sweep.store import ABANDONED, claim_cell

    dead = claim_cell(client, experiment, cells[1].config_hash, {"sweep": "twodrivers", "cell": cells[1].label,
                                                                  "config_hash": cells[1].config_hash}, "dead driver", 60)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "dpsd.cli", "sweep", str(path), *overrides, "--claim-timeout", "30"]
    started = time.monotonic()
    drivers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                start_new_session=True) for _ in range(2)]
    try:
        outputs = [driver.communicate(timeout=1200)[0] for driver in drivers]
    finally:
        for driver in drivers:
            stop(driver, signal.SIGKILL)
    print(f"two drivers: {time.monotonic() - started:.0f} s")
    assert [driver.returncode for driver in drivers] == [0, 0], outputs
    assert _cell_runs(uri) == Counter({c.config_hash: 1 for c in cells})  # none twice, none lost
    owners = Counter(run.data.tags["claim_owner"] for run in finished_runs(uri))
    print("cells done per driver:", dict(owners))
    assert client.get_run(dead).info.status == "KILLED" and client.get_run(dead).data.tags["cell_status"] == ABANDONED
    ran = [listed(output, "twodrivers", "ran: ") for output in outputs]
    print("ran per driver:", ran)
    assert sorted(ran[0] + ran[1]) == sorted(c.label for c in cells), outputs  # each cell ran by one driver


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_sweep_whose_tracking_server_dies_marks_nothing_unrecorded_done_and_resumes(tmp_path):
    import threading

    port = _free_port()
    server, uri = start_mlflow_server(tmp_path, port)
    path = write_spec(tmp_path, "serverdies", grid={"privacy.epsilon": [1, 2, 5]})
    overrides = [f"results_dir={tmp_path / 'results'}", f"tracking.uri={uri}", "tracking.http_retries=0"]
    hashes = {c.config_hash for c in expand_cells(path, "smoke", overrides)}
    killed = threading.Event()

    def kill_after_the_first_cell() -> None:
        while not killed.is_set():
            try:
                if finished_runs(uri):
                    stop(server, signal.SIGKILL)  # dies without a word
                    killed.set()
            except Exception:
                pass
            time.sleep(0.5)

    watcher = threading.Thread(target=kill_after_the_first_cell, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        first = run_sweep(path, "smoke", overrides, claim_timeout=20)
    finally:
        killed.set()
        stop(server, signal.SIGKILL)
    print(f"sweep with the server dying: {time.monotonic() - started:.0f} s; {first['failure_reasons']}")
    assert len(first["ran"]) >= 1 and first["failed"] and len(first["ran"]) + len(first["failed"]) == 3
    assert all(reason for reason in first["failure_reasons"].values())

    server, uri = start_mlflow_server(tmp_path, port)  # back, same store
    try:
        recorded = {run.data.tags["config_hash"] for run in finished_runs(uri)}
        ran = {c["config_hash"] for c in first["cells"] if c["status"] == "ran"}
        assert ran <= recorded  # nothing reported ran that the server does not hold
        started = time.monotonic()
        second = run_sweep(path, "smoke", overrides, claim_timeout=20)
        print(f"resumed sweep: {time.monotonic() - started:.0f} s")
        assert second["failed"] == [] and set(second["done"]) == set(first["ran"])
        assert _cell_runs(uri) == Counter({h: 1 for h in hashes})
    finally:
        stop(server)


@pytest.mark.timeout(600)
def test_a_local_sweeps_ray_listens_on_loopback_only():
    """Ray's GCS, raylet, object manager and workers of a local sweep (init_ray without an address),
    as `ss -ltnp` shows them: every listening socket of the process tree is on 127.0.0.1."""
    import re
    import shutil

    import ray

    from dpsd.sweep.runner import init_ray

    if shutil.which("ss") is None:
        pytest.skip("no ss here")

    def tree(pid: int) -> set[int]:
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
        return {pid}.union(*(tree(int(child)) for child in children))

    assert init_ray(None, num_cpus=1)
    try:
        ray.get(ray.remote(lambda: os.getpid()).remote())  # a worker too
        pids = tree(os.getpid())
        listening = {}
        for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines():
            names = {name for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line) if int(pid) in pids}
            if names:
                listening[line.split()[3]] = sorted(names)
    finally:
        ray.shutdown()
    print("listening:", listening)
    assert {"gcs_server", "raylet"} <= {name for names in listening.values() for name in names}, listening
    loopback = re.compile(r"^(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]|\[::1\]):\d+$")
    assert all(loopback.match(address) for address in listening), listening
def test_check_caps_leave_out_the_cells_above_an_amount_cap_at_check_scale_only(tmp_path):
    (tmp_path / "common").mkdir(exist_ok=True)
    (tmp_path / "common" / "check.yaml").write_text(yaml.safe_dump(
        {"check": ["++method.iterations=3"], "caps": {"method.num_teachers": 5}}))
    path = write_spec(tmp_path, "capped", base=["method=dgd"], grid={"method.num_teachers": [2, 5, 10]})
    assert [c.compose().method.num_teachers for c in expand_cells(path, "check")] == [2, 5]
    for scale in ("smoke", "laptop"):
        assert [c.compose().method.num_teachers for c in expand_cells(path, scale)] == [2, 5, 10]
    fixed = write_spec(tmp_path, "fixed", base=["method=dgd", "method.num_teachers=10"], seeds=[0, 1])
    assert len(expand_cells(fixed, "check")) == 2  # a size the spec sets for every cell is no amount axis
    (tmp_path / "common" / "check.yaml").write_text(yaml.safe_dump({"caps": {"method.num_teachers": "many"}}))
    with pytest.raises(ConfigError, match="caps must map override keys to numbers"):
        load_spec(path)


def test_an_on_demand_spec_runs_at_its_own_budget_at_smoke_without_the_shared_check_list_or_caps(tmp_path):
    """The ladder's and the query budget's cells keep their sizes (and their config hashes) whatever
    the shared pipeline-check sizes become: at smoke scale they take their own smoke list alone; at check scale
    they are checked like any other spec."""
    (tmp_path / "common").mkdir(exist_ok=True)
    (tmp_path / "common" / "check.yaml").write_text(yaml.safe_dump(
        {"check": ["method.epochs=3", "privacy.k=4"], "caps": {"method.num_teachers": 5}}))
    own = write_spec(tmp_path, "own", base=["method=pate"], grid={"method.num_teachers": [2, 10]},
                     smoke=["privacy.k=2"], on_demand=True)
    assert load_spec(own).smoke == ("privacy.k=2",)
    cells = [c.compose() for c in expand_cells(own, "smoke")]
    scale_epochs = compose(["method=pate", "scale=smoke"]).method.epochs  # PATE's own smoke value, not the shared 3
    assert scale_epochs != 3
    assert [(c.method.num_teachers, c.method.epochs, c.privacy.k) for c in cells] == [(2, scale_epochs, 2),
                                                                                    (10, scale_epochs, 2)]
    assert [(c.compose().method.num_teachers, c.compose().method.epochs, c.compose().privacy.k)
            for c in expand_cells(own, "check")] == [(2, 3, 4)]  # the shared list and caps, not its budget
    shared = write_spec(tmp_path, "shared", base=["method=pate"], grid={"method.num_teachers": [2, 10]},
                        check=["privacy.k=2"])
    assert [(c.compose().method.num_teachers, c.compose().method.epochs) for c in expand_cells(shared, "check")] == [(2, 3)]
    assert [c.compose().method.epochs for c in expand_cells(shared, "smoke")] == [scale_epochs] * 2


def test_a_sweep_warns_before_it_runs_cells_whose_budgets_differ(tmp_path, capsys):
    """Cells a spec declares comparable (feeds.comparable) at different budgets on a key the spec does not vary
    (LP-1ST's smoke epoch against DP-SGD's 0.1) are named before anything runs, and kept in the summary; two
    methods at the budgets their own files set are not compared (the report marks the same rows), and varying
    the key in the spec makes the difference the point of the table."""
    results = [f"results_dir={tmp_path / 'results'}"]
    path = write_spec(tmp_path, "unfair", base=["privacy=label"], cells=[["method=lp1st"], ["method=dpsgd"]],
                      feeds={"kind": "table", "id": "test", "comparable": [["lp1st", "dpsgd"]]})
    summary = run_sweep(path, "smoke", results, dry_run=True)
    assert summary["unequal_budgets"] == {"method=lp1st": "method.epochs=1 (others: 0.1)",
                                          "method=dpsgd": "method.epochs=0.1 (others: 1)"}
    assert "warning: unequal budget in cell method=lp1st: method.epochs=1 (others: 0.1)" in capsys.readouterr().err
    own = write_spec(tmp_path, "own", base=["privacy=label"], cells=[["method=lp1st"], ["method=dpsgd"]])
    assert run_sweep(own, "smoke", results, dry_run=True)["unequal_budgets"] == {}
    assert "unequal budget" not in capsys.readouterr().err
    path = write_spec(tmp_path, "fair", base=["privacy=label"],
                      feeds={"kind": "table", "id": "test", "comparable": [["lp1st", "dpsgd"]]},
                      cells=[["method=lp1st", "method.epochs=1"], ["method=dpsgd", "method.epochs=1"]])
    assert run_sweep(path, "smoke", results, dry_run=True)["unequal_budgets"] == {}


def test_a_sweep_ends_with_each_cells_method_accuracy_and_both_ledgers():
    """The summary prints the recorded figures, not Ray's table of config hashes."""
    from dpsd.sweep.spec import Cell
    from dpsd.sweep.summary import format_summary, summarize

    cells = [Cell("s", f"method=lp1st privacy.epsilon=1 seed={seed}", (), f"h{seed}", "digits", "lp1st") for seed in (0, 1)]
    figures = {"h0": {"accuracy": 0.25, "eps_claimed": 1.0, "eps_rigorous": 0.99996},
               "h1": {"accuracy": 0.35, "eps_claimed": 1.0, "eps_rigorous": 0.99996}}
    summary = summarize({"spec": "s", "scale": "smoke", "figures": figures}, cells, {"h0": "ran", "h1": "ran"})
    text = format_summary(summary)
    assert "  lp1st        method=lp1st privacy.epsilon=1" in text
    assert "accuracy 30.00 ± 7.07% (n = 2)  ε claimed 1  ε rigorous 1" in text
