"""tools/carry_run.py: a checkpointed run's state carried through git to a machine that has none of its disk, and a
machine that kept a newer checkpoint keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from conftest import load_tool

from dpsd.checkpoint import Checkpointer
from dpsd.config import compose
from dpsd.data import data_info, load_data
from dpsd.models import build_classifier, generator_from_config
from dpsd.teachers import evaluate_accuracy

carry_run = load_tool("carry_run")


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


def test_a_saved_run_resumes_on_a_machine_without_its_results_dir(tmp_path):
    old, new, carry = tmp_path / "old", tmp_path / "new", tmp_path / "carry"
    trainer = Trainer()
    checkpoint(old, 400, trainer)
    teacher(old, "mnist-lenet5-seed0-x.pt")
    teacher(old, "mnist-small_cnn-seed0-y.pt")
    lines = carry_run.save(old, "mnist-lenet5-seed0-*.pt", carry)
    assert lines[0].endswith("dafl-abc.pt (after step 400)") and len(lines) == 2  # the small CNN is not carried
    assert carry_run.restore(new, carry) == [f"restored {new / 'checkpoints' / 'dafl-abc.pt'} (after step 400)",
                                             f"restored {new / 'teachers' / 'mnist-lenet5-seed0-x.pt'}"]
    resumed = Trainer()
    assert Checkpointer(path=new / "checkpoints" / "dafl-abc.pt", every=1, code="v1").restore(
        resumed, [], torch.Generator()) == (400, 1.0)
    assert torch.equal(resumed.student.weight, trainer.student.weight)


def test_a_machine_that_kept_a_newer_checkpoint_keeps_it(tmp_path):
    kept, carry = tmp_path / "kept", tmp_path / "carry"
    checkpoint(kept, 400, Trainer())
    teacher(kept, "t.pt")
    carry_run.save(kept, "*.pt", carry)
    checkpoint(kept, 600, Trainer())  # the run went on after the save, on a disk the next session kept
    assert carry_run.restore(kept, carry) == [f"kept {kept / 'checkpoints' / 'dafl-abc.pt'} (after step 600; carried: 400)"]
    assert carry_run.steps_done(kept / "checkpoints" / "dafl-abc.pt") == 600


def test_saving_without_a_checkpoint_names_what_it_looked_for(tmp_path):
    teacher(tmp_path, "t.pt")
    with pytest.raises(SystemExit, match=r"nothing matches .*checkpoints/\*\.pt"):
        carry_run.save(tmp_path, "t.pt", tmp_path / "carry")


def test_a_peek_reads_the_checkpoints_student_on_the_runs_test_split(tmp_path, capsys):
    overrides = ["dataset=digits", "privacy=none", f"results_dir={tmp_path}"]
    cfg = compose(overrides)
    info = data_info(cfg)
    trainer = Trainer(build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes))
    saver = checkpoint(tmp_path, 7, trainer)
    assert carry_run.main(["peek", str(saver.path), *overrides]) == 0
    expected = 100 * evaluate_accuracy(trainer.student, load_data(cfg).test, torch.device("cpu"))
    assert f"after step 7: student test accuracy {expected:.2f}%" in capsys.readouterr().out


def test_a_peek_tells_a_generator_whose_latents_all_give_one_image_the_freeze(tmp_path, capsys):
    overrides = ["dataset=digits", "method=dafl", "model/generator=dafl", "privacy=none", f"results_dir={tmp_path}"]
    cfg = compose(overrides)
    info = data_info(cfg)
    generator = generator_from_config(cfg.model.generator, info.channels, info.image_size, 0, info.space)
    trainer = Trainer(build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes),
                      checkpointed=("student", "generator"), generator=generator)
    saver = checkpoint(tmp_path, 3, trainer)
    carry_run.main(["peek", str(saver.path), *overrides])
    learning = capsys.readouterr().out
    assert "spread across 64 latents" in learning and "frozen" not in learning
    last_conv = [module for module in generator.blocks if isinstance(module, torch.nn.Conv2d)][-1]
    torch.nn.init.zeros_(last_conv.weight)  # the images no longer depend on the latent: the absorbing state
    saver = checkpoint(tmp_path, 4, trainer)
    carry_run.main(["peek", str(saver.path), *overrides])
    assert "spread across 64 latents 0.000 (every latent gives the same image: frozen)" in capsys.readouterr().out


def test_compare_says_how_far_each_networks_weights_moved_leaving_out_batchnorm_statistics(tmp_path):
    trainer = Trainer(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)))
    older = checkpoint(tmp_path / "a", 400, trainer).path
    trainer.student[1].running_mean += 5.0  # a batch went through: statistics move, weights do not
    unchanged = checkpoint(tmp_path / "b", 600, trainer).path
    with torch.no_grad():
        trainer.student[0].bias[1] += 0.25
    moved = checkpoint(tmp_path / "c", 800, trainer).path
    assert carry_run.compare(older, unchanged) == ["steps 400 -> 600",
                                                   "student: 4 of 4 weight tensors unchanged, largest change 0.000e+00"]
    assert carry_run.compare(older, moved)[1] == "student: 3 of 4 weight tensors unchanged, largest change 2.500e-01"


def test_pace_is_the_median_over_consecutive_lines_leaving_out_a_resume(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("dpsd: resumed from x.pt after step 100\n"
                   "dafl [seed=0]: step 101/400 (25%), 2 s student_loss=0.1\n"
                   "dafl [seed=0]: step 117/400 (29%), 34 s student_loss=0.1\n"   # 2.0 s an iteration
                   "dafl [seed=0]: step 133/400 (33%), 66 s student_loss=0.1\n"   # 2.0
                   "dafl [seed=0]: step 143/400 (36%), 96 s student_loss=0.1\n"   # 3.0
                   "dpsd: resumed from x.pt after step 140\n"
                   "dafl [seed=0]: step 141/400 (35%), 1 s student_loss=0.1\n"    # a resume: left out
                   "dafl [seed=0]: step 161/400 (40%), 21 s student_loss=0.1\n")  # 1.0
    assert carry_run.pace(log) == "steps 101 -> 161: median 2.000 s an iteration over 4 intervals"
    log.write_text("dafl: step 1/400 (0%), 2 s\n")
    with pytest.raises(SystemExit, match="fewer than two consecutive progress lines"):
        carry_run.pace(log)
