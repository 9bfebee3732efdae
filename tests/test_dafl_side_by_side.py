"""tools/dafl_side_by_side.py: the shim runs an official script with only the device changed, and the
epochs, accuracies and training seconds it prints are read back (on stand-in scripts with DAFL's output)."""

from __future__ import annotations

import json

import pytest

from conftest import load_tool
from dpsd.errors import ConfigError

# Stands in for DAFL's scripts: CUDA calls (no GPU here), an Adam before the loop, a test loader over a
# dataset with train=False, and DAFL's "Test Avg. Loss: ..., Accuracy: ..." line per epoch.
STAND_IN = '''
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
net = torch.nn.Linear(4, 2).cuda()
optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
test = TensorDataset(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long)); test.train = False
for epoch in range(int(sys.argv[sys.argv.index("--n_epochs") + 1])):
    time.sleep(0.05)
    x = torch.randn(3, 4).cuda()
    for images, labels in DataLoader(test, batch_size=4):
        pass
    print("Test Avg. Loss: 0.1, Accuracy: %f" % (0.25 * (epoch + 1)))
'''


def tool():
    return load_tool("dafl_side_by_side")


def test_an_official_script_runs_on_the_cpu_and_its_epochs_are_read_back(tmp_path):
    script = tmp_path / "DAFL-train.py"
    script.write_text(STAND_IN)
    epochs = tool().run_official(script, 0, ["--n_epochs", "3"], tmp_path / "log.txt")
    assert [e["accuracy"] for e in epochs] == [0.25, 0.5, 0.75]
    assert all(0.04 < e["train_s"] < 5 for e in epochs)  # the sleep, not the evaluation or the start-up
    log = (tmp_path / "log.txt").read_text()
    assert "@@threads" in log and log.count("@@eval_start") == 3


def test_a_failing_official_script_stops_the_tool_naming_its_log(tmp_path):
    script = tmp_path / "teacher-train.py"
    script.write_text("raise SystemExit(3)\n")
    with pytest.raises(SystemExit, match="teacher-train.py failed.*log.txt"):
        tool().run_official(script, 0, [], tmp_path / "log.txt")


def test_the_table_puts_both_sides_per_epoch_and_the_time_ratio():
    official = [{"teacher_accuracy": 0.99, "epochs": [{"accuracy": 0.5, "train_s": 240.0}]},
                {"teacher_accuracy": 0.98, "epochs": [{"accuracy": 0.7, "train_s": 240.0}]}]
    ours = [{"teacher_accuracy": 0.99, "epochs": [{"accuracy": 0.55, "train_s": 120.0}]},
            {"teacher_accuracy": 0.99, "epochs": [{"accuracy": 0.6, "train_s": 120.0}]}]
    lines = tool().table(official, ours, [0, 1])
    assert lines[0].startswith("| epoch | official (n = 2: mean ± std; per run) | ours (n = 2: mean ± std; per run)")
    # mean ± sample std; Welch's two-sided p for these four runs (scipy: t = -0.24, 1.1 degrees of freedom)
    assert lines[2] == "| 0 | 60.00 ± 14.14 (50.00, 70.00) | 57.50 ± 3.54 (55.00, 60.00) | -2.50 | 0.845 |"
    assert "official 2.0000, ours 1.0000, ratio ours / official 0.50" in lines[-1]


def test_a_long_run_shows_its_first_five_epochs_every_tenth_and_its_last():
    assert tool().shown_epochs(45) == [0, 1, 2, 3, 4, 9, 19, 29, 39, 44]
    assert tool().shown_epochs(3) == [0, 1, 2]


def test_runs_made_apart_combine_into_one_table_at_the_epochs_every_run_reached(tmp_path):
    def run(seed, accuracies):
        return {"seed": seed, "teacher_accuracy": 0.99,
                "epochs": [{"accuracy": a, "train_s": 12.0} for a in accuracies]}
    files = []
    for name, side, seed, accuracies in [("a", "official", 0, [0.5, 0.6, 0.7]), ("b", "ours", 0, [0.4, 0.5]),
                                         ("c", "ours", 1, [0.6, 0.7, 0.8]), ("d", "official", 1, [])]:
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps({"official": [run(seed, accuracies)] if side == "official" else [],
                                         "ours": [run(seed, accuracies)] if side == "ours" else [], "threads": 1}))
    merged = tool().combine(files)
    assert merged["threads"] == [1]  # what the runs had, not the combining process's count
    assert merged["seeds"] == [0, 1] and len(merged["official"]) == 1 and len(merged["ours"]) == 2  # d: no epoch
    lines = tool().table(merged["official"], merged["ours"], merged["seeds"], merged["threads"])
    assert lines[-1].endswith("(intra-op threads a process: 1)")
    assert [line.split(" |")[0] for line in lines[2:4]] == ["| 0", "| 1"]  # ours seed 0 reached two epochs
    assert "epochs reached: official [3], ours [2, 3]" in lines[4]


def test_a_folder_that_is_not_dafl_s_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="must be DAFL's folder: missing .*teacher-train.py"):
        tool().main(["--official", str(tmp_path), "data.root=."])


# Stands in for DAFL's lenet.py: its networks as DAFL writes them (named layers, the 120 or 60 features after
# conv3's ReLU); tests/test_dafl_step_check.py uses it too.
STAND_IN_LENET = '''
import torch.nn as nn
class _LeNet(nn.Module):
    def __init__(self, widths, hidden):
        super().__init__()
        a, b, c = widths
        self.conv1, self.relu1, self.maxpool1 = nn.Conv2d(1, a, 5), nn.ReLU(), nn.MaxPool2d(2, stride=2)
        self.conv2, self.relu2, self.maxpool2 = nn.Conv2d(a, b, 5), nn.ReLU(), nn.MaxPool2d(2, stride=2)
        self.conv3, self.relu3 = nn.Conv2d(b, c, 5), nn.ReLU()
        self.fc1, self.relu4, self.fc2 = nn.Linear(c, hidden), nn.ReLU(), nn.Linear(hidden, 10)
        self.width = c
    def forward(self, img, out_feature=False):
        out = self.maxpool1(self.relu1(self.conv1(img)))
        out = self.maxpool2(self.relu2(self.conv2(out)))
        feature = self.relu3(self.conv3(out)).view(-1, self.width)
        out = self.fc2(self.relu4(self.fc1(feature)))
        return (out, feature) if out_feature else out
class LeNet5(_LeNet):
    def __init__(self):
        super().__init__((6, 16, 120), 84)
class LeNet5Half(_LeNet):
    def __init__(self):
        super().__init__((3, 8, 60), 42)
'''


def test_the_official_teacher_crossed_into_ours_answers_as_it_does(tmp_path):
    """--teacher official: the pickled official LeNet-5's weights, mapped by position onto our LeNet-5, give the
    same logits (so a crossed run trains against the very teacher the official side uses)."""
    import sys

    import torch

    from dpsd.models import build_classifier

    (tmp_path / "lenet.py").write_text(STAND_IN_LENET)
    sys.path.insert(0, str(tmp_path))
    try:
        import lenet
        torch.manual_seed(0)
        theirs = lenet.LeNet5().eval()
        torch.save(theirs, tmp_path / "teacher")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("lenet", None)
    ours = build_classifier("lenet5", 1, 32, 10).eval()
    ours.load_state_dict(tool().official_teacher_weights(tmp_path, tmp_path, ours))
    images = torch.randn(5, 1, 32, 32)
    with torch.no_grad():
        assert torch.allclose(ours(images), theirs(images), atol=1e-6)
    with pytest.raises(ConfigError, match="the official teacher in .* is not ours: shapes"):
        tool().official_teacher_weights(tmp_path, tmp_path, build_classifier("lenet5_half", 1, 32, 10))
