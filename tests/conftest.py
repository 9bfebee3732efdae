"""Shared test fixtures; the thread hygiene of every entry point (docs/performance.md)."""

from dpsd.threads import set_threads, wait_passively

wait_passively()  # before torch is imported: its OpenMP runtime reads it when loaded

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from dpsd.experiment import privacy_report, run_experiment

TOOLS = Path(__file__).resolve().parents[1] / "tools"
set_threads()  # one count for the whole session: the seed-for-seed comparisons run in one process


def load_tool(name: str):
    """The module ``tools/<name>.py`` (tools/ is not a package: loaded from its file)."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as importlib's recipe does: a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def spec_folder(folder: Path) -> Path:
    """``folder`` made, with an empty ``common/check.yaml``: its specs are sized by their own overrides,
    not by the package's shared check list (which every other folder's specs get at scale=check)."""
    (folder / "common").mkdir(parents=True, exist_ok=True)
    (folder / "common" / "check.yaml").write_text("{}\n")
    return folder


LEDGER_KEYS = ("eps_claimed", "eps_rigorous", "queries", "delta", "neighbouring")


def merged_events(events: list[dict]) -> dict[tuple, int]:
    """Events (as in a ledger summary) merged by what they release, counts summed, notes dropped:
    the same releases recorded one iteration at a time or planned all at once compare equal."""
    merged: Counter = Counter()
    for event in events:
        params = {key: value for key, value in event.items() if key not in ("count", "note")}
        merged[tuple(sorted(params.items()))] += event["count"]
    return {key: count for key, count in merged.items() if count}


@pytest.fixture
def run_as_planned():
    """Run a config end to end and check that the ledger it filled is the one ``privacy_report``
    planned: the same figures, and the events the run's mechanism calls realised (each mechanism
    returns the event of the noise it actually added) equal to the events the plan predicts from
    the config (so that code and ledger cannot drift apart).

    Returns ``(metrics, ledger)`` of the run for further checks.
    """

    def run(cfg):
        summary = run_experiment(cfg, show_progress=False)
        ledger = summary["privacy"]
        planned = privacy_report(cfg)
        assert merged_events(ledger["events"]) == merged_events(planned["events"]), "realised events != planned"
        for key in LEDGER_KEYS:
            assert ledger[key] == planned[key], key
        assert 0 <= summary["metrics"]["student_test_accuracy"] <= 1
        return summary["metrics"], ledger

    return run
