"""Real MNIST at smoke scale (../shared/data): the teacher and the DPSD label-sensitive student.

Slow (minutes on 2 CPU cores): deselected by the README's default test command, run with
``python -m pytest -m slow``.
"""

from pathlib import Path

import pytest

from dpsd.config import compose
from dpsd.experiment import run_experiment

MNIST_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (MNIST_ROOT / "MNIST" / "raw").is_dir(), reason=f"no MNIST under {MNIST_ROOT}"),
]


def test_dpsd_label_sensitive_student_on_mnist_at_epsilon_10(tmp_path):
    cfg = compose([
        "dataset=mnist", f"data.root={MNIST_ROOT}", "scale=smoke", "privacy=label",
        "privacy.epsilon=10", f"results_dir={tmp_path}", "tracking=none", "device=cpu",
    ])
    metrics = run_experiment(cfg, show_progress=False)["metrics"]
    assert metrics["teacher_test_accuracy"] >= 0.98
    assert metrics["student_test_accuracy"] >= 0.80
