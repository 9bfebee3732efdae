"""Model builders: students, teachers and generators, looked up by name.

Students and teachers share one namespace, :data:`ARCHITECTURES`: any registered classifier may
play either role (DPSD uses ResNet34 as student on ImageNet, and the DataLens CNN elsewhere).
Every architecture builder is a :data:`ClassifierBuilder`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from dpsd.errors import ConfigError
from dpsd.input_space import InputSpace
from dpsd.models.generators import GaussianNoise, Generator
from dpsd.models.vae import ConvVAE, normalize_code, vae_loss
from dpsd.registry import Registry

ClassifierBuilder = Callable[[int, int, int, bool], nn.Module]
"""``(channels, image_size, num_classes, pretrained) -> model returning logits``."""

ARCHITECTURES: Registry[ClassifierBuilder] = Registry("architecture")

# The submodules register their builders into ARCHITECTURES on import, so it must exist first.
from dpsd.models import lenet, students, teachers  # noqa: E402,F401

__all__ = [
    "ARCHITECTURES",
    "ClassifierBuilder",
    "ConvVAE",
    "GENERATORS",
    "GaussianNoise",
    "Generator",
    "build_classifier",
    "build_generator",
    "generator_from_config",
    "init_generator_",
    "generator_trainable",
    "normalize_code",
    "penultimate_features",
    "vae_loss",
    "xavier_init_",
]


def build_classifier(
    arch: str, channels: int, image_size: int, num_classes: int, pretrained: bool = False, stem: str | None = None
) -> nn.Module:
    """Build the registered architecture ``arch`` for ``channels`` x ``image_size``² inputs; ``stem``: a torchvision
    family's first layers (``dpsd.models.teachers.STEMS``; None: the family's default).

    Raises :class:`~dpsd.errors.ConfigError` for an unknown name (listing the known ones) or for
    ``pretrained=True`` where no matching weights exist. The model comes in :func:`channels_last` layout.
    """
    options = {} if stem is None else {"stem": stem}
    return channels_last(ARCHITECTURES.get(arch)(channels, image_size, num_classes, pretrained, **options))


def channels_last(model: nn.Module) -> nn.Module:
    """``model`` with its 4-d weights in channels-last (NHWC) memory layout, so that its convolutions,
    batch norms and poolings run in that layout whatever the input's (oneDNN on a CPU, cuDNN on a GPU).

    Same arithmetic, other summation order in the convolutions (float rounding only). On a 2-core CPU
    ``python -m dpsd.bench --layout --methods dpsd,dp_dfd dataset=mnist scale=laptop`` timed a DPSD iteration
    at b = 128 at 272 ms against 348 ms in NCHW and a DP-DFD one at 324 ms against 393 ms (docs/performance.md,
    "Memory layout").
    """
    return model.to(memory_format=torch.channels_last)


GENERATORS = {"dcgan": Generator, "gaussian_noise": GaussianNoise}


def build_generator(
    latent_dim: int, channels: int, image_size: int, width: int = 64, name: str = "dcgan", seed: int = 0,
    mean: float = 0.0, std: float = 1.0, output: str = "tanh", block_bn_eps: float = 1e-5,
    space: InputSpace = InputSpace(),
) -> Generator | GaussianNoise:
    """``model/generator=<name>``: ``dcgan``, the DCGAN-style generator of DAFL / DPDFD §3 / DPSD
    Alg. 1 sized to the dataset (its ``output`` and ``block_bn_eps``: :class:`Generator`), emitting images
    in the input ``space``, or ``gaussian_noise``, fresh N(mean, std²) images in that space (the ladder's R2)."""
    if name == "gaussian_noise":
        return GaussianNoise(channels, image_size, seed, mean, std)
    return channels_last(generator_class(name)(latent_dim, channels, image_size, width, output, block_bn_eps, space))


def generator_from_config(generator_cfg, channels: int, image_size: int, seed: int,
                          space: InputSpace = InputSpace()) -> Generator | GaussianNoise:
    """The ``model.generator`` node's generator, before initialisation (:func:`init_generator_`);
    ``gaussian_noise`` takes its noise moments (``mean``, ``std``) from the node, ``dcgan`` its ``output``
    and ``block_bn_eps`` where the node has them."""
    options = {key: float(generator_cfg[key]) for key in ("mean", "std", "block_bn_eps") if key in generator_cfg}
    if "output" in generator_cfg:
        options["output"] = str(generator_cfg.output)
    return build_generator(int(generator_cfg.latent_dim), channels, image_size, int(generator_cfg.width),
                           name=generator_cfg.name, seed=seed, space=space, **options)


def init_generator_(generator: nn.Module, generator_cfg) -> nn.Module:
    """Xavier weights and zero biases (DPSD Alg. 1 line 1), then the node's ``output_bias`` on the
    last conv where it has one: 0 in the papers; a negative value (a labelled variant, not the
    papers') darkens the first samples, whose tanh output is otherwise centred on 0."""
    xavier_init_(generator)
    if "output_bias" in generator_cfg:
        generator.output_bias_(float(generator_cfg.output_bias))
    return generator


def generator_class(name: str) -> type[nn.Module]:
    if name not in GENERATORS:
        raise ConfigError(f"unknown model.generator.name {name!r}; known: {', '.join(GENERATORS)}")
    return GENERATORS[name]


def generator_trainable(cfg) -> bool:
    """Whether the configured ``model.generator`` has parameters a method trains (``gaussian_noise`` has none)."""
    return bool(generator_class(cfg.model.generator.name).trainable)


def penultimate_features(model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """Run ``model(x)`` and return ``(its features, logits)``.

    The features are the output of the submodule named by the model's ``activation_features`` where
    the architecture names one (DAFL's LeNet-5: the 120 convolutional features before its two linear
    layers, DAFL-train.py's ``features_T``), and otherwise the input of the final :class:`nn.Linear` in
    ``model.modules()`` order, the classification head of every other registered architecture. They
    feed the activation loss of the generator (DAFL Eq. (4); DPSD Eq. (8), third term; DPDFD Eq. (5)),
    which must work on any student.
    """
    captured: list[Tensor] = []
    named = getattr(model, "activation_features", None)
    if named is not None:
        handle = model.get_submodule(named).register_forward_hook(lambda _m, _inputs, out: captured.append(out.flatten(1)))
    else:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise TypeError(f"{type(model).__name__} has no nn.Linear layer")
        handle = linears[-1].register_forward_hook(lambda _m, inputs, _out: captured.append(inputs[0]))
    try:
        logits = model(x)
    finally:
        handle.remove()
    return captured[-1], logits


@torch.no_grad()
def xavier_init_(module: nn.Module) -> nn.Module:
    """Xavier-uniform weights and zero biases for every conv / linear layer of ``module``.

    DPSD Alg. 1, line 1 initialises the student and the generator with Xavier. Normalisation
    layers keep their default (unit scale, zero shift). Returns ``module`` for chaining.
    """
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            # drawn in NCHW order and copied: a seed gives the same weights in either memory layout
            weight = torch.empty(layer.weight.shape, dtype=layer.weight.dtype, device=layer.weight.device)
            layer.weight.copy_(nn.init.xavier_uniform_(weight))
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module
