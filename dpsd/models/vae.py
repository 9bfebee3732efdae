"""The convolutional VAE {phi_e, phi_d} of DGD (§III, "we train a VAE ... constructed with
convolutional neural networks like [65]", the tangent-normal adversarial regularisation paper).

The decoder reads *normalised* codes: DGD adds Laplace noise of scale 2c/eps_1 to "the normalised
latent codes" and then "the mapping operator M(.) projects the code into decoder input". Here the
normalisation is a coordinate-wise tanh, so every normalised code lies in (-1, 1)^c and two codes
differ by at most 2c in L1 (the sensitivity behind the scale 2c/eps_1); M is the decoder's first
linear layer. The decoder is the DCGAN-style :class:`~dpsd.models.generators.Generator` (a linear
projection M followed by upsampling convolutions), so synthetic data and reconstructions share one
image model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpsd.errors import ConfigError
from dpsd.input_space import InputSpace
from dpsd.models.generators import Generator


def normalize_code(z: Tensor) -> Tensor:
    """DGD's normalisation of a latent code before its Laplace noise: tanh, into (-1, 1)^c."""
    return torch.tanh(z)


class ConvVAE(nn.Module):
    """Encoder: Conv 3x3 stride 2 (C→w) → LeakyReLU → Conv 3x3 stride 2 (w→2w) → BN → LeakyReLU →
    flatten → Linear to (mu, log var) of a ``latent_dim``-dim Gaussian. Decoder: tanh-normalised
    code → :class:`Generator` (M = its linear projection) → image in the input ``space``."""

    def __init__(self, latent_dim: int, channels: int, image_size: int, width: int = 32,
                 space: InputSpace = InputSpace()) -> None:
        super().__init__()
        if min(latent_dim, channels, image_size, width) < 1:
            raise ConfigError(f"VAE sizes must be positive, got latent_dim={latent_dim}, channels={channels}, "
                              f"image_size={image_size}, width={width}")
        self.latent_dim = latent_dim
        side = (((image_size + 1) // 2) + 1) // 2  # two stride-2 convolutions with padding 1
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, width, 3, stride=2, padding=1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.LeakyReLU(0.2),
            nn.Flatten(),
            nn.Linear(2 * width * side * side, 2 * latent_dim),
        )
        self.decoder = Generator(latent_dim, channels, image_size, width, space=space)

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(mu, log var) of q(z | x)."""
        mu, log_var = self.encoder(x).chunk(2, dim=1)
        return mu, log_var

    def decode(self, code: Tensor) -> Tensor:
        """phi_d(M(code)) for a normalised (possibly noisy) code in about [-1, 1]^c."""
        return self.decoder(code)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Reconstruction from a reparameterised sample, with the posterior's (mu, log var)."""
        mu, log_var = self.encode(x)
        z = mu + torch.randn_like(mu) * (0.5 * log_var).exp()
        return self.decode(normalize_code(z)), mu, log_var


def vae_loss(x: Tensor, reconstruction: Tensor, mu: Tensor, log_var: Tensor) -> Tensor:
    """Negative ELBO per image: summed squared error + KL(q(z|x) || N(0, I)), batch mean."""
    squared_error = F.mse_loss(reconstruction, x, reduction="sum") / len(x)
    kl = -0.5 * (1 + log_var - mu.pow(2) - log_var.exp()).sum(dim=1).mean()
    return squared_error + kl
