"""Resumable runs (dpsd/checkpoint.py): a run killed after a checkpoint ends as if it had never stopped."""

from __future__ import annotations

import pytest
import torch

from baselines.dafl import DAFLTrainer
from dpsd.methods.dp_dfd import DpDfdTrainer
from dpsd.checkpoint import Checkpointer
from dpsd.cell_identity import config_hash
from dpsd.config import compose, resolve_paths
from dpsd.experiment import resolve_run
from dpsd.errors import ConfigError
from dpsd.experiment import checkpointer, run_experiment
from dpsd.tracking import whole_run_wall

DAFL_SMALL = ["method=dafl", "tracking=none", "method.iterations=6", "method.batch_size=16",
              "model.teacher.recipe.steps=20"]


def _cfg(tmp_path, *extra):
    return resolve_paths(compose([*DAFL_SMALL, f"results_dir={tmp_path}", *extra]))


class Killed(RuntimeError):
    """The stand-in for a run's process being killed mid-run."""


def _killed_at(monkeypatch, call: int, trainer=DAFLTrainer) -> None:
    """Make ``trainer.step`` raise on its ``call``-th call (1-based), as a kill between steps would stop it."""
    original, calls = trainer.step, {"n": 0}

    def step(self):
        calls["n"] += 1
        if calls["n"] == call:
            raise Killed(f"killed at call {call}")
        return original(self)

    monkeypatch.setattr(trainer, "step", step)


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_as_an_unbroken_one(tmp_path, monkeypatch):
    unbroken = run_experiment(_cfg(tmp_path / "unbroken", "checkpoint.every_steps=2"), show_progress=False)["metrics"]
    cfg = _cfg(tmp_path / "killed", "checkpoint.every_steps=2")
    with monkeypatch.context() as patch:
        _killed_at(patch, 6)  # steps 1-5 done, checkpoints after steps 2 and 4
        with pytest.raises(Killed):
            run_experiment(cfg, show_progress=False)
    saved = checkpointer(cfg).path
    state = torch.load(saved, weights_only=False)
    assert state["steps_done"] == 4 and state["train_seconds"] > 0
    # the ledger's totals, not a release a step: DAFL's four steps of unprotected answers are one release
    assert [event.count for event in state["ledger_events"]] == [4 * cfg.method.batch_size]
    resumed = run_experiment(cfg, show_progress=False)["metrics"]
    assert resumed["resumed_after_step"] == 4 and unbroken["resumed_after_step"] == 0
    # the wall time counts the four steps trained before the kill, too
    assert resumed["train_s_before_resume"] == state["train_seconds"] < resumed["time_train_s"]
    # as recorded (dpsd.tracking.record_run) and as `dpsd run` prints it: time_total_s is the whole run's
    whole = {**resumed, **whole_run_wall(resumed)}
    assert whole["time_train_s"] <= whole["time_total_s"] == whole["time_since_resume_s"] + whole["train_s_before_resume"]
    for name in ("student_test_accuracy", "final_student_loss", "final_generator_loss", "queries", "eps_rigorous"):
        assert resumed[name] == unbroken[name], name
    assert not saved.exists()  # the run is kept: its checkpoint is deleted


DP_DFD_SMALL = ["method=dp_dfd", "privacy=label", "tracking=none", "model.teacher.recipe.steps=20", "method.stages=3",
                "method.samples_per_stage=32", "method.student_epochs=1", "method.batch_size=16",
                "method.pretrain_iterations=2"]  # a stage: 2 steps


def test_a_killed_dp_dfd_run_resumes_between_stages_and_ends_as_an_unbroken_one(tmp_path, monkeypatch):
    def cfg(name):
        return resolve_paths(compose([*DP_DFD_SMALL, f"results_dir={tmp_path / name}", "checkpoint.every_steps=2"]))

    unbroken = run_experiment(cfg("unbroken"), show_progress=False)["metrics"]
    killed = cfg("killed")
    with monkeypatch.context() as patch:
        _killed_at(patch, 6, DpDfdTrainer)  # stages 1 and 2 done (checkpoints after steps 2 and 4), stage 3 begun
        with pytest.raises(Killed):
            run_experiment(killed, show_progress=False)
    assert torch.load(checkpointer(killed).path, weights_only=False)["steps_done"] == 4
    pretrained = []
    with monkeypatch.context() as patch:
        patch.setattr(DpDfdTrainer, "pretrain", lambda self: pretrained.append(self))
        resumed = run_experiment(killed, show_progress=False)["metrics"]
    assert not pretrained  # the generator's pre-training is in the checkpoint, not run again
    assert resumed["resumed_after_step"] == 4
    for name in ("student_test_accuracy", "final_student_loss", "final_generator_loss", "queries", "eps_rigorous"):
        assert resumed[name] == unbroken[name], name


def test_a_dp_dfd_checkpoint_inside_a_stage_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="a multiple of a stage's 2 steps"):
        resolve_run(resolve_paths(compose([*DP_DFD_SMALL, f"results_dir={tmp_path}", "checkpoint.every_steps=3"])))


class _Stub:
    """A trainer with no state: enough to write a checkpoint file."""

    checkpointed = ()
    queries = 0


def test_a_checkpoint_written_by_other_code_is_not_resumed(tmp_path, capsys):
    cfg = _cfg(tmp_path, "checkpoint.every_steps=2")
    path = checkpointer(cfg).path
    Checkpointer(path=path, every=2, code="0.0.0+dafl.other").save(4, _Stub(), [], torch.Generator(), 1.0)
    metrics = run_experiment(cfg, show_progress=False)["metrics"]
    assert metrics["resumed_after_step"] == 0
    assert "starting afresh" in capsys.readouterr().err


def test_the_checkpoint_settings_are_not_part_of_a_cell_s_identity(tmp_path):
    assert config_hash(_cfg(tmp_path, "checkpoint.every_steps=2")) == config_hash(_cfg(tmp_path))
    assert checkpointer(_cfg(tmp_path)) is None
    assert str(checkpointer(_cfg(tmp_path, "checkpoint.every_steps=3")).path).startswith(str(tmp_path / "checkpoints"))


@pytest.mark.parametrize("overrides, words", [
    (["checkpoint.every_steps=-1"], "checkpoint.every_steps must be >= 0"),
    (["checkpoint.every_steps=5", "model/generator=gaussian_noise"], "cannot resume from a checkpoint; methods that can: dafl, dp_dfd"),
])
def test_a_run_that_cannot_checkpoint_is_refused_in_one_line(tmp_path, overrides, words):
    with pytest.raises(ConfigError, match=words):
        resolve_run(_cfg(tmp_path, *overrides))


def test_only_methods_that_name_their_state_are_resumable():
    with pytest.raises(ConfigError, match="method 'dpsd' with these settings cannot resume"):
        resolve_run(resolve_paths(compose(["method=dpsd", "checkpoint.every_steps=5"])))


def test_ctrl_c_during_a_checkpointed_dpsd_run_names_the_step_it_resumes_from(tmp_path, monkeypatch, capsys):
    """Ctrl-C in `dpsd run`: one line, exit 130, the checkpoint and its step where the run wrote one."""
    from dpsd.cli import main

    original, calls = DAFLTrainer.step, {"n": 0}

    def step(self):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(DAFLTrainer, "step", step)
    overrides = [*DAFL_SMALL, f"results_dir={tmp_path}", "checkpoint.every_steps=2"]
    assert main(["run", *overrides]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dpsd run: interrupted; nothing recorded; checkpoint at step 4 (" in err[0], err
    assert "the same command resumes from it" in err[0]
