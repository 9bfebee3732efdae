"""Faults of one run, each ending in one line: a tracking server that does not answer
(before the run, or only once it has finished: the local fallback store and `dpsd sync`), a device
that is not there, a truncated teacher cache, a NaN loss."""

from __future__ import annotations

import math
import socket

import mlflow
import pytest
import torch

from dpsd.cli import main
from dpsd.config import compose, resolve_device
from dpsd.errors import ConfigError, Fault
from dpsd.experiment import check_finite, run_experiment
from dpsd.teachers import load_or_train_teacher, teacher_key
from dpsd.tracking import INTENDED_URI, SYNCED_TO, sync_runs
from dpsd.version import METHOD_CODE_VERSION, method_code_version

TINY = ["method.iterations=4", "method.batch_size=32", "model.teacher.recipe.steps=30"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_tracking_server_that_does_not_answer_stops_the_run_before_training(tmp_path, capsys):
    uri = f"http://127.0.0.1:{closed_port()}"
    assert main(["run", *TINY, f"results_dir={tmp_path}", f"tracking.uri={uri}"]) == 1
    assert one_line_error(capsys) == (
        f"dpsd run: error: tracking server {uri} does not answer (connection refused or host unreachable); "
        "start it (mlflow server --host 127.0.0.1 ...) or leave tracking.uri unset for the local store under results/")
    assert not (tmp_path / "teachers").exists()  # nothing trained


def test_a_server_gone_when_the_run_ends_leaves_it_in_the_fallback_store_and_sync_pushes_it(tmp_path, capsys, monkeypatch):
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr("dpsd.tracking.check_tracking", lambda cfg: None)  # it answered when the run started
    assert main(["run", *TINY, f"results_dir={tmp_path}", f"tracking.uri={uri}", "tracking.http_retries=0"]) == 0
    out = capsys.readouterr().out
    fallback = tmp_path / "fallback"
    assert f"not recorded on the server (tracking server {uri}: connection refused or host unreachable)" in out
    assert f"push it once the server is back: dpsd sync {fallback}" in out
    kept = mlflow.MlflowClient(f"sqlite:///{fallback / 'mlflow.db'}")
    (run,) = kept.search_runs([kept.get_experiment_by_name("dpsd").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags[INTENDED_URI] == uri
    assert run.data.tags[METHOD_CODE_VERSION] == method_code_version(run.data.tags["method"])  # what a sweep reads

    target = f"sqlite:///{tmp_path / 'server.db'}"  # the server's store, back
    assert main(["sync", str(fallback), "--to", target]) == 0
    assert capsys.readouterr().out.endswith("synced 1 run(s)\n")
    server = mlflow.MlflowClient(target)
    (copied,) = server.search_runs([server.get_experiment_by_name("dpsd").experiment_id])
    assert copied.info.status == "FINISHED" and copied.info.start_time == run.info.start_time
    assert copied.data.params == run.data.params and copied.data.metrics == run.data.metrics
    assert {a.path for a in server.list_artifacts(copied.info.run_id)} == {
        "config.yaml", "ledger.json", "samples.png", "student.pt", "generator.pt"}
    assert kept.get_run(run.info.run_id).data.tags[SYNCED_TO] == f"{target} {copied.info.run_id}"
    assert sync_runs(fallback, target).copied == []  # a second sync copies nothing


def test_sync_leaves_a_run_that_has_not_ended_and_copies_it_whole_once_it_has(tmp_path, capsys):
    """A lane's store synced while one of its runs still trains: that run is not copied half made (and marked
    synced, so its end would never be copied); the next sync copies it, ended, with the metrics it logged last."""
    fallback, target = tmp_path / "lane", f"sqlite:///{tmp_path / 'main.db'}"
    fallback.mkdir()
    lane = mlflow.MlflowClient(f"sqlite:///{fallback / 'mlflow.db'}")
    experiment = lane.create_experiment("dpsd", artifact_location=(fallback / "mlartifacts").as_uri())
    ended = lane.create_run(experiment, tags={INTENDED_URI: target}).info.run_id
    lane.set_terminated(ended, "FINISHED")
    running = lane.create_run(experiment, tags={INTENDED_URI: target}).info.run_id
    lane.log_metric(running, "student_test_accuracy", 0.5)

    assert main(["sync", str(fallback)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == (f"left 1 run(s) that have not ended (still running, or killed before they ended): {running}; "
                       "a later sync copies each once it has ended") and out[-1] == "synced 1 run(s)"
    assert SYNCED_TO not in lane.get_run(running).data.tags

    lane.log_metric(running, "student_test_accuracy", 0.9)
    lane.set_terminated(running, "FINISHED")
    synced = sync_runs(fallback)
    assert [local for local, _, _ in synced.copied] == [running] and synced.unended == []
    main_store = mlflow.MlflowClient(target)
    copied = main_store.get_run(synced.copied[0][2])
    assert copied.info.status == "FINISHED" and copied.data.metrics == {"student_test_accuracy": 0.9}
    assert sync_runs(fallback).copied == []


def test_a_device_that_is_not_here_is_one_line_listing_those_that_are(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert main(["run", "device=cuda"]) == 2
    assert one_line_error(capsys) == "dpsd run: error: device 'cuda' is not on this machine; here: cpu"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"^device 'cuda:2' is not on this machine; here: cpu, cuda:0, cuda:1$"):
        resolve_device("cuda:2")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError, match="^device 'gpu' is not a device name; here: cpu, cuda:0, cuda:1$"):
        resolve_device("gpu")


def test_a_truncated_teacher_cache_is_retrained_with_a_one_line_warning(tmp_path, capsys):
    from dpsd.data import load_data

    cfg = compose([*TINY, f"results_dir={tmp_path}", "device=cpu"])
    data = load_data(cfg)
    _, first = load_or_train_teacher(cfg, data, torch.device("cpu"))
    path = tmp_path / "teachers" / teacher_key(cfg, data.convention).filename
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # a run killed mid-write before writes were atomic
    capsys.readouterr()
    _, second = load_or_train_teacher(cfg, data, torch.device("cpu"))
    warning = capsys.readouterr().err.strip()
    assert warning.startswith(f"dpsd: warning: teacher cache {path} is unreadable (") and warning.endswith("retraining it")
    assert "\n" not in warning and second["cached"] is False and second["test_accuracy"] == first["test_accuracy"]
    _, third = load_or_train_teacher(cfg, data, torch.device("cpu"))
    assert third["cached"] is True  # the retrained teacher was written whole


def test_a_nan_loss_stops_the_run_naming_the_step_and_the_term(tmp_path, monkeypatch, capsys):
    from dpsd.methods.dpsd import DPSDTrainer

    step = DPSDTrainer.step
    calls = []

    def poisoned(self):
        metrics = step(self)
        calls.append(1)
        return {**metrics, "generator_loss": math.nan} if len(calls) == 3 else metrics

    monkeypatch.setattr(DPSDTrainer, "step", poisoned)
    assert main(["run", *TINY, f"results_dir={tmp_path}"]) == 1
    assert one_line_error(capsys) == "dpsd run: error: step 2: generator_loss = nan; the run stopped instead of training on"
    assert not (tmp_path / "mlflow.db").exists()  # nothing recorded: no garbage reported
    with pytest.raises(Fault, match=r"^step 7: loss = inf, kl = -inf;"):
        check_finite(7, {"loss": math.inf, "ok": 1.0, "kl": -math.inf})
