"""tools/dafl_freeze_census.py: which kept runs of DAFL's loop froze, from per-epoch accuracies and progress lines."""

from __future__ import annotations

import json

from conftest import load_tool

census = load_tool("dafl_freeze_census")


def test_a_run_froze_where_its_accuracy_stays_the_same_for_five_epochs_or_more():
    assert census.froze_from_accuracies([0.5, 0.9, 0.42, 0.43, 0.43, 0.43, 0.43, 0.43]) == 3
    assert census.froze_from_accuracies([0.5, 0.9, 0.42, 0.43, 0.43, 0.43, 0.43]) is None  # four: not yet
    assert census.froze_from_accuracies([0.9] * 6) == 0


def write_logs(root):
    (root / "results" / "gpu").mkdir(parents=True)
    (root / "results" / "cpu").mkdir()
    gpu_log = ["# a GPU run", "run_cells: 2 cells to run"]
    for mark, step in enumerate(range(2400, 9601, 2400), start=1):  # two interleaved cells; the second freezes
        gpu_log.append(f"dafl: step {step}/24000 ({10 * mark}%), {30 * mark} s student_loss=0.1{mark} generator_loss=-4.8{mark}")
        frozen = "student_loss=-0.000 generator_loss=-2.932" if step >= 4800 else "student_loss=0.090 generator_loss=-4.700"
        gpu_log.append(f"dafl: step {step + 7}/24000 ({10 * mark}%), {30 * mark} s {frozen}")
    gpu_log.append("dafl: step 9700, 300 s student_loss=0.100 generator_loss=-4.000")  # no total: left out
    (root / "results" / "gpu" / "gpu_run_x.log").write_text("\n".join(gpu_log) + "\n")
    cell = "dafl [method=dafl seed=0]: step {}/24000 (5%), 30 s student_loss={} generator_loss={}"
    (root / "results" / "cpu" / "a.log").write_text("\n".join(cell.format(step, 0.15, -4.6) for step in (4800, 6000)))
    (root / "results" / "cpu" / "b.log").write_text("\n".join(
        [cell.format(7200, 0.053, -3.024)] + [cell.format(step, "0.000", -2.936) for step in (7320, 7440, 7560, 8400)]))


def test_the_census_lists_each_long_run_and_where_it_froze(tmp_path):
    summaries = tmp_path / "results" / "summaries"
    summaries.mkdir(parents=True)
    epochs = lambda accuracies: [{"accuracy": a} for a in accuracies]
    (summaries / "dafl_side_by_side_h200_ours_s0.json").write_text(json.dumps(
        {"ours": [{"seed": 0, "epochs": epochs([0.9 + 0.001 * e for e in range(40)] + [0.4268] * 10)}]}))
    (summaries / "dafl_side_by_side_h200_official_s0.json").write_text(json.dumps(
        {"official": [{"seed": 0, "epochs": epochs([0.9 + 0.001 * e for e in range(45)])}]}))
    (summaries / "dafl_side_by_side_short.json").write_text(json.dumps(
        {"ours": [{"seed": 3, "epochs": epochs([0.5] * 5)}]}))  # 5 epochs: left out
    (summaries / "dafl_ours_diag_h200_seed1.json").write_text(json.dumps(
        {"epochs": [{"epoch": e, "acc": 0.98 + 0.0001 * e} for e in range(40)]}))
    write_logs(tmp_path)
    runs = census.census(tmp_path, min_epochs=40)
    found = {(run.source, run.side, run.name): (run.epochs, run.froze_at_epoch) for run in runs}
    assert found == {
        ("dafl_side_by_side_h200_ours_s0.json", "ours", "seed 0"): (50, 40),
        ("dafl_side_by_side_h200_official_s0.json", "official", "seed 0"): (45, None),
        ("dafl_ours_diag_h200_seed1.json", "ours", "seed 1"): (40, None),
        ("gpu_run_x.log", "ours", "cell 1 of 2"): (80, None),
        ("gpu_run_x.log", "ours", "cell 2 of 2"): (9607 / 120, 4807 / 120),
        ("a.log, b.log", "ours", "method=dafl seed=0"): (70, 7320 / 120),  # one run resumed across two logs
    }
    assert census.table(runs)[-2:] == ["ours: 3 of 5 froze", "official: 0 of 1 froze"]
