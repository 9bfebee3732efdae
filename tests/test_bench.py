"""The privacy-cost benchmark: one row per method and mode, methods found through the registry,
the others skipped with a printed line (it asserts no timings)."""

import os
import sys

import pytest

from dpsd import bench
from dpsd.allocator import available
from dpsd.methods import METHODS

TINY = ["method.batch_size=8", "model.teacher.recipe.steps=20", "device=cpu"]


def rows(output: str) -> dict[tuple[str, str], list[str]]:
    names = set(METHODS.names())
    return {(line.split()[0], line.split()[1]): line.split() for line in output.splitlines()
            if line.split() and line.split()[0] in names}


def test_bench_prints_a_ratio_and_share_for_each_privacy_mode(tmp_path, capsys):
    bench.main(["--methods", "dpsd,teacher", "--repeats", "2", *TINY, f"results_dir={tmp_path}"])
    out = capsys.readouterr().out
    table = rows(out)
    assert set(table) == {("dpsd", mode) for mode in (bench.REFERENCE, *bench.PRIVATE_MODES)}
    assert float(table[("dpsd", "none")][3]) == 1.0  # the reference row
    assert table[("dpsd", "none")][4] == "0.0%"
    for row in table.values():
        # the ratio is printed to 3 decimals and the share to 0.1%: the share must lie within what
        # the ratio's rounding interval allows, plus its own rounding (never a fixed tolerance: a
        # small ratio stretches the interval, 1 - 1/r being steep there)
        ratio, share = float(row[3]), float(row[4].rstrip("%")) / 100
        assert ratio > 0.0005
        low, high = 1 - 1 / (ratio - 0.0005), 1 - 1 / (ratio + 0.0005)
        assert low - 0.0005 - 1e-12 <= share <= high + 0.0005 + 1e-12, (ratio, share)
        assert float(row[5]) == pytest.approx(1e3 / float(row[2]), rel=0.01) and row[6] == "cpu"  # it/s, device
    assert "skip teacher: no make_trainer" in out


def test_auto_benchmarks_every_device_found_and_a_named_device_alone(monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "device_count", lambda: 2)
    assert [str(d) for d in bench.devices("auto")] == ["cpu", "cuda:0", "cuda:1"]
    assert [str(d) for d in bench.devices("cpu")] == ["cpu"]


def test_methods_with_a_trainer_are_found_in_the_registry():
    assert bench.has_trainer("dpsd") and bench.has_trainer("fed_dpsd")
    assert not bench.has_trainer("teacher")


def test_a_mode_or_method_that_fails_to_build_is_skipped_with_a_line(tmp_path, capsys, monkeypatch):
    real = bench.build_trainer

    def build(overrides, method, mode, *rest):
        if mode == "data" or method == "fed_dpsd":
            raise RuntimeError(f"no {mode} for {method}")
        return real(overrides, method, mode, *rest)

    monkeypatch.setattr(bench, "build_trainer", build)
    bench.main(["--methods", "dpsd,fed_dpsd", "--repeats", "1", *TINY, f"results_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert set(rows(out)) == {("dpsd", "none"), ("dpsd", "label")}
    assert "skip dpsd privacy=data: RuntimeError: no data for dpsd" in out
    assert "skip fed_dpsd privacy=none: RuntimeError: no none for fed_dpsd" in out


def test_ensemble_bench_trains_each_backend_into_an_empty_cache_and_prints_their_ratio(tmp_path, capsys):
    bench.main(["--ensemble", "2", "--parts", "50", "--member-steps", "2", *TINY, f"results_dir={tmp_path}"])
    lines = capsys.readouterr().out.splitlines()
    assert "dealt 50 ways, 2 members timed per backend, 2 steps of" in lines[0]
    serial, batched, ratio, serial_all, batched_all, answer_serial, answer_vmap, answer_ratio = (
        float(v) for v in lines[2].split()[:8])
    assert serial > 0 and batched > 0 and lines[2].split()[8] == "cpu"
    half = 0.0005  # seconds are printed to 3 decimals, the ratio (from the unrounded seconds) to 2
    assert (batched - half) / (serial + half) - 0.005 <= ratio <= (batched + half) / (serial - half) + 0.005
    assert serial_all == pytest.approx(serial * 50 / 60, abs=0.06)
    # members per second answering, serial and batched, printed to 1 decimal, their ratio to 2
    assert answer_serial > 0 and answer_vmap > 0
    assert answer_ratio == pytest.approx(answer_vmap / answer_serial, rel=0.05, abs=0.01)
    assert not (tmp_path / "teachers").exists()  # the timed members went to temporary caches only


def test_ensemble_bench_records_each_backends_rate_per_member_step_replacing_the_last_of_its_key(tmp_path, capsys):
    from dpsd.member_rates import RATES_FILE, read_rates
    from dpsd.tracking import this_hardware

    for _ in range(2):  # the second records the same keys: it replaces the first's rows
        bench.main(["--ensemble", "2", "--parts", "50", "--member-steps", "3", "--record", *TINY,
                    f"results_dir={tmp_path}"])
    printed = capsys.readouterr().out.splitlines()
    rates = read_rates(tmp_path / RATES_FILE)
    assert [rate.backend for rate in rates] == ["serial", "vmap"]
    last = [line.split() for line in printed if line.split()[8:9] == ["cpu"]][-1]
    for rate, seconds_per_member in zip(rates, (float(last[0]), float(last[1]))):
        assert (rate.hardware, rate.dataset, rate.arch, rate.members, rate.member_steps) == (
            this_hardware(), "digits", "small_cnn", 2, 3)
        # the table prints seconds per member to 3 decimals; the record is that over the member's steps
        assert rate.seconds_per_step * 3 == pytest.approx(seconds_per_member, abs=0.0006)
    assert printed[-1].startswith(f"recorded the serial and vmap rates on {this_hardware()} in ")


def test_teacher_paths_bench_records_the_fp32_step_at_the_threads_given_as_one_networks_rate(tmp_path, capsys):
    import torch

    from dpsd.member_rates import RATES_FILE, read_rates
    from dpsd.tracking import this_hardware

    bench.main(["--teacher-paths", "--repeats", "2", "--record", *TINY, f"results_dir={tmp_path}"])
    printed = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in printed if line.startswith(("fp32", "bf16"))]
    given = torch.get_num_threads()
    assert sorted({int(row[2]) for row in rows}) == sorted({1, 2, given})  # the threads given are among those timed
    (rate,) = read_rates(tmp_path / RATES_FILE)
    assert (rate.hardware, rate.dataset, rate.arch, rate.backend, rate.members, rate.member_steps) == (
        this_hardware(), "digits", "small_cnn", "serial", 1, 2)
    step_ms = next(float(row[3]) for row in rows if row[:2] == ["fp32", "channels_last"] and int(row[2]) == given)
    assert rate.seconds_per_step * 1e3 == pytest.approx(step_ms, abs=0.051)  # the table prints ms to 1 decimal
    assert printed.count(f"recorded the teacher's rate (fp32 channels_last, {given} threads) on {this_hardware()} "
                           f"in {tmp_path / RATES_FILE}") == 1


def test_bench_refuses_record_without_ensemble_or_teacher_paths(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--record"])
    assert "--record writes a benchmark's rates: give it with --ensemble M or --teacher-paths" in capsys.readouterr().err


def test_ensemble_bench_refuses_more_members_than_parts():
    with pytest.raises(SystemExit):
        bench.main(["--ensemble", "300", "--parts", "250"])


def test_layout_times_each_method_in_both_layouts_and_prints_their_ratio(tmp_path, capsys):
    bench.main(["--layout", "--methods", "dpsd,teacher", "--repeats", "2", *TINY, f"results_dir={tmp_path}"])
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("dpsd "))
    fast, slow, ratio = (float(value) for value in row[1:4])
    assert ratio == pytest.approx(slow / fast, abs=0.006) and row[4] == "cpu"
    assert "skip teacher: no make_trainer" in out


def test_the_nchw_trainer_holds_its_networks_in_nchw_and_the_built_one_in_channels_last(tmp_path):
    import torch

    from dpsd.config import compose, resolve_paths
    from dpsd.data import load_data
    from dpsd.teachers import load_or_train_teacher

    overrides = [*TINY, f"results_dir={tmp_path}", "tracking=none"]
    cfg = resolve_paths(compose(overrides))
    data = load_data(cfg)
    teacher, _ = load_or_train_teacher(cfg, data, torch.device("cpu"))
    built = bench.build_trainer(overrides, "dpsd", bench.REFERENCE, teacher, data, torch.device("cpu"))
    converted = bench.nchw(bench.build_trainer(overrides, "dpsd", bench.REFERENCE, teacher, data, torch.device("cpu")))
    for trainer, layout in ((built, torch.channels_last), (converted, torch.contiguous_format)):
        weights = [p for p in trainer.student.parameters() if p.dim() == 4 and p.shape[1] > 1]
        assert weights and all(p.is_contiguous(memory_format=layout) for p in weights)


def test_contention_times_before_and_after_quiet_and_beside_competitors_it_starts_and_stops(tmp_path, capsys,
                                                                                          monkeypatch):
    started = []

    class Watched(bench.Competitors):
        def __enter__(self):
            entered = super().__enter__()
            started.append((self.running(), list(self.processes)))  # all running once the timed rounds start
            return entered

    monkeypatch.setattr(bench, "Competitors", Watched)
    bench.main(["--contention", "1", "--competitor-threads", "1", "--repeats", "1", *TINY, f"results_dir={tmp_path}"])
    lines = capsys.readouterr().out.splitlines()
    assert "beside 1 processes of 1 threads" in lines[0] and lines[1].startswith("load average before: ")
    table = {line.split()[0]: line.split() for line in lines[3:]}
    assert set(table) == {"before", "after"}
    # each worker's waiting policy: the runtime's default (or the user's) before, PASSIVE (or the user's) after
    from dpsd.threads import without_hygiene

    assert table["before"][2] == without_hygiene().get("OMP_WAIT_POLICY", "default")
    assert table["after"][2] == os.environ.get("OMP_WAIT_POLICY", "default")
    for _, threads, _, quiet, contended, ratio in table.values():
        assert int(threads) >= 1 and float(quiet) > 0 and float(contended) > 0
        assert float(ratio) == pytest.approx(float(contended) / float(quiet), rel=0.01, abs=0.006)
    (running, processes), = started
    assert running == 1 and all(process.poll() is not None for process in processes)  # stopped at the end


def test_competitors_are_stopped_when_the_block_ends_by_an_exception():
    with pytest.raises(KeyboardInterrupt):
        with bench.Competitors(1, 1, 60) as competitors:
            processes = list(competitors.processes)
            assert competitors.running() == 1
            raise KeyboardInterrupt  # Ctrl-C during the timed rounds
    assert all(process.poll() is not None for process in processes)


def test_workers_started_before_one_that_fails_to_start_are_closed(monkeypatch):
    from dpsd import contention

    created = []

    class Recorded(contention.Worker):
        def __init__(self, argv, env):
            created.append(self)
            super().__init__(argv, env)

    monkeypatch.setattr(contention, "Worker", Recorded)
    waits = [sys.executable, "-c", "import sys; print('ready waiting', flush=True); sys.stdin.read()"]
    dies = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(RuntimeError, match=r"ended \(status 3\) before saying 'ready'"):
        with contention.workers({"first": (waits, os.environ), "second": (dies, os.environ)}):
            pass  # not reached: the second worker never says ready
    assert created[0].ready == "waiting" and created[0].process.poll() is not None  # the first was closed
    with contention.workers({"first": (waits, os.environ)}) as started:
        first = started["first"].process
        assert first.poll() is None
    assert first.poll() is not None  # closed when the block ends


def test_contention_refuses_no_competitors():
    with pytest.raises(SystemExit):
        bench.main(["--contention", "0"])


@pytest.mark.skipif(not available(), reason="no jemalloc to preload (Linux with Ray or libjemalloc)")
def test_allocator_times_each_method_under_malloc_and_jemalloc_in_a_process_each(tmp_path, capsys):
    bench.main(["--allocator", "--methods", "dpsd,pate", "--repeats", "1", *TINY, f"results_dir={tmp_path}"])
    lines = capsys.readouterr().out.splitlines()
    assert "under each allocator" in lines[0] and lines[1].split()[:4] == ["method", "batch", "malloc", "s/step"]
    assert lines[2] == "skip pate: no make_trainer (not an iterative method)"
    (method, batch, malloc, jemalloc, ratio), = (line.split() for line in lines[3:])
    assert method == "dpsd" and batch == "8" and float(malloc) > 0 and float(jemalloc) > 0
    assert float(ratio) == pytest.approx(float(malloc) / float(jemalloc), rel=0.01, abs=0.006)
