"""Label-preserving moves of a batch of images for a student that learns from few answered queries.

:func:`random_affine` turns, scales and shifts every image of a batch by its own random affine map (the moves a
handwritten digit's label survives: DAFL's and most MNIST students' augmentation), one ``F.affine_grid`` /
``F.grid_sample`` call for the whole batch. torchvision's ``RandomAffine`` draws one map a call, the same for every
image of a batch, hence this batched form. Pixels moved in from outside repeat the border (``padding_mode="border"``),
so the background stays the input space's black wherever the border is.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

DEGREES = 15.0
"""Largest turn, either way."""
SCALE = (0.9, 1.1)
"""Range of the zoom."""
SHIFT = 0.1
"""Largest shift along each axis, as a share of the side (2.8 px at 28)."""


def random_affine(images: Tensor, rng: torch.Generator) -> Tensor:
    """``images`` (``n x c x h x w``), each turned by an angle uniform in [-DEGREES, DEGREES], zoomed by a factor
    uniform in SCALE and shifted by up to SHIFT of the side along each axis, bilinear, drawn from ``rng``."""
    return affine_from_draws(images, torch.rand(len(images), 4, generator=rng))


def affine_from_draws(images: Tensor, draw: Tensor) -> Tensor:
    """:func:`random_affine` with its uniform draws given: ``draw`` (``n x 4``, in [0, 1)) holds each image's turn,
    zoom and two shifts. Callers that keep one random stream per image group (an ensemble's members) draw them
    apart and move the whole batch in one call."""
    draw = draw.to(images.device)
    angle = math.radians(DEGREES) * (2 * draw[:, 0] - 1)
    zoom = SCALE[0] + (SCALE[1] - SCALE[0]) * draw[:, 1]
    shift = 2 * SHIFT * (2 * draw[:, 2:] - 1)  # affine_grid's coordinates span [-1, 1]: a side is 2
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], dim=1),
                         torch.stack([sin, cos, shift[:, 1]], dim=1)], dim=1)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


__all__ = ["affine_from_draws", "random_affine"]
