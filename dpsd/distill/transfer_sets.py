"""Programmatic transfer sets: images made by code, never read from any dataset, for a teacher ensemble to label.

A data-free distillation that queries its teachers on these reads no private record after the teachers are trained
(``method=dfpate``). Each set renders ``n`` grey images in pixel space [0, 1], white shapes on black as MNIST's,
seeded by a ``torch.Generator``; :func:`transfer_images` maps them into the run's input space and repeats the grey
channel for colour data. The sets (``method.transfer``, :data:`TRANSFER_SETS`):

* ``strokes``: one to four cubic Bezier pen strokes of random width inside the central 20 x 20 box (MNIST's digits
  fill a 20 x 20 box in a 28 x 28 image), rendered by distance to the curve with an anti-aliased edge;
* ``dead_leaves``: discs of random radius and grey level laid over each other (the dead-leaves model of natural
  image statistics, Baradad et al. 2021, "Learning to see by looking at noise");
* ``fractals``: points of a random two-map affine iterated function system (chaos game), the attractor drawn as a
  density and thickened (Kataoka et al. 2020, FractalDB's construction, small);
* ``noise``: uniform pixels in [0, 1] (the reference a structured set must beat);
* ``mixed``: strokes, dead leaves and fractals in equal shares, shuffled (no one program's bias decides).

Pen strokes and the rest are DIET-PATE's kind of transfer set (noise and programmatic images); none of its code
is used here.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from dpsd.input_space import InputSpace
from dpsd.registry import Registry

Renderer = Callable[[int, int, torch.Generator], Tensor]
TRANSFER_SETS: Registry[Renderer] = Registry("transfer set")

_CHUNK = 512
"""Images rendered at once (a chunk's distance tensor is chunk x side^2 x curve points)."""


def _grid(side: int) -> Tensor:
    """``side^2 x 2``: pixel centres (x, y) in pixels."""
    coords = torch.arange(side, dtype=torch.float32) + 0.5
    y, x = torch.meshgrid(coords, coords, indexing="ij")
    return torch.stack([x.flatten(), y.flatten()], dim=1)


def _uniform(shape: tuple[int, ...], low: float, high: float, rng: torch.Generator) -> Tensor:
    return low + (high - low) * torch.rand(shape, generator=rng)


def _chunked(render: Callable[[int, int, torch.Generator], Tensor]) -> Renderer:
    def chunked(n: int, side: int, rng: torch.Generator) -> Tensor:
        return torch.cat([render(min(_CHUNK, n - start), side, rng) for start in range(0, n, _CHUNK)]) if n else \
            torch.zeros(0, 1, side, side)
    chunked.__doc__ = render.__doc__
    return chunked


@TRANSFER_SETS.register("strokes")
@_chunked
def strokes(n: int, side: int, rng: torch.Generator) -> Tensor:
    """One to four cubic Bezier strokes an image, control points uniform in the central box of ``20/28`` of the side,
    pen half-width uniform in [0.035, 0.07] of the side (1.0 to 2.0 px at 28), intensity 1 inside, a one-pixel
    linear edge."""
    points, max_strokes = 24, 4
    box = side * 20 / 28
    low, high = (side - box) / 2, (side + box) / 2
    control = _uniform((n, max_strokes, 4, 2), low, high, rng)
    t = torch.linspace(0, 1, points)
    basis = torch.stack([(1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t ** 2, t ** 3], dim=1)  # points x 4
    curve = torch.einsum("pk,nskd->nspd", basis, control)  # n x strokes x points x 2
    used = torch.arange(max_strokes) < torch.randint(1, max_strokes + 1, (n, 1), generator=rng)  # n x strokes
    width = _uniform((n, max_strokes, 1), 0.035 * side, 0.07 * side, rng)
    distance = torch.cdist(_grid(side).expand(n * max_strokes, -1, -1),
                           curve.reshape(n * max_strokes, points, 2)).min(dim=2).values.reshape(n, max_strokes, -1)
    ink = (width + 0.5 - distance).clamp(0, 1) * used.unsqueeze(2)
    return ink.amax(dim=1).reshape(n, 1, side, side)


@TRANSFER_SETS.register("dead_leaves")
@_chunked
def dead_leaves(n: int, side: int, rng: torch.Generator) -> Tensor:
    """Twelve discs an image on black, each later one covering the earlier: centres uniform over the image, radius
    uniform in [0.05, 0.25] of the side, grey level uniform in [0, 1]."""
    discs = 12
    centre = _uniform((n, discs, 1, 2), 0, side, rng)
    radius = _uniform((n, discs, 1), 0.05 * side, 0.25 * side, rng)
    level = torch.rand((n, discs, 1), generator=rng)
    inside = ((_grid(side) - centre).norm(dim=3) <= radius)  # n x discs x pixels
    image = torch.zeros(n, side * side)
    for disc in range(discs):
        image = torch.where(inside[:, disc], level[:, disc], image)
    return image.reshape(n, 1, side, side)


@TRANSFER_SETS.register("fractals")
@_chunked
def fractals(n: int, side: int, rng: torch.Generator) -> Tensor:
    """The attractor of a random two-map contractive affine system (each map's linear part with entries uniform in
    [-0.7, 0.7], rescaled to spectral norm at most 0.8), 600 chaos-game points after 20 burn-in steps, scaled
    into the central box, drawn as a density, thickened by a 3 x 3 max-pool, normalised to a peak of 1."""
    maps, steps, burn_in = 2, 600, 20
    linear = _uniform((n, maps, 2, 2), -0.7, 0.7, rng)
    norm = torch.linalg.matrix_norm(linear, ord=2).clamp(min=0.8) / 0.8
    linear = linear / norm[..., None, None]
    shift = _uniform((n, maps, 2), -1, 1, rng)
    point, visited = torch.zeros(n, 2), []
    choice = torch.randint(0, maps, (n, steps + burn_in), generator=rng)
    rows = torch.arange(n)
    for step in range(steps + burn_in):
        k = choice[:, step]
        point = torch.einsum("nij,nj->ni", linear[rows, k], point) + shift[rows, k]
        if step >= burn_in:
            visited.append(point)
    cloud = torch.stack(visited, dim=1)  # n x steps x 2
    low, high = cloud.amin(dim=1, keepdim=True), cloud.amax(dim=1, keepdim=True)
    box = side * 20 / 28
    pixel = ((cloud - low) / (high - low).clamp(min=1e-6) * (box - 1) + (side - box) / 2).long().clamp(0, side - 1)
    flat = (pixel[..., 1] * side + pixel[..., 0])
    density = torch.zeros(n, side * side).scatter_add_(1, flat, torch.ones_like(flat, dtype=torch.float32))
    image = F.max_pool2d(density.reshape(n, 1, side, side), 3, stride=1, padding=1)
    return (image / image.amax(dim=(2, 3), keepdim=True).clamp(min=1e-6)).sqrt()


@TRANSFER_SETS.register("noise")
def noise(n: int, side: int, rng: torch.Generator) -> Tensor:
    """Uniform pixels in [0, 1]."""
    return torch.rand((n, 1, side, side), generator=rng)


_MIXED = ("strokes", "dead_leaves", "fractals")


def even_shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` shares as even as can be: ``total // parts`` each, the first ``total % parts``
    one more (the mixed set's programs, a run's rounds of queries, a round's classes)."""
    return [total // parts + (i < total % parts) for i in range(parts)]


@TRANSFER_SETS.register("mixed")
def mixed(n: int, side: int, rng: torch.Generator) -> Tensor:
    """Strokes, dead leaves and fractals, ``n / 3`` each (the first sets one more where ``n`` does not divide), in a
    random order."""
    images = torch.cat([TRANSFER_SETS.get(name)(share, side, rng) for name, share in zip(_MIXED, even_shares(n, len(_MIXED)))])
    return images[torch.randperm(n, generator=rng)]


def transfer_images(name: str, n: int, channels: int, side: int, space: InputSpace, rng: torch.Generator) -> Tensor:
    """``n`` images of transfer set ``name`` (:data:`TRANSFER_SETS`; an unknown name is a one-line ConfigError naming
    the known ones) at ``side`` px, their grey channel repeated ``channels`` times, mapped from pixels in [0, 1]
    into ``space`` (``(p - mean) / std`` per channel)."""
    pixels = TRANSFER_SETS.get(name)(n, side, rng).repeat(1, channels, 1, 1)
    stats = space.for_channels(channels)
    mean = torch.tensor(stats.mean).view(1, channels, 1, 1)
    std = torch.tensor(stats.std).view(1, channels, 1, 1)
    return (pixels - mean) / std


def check_transfer_set(name: str) -> str:
    """``name`` if it is a registered transfer set, else the registry's one-line ConfigError."""
    TRANSFER_SETS.get(name)
    return name


__all__ = ["TRANSFER_SETS", "check_transfer_set", "transfer_images"]
