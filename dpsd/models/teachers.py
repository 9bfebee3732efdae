"""Teacher networks: a small CPU-friendly CNN and torchvision families adapted to small inputs.

DPSD §IV-A and DPDFD §4 ("Networks") pretrain nine families on the private data (AlexNet,
VGG19-BN, ResNet34/50, WideResNet50, DenseNet161, MobileNet, ShuffleNet, GoogLeNet, ViT), most
datasets being 28x28 or 32x32, and take ImageNet-pretrained ones from the PyTorch model zoo for
the open-source-network experiments (DPSD Fig. 4, DPDFD Tab. 3).

Every torchvision family goes through one adaptation, driven by :data:`TORCHVISION_FAMILIES`:

* the first conv takes ``channels`` inputs (replaced, hence freshly initialised, unless 3);
* the final ``nn.Linear`` gets ``num_classes`` outputs (always replaced);
* small inputs (side < :data:`SMALL_INPUT`) get the usual CIFAR adaptation: a 3x3 stride-1 stem
  conv and no stem max-pooling (ResNet, WideResNet, DenseNet, GoogLeNet, ShuffleNet, AlexNet;
  MobileNetV2 only loses its stem stride); VGG and AlexNet also pool globally, and their first
  classifier layer is resized to the channels that come out (instead of a 7x7 / 6x6 map
  replicated from a 1x1 one). That is the ``small_input`` reading of ``model.teacher.stem``
  (:data:`STEMS`); ``imagenet`` keeps torchvision's own layout (ResNet's 7x7 stride-2 conv and
  max-pool) at every size: the papers train "ResNet34" on 28 and 32 px images and name no stem;
* where the adapted net still cannot take the input, a leading bilinear ``nn.Upsample`` resizes
  it: VGG's five 2x2 pools need 32 px, AlexNet's three 3/2 pools need 15 px, ViT-B/16's position
  embeddings are for 224 px, and ``vit_tiny`` needs a multiple of its patch size.

``pretrained=True`` loads torchvision's ImageNet weights (``weights=<Enum>.DEFAULT``) and needs 3
channels; the layers the adaptation replaces start from scratch.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torchvision import models
from torchvision.models import VisionTransformer, WeightsEnum

from dpsd.errors import ConfigError
from dpsd.models import ARCHITECTURES

SMALL_INPUT = 64
"""Inputs with a side below this get the CIFAR adaptation (``stem: small_input``); larger ones keep the ImageNet stem."""
STEMS = ("small_input", "imagenet")
"""``model.teacher.stem`` of a torchvision family: the CIFAR adaptation below :data:`SMALL_INPUT` px | torchvision's
own stem at every size."""
DEFAULT_STEM = STEMS[0]


@ARCHITECTURES.register("pooled_mlp")
def pooled_mlp(channels: int, image_size: int, num_classes: int, pretrained: bool) -> nn.Sequential:
    """A weak, cheap ensemble member: 2x2 average pooling (28 px to 14), one hidden layer of 64 ReLU units.

    For ensembles of hundreds to thousands of teachers each trained on a few dozen private records (the data-free
    PATE method, ``method=dfpate``): about 13,000 multiply-adds an MNIST image, so thousands of members answer
    thousands of queries in seconds on a CPU when batched (:func:`dpsd.ensembles.member_probabilities`).
    """
    if pretrained:
        raise ConfigError("no pretrained weights exist for 'pooled_mlp'; set pretrained=false")
    side = image_size // 2
    if side < 1:
        raise ConfigError(f"pooled_mlp needs images of at least 2x2 pixels, got {image_size}")
    return nn.Sequential(nn.AvgPool2d(2), nn.Flatten(), nn.Linear(channels * side * side, 64), nn.ReLU(),
                         nn.Linear(64, num_classes))


class FixedFront(nn.Module):
    """A member's first stage that holds no trainable parameter and was made from no data: the same map for every
    member built for one input, so an ensemble computes it once for all of its members and trains (and batches) only
    what follows it (:func:`dpsd.ensembles.split_front`). A member that has one is ``Sequential(front=..., head=...)``.
    """


class ScatteringFront(FixedFront):
    """Mallat's 2-D scattering transform (Bruna & Mallat, "Invariant scattering convolution networks", TPAMI 2013,
    §3-4): wavelet moduli averaged over 2^J pixels, orders 0 to 2, through kymatio's ``Scattering2D``, flattened. At
    J = 2 and L = 8 orientations (kymatio's MNIST example and the paper's small-sample setting) a 28 px image gives 81
    channels of 7 x 7, 3,969 features, stable to small shifts and deformations: a member on a few dozen records need
    not learn them. Wavelets are fixed by (J, L, size) alone: no data, no seed, no privacy cost. Their filters are
    rebuilt, not stored (non-persistent buffers), so a member's cache file holds its head only.
    """

    def __init__(self, image_size: int, J: int = 2, L: int = 8):
        super().__init__()
        # kymatio.torch imports the 3-D frontend too, which needs scipy.special.sph_harm (gone since SciPy 1.15);
        # the 2-D frontend alone does not
        from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

        self.scattering = ScatteringTorch2D(J=J, shape=(image_size, image_size), L=L)
        for name, tensor in list(self.scattering.named_buffers(recurse=False)):
            delattr(self.scattering, name)
            self.scattering.register_buffer(name, tensor, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.scattering(x.contiguous()).flatten(1)


@lru_cache(maxsize=None)
def _scattering_front(channels: int, image_size: int) -> tuple[ScatteringFront, int]:
    """One front per input shape, shared by every member built for it (building one takes a fifth of a second,
    a thousand members minutes), and its feature count."""
    front = ScatteringFront(image_size)
    with torch.no_grad():
        features = front(torch.zeros(1, channels, image_size, image_size)).shape[1]
    return front, features


@ARCHITECTURES.register("scattering_mlp")
def scattering_mlp(channels: int, image_size: int, num_classes: int, pretrained: bool) -> nn.Sequential:
    """An ensemble member on fixed wavelet features: the scattering transform (:class:`ScatteringFront`, shared by
    every member, computed once for all of them) and the pooled MLP's head, one hidden layer of 64 ReLU units. A
    stronger member than :func:`pooled_mlp` where each has a few dozen records: it need not learn shift and
    deformation stability from them."""
    if pretrained:
        raise ConfigError("no pretrained weights exist for 'scattering_mlp'; set pretrained=false")
    if image_size < 8:
        raise ConfigError(f"scattering_mlp needs images of at least 8x8 pixels, got {image_size}")
    front, features = _scattering_front(channels, image_size)
    return nn.Sequential(OrderedDict(front=front, head=nn.Sequential(nn.Linear(features, 64), nn.ReLU(),
                                                                     nn.Linear(64, num_classes))))


@ARCHITECTURES.register("small_cnn")
def small_cnn(channels: int, image_size: int, num_classes: int, pretrained: bool) -> nn.Sequential:
    """A small BN-CNN teacher for CPU runs.

    On MNIST it reached 98.7% test accuracy after one epoch and 98.9% after two (Adam, lr 1e-3,
    batch 128, inputs scaled to [-1, 1]).

    [Conv 3x3 → BN → ReLU] x2 at 32 channels → MaxPool 2 → [Conv 3x3 → BN → ReLU] x2 at 64
    channels → MaxPool 2 → flatten → Linear 128 → ReLU → Linear ``num_classes``. The BN layers
    are wanted: the BN-statistics generator losses of DFAD-style methods read them.
    """
    if pretrained:
        raise ConfigError("no pretrained weights exist for 'small_cnn'; set pretrained=false")
    side = image_size // 2 // 2
    if side < 1:
        raise ConfigError(f"small_cnn needs images of at least 4x4 pixels, got {image_size}")

    def conv_bn_relu(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *conv_bn_relu(channels, 32),
        *conv_bn_relu(32, 32),
        nn.MaxPool2d(2),
        *conv_bn_relu(32, 64),
        *conv_bn_relu(64, 64),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * side * side, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


Constructor = Callable[[WeightsEnum | None, int], nn.Module]
"""``(weights or None, input side) -> torchvision model with its ImageNet layout``."""


@dataclass(frozen=True)
class TorchvisionFamily:
    """How one torchvision architecture is built and adapted (paths are ``get_submodule`` paths)."""

    constructor: Constructor
    weights: type[WeightsEnum] | None  # ImageNet weights enum; None where torchvision has none
    stem: str  # the first conv: takes ``channels`` inputs
    head: str  # the final nn.Linear: gets ``num_classes`` outputs
    small_stem: dict[str, Any] = field(default_factory=dict)  # Conv2d geometry for small inputs
    small_removed: tuple[str, ...] = ()  # stem downsampling dropped for small inputs
    small_global_pool: tuple[str, str] | None = None  # (pooling, first classifier Linear)
    min_size: int = 1  # smallest side the adapted net takes
    fixed_size: int | None = None  # the only side the net takes
    size_multiple: int = 1  # the side must be a multiple of this

    def input_size(self, image_size: int) -> int:
        """The side the net is built for; images of another side are resized to it."""
        if self.fixed_size is not None:
            return self.fixed_size
        size = max(image_size, self.min_size)
        return -(-size // self.size_multiple) * self.size_multiple


def _any_size(builder: Callable[..., nn.Module]) -> Constructor:
    """A torchvision builder whose nets pool adaptively, so the input side does not matter."""
    return lambda weights, input_size: builder(weights=weights)


def _googlenet(weights: WeightsEnum | None, input_size: int) -> nn.Module:
    # Without weights torchvision adds auxiliary heads (a tuple output in training) and warns
    # about its init default; with weights it drops the untrained aux heads itself and refuses
    # both arguments.
    if weights is None:
        return models.googlenet(aux_logits=False, init_weights=True)
    return models.googlenet(weights=weights)


def _vit_tiny(weights: WeightsEnum | None, input_size: int) -> nn.Module:
    """A 4-layer, 128-wide ViT for CPU runs: patch 4 (16 tokens per 16x16), patch 2 below 16 px."""
    return VisionTransformer(
        image_size=input_size,
        patch_size=4 if input_size >= 16 else 2,
        num_layers=4,
        num_heads=4,
        hidden_dim=128,
        mlp_dim=256,
    )


_CIFAR_STEM = {"kernel_size": 3, "stride": 1, "padding": 1}
_RESNET = {"stem": "conv1", "head": "fc", "small_stem": _CIFAR_STEM, "small_removed": ("maxpool",)}
_DENSENET = {
    "stem": "features.conv0",
    "head": "classifier",
    "small_stem": _CIFAR_STEM,
    "small_removed": ("features.pool0",),
}

TORCHVISION_FAMILIES: dict[str, TorchvisionFamily] = {
    "resnet18": TorchvisionFamily(_any_size(models.resnet18), models.ResNet18_Weights, **_RESNET),
    "resnet34": TorchvisionFamily(_any_size(models.resnet34), models.ResNet34_Weights, **_RESNET),
    "resnet50": TorchvisionFamily(_any_size(models.resnet50), models.ResNet50_Weights, **_RESNET),
    "wide_resnet50_2": TorchvisionFamily(
        _any_size(models.wide_resnet50_2), models.Wide_ResNet50_2_Weights, **_RESNET
    ),
    "vgg19_bn": TorchvisionFamily(
        _any_size(models.vgg19_bn),
        models.VGG19_BN_Weights,
        stem="features.0",
        head="classifier.6",
        small_global_pool=("avgpool", "classifier.0"),
        min_size=32,
    ),
    "alexnet": TorchvisionFamily(
        _any_size(models.alexnet),
        models.AlexNet_Weights,
        stem="features.0",
        head="classifier.6",
        small_stem=_CIFAR_STEM,
        small_global_pool=("avgpool", "classifier.1"),
        min_size=15,
    ),
    "densenet121": TorchvisionFamily(
        _any_size(models.densenet121), models.DenseNet121_Weights, **_DENSENET
    ),
    "densenet161": TorchvisionFamily(
        _any_size(models.densenet161), models.DenseNet161_Weights, **_DENSENET
    ),
    "mobilenet_v2": TorchvisionFamily(
        _any_size(models.mobilenet_v2),
        models.MobileNet_V2_Weights,
        stem="features.0.0",
        head="classifier.1",
        small_stem={"stride": 1},
    ),
    "shufflenet_v2_x1_0": TorchvisionFamily(
        _any_size(models.shufflenet_v2_x1_0),
        models.ShuffleNet_V2_X1_0_Weights,
        stem="conv1.0",
        head="fc",
        small_stem={"stride": 1},
        small_removed=("maxpool",),
    ),
    "googlenet": TorchvisionFamily(
        _googlenet,
        models.GoogLeNet_Weights,
        stem="conv1.conv",
        head="fc",
        small_stem=_CIFAR_STEM,
        small_removed=("maxpool1", "maxpool2"),
    ),
    "vit_b_16": TorchvisionFamily(
        _any_size(models.vit_b_16),
        models.ViT_B_16_Weights,
        stem="conv_proj",
        head="heads.head",
        fixed_size=224,
    ),
    "vit_tiny": TorchvisionFamily(
        _vit_tiny, None, stem="conv_proj", head="heads.head", size_multiple=4
    ),
}


def _replace(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent), name, module)


def build_torchvision(
    arch: str, channels: int, image_size: int, num_classes: int, pretrained: bool, stem: str = DEFAULT_STEM
) -> nn.Module:
    """Build ``TORCHVISION_FAMILIES[arch]`` adapted to ``channels`` x ``image_size``² inputs, with the small-input
    adaptation below :data:`SMALL_INPUT` px unless ``stem`` is ``imagenet`` (:data:`STEMS`)."""
    family = TORCHVISION_FAMILIES[arch]
    weights = None
    if pretrained:
        if family.weights is None:
            raise ConfigError(f"no pretrained weights exist for {arch!r}; set pretrained=false")
        if channels != 3:
            raise ConfigError(
                f"pretrained {arch!r} weights are torchvision's ImageNet weights for 3-channel "
                f"(RGB) inputs, but the data has {channels} channel(s); set pretrained=false"
            )
        weights = family.weights.DEFAULT
    input_size = family.input_size(image_size)
    model = family.constructor(weights, input_size)
    small = image_size < SMALL_INPUT and stem == DEFAULT_STEM

    stem = model.get_submodule(family.stem)
    if channels != stem.in_channels or (small and family.small_stem):
        geometry = {"kernel_size": stem.kernel_size, "stride": stem.stride, "padding": stem.padding}
        if small:
            geometry.update(family.small_stem)
        conv = nn.Conv2d(channels, stem.out_channels, bias=stem.bias is not None, **geometry)
        _replace(model, family.stem, conv)
    if small:
        for path in family.small_removed:
            _replace(model, path, nn.Identity())
        if family.small_global_pool is not None:
            pool, first_linear = family.small_global_pool
            feature_channels = [m for m in model.modules() if isinstance(m, nn.Conv2d)][-1]
            hidden = model.get_submodule(first_linear).out_features
            _replace(model, pool, nn.AdaptiveAvgPool2d(1))
            _replace(model, first_linear, nn.Linear(feature_channels.out_channels, hidden))
    head = model.get_submodule(family.head)
    _replace(model, family.head, nn.Linear(head.in_features, num_classes))

    if input_size == image_size:
        return model
    resize = nn.Upsample(size=(input_size, input_size), mode="bilinear", align_corners=False)
    return nn.Sequential(OrderedDict(resize=resize, net=model))


for _name in TORCHVISION_FAMILIES:
    ARCHITECTURES.register(_name)(partial(build_torchvision, _name))
