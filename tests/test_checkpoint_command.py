"""dpsd checkpoint: a checkpointed run's state copied to a folder and back into a results_dir that has none of it
(another machine, a fresh clone), a newer checkpoint kept, and a run in progress looked at."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from dpsd import cli
from dpsd.checkpoint import Checkpointer
from dpsd.config import compose
from dpsd.data import data_info, load_data
from dpsd.errors import ConfigError
from dpsd.models import build_classifier, generator_from_config
from dpsd.teachers import evaluate_accuracy


@dataclass
class Trainer:
    """A stand-in trainer: its modules and query count, all a checkpoint holds of it."""

    student: torch.nn.Module = field(default_factory=lambda: torch.nn.Linear(3, 2))
    queries: int = 0
    checkpointed: tuple[str, ...] = ("student",)
    generator: torch.nn.Module | None = None


def checkpoint(results: Path, steps: int, trainer: Trainer) -> Checkpointer:
    saver = Checkpointer(path=results / "checkpoints" / "dafl-abc.pt", every=1, code="v1")
    saver.save(steps, trainer, [], torch.Generator().manual_seed(0), 1.0)
    return saver


def teacher(results: Path, name: str) -> Path:
    path = results / "teachers" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(name.encode())
    return path


def test_a_saved_run_resumes_from_a_results_dir_that_had_none_of_it(tmp_path, capsys):
    old, new, folder = tmp_path / "old", tmp_path / "new", tmp_path / "moved"
    trainer = Trainer()
    checkpoint(old, 400, trainer)
    teacher(old, "mnist-lenet5-seed0-x.pt")
    teacher(old, "mnist-small_cnn-seed0-y.pt")
    assert cli.main(["checkpoint", "save", str(folder), f"results_dir={old}", "--teachers", "mnist-lenet5-seed0-*.pt"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("dafl-abc.pt (after step 400)") and len(lines) == 2  # the small CNN is not copied
    assert cli.main(["checkpoint", "restore", str(folder), f"results_dir={new}"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"restored {new / 'checkpoints' / 'dafl-abc.pt'} (after step 400)",
                                                    f"restored {new / 'teachers' / 'mnist-lenet5-seed0-x.pt'}"]
    resumed = Trainer()
    assert Checkpointer(path=new / "checkpoints" / "dafl-abc.pt", every=1, code="v1").restore(
        resumed, [], torch.Generator()) == (400, 1.0)
    assert torch.equal(resumed.student.weight, trainer.student.weight)


def test_checkpoint_dir_names_where_the_checkpoints_are_on_either_side(tmp_path):
    elsewhere, folder, new = tmp_path / "ckpt", tmp_path / "moved", tmp_path / "new"
    Checkpointer(path=elsewhere / "dafl-abc.pt", every=1, code="v1").save(9, Trainer(), [], torch.Generator(), 1.0)
    teacher(tmp_path / "old", "t.pt")
    cli.checkpoint_save(folder, [f"results_dir={tmp_path / 'old'}", f"checkpoint.dir={elsewhere}"])
    target = tmp_path / "new_ckpt" / "dafl-abc.pt"
    assert cli.checkpoint_restore(folder, [f"results_dir={new}", f"checkpoint.dir={target.parent}"])[0] == (
        f"restored {target} (after step 9)")
    assert (new / "teachers" / "t.pt").is_file()


def test_a_results_dir_that_kept_a_newer_checkpoint_keeps_it(tmp_path):
    kept, folder = tmp_path / "kept", tmp_path / "moved"
    checkpoint(kept, 400, Trainer())
    teacher(kept, "t.pt")
    cli.checkpoint_save(folder, [f"results_dir={kept}"])
    checkpoint(kept, 600, Trainer())  # the run went on after the save, on a disk that was kept
    assert cli.checkpoint_restore(folder, [f"results_dir={kept}"]) == [
        f"kept {kept / 'checkpoints' / 'dafl-abc.pt'} (after step 600; saved: 400)"]
    assert cli.steps_done(kept / "checkpoints" / "dafl-abc.pt") == 600


def test_saving_without_a_checkpoint_or_a_teacher_is_one_line_naming_what_it_looked_for(tmp_path, capsys):
    teacher(tmp_path, "t.pt")
    assert cli.main(["checkpoint", "save", str(tmp_path / "moved"), f"results_dir={tmp_path}"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"no checkpoint in {tmp_path / 'checkpoints'} (*.pt)" in error
    checkpoint(tmp_path, 5, Trainer())
    with pytest.raises(ConfigError, match=r"no teacher in .*teachers matches 'lenet\*'"):
        cli.checkpoint_save(tmp_path / "moved", [f"results_dir={tmp_path}"], "lenet*")
    assert not (tmp_path / "moved").exists()


def test_restoring_from_a_folder_nothing_was_saved_to_names_it(tmp_path, capsys):
    assert cli.main(["checkpoint", "restore", str(tmp_path / "empty"), f"results_dir={tmp_path}"]) == 2
    assert f"no {tmp_path / 'empty' / 'checkpoints'}: nothing was saved there" in capsys.readouterr().err


def test_a_bad_action_names_the_accepted_ones_and_a_bad_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["checkpoint", "carry", str(tmp_path)])
    assert stop.value.code == 2
    assert "(choose from 'save', 'restore', 'peek', 'compare')" in capsys.readouterr().err
    assert cli.main(["checkpoint", "peek", str(tmp_path / "absent.pt")]) == 2
    assert f"no checkpoint file {tmp_path / 'absent.pt'}" in capsys.readouterr().err
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    assert cli.main(["checkpoint", "compare", str(other), str(other)]) == 2
    assert "is not a dpsd checkpoint" in capsys.readouterr().err
    assert cli.main(["checkpoint", "compare", str(other)]) == 2
    assert "compare takes two checkpoint files: OLDER NEWER" in capsys.readouterr().err


def test_a_peek_reads_the_checkpoints_student_on_the_runs_test_split(tmp_path, capsys):
    overrides = ["dataset=digits", "privacy=none", f"results_dir={tmp_path}"]
    cfg = compose(overrides)
    info = data_info(cfg)
    trainer = Trainer(build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes))
    saver = checkpoint(tmp_path, 7, trainer)
    assert cli.main(["checkpoint", "peek", str(saver.path), *overrides]) == 0
    expected = 100 * evaluate_accuracy(trainer.student, load_data(cfg).test, torch.device("cpu"))
    assert f"after step 7: student test accuracy {expected:.2f}% (a look, not a result)" in capsys.readouterr().out


def test_a_peek_with_another_runs_overrides_says_the_student_does_not_fit(tmp_path):
    saver = checkpoint(tmp_path, 7, Trainer())  # a Linear(3, 2) student: no classifier of the config
    with pytest.raises(ConfigError, match="student does not fit this config's model.student"):
        cli.checkpoint_peek(saver.path, ["dataset=digits", "privacy=none", f"results_dir={tmp_path}"])


def test_a_peek_tells_a_generator_whose_latents_all_give_one_image_the_freeze(tmp_path, capsys):
    overrides = ["dataset=digits", "method=dafl", "model/generator=dafl", "privacy=none", f"results_dir={tmp_path}"]
    cfg = compose(overrides)
    info = data_info(cfg)
    generator = generator_from_config(cfg.model.generator, info.channels, info.image_size, 0, info.space)
    trainer = Trainer(build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes),
                      checkpointed=("student", "generator"), generator=generator)
    saver = checkpoint(tmp_path, 3, trainer)
    cli.main(["checkpoint", "peek", str(saver.path), *overrides])
    learning = capsys.readouterr().out
    assert "spread across 64 latents" in learning and "frozen" not in learning
    last_conv = [module for module in generator.blocks if isinstance(module, torch.nn.Conv2d)][-1]
    torch.nn.init.zeros_(last_conv.weight)  # the images no longer depend on the latent: the absorbing state
    saver = checkpoint(tmp_path, 4, trainer)
    cli.main(["checkpoint", "peek", str(saver.path), *overrides])
    assert "spread across 64 latents 0.000 (every latent gives the same image: frozen)" in capsys.readouterr().out


def test_compare_says_how_far_each_networks_weights_moved_leaving_out_batchnorm_statistics(tmp_path, capsys):
    trainer = Trainer(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)))
    older = checkpoint(tmp_path / "a", 400, trainer).path
    trainer.student[1].running_mean += 5.0  # a batch went through: statistics move, weights do not
    unchanged = checkpoint(tmp_path / "b", 600, trainer).path
    with torch.no_grad():
        trainer.student[0].bias[1] += 0.25
    moved = checkpoint(tmp_path / "c", 800, trainer).path
    assert cli.main(["checkpoint", "compare", str(older), str(unchanged)]) == 0
    assert capsys.readouterr().out.splitlines() == ["steps 400 -> 600",
                                                    "student: 4 of 4 weight tensors unchanged, largest change 0.000e+00"]
    assert cli.checkpoint_compare(older, moved)[1] == "student: 3 of 4 weight tensors unchanged, largest change 2.500e-01"
