"""Real MNIST at smoke scale (../shared/data): the teacher and the DPSD label-sensitive student.

Slow (about 6 minutes on 2 CPU cores): deselected by the README's default test command; run with
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


@pytest.fixture(scope="module")
def mnist_label_run(tmp_path_factory):
    cfg = compose([
        "dataset=mnist", f"data.root={MNIST_ROOT}", "scale=smoke", "privacy=label", "privacy.epsilon=10",
        f"results_dir={tmp_path_factory.mktemp('results')}", "tracking=none", "device=cpu",
    ])
    return run_experiment(cfg, show_progress=False)["metrics"]


def test_smoke_teacher_reaches_98_percent(mnist_label_run):
    assert mnist_label_run["teacher_test_accuracy"] >= 0.98


@pytest.mark.xfail(
    strict=True,
    reason="Alg. 1 as published (student as discriminator, top-3 randomized response with a "
    "from-scratch student as prior) does not bootstrap: measured ~10% at smoke scale (docs/findings.md "
    "lists the readings tried). Strict: a change that reaches 80% must update this.",
)
def test_dpsd_label_sensitive_student_reaches_80_percent_at_epsilon_10(mnist_label_run):
    assert mnist_label_run["student_test_accuracy"] >= 0.80


def test_dpsd_label_sensitive_student_is_recorded_with_both_ledgers(mnist_label_run):
    assert 0.0 <= mnist_label_run["student_test_accuracy"] <= 1.0
    assert mnist_label_run["eps_claimed"] == 10.0
    assert mnist_label_run["eps_rigorous"] > mnist_label_run["eps_claimed"]
