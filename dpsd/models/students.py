"""Student networks.

DPSD §IV-A (and DPDFD §4, "Networks") deploy "the same network configuration as DataLens" as the
student on every dataset except ImageNet, where the student is a ResNet34 (registered in
:mod:`dpsd.models.teachers`, since students and teachers share one namespace).
"""

from __future__ import annotations

from torch import nn

from dpsd.errors import ConfigError
from dpsd.models import ARCHITECTURES


@ARCHITECTURES.register("datalens_cnn")
def datalens_cnn(
    channels: int, image_size: int, num_classes: int, pretrained: bool
) -> nn.Sequential:
    """The DataLens evaluation CNN, the student of DPSD §IV-A.

    Conv(channels→32, 3x3, pad 1) → ReLU → MaxPool 2 → Conv(32→64, 3x3, pad 1) → ReLU → MaxPool 2
    → flatten → Linear(64·⌊⌊s/2⌋/2⌋², 64) → ReLU → Linear(64, num_classes), for s = ``image_size``.
    No batch normalisation, as in DataLens, so Opacus (per-sample gradients) takes it unchanged.
    The last hidden layer has 64 units: these are the features of the activation loss.
    """
    if pretrained:
        raise ConfigError("no pretrained weights exist for 'datalens_cnn'; set pretrained=false")
    side = image_size // 2 // 2
    if side < 1:
        raise ConfigError(f"datalens_cnn needs images of at least 4x4 pixels, got {image_size}")
    return nn.Sequential(
        nn.Conv2d(channels, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * side * side, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )
