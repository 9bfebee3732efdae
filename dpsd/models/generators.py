"""The synthetic-data generator Φg of DPSD Alg. 1 and DPDFD §3 (Fig. 1).

Both papers take the DCGAN-style generator of DAFL (Chen et al., ICCV 2019): a linear projection
of the latent code to a (2·width)-channel map of a quarter of the image side, two ×2 upsampling
conv blocks, and a conv to the image channels squashed by tanh.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from dpsd.errors import ConfigError


class Generator(nn.Module):
    """Maps latent codes ``z`` of shape (B, ``latent_dim``) to images (B, C, S, S) in [-1, 1].

    Linear(latent_dim → 2w·s²), s = ⌈S/4⌉ → BN → Upsample×2 → Conv 3x3 (2w→2w) → BN →
    LeakyReLU(0.2) → Upsample×2 → Conv 3x3 (2w→w) → BN → LeakyReLU(0.2) → Conv 3x3 (w→C) → tanh,
    then a centre crop from 4s to S when S is not a multiple of 4 (cropping keeps the range).
    """

    def __init__(self, latent_dim: int, channels: int, image_size: int, width: int = 64) -> None:
        super().__init__()
        if min(latent_dim, channels, image_size, width) < 1:
            raise ConfigError(
                f"generator sizes must be positive, got latent_dim={latent_dim}, "
                f"channels={channels}, image_size={image_size}, width={width}"
            )
        self.latent_dim = latent_dim
        self.channels = channels
        self.image_size = image_size
        self.init_size = math.ceil(image_size / 4)
        self.project = nn.Linear(latent_dim, 2 * width * self.init_size**2)
        self.blocks = nn.Sequential(
            nn.BatchNorm2d(2 * width),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, channels, kernel_size=3, padding=1),
            nn.Tanh(),
        )

    def forward(self, z: Tensor) -> Tensor:
        x = self.project(z).view(z.shape[0], -1, self.init_size, self.init_size)
        x = self.blocks(x)
        start = (4 * self.init_size - self.image_size) // 2
        return x[..., start : start + self.image_size, start : start + self.image_size]
