"""The synthetic-data generator Φg of DPSD Alg. 1 and DPDFD §3 (Fig. 1), and the ladder's R2 stand-in.

Both papers take the DCGAN-style generator of DAFL (Chen et al., ICCV 2019): a linear projection
of the latent code to a (2·width)-channel map of a quarter of the image side, two ×2 upsampling
conv blocks, and a conv to the image channels squashed by tanh. :class:`GaussianNoise`
(``model/generator=gaussian_noise``) replaces it with fresh N(0, 1) images and no parameters: the
ladder's rung R2, "KD on pure noise" (DAFL, Chen et al. 2019, §4.1: 88% on MNIST).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from dpsd.errors import ConfigError
from dpsd.input_space import InputSpace

OUTPUTS = ("tanh", "tanh_batchnorm")
"""``model.generator.output``: ``tanh`` (DPSD Alg. 1, DPDFD: pixels in [-1, 1], mapped into the teacher's
input space) | ``tanh_batchnorm`` (DAFL-train.py and DFAD: tanh, then an affine-free BatchNorm, which
standardises each batch's images per channel: they land in the teacher's input space whatever it is)."""


class Generator(nn.Module):
    """Maps latent codes ``z`` of shape (B, ``latent_dim``) to images (B, C, S, S) in the input ``space``.

    Linear(latent_dim → 2w·s²), s = ⌈S/4⌉ → BN → Upsample×2 → Conv 3x3 (2w→2w) → BN →
    LeakyReLU(0.2) → Upsample×2 → Conv 3x3 (2w→w) → BN → LeakyReLU(0.2) → Conv 3x3 (w→C) → tanh,
    then a centre crop from 4s to S when S is not a multiple of 4 (cropping keeps the range).
    ``output=tanh``: the tanh's pixels in [-1, 1] are mapped into ``space`` (the identity for
    ``minus_one_one``); ``output=tanh_batchnorm``: an affine-free BatchNorm follows the tanh (DAFL's
    generator). ``block_bn_eps`` is the eps of the two BatchNorms after the convs: 1e-5 (PyTorch's), or
    DAFL's 0.8 (``nn.BatchNorm2d(128, 0.8)`` in DAFL-train.py passes 0.8 as eps).
    """

    trainable = True  # a method trains its parameters (see GaussianNoise)

    def __init__(self, latent_dim: int, channels: int, image_size: int, width: int = 64, output: str = "tanh",
                 block_bn_eps: float = 1e-5, space: InputSpace = InputSpace()) -> None:
        super().__init__()
        if min(latent_dim, channels, image_size, width) < 1:
            raise ConfigError(
                f"generator sizes must be positive, got latent_dim={latent_dim}, "
                f"channels={channels}, image_size={image_size}, width={width}"
            )
        if output not in OUTPUTS:
            raise ConfigError(f"model.generator.output must be one of {', '.join(OUTPUTS)}, got {output!r}")
        if block_bn_eps <= 0:
            raise ConfigError(f"model.generator.block_bn_eps must be > 0, got {block_bn_eps}")
        self.latent_dim = latent_dim
        self.channels = channels
        self.image_size = image_size
        self.init_size = math.ceil(image_size / 4)
        self.project = nn.Linear(latent_dim, 2 * width * self.init_size**2)
        self.blocks = nn.Sequential(
            nn.BatchNorm2d(2 * width),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width, eps=block_bn_eps),
            nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width, eps=block_bn_eps),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, channels, kernel_size=3, padding=1),
            nn.Tanh(),
            *([nn.BatchNorm2d(channels, affine=False)] if output == "tanh_batchnorm" else []),
        )
        space = space.for_channels(channels)
        # tanh pixels -> the input space (not in the state dict: a property of the run's config)
        self.to_space = output == "tanh" and not space.is_minus_one_one
        scale, shift = space.from_tanh()
        self.register_buffer("output_scale", torch.tensor(scale).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("output_shift", torch.tensor(shift).view(1, -1, 1, 1), persistent=False)

    def output_bias_(self, value: float) -> "Generator":
        """Set the bias of the last conv (before tanh) to ``value``; returns ``self``."""
        last_conv = [m for m in self.blocks if isinstance(m, nn.Conv2d)][-1]
        nn.init.constant_(last_conv.bias, value)
        return self

    def forward(self, z: Tensor) -> Tensor:
        x = self.project(z).view(z.shape[0], -1, self.init_size, self.init_size)
        x = self.blocks(x)
        if self.to_space:
            x = x * self.output_scale + self.output_shift
        start = (4 * self.init_size - self.image_size) // 2
        return x[..., start : start + self.image_size, start : start + self.image_size]


class GaussianNoise(nn.Module):
    """No generator at all: ``forward(z)`` returns ``len(z)`` fresh N(mean, std²) images (C, S, S),
    ignoring the latent values (N(0, 1) by default, DAFL's "pure noise"). It has no parameters (``trainable = False``): a method's generator update is
    skipped, not run on nothing. Its randomness is its own generator, seeded by ``seed``, so a run
    is reproducible and the method's other draws are unchanged in number."""

    trainable = False

    def __init__(self, channels: int, image_size: int, seed: int = 0, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        if min(channels, image_size) < 1 or std <= 0:
            raise ConfigError(f"gaussian_noise needs positive sizes and std, got channels={channels}, "
                              f"image_size={image_size}, std={std}")
        self.channels, self.image_size, self.seed = channels, image_size, seed
        self.mean, self.std = float(mean), float(std)
        self._rng: torch.Generator | None = None

    def forward(self, z: Tensor) -> Tensor:
        if self._rng is None or self._rng.device != z.device:
            self._rng = torch.Generator(device=z.device).manual_seed(self.seed)
        shape = (z.shape[0], self.channels, self.image_size, self.image_size)
        noise = torch.randn(shape, generator=self._rng, device=z.device, dtype=z.dtype)
        return noise * self.std + self.mean
