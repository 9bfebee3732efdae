"""``dpsd reproduce``'s planning: the fast composition path (group choices composed once, in memory and on disk;
parses and method checks once per distinct question; the store read once for every spec) lists exactly the cells,
hashes and statuses that composing every cell through Hydra does."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from dpsd.config import compose
from dpsd.sweep import spec as sweep_spec
from dpsd.sweep.runner import run_sweeps

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "results" / "runs.csv"


def _clear_caches() -> None:
    for cached in (sweep_spec._compose_once, sweep_spec._groups_composed, sweep_spec.composition_cache,
                   sweep_spec._parse_once):
        cached.cache_clear()
    sweep_spec._METHOD_CHECKED.clear()


def _listing(summaries: list[dict]) -> list[tuple]:
    return [(s["spec"], c["label"], c["config_hash"], c["status"]) for s in summaries for c in s["cells"]]


@pytest.mark.parametrize("specs, scale", [(["dpsd_direct_training", "readings_dgd_r3"], "smoke"),
                                          (["dafl_table1", "quickstart"], "laptop")])
def test_the_fast_plan_lists_exactly_the_cells_composing_each_through_hydra_does(tmp_path, monkeypatch, specs, scale):
    """Specs with several methods, datasets and group choices, some cells done or stale in the runs archive, others
    to run or with absent data: one dry run as ``dpsd reproduce`` makes it (cold, then again from the on-disk cache
    of compositions), one with every cell composed by :func:`dpsd.config.compose`; the listings are equal."""
    if not ARCHIVE.is_file():
        pytest.skip("no runs archive in this checkout")
    monkeypatch.setenv(sweep_spec.CACHE_VARIABLE, str(tmp_path / "compositions"))
    paths = [REPO / "sweeps" / f"{name}.yaml" for name in specs]
    overrides = [f"results_dir={tmp_path / 'results'}", f"data.root={tmp_path / 'no-data'}"]

    def plan() -> list[tuple]:
        return _listing(run_sweeps(paths, scale, overrides, dry_run=True, archive=ARCHIVE))

    _clear_caches()
    cold = plan()
    assert list((tmp_path / "compositions").glob("*/*.pkl")), "the group compositions were kept on disk"
    _clear_caches()
    warm = plan()
    _clear_caches()
    with monkeypatch.context() as patched:  # the full path: Hydra composes every cell's whole override list
        patched.setattr(sweep_spec, "_compose_once", lambda overrides: pickle.dumps(compose(list(overrides))))
        full = plan()
    _clear_caches()
    assert cold == warm == full
    statuses = {status for *_, status in full}
    assert len(full) >= 10 and len(statuses) >= 2, statuses


def test_a_changed_config_tree_is_a_new_composition_cache(tmp_path, monkeypatch):
    """The on-disk cache is named by a fingerprint of what Hydra reads: another config tree, another folder."""
    monkeypatch.setenv(sweep_spec.CACHE_VARIABLE, str(tmp_path))
    sweep_spec.composition_cache.cache_clear()
    first = sweep_spec.composition_cache()
    tree = tmp_path / "conf"
    for path in sweep_spec.CONFIG_DIR.rglob("*"):
        if path.is_file():
            target = tree / path.relative_to(sweep_spec.CONFIG_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (tree / "scale" / "smoke.yaml").write_text((tree / "scale" / "smoke.yaml").read_text() + "\n# an edit\n")
    monkeypatch.setattr(sweep_spec, "CONFIG_DIR", tree)
    sweep_spec.composition_cache.cache_clear()
    second = sweep_spec.composition_cache()
    sweep_spec.composition_cache.cache_clear()
    assert first.parent == second.parent == tmp_path and first != second
    monkeypatch.setenv(sweep_spec.CACHE_VARIABLE, "off")
    assert sweep_spec.composition_cache() is None
    sweep_spec.composition_cache.cache_clear()
