"""tools/run_cells.py (a spec's cells without Ray, for a machine that has none): the cells it would start, in
priority order (the specs as given, each spec's lowest seed first), less those --skip names; --dry-run runs none."""

from __future__ import annotations

from conftest import load_tool

SPEC = """name: tiny_cells
on_demand: true
base: [dataset=digits, privacy=none]
seeds: [0, 1, 2]
cells:
  - [method=teacher]
  - [method=kd_data]
  - [method=dfkd]
"""


def test_the_dry_run_lists_the_cells_seed_by_seed_and_leaves_out_the_skipped(tmp_path, capsys):
    spec = tmp_path / "tiny_cells.yaml"
    spec.write_text(SPEC)
    code = load_tool("run_cells").main([str(spec), "--dry-run", "--no-archive", "--skip", "method=teacher ",
                                        f"results_dir={tmp_path / 'results'}"])
    assert code == 0
    listed = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  tiny_cells: ")]
    assert len(listed) == 6  # 3 seeds x 2 cells: the teacher cells skipped
    assert [line.rsplit("seed=", 1)[1] for line in listed] == ["0", "0", "1", "1", "2", "2"]
    assert not any("method=teacher " in line for line in listed)
    assert not list(tmp_path.glob("**/*.pt"))  # nothing trained
