"""``dpsd reproduce``'s planning: the fast composition path (group choices composed once, in memory and on disk;
parses and method checks once per distinct question; the store read once for every spec) lists exactly the cells,
hashes and statuses that composing every cell through Hydra does."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError

from dpsd.cell_identity import config_hash
from dpsd.config import compose
from dpsd.sweep import spec as sweep_spec
from dpsd.sweep.runner import run_sweeps

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "results" / "runs.csv"


def _clear_caches() -> None:
    for cached in (sweep_spec._compose_once, sweep_spec._groups_composed, sweep_spec.composition_cache,
                   sweep_spec._parse_once, sweep_spec._hash_table):
        cached.cache_clear()
    sweep_spec._METHOD_CHECKED.clear()
    sweep_spec._EXPANDED.clear()


def _listing(summaries: list[dict]) -> list[tuple]:
    return [(s["spec"], c["label"], c["config_hash"], c["status"]) for s in summaries for c in s["cells"]]


@pytest.mark.parametrize("specs, scale", [(["dpsd_direct_training", "readings_dgd_r3"], "smoke"),
                                          (["dp_dfd_fig3", "quickstart"], "check"),
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
    assert list((tmp_path / "compositions").glob(f"*/{sweep_spec.HASHES}")), "so were the cells' hashes"
    _clear_caches()
    warm = plan()
    _clear_caches()
    with monkeypatch.context() as patched:  # the full path: Hydra composes every cell's whole override list
        patched.setattr(sweep_spec, "_compose_once", lambda overrides: pickle.dumps(compose(list(overrides))))
        patched.setattr(sweep_spec, "cell_hash", config_hash)  # and hashes each by dpsd.config
        full = plan()
    _clear_caches()
    assert cold == warm == full
    statuses = {status for *_, status in full}
    assert len(full) >= 10 and len(statuses) >= 2, statuses


def test_a_kept_hash_is_config_hash_and_a_changed_value_or_type_is_hashed_anew(tmp_path, monkeypatch):
    """The on-disk table of cells' hashes answers config_hash's own hash, from a new process's read too; a config
    that differs from a kept one in one value, or only in a value's type (1 and 1.0), gets its own."""
    monkeypatch.setenv(sweep_spec.CACHE_VARIABLE, str(tmp_path))
    _clear_caches()
    cfg = compose(["method=dpsd", "seed=1"])
    first = sweep_spec.cell_hash(cfg)
    sweep_spec._save_hashes()
    _clear_caches()  # as a new process: the table read from disk
    assert sweep_spec.cell_hash(cfg) == first == config_hash(cfg)
    assert len(sweep_spec._hash_table(sweep_spec.composition_cache())) == 1
    other = cfg.copy()
    other.seed = 2
    assert sweep_spec.cell_hash(other) == config_hash(other) != first
    as_float, as_int = cfg.copy(), cfg.copy()
    as_float.method.student_lr, as_int.method.student_lr = 1.0, 1
    for config in (as_float, as_int):  # kept in this order: the int must not be answered the float's hash
        assert sweep_spec.cell_hash(config) == config_hash(config)
    _clear_caches()


def test_a_kept_hash_is_found_from_another_store_and_data_root(tmp_path, monkeypatch):
    """Where results and data live is no part of a cell: a hash kept while planning with one ``results_dir`` and
    ``data.root`` answers the same cell planned with others (a test's store, a clone's data) from the one entry."""
    monkeypatch.setenv(sweep_spec.CACHE_VARIABLE, str(tmp_path))
    _clear_caches()
    here = compose(["method=dpsd", "results_dir=/a/store", "data.root=/a/data"])
    first = sweep_spec.cell_hash(here)
    sweep_spec._save_hashes()
    _clear_caches()
    there = compose(["method=dpsd", "results_dir=/b/store", "data.root=/b/data"])
    assert sweep_spec.cell_hash(there) == first == config_hash(there)
    assert len(sweep_spec._hash_table(sweep_spec.composition_cache())) == 1
    _clear_caches()


def test_a_changed_cell_hash_definition_is_a_new_composition_cache(tmp_path, monkeypatch):
    """The kept hashes are config_hash's only while dpsd/cell_identity.py is what it was: an edit to it (a setting
    added at its historical value) names another folder, so no hash of the old rule is read."""
    import dpsd.cell_identity

    monkeypatch.setenv(sweep_spec.CACHE_VARIABLE, str(tmp_path))
    sweep_spec.composition_cache.cache_clear()
    first = sweep_spec.composition_cache()
    edited = tmp_path / "cell_identity.py"
    edited.write_text(Path(dpsd.cell_identity.__file__).read_text() + "\n# an edit\n")
    monkeypatch.setattr(dpsd.cell_identity, "__file__", str(edited))
    sweep_spec.composition_cache.cache_clear()
    second = sweep_spec.composition_cache()
    sweep_spec.composition_cache.cache_clear()
    assert first.parent == second.parent == tmp_path and first != second


def test_an_expansion_is_kept_but_each_call_gets_configs_of_its_own(tmp_path):
    """A spec expanded twice in a process is composed once; a config a caller changes is its own, and a spec whose
    content changed under the same name is expanded anew."""
    _clear_caches()
    spec = sweep_spec.load_spec(REPO / "sweeps" / "quickstart.yaml")
    first = sweep_spec.expand_configs(spec, "smoke")
    first[0][1].seed = 12345
    again = sweep_spec.expand_configs(spec, "smoke")
    assert [cell for cell, _ in again] == [cell for cell, _ in first]
    assert again[0][1].seed != 12345 and again[0][1] is not first[0][1]
    fewer = dataclasses.replace(spec, cells=spec.cells[:2])
    assert [cell.label for cell in sweep_spec.expand_cells(fewer, "smoke")] == [cell.label for cell, _ in first[
        :2 * len(spec.seeds)]] != [cell.label for cell, _ in first]
    _clear_caches()


def test_a_readers_shared_configs_are_the_same_configs_read_only_and_a_copy_stays_writable():
    """``shared=True`` hands every reader the process's one config of each cell, equal to a copy, refusing a write,
    while a caller asking for copies still gets writable ones of its own."""
    _clear_caches()
    spec = sweep_spec.load_spec(REPO / "sweeps" / "quickstart.yaml")
    shared = sweep_spec.expand_configs(spec, "smoke", shared=True)
    again = sweep_spec.expand_configs(spec, "smoke", shared=True)
    copies = sweep_spec.expand_configs(spec, "smoke")
    assert all(a is b for (_, a), (_, b) in zip(shared, again))
    assert [(cell, OmegaConf.to_container(cfg)) for cell, cfg in shared] == [
        (cell, OmegaConf.to_container(cfg)) for cell, cfg in copies]
    with pytest.raises(ReadonlyConfigError):
        shared[0][1].seed = 12345
    with pytest.raises(ReadonlyConfigError):
        shared[0][1].method.name = "another"  # a nested node too
    copies[0][1].seed = 12345
    assert shared[0][1].seed != 12345
    _clear_caches()


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


# ---------------------------------------------------------------------------------------------
# The estimate, the progress lines and --scale pages

from dpsd.sweep.spec import Cell  # noqa: E402
from dpsd.sweep.timing import Progress, Timing, estimate  # noqa: E402
from dpsd.tracking import hardware_class  # noqa: E402

HERE = "AMD EPYC, 2 logical cores, no GPU"


def _timing(run: str, digest: str, sweep: str, method: str, seconds: float, hardware: str = HERE,
            scale: str = "laptop") -> Timing:
    return Timing(run, digest, sweep, method, scale, hardware, seconds)


def test_hardware_class_leaves_out_what_varies_between_trials_of_one_machine():
    assert hardware_class("AMD EPYC, 2 logical cores, 1 torch threads, no GPU") == HERE
    assert hardware_class("AMD EPYC, 2 logical cores, 2 torch threads, no GPU, jemalloc") == HERE


def test_the_estimate_prices_each_cell_from_its_own_runs_then_its_specs_then_its_methods_on_this_hardware():
    cells = [(Cell("headline", "a", (), "h1", "mnist", "dpsd"), "laptop"),   # its own earlier (stale) runs
             (Cell("headline", "b", (), "h2", "mnist", "dpsd"), "laptop"),   # the spec's dpsd runs
             (Cell("other", "c", (), "h3", "mnist", "dpsd"), "laptop"),      # dpsd's runs at laptop scale
             (Cell("other", "d", (), "h4", "mnist", "dgd"), "laptop"),       # timed on a GPU machine only
             (Cell("other", "e", (), "h5", "mnist", "pate"), "laptop")]      # never timed
    timings = [_timing("r1", "h1", "headline", "dpsd", 100), _timing("r2", "h1", "headline", "dpsd", 300),
               _timing("r3", "hx", "headline", "dpsd", 50), _timing("r4", "hy", "headline", "dpsd", 70),
               _timing("r4", "hy", "headline", "dpsd", 70),  # the same run in the archive and the store: once
               _timing("r5", "hz", "elsewhere", "dpsd", 1000, scale="paper"),  # another scale: not used
               _timing("r6", "h4", "other", "dgd", 10, hardware="Intel Xeon, 16 logical cores, NVIDIA H200")]
    got = estimate(cells, timings, HERE, concurrent=2)
    # h1: median(100, 300); h2: median of the spec's dpsd runs (100, 300, 50, 70); h3: dpsd at laptop, the same runs
    assert got.per_cell == {"h1": 200, "h2": 85, "h3": 85}
    assert got.seconds == (200 + 85 + 85) / 2 and got.untimed == 2 and got.other_hardware == 1 and got.runs == 4
    line = got.line()
    assert line.startswith("estimate: ≈ 3 min for 3 of 5 cells on this machine's class of hardware "
                           f"({HERE}; 2 trials at a time), from 4 recorded runs")
    assert "its own earlier runs for 1" in line and "2 cells have no timing (1 timed on other hardware only)" in line
    assert estimate([], timings, HERE, 1).line() == "estimate: nothing to run"
    assert estimate(cells[4:], timings, HERE, 1).line().startswith("estimate: none: no recorded run")


def test_a_cell_with_no_run_of_its_own_is_priced_by_its_other_seeds_before_its_specs_other_cells():
    """The ladder's DP-DFD cells: its R2 cell (no generator) took 462 s, its R3 cell at seed 0 many times that; R3 at
    seed 1 is priced by R3 at seed 0, not by the median of the spec's DP-DFD runs."""
    r2, r3 = "method=dp_dfd privacy=none model.generator=noise", "method=dp_dfd privacy=none"
    timings = [Timing("a", "h20", "ladder", "dp_dfd", "smoke", HERE, 462.0, r2),
               Timing("b", "h21", "ladder", "dp_dfd", "smoke", HERE, 470.0, r2),
               Timing("c", "h30", "ladder", "dp_dfd", "smoke", HERE, 6199.0, r3)]
    cells = [(Cell("ladder", f"{r3} seed=1", (), "h31", "mnist", "dp_dfd"), "smoke"),
             (Cell("ladder", "method=dp_dfd privacy=label seed=0", (), "h40", "mnist", "dp_dfd"), "smoke")]
    got = estimate(cells, timings, HERE, concurrent=1)
    assert got.per_cell == {"h31": 6199.0, "h40": 470.0}  # its other seed; the spec's DP-DFD runs' median
    assert "its other seeds' runs for 1" in got.line() and "its spec's runs of its method for 1" in got.line()


def test_a_cell_run_on_other_hardware_only_is_priced_by_its_time_there_times_the_ratio_on_the_cells_both_ran():
    """A new machine that has run the ladder's R5 (2,607 s; 1,870 s on the old one) prices R3, which only the old one
    ran (6,199 s), at 6,199 s x 2,607 / 1,870, not at R5's time; a class sharing more of the spec's cells prices
    first; a cell of a spec the two classes share no cell of is scaled by the ratio over every spec's cells they share
    at its scale, and where they share none at its scale, by the ratio over every cell they share, but only where this
    hardware has no run of its method at its scale; a class that shares no cell with this one prices nothing."""
    r3, r5, r4 = "method=dp_dfd privacy=none", "method=dp_dfd privacy=label", "method=dp_dfd privacy.noiseless=true"
    old, fast = "AMD EPYC, 2 logical cores, no GPU", "Intel Xeon, 16 logical cores, NVIDIA H200"
    timings = [Timing("a", "h50", "ladder", "dp_dfd", "smoke", HERE.replace("AMD EPYC", "Intel Xeon"), 2607.0, r5),
               Timing("b", "h51", "ladder", "dp_dfd", "smoke", old, 1800.0, r5),
               Timing("c", "h52", "ladder", "dp_dfd", "smoke", old, 1940.0, r5),
               Timing("d", "h30", "ladder", "dp_dfd", "smoke", old, 6199.0, r3),
               Timing("e", "h40", "ladder", "dp_dfd", "smoke", fast, 100.0, r4),  # shares no cell with this machine
               Timing("f", "h60", "other", "dp_dfd", "smoke", old, 500.0, "method=dp_dfd"),  # nor of this spec
               Timing("l", "h80", "other", "dp_dfd", "paper", old, 700.0, "method=dp_dfd")]  # nor at this scale
    here = HERE.replace("AMD EPYC", "Intel Xeon")
    cells = [(Cell("ladder", f"{r3} seed=1", (), "h31", "mnist", "dp_dfd"), "smoke"),
             (Cell("ladder", f"{r4} seed=1", (), "h41", "mnist", "dp_dfd"), "smoke"),
             (Cell("other", "method=dp_dfd seed=1", (), "h61", "mnist", "dp_dfd"), "smoke"),
             (Cell("other", "method=dp_dfd seed=1", (), "h81", "mnist", "dp_dfd"), "paper")]
    got = estimate(cells, timings, here, concurrent=1)
    assert got.per_cell["h31"] == pytest.approx(6199.0 * 2607.0 / 1870.0)
    assert got.per_cell["h41"] == 2607.0  # the spec's DP-DFD runs here: the fast class shares no cell with this one
    assert got.per_cell["h61"] == pytest.approx(500.0 * 2607.0 / 1870.0)  # the ladder's ratio, at the same scale
    assert got.per_cell["h81"] == pytest.approx(700.0 * 2607.0 / 1870.0)  # the smoke ladder's ratio, at paper
    for among in ("its spec's cells both ran at its scale for 1", "every spec's cells both ran at its scale for 1",
                  "every cell both ran, at any scale for 1"):
        assert f"its runs on another class of hardware, times that class's ratio to this one over {among}" in got.line()
    assert got.runs == 6 and got.untimed == 0  # a-d, f, l: the runs there and the R5 runs the ratio rests on
    own = Timing("m", "h90", "third", "dp_dfd", "smoke", here, 333.0, "method=dp_dfd w")  # its method's run here
    assert estimate(cells[2:3], [*timings, own], here, concurrent=1).per_cell["h61"] == 333.0  # beats another spec's ratio
    unshared = estimate(cells[3:], [t for t in timings if t.run_id != "a"], here, concurrent=1)
    assert unshared.per_cell == {} and unshared.untimed == unshared.other_hardware == 1  # timed elsewhere only
    more = [*timings, Timing("g", "h70", "ladder", "dp_dfd", "smoke", fast, 26.07, "method=dp_dfd x"),
            Timing("h", "h71", "ladder", "dp_dfd", "smoke", here, 2607.0, "method=dp_dfd x"),
            Timing("i", "h72", "ladder", "dp_dfd", "smoke", fast, 10.0, "method=dp_dfd y"),
            Timing("j", "h73", "ladder", "dp_dfd", "smoke", here, 1000.0, "method=dp_dfd y"),
            Timing("k", "h32", "ladder", "dp_dfd", "smoke", fast, 60.0, r3)]
    assert estimate(cells[:1], more, here, concurrent=1).per_cell["h31"] == pytest.approx(60.0 * 100.0)
    elsewhere = [dataclasses.replace(t, scale="paper") if t.hardware == fast else t for t in more]  # R5's ratio again
    assert estimate(cells[:1], elsewhere, here, concurrent=1).per_cell["h31"] == pytest.approx(got.per_cell["h31"])


def test_cells_no_run_prices_are_priced_by_their_members_at_the_benchmark_rate_each_shared_ensemble_once():
    """PATE's cells at two ε and one seed train the same members once; another seed trains its own; a rate recorded on
    other hardware, or for another backend than this hardware's, prices nothing; the estimate says it is a lower
    bound."""
    from dpsd.member_rates import MemberRate, member_work

    def pate(epsilon: int, seed: int) -> tuple[Cell, str]:
        overrides = ("method=pate", "privacy=label", f"privacy.epsilon={epsilon}", "method.num_teachers=20",
                     "method.member_steps=30", f"seed={seed}")
        return Cell("headline", " ".join(overrides), overrides, f"pate-{epsilon}-{seed}", "digits", "pate"), "paper"

    cells = [pate(1, 0), pate(10, 0), pate(1, 1), (Cell("headline", "dpsd", ("method=dpsd",), "d", "digits", "dpsd"),
                                                   "paper")]
    work = member_work(cells[0][0].compose())
    assert work is not None and (work.count, work.steps) == (20, 30)
    assert work.ensemble == member_work(cells[1][0].compose()).ensemble != member_work(cells[2][0].compose()).ensemble
    assert member_work(cells[3][0].compose()) is None  # DPSD trains no members
    rate = MemberRate(HERE, work.dataset, work.arch, work.batch_size, "serial", 0.5, 4, 30)
    elsewhere = [MemberRate("Intel Xeon, 16 logical cores, NVIDIA H200", *rate.key[1:], 0.01, 4, 30),
                 MemberRate(HERE, *rate.key[1:4], "vmap", 0.01, 4, 30)]  # a CPU's cells train one by one
    got = estimate(cells, [], HERE, concurrent=1, rates=[*elsewhere, rate])
    assert got.per_cell == {"pate-1-0": 20 * 30 * 0.5, "pate-10-0": 0.0, "pate-1-1": 20 * 30 * 0.5}
    assert got.seconds == 600 and got.untimed == 1 and got.members_only == 3
    assert got.line().startswith(f"estimate: ≥ 10 min for 3 of 4 cells on this machine's class of hardware ({HERE}; "
                                 "1 trial at a time), from the ensemble benchmark's rate (a cell's time: ")
    timed = estimate(cells, [_timing("r1", "d", "headline", "dpsd", 60, scale="paper")], HERE, 1, rates=[rate])
    assert "from 1 recorded runs and the ensemble benchmark's rate (a cell's time: the median of its own earlier " \
           "runs for 1; its members alone" in timed.line() and timed.seconds == 660
    assert got.line().endswith("(a cell's time: its members alone at the ensemble benchmark's rate for 3, each shared "
                               "ensemble once); a lower bound: 3 cells are priced by training their members only, "
                               "from an empty cache; 1 cell has no timing")
    assert estimate(cells, [], HERE, concurrent=1, rates=elsewhere).line().startswith("estimate: none: ")


def test_the_dry_run_prices_pates_cells_by_the_member_rates_beside_the_runs_archive(tmp_path):
    import yaml

    from dpsd.member_rates import RATES_FILE, MemberRate, record_rates
    from dpsd.sweep.runner import run_sweeps
    from dpsd.tracking import this_hardware

    spec = tmp_path / "ensemble.yaml"
    base = ["method=pate", "privacy=label", "device=cpu", "method.num_teachers=8", "method.member_steps=25"]
    spec.write_text(yaml.safe_dump({"name": "ensemble", "paper": None, "base": base,
                                    "grid": {"privacy.epsilon": [1, 10]}}))
    archive = tmp_path / "archive" / "runs.csv"

    def estimate_line() -> str:
        progress = Progress(echo=False)
        run_sweeps([spec], "smoke", [f"results_dir={tmp_path / 'results'}"], dry_run=True, archive=archive,
                   progress=progress)
        return progress.estimate_line

    assert estimate_line().startswith("estimate: none: ")
    record_rates(archive.parent / RATES_FILE, [MemberRate(this_hardware(), "digits", "small_cnn", 128, "serial", 3.0,
                                                          2, 30)])
    # one ensemble of 8 members x 25 steps x 3 s, for both cells; and their full-data teacher, absent here: the same
    # network at the same batch, so the member rate prices its recipe's 600 steps too
    line = estimate_line()
    assert line.startswith("estimate: ≥ 40 min for 2 of 2 cells ")
    assert "; 1 teacher absent from this machine's cache, trained first, adding 30 min for 1 " in line


def test_a_teacher_absent_from_the_cache_is_priced_once_over_its_recipes_steps_at_the_teacher_benchmarks_rate(
        tmp_path):
    """The ladder on a fresh machine: its cells' times were recorded with their teacher cached, so the teachers a
    sweep trains first are priced apart, each once (cells of one seed share it), at the teacher benchmark's rate for
    that network and stem; a teacher the cache holds, or no rate on this hardware, adds nothing, and the line says
    which."""
    from dpsd.member_rates import MemberRate, teacher_work
    from dpsd.sweep.runner import absent_teachers

    def cell_config(seed: int, stem: str = "imagenet"):
        return compose(["method=dpsd", "dataset=mnist", "model/teacher=resnet34_paper", f"model.teacher.stem={stem}",
                        f"seed={seed}",
                        f"results_dir={tmp_path}"])

    work = teacher_work(cell_config(0))
    assert (work.count, work.steps, work.arch, work.backend_setting) == (1, 3000, "resnet34 (imagenet stem)", "serial")
    configs = [cell_config(0), cell_config(0), cell_config(1), cell_config(1, "small_input")]
    teachers = absent_teachers(configs)
    assert [t.arch for t in teachers] == ["resnet34 (imagenet stem)"] * 2 + ["resnet34 (small_input stem)"]
    cached = tmp_path / "teachers" / teachers[1].ensemble
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"")  # seed 1's teacher is in the cache
    assert teacher_work(cell_config(1)) is None and len(absent_teachers(configs)) == 2

    cells = [(Cell("ladder", "dpsd", ("method=dpsd",), "d", "mnist", "dpsd"), "smoke")]
    timings = [_timing("r1", "d", "ladder", "dpsd", 100.0, scale="smoke")]
    rate = MemberRate(HERE, "mnist", "resnet34 (imagenet stem)", 128, "serial", 0.4, 1, 20)
    got = estimate(cells, timings, HERE, concurrent=1, rates=[rate], teachers=absent_teachers(configs))
    assert got.seconds == 100.0 + 3000 * 0.4 and (got.teachers_absent, got.teachers_unpriced) == (2, 1)
    assert got.line().endswith(
        "; 2 teachers absent from this machine's cache, trained first, adding 20 min for 1 at the teacher benchmark's "
        "rate over each recipe's full steps (a teacher that reaches its target stops sooner); 1 not priced (no teacher "
        "benchmark rate on this hardware: python -m dpsd.bench --teacher-paths --record, with the cells' teacher "
        "settings)")
    assert estimate(cells, timings, HERE, 1, rates=[rate]).line() == estimate(cells, timings, HERE, 1).line()


def test_the_dry_run_says_which_teachers_a_fresh_machine_trains_first(tmp_path):
    import yaml

    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump({"name": "one", "paper": None, "seeds": [0, 1],
                                    "base": ["method=dpsd", "privacy=label", "privacy.epsilon=1"]}))

    def estimate_line() -> str:
        progress = Progress(echo=False)
        run_sweeps([spec], "smoke", [f"results_dir={tmp_path / 'results'}"], dry_run=True,
                   archive=tmp_path / "runs.csv", progress=progress)
        return progress.estimate_line

    assert "2 teachers absent from this machine's cache, trained first; 2 not priced" in estimate_line()


def test_progress_prints_cells_done_of_total_and_elapsed_and_appends_them_to_its_log(tmp_path, capsys):
    progress = Progress()
    progress.estimate_line = "estimate: ≈ 3 min ..."
    priced = estimate([(Cell("s", "a", (), "h1", "digits", "dpsd"), "smoke"),
                       (Cell("s", "b", (), "h2", "digits", "dpsd"), "smoke")],
                      [_timing("r1", "h1", "s", "dpsd", 60, scale="smoke")], HERE, 1)
    progress.start({"h1": "s (smoke): a", "h2": "s (smoke): b"}, priced, tmp_path)
    progress.finished("h1", "ran", 61.0)
    progress.finished("h1", "ran", 61.0)  # reported twice (a restored experiment): counted once
    progress.finished("h2", "failed")
    progress.end()
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("progress: 2 cells to run; log ") and printed[1] == "estimate: ≈ 3 min ..."
    assert printed[2].startswith("progress: [1/2] ran s (smoke): a in 61 s; elapsed 0:00:0")
    assert "left by the estimate" in printed[2]  # b is priced at 60 s (the spec's dpsd runs)
    assert printed[3].startswith("progress: [2/2] failed s (smoke): b; elapsed ")
    assert printed[4].startswith("progress: 2/2 cells finished a trial")
    logged = progress.log_path.read_text().splitlines()
    assert progress.log_path.parent == tmp_path and progress.log_path.name.startswith("reproduce-")
    assert [line.split(" ", 2)[2] for line in logged] == printed


def test_scale_pages_runs_each_spec_at_the_scale_of_its_page(tmp_path, capsys):
    """``--scale pages``: a spec on two pages at two scales is planned at both, an on-demand spec a page names is
    planned, a spec on no page is said to be left out, a hyper-parameter study a page names is not run cell by cell but
    named with the command that searches it; the dry run ends with the estimate."""
    import yaml

    from dpsd.cli import main

    specs = tmp_path / "sweeps"
    (specs / "common").mkdir(parents=True)
    (specs / "common" / "check.yaml").write_text("{}\n")
    base = ["method=dpsd", "privacy=label", "device=cpu", "++method.iterations=2", "++method.batch_size=16"]
    for name, extra in (("table", {}), ("study", {"on_demand": True}), ("elsewhere", {})):
        (specs / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "paper": None, "base": base,
                                                           "grid": {"privacy.epsilon": [1, 10]}, **extra}))
    (specs / "searched.yaml").write_text(yaml.safe_dump({"name": "searched", "base": base, "on_demand": True,
                                                         "feeds": {"kind": "study", "trials": 4, "best": 1},
                                                         "search": {"method.student_lr": {"loguniform": [1e-4, 0.1]}}}))
    manifest = tmp_path / "pages.yaml"
    manifest.write_text(yaml.safe_dump({"pages": [
        {"markdown": "results/table_laptop.md", "only": ["table"], "scale": "laptop"},
        {"markdown": "results/table_paper.md", "only": ["table"], "scale": "paper"},
        {"markdown": "results/study.md", "only": ["study", "table"], "scale": "laptop"},
        {"markdown": "results/searched.md", "only": ["searched"]}]}))
    args = ["reproduce", "--dry-run", "--scale", "pages", "--specs", str(specs), "--pages", str(manifest),
            "--no-archive", f"results_dir={tmp_path / 'results'}"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    planned = [line for line in printed.splitlines() if line.startswith("sweep ") and "dry run" in line]
    assert planned == ["sweep table (scale=laptop) — dry run", "sweep table (scale=paper) — dry run",
                       "sweep study (scale=laptop) — dry run"]
    assert f"sweep elsewhere: on no page of {manifest}, not run at --scale pages" in printed
    assert ("sweep searched: a hyper-parameter study, not run by reproduce; run it with "
            "`dpsd sweep searched --search optuna --trials 4 --best 1`") in printed
    assert printed.rstrip().splitlines()[-1].startswith("estimate: ")
    assert main([*args, "--only", "elsewhere"]) == 2  # named, but on no page: one line
    assert "none of the specs named is on a page" in capsys.readouterr().err
