"""docs/cluster.md, tested: ``dpsd reproduce --address`` on a two-node Ray cluster (both nodes on loopback, one CPU
each, ``--cpus-per-trial 1``), every trial's run recorded in one MLflow tracking server (its own database and
artifact store), progress on the terminal and in the log file beside Tune's experiments."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[1]
TINY = ["device=cpu", "model.teacher.recipe.steps=30", "++method.iterations=2", "++method.batch_size=16"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def tracking_server(tmp_path):
    """``mlflow server`` on 127.0.0.1 with a database backend and an artifact store of its own (docs/cluster.md's
    step 2; SQLite here, PostgreSQL on a real cluster), once it answers."""
    port = _free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}",
               "--artifacts-destination", str(tmp_path / "server" / "artifacts"), "--workers", "1"]
    (tmp_path / "server").mkdir()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.time() < deadline, "mlflow server did not come up"
            time.sleep(1)
        yield uri
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # the server's own session: it and its workers
        server.wait(timeout=60)


@pytest.fixture
def loopback_cluster(monkeypatch):
    """A head node and a worker node (``ray start --head`` and ``ray start --address`` in docs/cluster.md; here
    ray.cluster_utils.Cluster, which stops exactly the processes it started), one CPU each, on 127.0.0.1."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    from dpsd.sweep.runner import LOOPBACK_ONLY

    monkeypatch.setenv(LOOPBACK_ONLY, "0")  # Ray keeps 127.0.0.1 as every node's address (dpsd/sweep/runner.py)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


def _overlap(runs) -> bool:
    (first, second) = sorted(runs, key=lambda run: run.info.start_time)
    return second.info.start_time < first.info.end_time


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_reproduce_on_a_two_node_cluster_records_every_trial_in_one_tracking_server(
        tmp_path, tracking_server, loopback_cluster, capsys):
    from dpsd.cli import main

    started = time.time()
    specs = tmp_path / "sweeps"
    (specs / "common").mkdir(parents=True)
    (specs / "common" / "check.yaml").write_text("{}\n")
    (specs / "cluster.yaml").write_text(yaml.safe_dump({
        "name": "cluster", "paper": None, "feeds": {"kind": "table", "id": "cluster test", "reference": "none"},
        "base": ["method=dpsd", "privacy=label", *TINY], "grid": {"privacy.epsilon": [1, 10]}}))
    results = tmp_path / "results"  # on a real cluster: a folder every node mounts at the same path
    code = main(["reproduce", "--only", "cluster", "--specs", str(specs), "--address", loopback_cluster.address,
                 "--cpus-per-trial", "1", "--no-archive", "--reference", str(REPO / "results/reference/papers.csv"),
                 "--out", str(tmp_path / "reports"), f"results_dir={results}", f"tracking.uri={tracking_server}"])
    printed = capsys.readouterr().out
    print(printed)
    print(f"wall time {time.time() - started:.0f} s")
    assert code == 0, printed
    assert "ran: 2" in printed and "privacy.epsilon=1 seed=0" in printed
    assert "progress: [2/2] ran cluster (check): privacy.epsilon=" in printed
    logs = list((results / "ray").glob("reproduce-*.log"))
    assert len(logs) == 1 and "progress: [2/2] ran" in logs[0].read_text()
    assert not (results / "mlflow.db").exists()  # nothing went to a local store

    client = MlflowClient(tracking_server)
    experiment = client.get_experiment_by_name("dpsd").experiment_id
    runs = client.search_runs([experiment], "tags.cell_status = 'done' and attributes.status = 'FINISHED'")
    assert sorted(run.data.tags["cell"] for run in runs) == ["privacy.epsilon=1 seed=0", "privacy.epsilon=10 seed=0"]
    parents = {run.data.tags["mlflow.parentRunId"] for run in runs}
    assert len(parents) == 1 and client.get_run(parents.pop()).info.status == "FINISHED"
    for run in runs:
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"ledger.json", "student.pt"}
    # one CPU a node and one a trial: two trials at once ran on the two nodes
    assert _overlap(runs), [(r.info.start_time, r.info.end_time) for r in runs]
