"""The one-run canary audit: the bound against the paper's closed forms and,
when installed, DeepMind jax_privacy's CanaryScoreAuditor; the pipeline on digits."""

import importlib
import math

import numpy as np
import pytest
import torch

from dpsd.config import compose
from dpsd.data import load_dataset
from dpsd.errors import ConfigError
from dpsd.privacy_ops.canary import (
    draw_canaries,
    epsilon_from_scores,
    one_run_epsilon,
    one_run_p_value,
    training_set,
)


def test_all_guesses_right_gives_the_closed_form_bound_without_delta():
    """Thm. 5.2 with delta = 0 and v = r: P[Bin(r, q) >= r] = q^r, so the bound solves q^r = beta:
    eps = log(q / (1 - q)) with q = beta^(1/r)."""
    for guesses in (10, 50, 200):
        q = 0.05 ** (1 / guesses)
        assert one_run_epsilon(1000, guesses, guesses, 0.0, 0.05) == pytest.approx(math.log(q / (1 - q)), abs=1e-5)


def test_chance_level_guesses_refute_nothing_and_delta_only_weakens_the_bound():
    assert one_run_epsilon(1000, 100, 50, 1e-5, 0.05) == 0.0
    strong = one_run_epsilon(1000, 100, 95, 0.0, 0.05)
    assert 0 < one_run_epsilon(1000, 100, 95, 1e-5, 0.05) <= strong
    assert one_run_p_value(1000, 100, 95, strong, 0.0) == pytest.approx(0.05, abs=1e-4)


def test_the_bound_agrees_with_jax_privacy_when_installed():
    auditing = pytest.importorskip("jax_privacy.auditing")
    for m, r, v, delta in [(1000, 100, 95, 1e-5), (500, 50, 50, 0.0), (200, 40, 33, 1e-5)]:
        assert one_run_p_value(m, r, v, 1.0, delta) == pytest.approx(auditing._one_run_p_value(m, r, v, 1.0, delta))
        assert one_run_epsilon(m, r, v, delta, 0.05) == pytest.approx(
            auditing._epsilon_one_run(0.0, m, r, v, 0.05, delta), abs=1e-4)


def test_scores_that_separate_the_canaries_give_a_bound_and_random_ones_do_not():
    rng = np.random.default_rng(0)
    included = rng.random(1000) < 0.5
    separated = epsilon_from_scores(included + 0.01 * rng.random(1000), included, 1e-5, 0.05)
    assert separated["eps_lower_bound"] > 2 and separated["correct"] == separated["guesses"]
    assert epsilon_from_scores(rng.random(1000), included, 1e-5, 0.05)["eps_lower_bound"] < 0.5


def test_canaries_are_mislabelled_and_only_the_included_ones_are_trained_on():
    data = load_dataset("digits")
    drawn = draw_canaries(data.train, data.num_classes, 100, seed=3)
    true = torch.as_tensor([int(data.train[int(i)][1]) for i in drawn.indices])
    assert (drawn.labels != true).all() and 20 < int(drawn.included.sum()) < 80
    train = training_set(data.train, drawn)
    assert len(train) == len(data.train) - 100 + int(drawn.included.sum())
    with pytest.raises(ConfigError, match="--canaries"):
        draw_canaries(data.train, data.num_classes, len(data.train), seed=0)


@pytest.mark.slow  # trains a teacher on digits: about a minute on a shared 2-core machine
def test_a_released_teacher_is_caught_by_the_canary_audit(tmp_path):
    from dpsd.privacy_ops.canary import audit_one_run

    cfg = compose(["method=teacher", f"results_dir={tmp_path}", "device=cpu", "tracking=none",
                   "model.teacher.recipe.steps=600"])
    result = audit_one_run(cfg, 400)
    assert result["eps_rigorous"] == math.inf and result["eps_lower_bound"] > 1
