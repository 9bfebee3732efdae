"""tools/dafl_step_check.py: DAFL's script, run under the step shim, and ``method=dafl`` from the same start on the
same latents stay together to rounding in float64 where the loops are one loop, and part at the first step where
they differ (on stand-ins written in DAFL's form: its lenet.py's networks, its generator, its loop body)."""

from __future__ import annotations

import pytest
import torch

from conftest import load_tool
from test_dafl_side_by_side import STAND_IN_LENET
from dpsd.config import compose, resolve_paths
from dpsd.experiment import resolve_run
from dpsd.data import load_data
from dpsd.errors import ConfigError
from dpsd.methods.base import RunContext
from dpsd.models import build_classifier
from dpsd.privacy.accounting import Ledger
from dpsd.methods import METHODS

# DAFL-train.py's MNIST path: its generator, the teacher it loads, two Adams, and its loop body.
STAND_IN_TRAIN = '''
import argparse, torch, torch.nn as nn, torch.nn.functional as F
from lenet import LeNet5Half
parser = argparse.ArgumentParser()
for name, default in [("--batch_size", 512), ("--ie", 5.0), ("--teacher_dir", ""), ("--data", ""),
                      ("--dataset", ""), ("--output_dir", "")]:
    parser.add_argument(name, type=type(default), default=default)
opt = parser.parse_args()
class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Sequential(nn.Linear(100, 128 * 8 ** 2))
        self.conv_blocks0 = nn.Sequential(nn.BatchNorm2d(128))
        self.conv_blocks1 = nn.Sequential(nn.Conv2d(128, 128, 3, stride=1, padding=1), nn.BatchNorm2d(128, 0.8),
                                          nn.LeakyReLU(0.2, inplace=True))
        self.conv_blocks2 = nn.Sequential(nn.Conv2d(128, 64, 3, stride=1, padding=1), nn.BatchNorm2d(64, 0.8),
                                          nn.LeakyReLU(0.2, inplace=True), nn.Conv2d(64, 1, 3, stride=1, padding=1),
                                          nn.Tanh(), nn.BatchNorm2d(1, affine=False))
    def forward(self, z):
        img = self.conv_blocks0(self.l1(z).view(z.shape[0], 128, 8, 8))
        img = self.conv_blocks1(nn.functional.interpolate(img, scale_factor=2))
        return self.conv_blocks2(nn.functional.interpolate(img, scale_factor=2))
generator = Generator().cuda()
teacher = torch.load(opt.teacher_dir + "teacher").cuda()
teacher.eval()
net = LeNet5Half().cuda()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=0.2)
optimizer_S = torch.optim.Adam(net.parameters(), lr=2e-3)
for i in range(120):
    net.train()
    z = torch.randn(opt.batch_size, 100).cuda()
    optimizer_G.zero_grad()
    optimizer_S.zero_grad()
    gen_imgs = generator(z)
    outputs_T, features_T = teacher(gen_imgs, out_feature=True)
    pred = outputs_T.data.max(1)[1]
    loss_activation = -features_T.abs().mean()
    loss_one_hot = torch.nn.CrossEntropyLoss()(outputs_T, pred)
    softmax_o_T = F.softmax(outputs_T, dim=1).mean(dim=0)
    loss_information_entropy = (softmax_o_T * torch.log10(softmax_o_T)).sum()
    loss = loss_one_hot + loss_information_entropy * opt.ie + loss_activation * 0.1
    y = net(gen_imgs.detach())
    loss += F.kl_div(F.log_softmax(y, dim=1), F.softmax(outputs_T.detach(), dim=1), reduction="sum") / y.shape[0]
    loss.backward()
    optimizer_G.step()
    optimizer_S.step()
'''


def _folder(tmp_path):
    (tmp_path / "lenet.py").write_text(STAND_IN_LENET)
    (tmp_path / "DAFL-train.py").write_text(STAND_IN_TRAIN)
    return tmp_path


def _trainer():
    cfg = resolve_paths(compose(["method=dafl", "scale=paper", "tracking=none", "method.batch_size=16", "device=cpu"]))
    resolve_run(cfg)
    torch.manual_seed(0)
    teacher = build_classifier("lenet5", 1, 32, 10).eval()
    ctx = RunContext(cfg=cfg, data=load_data(cfg), teachers=[teacher], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    return METHODS.get("dafl")().make_trainer(ctx)


def test_one_loop_stays_together_to_rounding_in_float64(tmp_path):
    rows = load_tool("dafl_step_check").step_check(_folder(tmp_path), _trainer(), ".", 2, ["--batch_size", "16"])
    assert [row["step"] for row in rows] == [0, 1]
    assert rows[0]["images"] < 1e-9 and rows[0]["student"] < 1e-12
    assert max(row["student"] for row in rows) < 1e-9


def test_a_loop_that_differs_parts_at_the_first_step(tmp_path):
    """One loss weight changed (the entropy term's 5 to 4) on the official side: the images part at step 0 by
    orders of magnitude more than rounding."""
    rows = load_tool("dafl_step_check").step_check(_folder(tmp_path), _trainer(), ".", 1,
                                                   ["--batch_size", "16", "--ie", "4"])
    assert rows[0]["images"] > 1e-4


def test_networks_that_are_not_ours_are_refused_naming_the_shapes(tmp_path):
    folder = _folder(tmp_path)
    (folder / "lenet.py").write_text(STAND_IN_LENET.replace("(3, 8, 60), 42", "(3, 8, 60), 40"))
    with pytest.raises(ConfigError, match="the official student is not ours: shapes"):
        load_tool("dafl_step_check").step_check(folder, _trainer(), ".", 1, ["--batch_size", "16"])


def test_our_test_images_are_those_dafl_evaluates_on(tmp_path):
    """DAFL-train.py tests on torchvision's Resize((32, 32)) of MNIST in its mean and std; ours, read as
    ``method=dafl`` reads them, differ from those by interpolation rounding only."""
    from test_data import write_mnist_like

    write_mnist_like(tmp_path, "MNIST", [5, 0, 4, 1], [7, 2, 1])
    cfg = resolve_paths(compose(["method=dafl", "dataset=mnist", "tracking=none", f"data.root={tmp_path}"]))
    ours = load_data(cfg).test.tensors[0]
    assert ours.shape == (3, 1, 32, 32)
    check = load_tool("dafl_step_check").evaluation_image_difference
    assert check(ours, str(tmp_path)) < 0.05
    assert check(ours * 0.5, str(tmp_path)) > 0.3  # another normalisation is seen
