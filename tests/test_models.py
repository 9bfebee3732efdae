"""Model builders: every architecture at the dataset shapes, the generator, the feature hook."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision import models
from torchvision.models import WeightsEnum

from dpsd.errors import ConfigError
from dpsd.models import (
    ARCHITECTURES,
    build_classifier,
    build_generator,
    penultimate_features,
    xavier_init_,
)

# (channels, image_size): MNIST-like, CIFAR-like, the embedded 8x8 digits, and a 64 px input that
# keeps the ImageNet stem.
SHAPES = [(1, 28), (3, 32), (1, 8), (1, 64)]

# Tens of millions of parameters each: one shape apiece keeps the file fast on one core; the
# shapes are spread so each adaptation path (channel swap, CIFAR stem, resize) is still covered.
HEAVY = {
    "resnet50": (1, 28),
    "wide_resnet50_2": (3, 32),
    "densenet161": (1, 8),
    "vgg19_bn": (1, 28),  # resized to 32 px for VGG's five 2x2 pools
    "vit_b_16": (1, 28),  # resized to 224 px for ViT-B/16's position embeddings
}

# Architectures that take one image side only (DAFL's LeNets: 32 px).
ONE_SIDE = {"lenet5": (1, 32), "lenet5_half": (3, 32)}

CASES = [
    pytest.param(arch, channels, size, id=f"{arch}-{channels}x{size}")
    for arch in ARCHITECTURES.names()
    for channels, size in ([HEAVY[arch]] if arch in HEAVY else [ONE_SIDE[arch]] if arch in ONE_SIDE else SHAPES)
]


@pytest.mark.parametrize(("arch", "channels", "size"), CASES)
def test_architecture_gives_logits_and_head_features(arch: str, channels: int, size: int) -> None:
    torch.manual_seed(0)
    model = build_classifier(arch, channels, size, num_classes=10).eval()
    x = torch.randn(2, channels, size, size)
    with torch.no_grad():
        features, logits = penultimate_features(model, x)
        assert logits.shape == (2, 10)
        assert features.ndim == 2 and features.shape[0] == 2
        torch.testing.assert_close(logits, model(x))


def test_heavy_architectures_are_registered() -> None:
    assert set(HEAVY) <= set(ARCHITECTURES.names())


def test_students_and_teachers_share_one_namespace() -> None:
    names = ARCHITECTURES.names()
    assert {"datalens_cnn", "small_cnn", "resnet34", "vit_tiny"} <= set(names)


def test_penultimate_features_of_datalens_cnn_are_its_64_hidden_units() -> None:
    model = build_classifier("datalens_cnn", 1, 28, 10)
    x = torch.randn(5, 1, 28, 28)
    features, logits = penultimate_features(model, x)
    assert features.shape == (5, 64)
    assert (features >= 0).all()  # taken after the ReLU
    torch.testing.assert_close(logits, model(x))
    assert all(not m._forward_hooks for m in model.modules())  # the hook is removed again


def test_penultimate_features_backpropagates_to_the_input() -> None:
    model = build_classifier("small_cnn", 1, 28, 10)
    x = torch.randn(3, 1, 28, 28, requires_grad=True)
    features, _ = penultimate_features(model, x)
    features.norm(dim=1).mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_datalens_cnn_parameter_count_follows_its_layer_list() -> None:
    channels, size, classes = 1, 28, 10
    conv1 = 32 * channels * 3 * 3 + 32
    conv2 = 64 * 32 * 3 * 3 + 64
    flat = 64 * (size // 2 // 2) ** 2
    fc1 = flat * 64 + 64
    fc2 = 64 * classes + classes
    model = build_classifier("datalens_cnn", channels, size, classes)
    assert sum(p.numel() for p in model.parameters()) == conv1 + conv2 + fc1 + fc2


def test_datalens_cnn_trains_under_opacus_unchanged() -> None:
    # The DPSGD baseline trains the same student with per-sample gradients (no BatchNorm).
    validators = pytest.importorskip("opacus.validators")
    model = build_classifier("datalens_cnn", 3, 32, 10)
    assert validators.ModuleValidator.validate(model, strict=False) == []


def test_small_cnn_has_batch_norm_for_bn_statistics_losses() -> None:
    model = build_classifier("small_cnn", 1, 28, 10)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 4


def test_small_inputs_get_a_cifar_stem() -> None:
    model = build_classifier("resnet18", 1, 32, 10)
    assert model.conv1.in_channels == 1
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, nn.Identity)
    assert model.fc.out_features == 10


def test_large_inputs_keep_the_imagenet_stem() -> None:
    model = build_classifier("resnet18", 1, 64, 10)
    assert model.conv1.in_channels == 1
    assert model.conv1.kernel_size == (7, 7) and model.conv1.stride == (2, 2)
    assert isinstance(model.maxpool, nn.MaxPool2d)


def test_vgg_pools_globally_and_sizes_its_classifier_for_small_inputs() -> None:
    model = build_classifier("vgg19_bn", 3, 32, 10)
    assert isinstance(model.avgpool, nn.AdaptiveAvgPool2d)
    assert model.classifier[0].in_features == 512


def test_unknown_architecture_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown architecture 'lenet9'") as caught:
        build_classifier("lenet9", 1, 28, 10)
    for name in ARCHITECTURES.names():
        assert name in str(caught.value)


@pytest.mark.parametrize("arch", ["resnet18", "vit_b_16", "googlenet"])
def test_pretrained_weights_need_three_channels(arch: str) -> None:
    # Checked before any weights are fetched: nothing is downloaded.
    with pytest.raises(ConfigError, match="3-channel"):
        build_classifier(arch, 1, 28, 10, pretrained=True)


@pytest.mark.parametrize(
    ("arch", "imagenet_model", "kept_layer"),
    [
        ("resnet18", models.resnet18, "layer1.0.conv1.weight"),
        # torchvision's pretrained GoogLeNet carries (untrained) auxiliary heads in its file
        (
            "googlenet",
            lambda: models.GoogLeNet(aux_logits=True, init_weights=False),
            "inception3a.branch1.conv.weight",
        ),
    ],
)
def test_pretrained_loads_imagenet_weights_into_the_kept_layers(
    arch: str, imagenet_model, kept_layer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for the downloaded file: same layout, random values, nothing fetched.
    state = imagenet_model().state_dict()
    monkeypatch.setattr(WeightsEnum, "get_state_dict", lambda self, *args, **kwargs: state)
    model = build_classifier(arch, 3, 32, 10, pretrained=True).eval()
    torch.testing.assert_close(model.state_dict()[kept_layer], state[kept_layer])
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("arch", ["datalens_cnn", "small_cnn", "vit_tiny"])
def test_pretrained_is_refused_where_no_weights_exist(arch: str) -> None:
    with pytest.raises(ConfigError, match="no pretrained weights"):
        build_classifier(arch, 3, 32, 10, pretrained=True)


@pytest.mark.parametrize("arch", ["datalens_cnn", "small_cnn"])
def test_too_small_images_are_a_config_error(arch: str) -> None:
    with pytest.raises(ConfigError, match="at least 4x4"):
        build_classifier(arch, 1, 3, 10)


@pytest.mark.parametrize("size", [8, 28, 30, 32, 64])
def test_generator_output_shape_and_range(size: int) -> None:
    torch.manual_seed(0)
    generator = build_generator(latent_dim=100, channels=3, image_size=size)
    assert generator.latent_dim == 100
    images = generator(torch.randn(4, 100))
    assert images.shape == (4, 3, size, size)
    assert images.min() >= -1 and images.max() <= 1


def test_generator_is_differentiable_in_its_latent_codes() -> None:
    # DPSD Alg. 1 line 6 updates the latent codes z as well as the generator.
    generator = build_generator(latent_dim=16, channels=1, image_size=28, width=8)
    z = torch.randn(4, 16, requires_grad=True)
    generator(z).sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


def test_generator_rejects_non_positive_sizes() -> None:
    with pytest.raises(ConfigError, match="positive"):
        build_generator(latent_dim=0, channels=1, image_size=28)


def test_xavier_init_zeroes_biases_and_bounds_weights() -> None:
    model = xavier_init_(build_classifier("datalens_cnn", 1, 28, 10))
    for layer in model.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            fan_in = layer.weight[0].numel()
            fan_out = layer.weight.shape[0] * layer.weight[0, 0].numel()
            bound = (6 / (fan_in + fan_out)) ** 0.5
            assert layer.weight.abs().max() <= bound
            assert layer.weight.abs().max() > bound / 2  # filled, not left at a small default
            assert torch.count_nonzero(layer.bias) == 0


@pytest.mark.parametrize("arch", ["small_cnn", "datalens_cnn"])
def test_classifiers_come_in_channels_last_layout_and_compute_what_nchw_computes(arch: str) -> None:
    torch.manual_seed(0)
    model = build_classifier(arch, 1, 28, 10).eval()
    convs = [m.weight for m in model.modules() if isinstance(m, nn.Conv2d) and m.in_channels > 1]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    assert not any(w.is_contiguous() for w in convs)
    x = torch.randn(16, 1, 28, 28)
    with torch.no_grad():
        fast = model(x)
        slow = model.to(memory_format=torch.contiguous_format)(x)
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)


def test_the_generator_comes_in_channels_last_layout() -> None:
    generator = build_generator(100, 1, 28, 32)
    convs = [m.weight for m in generator.modules() if isinstance(m, nn.Conv2d) and m.in_channels > 1]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)


def test_xavier_init_gives_a_seed_the_same_weights_in_either_memory_layout() -> None:
    built = build_classifier("small_cnn", 1, 28, 10)
    nchw = build_classifier("small_cnn", 1, 28, 10).to(memory_format=torch.contiguous_format)
    torch.manual_seed(0)
    xavier_init_(built)
    torch.manual_seed(0)
    xavier_init_(nchw)
    for (name, a), b in zip(built.named_parameters(), nchw.parameters()):
        assert torch.equal(a, b), name


def test_the_stem_switch_keeps_torchvisions_own_stem_on_small_images_and_the_cifar_one_by_default() -> None:
    """model.teacher.stem: the papers' "ResNet34" on 28 px has two readings. small_input (the default) swaps in a
    3x3 stride-1 conv and drops the max-pool; imagenet keeps the 7x7 stride-2 conv and the max-pool, so the first
    stage's maps are 7x7 instead of 28x28."""
    torch.manual_seed(0)
    cifar, imagenet = build_classifier("resnet34", 1, 28, 10), build_classifier("resnet34", 1, 28, 10, stem="imagenet")
    assert (cifar.conv1.kernel_size, cifar.conv1.stride) == ((3, 3), (1, 1)) and isinstance(cifar.maxpool, nn.Identity)
    assert (imagenet.conv1.kernel_size, imagenet.conv1.stride) == ((7, 7), (2, 2))
    assert isinstance(imagenet.maxpool, nn.MaxPool2d) and imagenet.conv1.in_channels == 1
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        assert imagenet.eval()(x).shape == (2, 10)
        assert imagenet.layer1(imagenet.maxpool(imagenet.relu(imagenet.bn1(imagenet.conv1(x))))).shape[-1] == 7
        assert cifar.eval().layer1(cifar.relu(cifar.bn1(cifar.conv1(x)))).shape[-1] == 28
    torch.manual_seed(0)
    same = build_classifier("resnet34", 1, 28, 10, stem="small_input")
    assert all(torch.equal(a, b) for a, b in zip(cifar.state_dict().values(), same.state_dict().values()))
