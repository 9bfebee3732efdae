"""The method contract: every registered name runs end to end on the embedded digits.

Adding a method (core or baseline) needs nothing here unless its generic tiny run is slow; then it
gets its own tiny overrides in ``TINY``.
"""

import math

import mlflow
import pytest

from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.experiment import privacy_report, run_experiment
from dpsd.methods import METHODS

TEACHER = ["model.teacher.recipe.steps=30", "device=cpu"]
GENERIC = ["++method.iterations=4", "++method.batch_size=32"]  # ++: the teacher has neither
TINY = {
    "lp1st": ["method.epochs=1"],
    "dpsgd": ["method.epochs=1", "method.sample_rate=0.05", "method.noise_multiplier=1.0"],
    "pate": ["method.num_teachers=3", "method.queries=100", "method.epochs=2"],
    "dfpate": ["method.num_teachers=10", "method.queries=50", "method.member_steps=10", "method.epochs=2"],
    "fed_dpsd": [*GENERIC, "method.num_clients=2"],
    "dp_dfd": ["method.stages=2", "method.samples_per_stage=32", "method.student_epochs=1",
               "method.batch_size=16", "method.pretrain_iterations=2"],
    **{name: ["method.num_teachers=3", "method.member_steps=15", "method.queries=40", "method.iterations=8",
              "method.batch_size=32", "method.generator_iterations=3", "method.vae_epochs=1",
              "method.synthetic_count=200", "method.latent_dim=4"] for name in ("dgd", "dgd_plus")},
}
NON_PRIVATE = {("teacher", None), ("dfkd", None), ("kd_data", None), ("dafl", None), ("dpsd", "none")}
# privacy=None: the method's own privacy group (its YAML's defaults list), as `dpsd run method=<name>` takes it.
CASES = [(name, None) for name in METHODS.names()] + [("dpsd", "none")]


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    """One results directory for the module, so the teacher is trained once and then cached."""
    return tmp_path_factory.mktemp("contract")


def tiny_cfg(results_dir, name, privacy, *extra):
    chosen = [] if privacy is None else [f"privacy={privacy}"]
    return compose([f"method={name}", "dataset=digits", *chosen, f"results_dir={results_dir}", *TEACHER,
                    *TINY.get(name, GENERIC), *extra])


@pytest.mark.parametrize(("name", "privacy"), CASES)
def test_every_method_runs_evaluates_and_fills_the_ledger_it_planned(results_dir, run_as_planned, name, privacy):
    cfg = tiny_cfg(results_dir, name, privacy, "tracking=none")
    metrics, ledger = run_as_planned(cfg)
    assert 0 <= metrics["teacher_test_accuracy"] <= 1
    assert ledger["queries"] >= 1 or privacy == "none"
    if (name, privacy) in NON_PRIVATE:
        assert ledger["eps_claimed"] == math.inf and ledger["eps_rigorous"] == math.inf
    else:
        assert math.isfinite(ledger["eps_claimed"])


def test_a_baseline_run_is_recorded_in_mlflow(results_dir):
    summary = run_experiment(tiny_cfg(results_dir, "teacher", None), show_progress=False)
    mlflow.set_tracking_uri(f"sqlite:///{results_dir / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["dpsd"])
    assert list(runs["run_id"]) == [summary["run_id"]]
    assert runs.iloc[0]["tags.method"] == "teacher"
    assert runs.iloc[0]["tags.eps_rigorous"] == "inf"
    assert "logical cores" in runs.iloc[0]["tags.hardware"] and "torch threads" in runs.iloc[0]["tags.hardware"]


def test_a_label_dp_adapter_that_trains_on_the_private_images_without_saying_so_is_refused(results_dir, monkeypatch):
    """The false-epsilon trap: LP-1ST without its PrivateImagesRelease would report
    the randomized response's epsilon under replace_record while its student holds the raw images.
    The run watches the private split and stops it in one line naming the release to record."""
    from baselines.lp1st import IMAGES, LP1ST

    class Forgetful(LP1ST):
        @staticmethod
        def plan_ledger(cfg, info):
            ledger = LP1ST.plan_ledger(cfg, info)
            ledger.events.remove(IMAGES)
            return ledger

        def fit(self, ctx):
            record = ctx.ledger.record
            monkeypatch.setattr(ctx.ledger, "record", lambda event: None if event is IMAGES else record(event))
            return super().fit(ctx)

    monkeypatch.setitem(METHODS._entries, "lp1st", Forgetful)
    cfg = tiny_cfg(results_dir, "lp1st", None, "tracking=none")
    assert privacy_report(cfg)["neighbouring"] == "replace_record"  # the plan alone cannot tell
    with pytest.raises(ConfigError, match="read the private images.*record PrivateImagesRelease") as refused:
        run_experiment(cfg, show_progress=False)
    assert "\n" not in str(refused.value)
    monkeypatch.undo()
    summary = run_experiment(cfg, show_progress=False)["privacy"]
    assert summary["neighbouring"] == "label" and summary["eps_rigorous"] == pytest.approx(10.0, rel=1e-3)
