"""tools/generator_labels.py: a run's generator as its teacher sees it, from the run's MLflow artifacts."""

from __future__ import annotations

import re

import pytest

from conftest import load_tool
from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.experiment import run_experiment

TINY = ["device=cpu", "++method.iterations=3", "++method.batch_size=16", "model.teacher.recipe.steps=30"]


def tool():
    return load_tool("generator_labels")


def test_it_labels_the_generated_and_the_real_images_and_scores_the_student_per_class(tmp_path, capsys):
    store = [f"results_dir={tmp_path}"]
    summary = run_experiment(compose(["method=dpsd_t", "privacy=none", *TINY, *store]), show_progress=False)
    tool().main([summary["run_id"], *store, "--images", "64"])
    out = capsys.readouterr().out
    generated, real = re.findall(r"\[([\d, ]+)\]  mean top-1 probability", out)
    assert sum(map(int, generated.split(","))) == 64 and sum(map(int, real.split(","))) == 64
    per_class = re.search(r"per class on those test images: \[([\d, ]+)\], all ([\d.]+)", out)
    assert per_class and len(per_class.group(1).split(",")) == 10  # digits: 10 classes


def test_a_run_without_a_generator_is_a_one_line_error(tmp_path):
    store = [f"results_dir={tmp_path}"]
    summary = run_experiment(compose(["method=kd_data", "privacy=none", *TINY, *store]), show_progress=False)
    with pytest.raises(ConfigError, match="no generator.pt"):
        tool().main([summary["run_id"], *store])
