"""DAFL's LeNet-5 teacher and LeNet-5-half student (Chen et al., ICCV 2019, §4.1, MNIST).

The facts of DAFL's ``lenet.py``, written here: three 5x5 convolutions with ReLU (the first two each
followed by a 2x2 max-pool) take a 32x32 image to a 1x1 map of ``c3`` channels, then two linear layers
with a ReLU between them. LeNet-5: 6, 16, 120 channels, 84 hidden units (about 62,000 parameters);
LeNet-5-half: 3, 8, 60 channels, 42 hidden units. ``model.features`` ends at the ``c3`` features before
the linear layers: DAFL's activation loss reads those (``features_T`` in DAFL-train.py), so the model
names them (``activation_features``) and :func:`dpsd.models.penultimate_features` takes them from there
rather than from the last layer's input.
"""

from __future__ import annotations

from torch import Tensor, nn

from dpsd.errors import ConfigError
from dpsd.models import ARCHITECTURES

LENET_INPUT = 32
"""The only image side a LeNet-5 takes: 32 -> 28 -> 14 -> 10 -> 5 -> 1."""


class LeNet5(nn.Module):
    """A LeNet-5 of ``sizes`` = (conv channels c1, c2, c3, hidden units): ``features`` then ``classifier``."""

    activation_features = "features"

    def __init__(self, channels: int, num_classes: int, sizes: tuple[int, int, int, int]) -> None:
        super().__init__()
        c1, c2, c3, hidden = sizes
        self.features = nn.Sequential(
            nn.Conv2d(channels, c1, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2, stride=2),
            nn.Conv2d(c1, c2, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2, stride=2),
            nn.Conv2d(c2, c3, kernel_size=5), nn.ReLU(), nn.Flatten(),
        )
        self.classifier = nn.Sequential(nn.Linear(c3, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


def _lenet(name: str, sizes: tuple[int, int, int, int]):
    def build(channels: int, image_size: int, num_classes: int, pretrained: bool) -> LeNet5:
        if pretrained:
            raise ConfigError(f"no pretrained weights exist for {name!r}; set pretrained=false")
        if image_size != LENET_INPUT:
            raise ConfigError(f"{name} takes {LENET_INPUT}x{LENET_INPUT} images, got {image_size}: "
                              f"set model.teacher.input.image_size={LENET_INPUT}")
        return LeNet5(channels, num_classes, sizes)

    build.__doc__ = f"DAFL's {name}: conv channels {sizes[:3]}, {sizes[3]} hidden units, 32x32 inputs."
    return ARCHITECTURES.register(name)(build)


lenet5 = _lenet("lenet5", (6, 16, 120, 84))
lenet5_half = _lenet("lenet5_half", (3, 8, 60, 42))
