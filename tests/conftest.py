"""Shared test fixtures."""

import pytest

from dpsd.experiment import privacy_report, run_experiment

LEDGER_KEYS = ("eps_claimed", "eps_rigorous", "queries", "delta")


@pytest.fixture
def run_as_planned():
    """Run a config end to end and check that the ledger it filled is the one ``privacy_report`` planned.

    Returns ``(metrics, ledger)`` of the run for further checks.
    """

    def run(cfg):
        summary = run_experiment(cfg, show_progress=False)
        ledger = summary["privacy"]
        planned = privacy_report(cfg)
        for key in LEDGER_KEYS:
            assert ledger[key] == planned[key], key
        assert 0 <= summary["metrics"]["student_test_accuracy"] <= 1
        return summary["metrics"], ledger

    return run
