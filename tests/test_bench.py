"""The privacy-cost benchmark runs and prints one row per privacy mode (it asserts no timings)."""

from dpsd import bench


def test_bench_prints_a_ratio_for_each_privacy_mode(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "REPEATS", 2)
    bench.main(["method.batch_size=16", "model.teacher.recipe.steps=20", f"results_dir={tmp_path}"])
    lines = capsys.readouterr().out.strip().splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == set(bench.MODES)
    assert float(rows["none"][2]) == 1.0  # the reference row
    assert all(float(row[2]) > 0 for row in rows.values())
