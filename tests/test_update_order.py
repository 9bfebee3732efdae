"""DPSD's update order: Alg. 1's student-first iteration against §III-B's generator-first one."""

import pytest

from dpsd.config import compose
from dpsd.experiment import resolve_run
from dpsd.errors import ConfigError

BASE = ["dataset=digits", "model.teacher.recipe.steps=30", "device=cpu", "tracking=none",
        "++method.iterations=4", "++method.batch_size=32"]


@pytest.mark.parametrize(("method", "privacy", "annotations"), [
    ("dpsd", "label", 2), ("dpsd", "data", 2), ("dpsd_t", "label", 2), ("dpdfd", "data", 2),
    ("dpsd", "label", 1),
])
def test_generator_first_annotates_twice_an_iteration_and_the_ledger_counts_it(
        tmp_path, run_as_planned, method, privacy, annotations):
    order = "generator_first" if annotations == 2 else "student_first"
    cfg = compose([f"method={method}", f"privacy={privacy}", f"results_dir={tmp_path}", *BASE,
                   f"method.update_order={order}"])
    metrics, ledger = run_as_planned(cfg)
    assert metrics["queries"] == annotations * 4 * 32
    generator_updates = 4 if method == "dpsd_t" else 0  # DPSD-T's unprotected generator releases, one an iteration
    assert ledger["queries"] == annotations * 4 * 32 + generator_updates


def test_generator_first_without_a_generator_is_one_annotation(tmp_path, run_as_planned):
    cfg = compose(["method=dpsd", "privacy=label", f"results_dir={tmp_path}", *BASE,
                   "model/generator=gaussian_noise", "method.update_order=generator_first"])
    metrics, _ = run_as_planned(cfg)
    assert metrics["queries"] == 4 * 32


def test_fed_dpsd_refuses_the_generator_first_order():
    with pytest.raises(ConfigError, match="update_order must be student_first"):
        resolve_run(compose(["method=fed_dpsd", "dataset=digits", "method.update_order=generator_first"]))
