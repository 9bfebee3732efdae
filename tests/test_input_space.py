"""Input conventions (model.teacher.input): the data, the generators and the teacher cache honour them."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from dpsd.config import compose
from dpsd.data import data_info, input_convention, load_data
from dpsd.errors import ConfigError
from dpsd.input_space import PUBLISHED_STATISTICS, InputSpace, input_space
from dpsd.models import build_classifier, build_generator
from dpsd.models.teachers import STEMS
from dpsd.cell_identity import config_hash
from dpsd.teachers import teacher_key



def test_mean_std_maps_every_pixel_of_the_default_splits_affinely():
    plain = load_data(compose([]))
    normalised = load_data(compose(["model.teacher.input.normalization=mean_std"]))
    (mean,), (std,) = PUBLISHED_STATISTICS["digits"]
    for split in ("train", "test"):
        x, y = getattr(plain, split).tensors
        mapped, labels = getattr(normalised, split).tensors
        torch.testing.assert_close(mapped, ((x + 1) / 2 - mean) / std)
        assert torch.equal(labels, y)
    assert normalised.space == InputSpace((mean,), (std,))
    # the digits' published statistics describe their pixels: the mapped training split is near N(0, 1)
    assert abs(float(normalised.train.tensors[0].mean())) < 0.05
    assert abs(float(normalised.train.tensors[0].std()) - 1) < 0.05


def test_image_size_resizes_the_splits_and_is_what_the_run_is_told():
    cfg = compose(["model.teacher.input.image_size=32"])
    data = load_data(cfg)
    assert data.train.tensors[0].shape[-2:] == (32, 32) and data.image_size == 32
    assert data_info(cfg).image_size == 32


def test_a_dataset_without_published_statistics_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="needs published statistics.*mnist"):
        input_space("mean_std", "celeba_hair")
    with pytest.raises(ConfigError, match="must be one of minus_one_one, mean_std"):
        data_info(compose(["model.teacher.input.normalization=zscore"]))


@pytest.mark.parametrize("width", [8, 16])
def test_a_tanh_generator_emits_pixels_in_the_input_space(width):
    space = InputSpace((0.1307,), (0.3081,))
    torch.manual_seed(0)
    generator = build_generator(100, 1, 32, width, space=space)
    plain = build_generator(100, 1, 32, width)
    plain.load_state_dict(generator.state_dict())  # the map is not a weight: the same state dict loads
    z = torch.randn(64, 100)
    images, pixels = generator(z), plain(z)  # plain: tanh in [-1, 1]
    torch.testing.assert_close(images, ((pixels + 1) / 2 - 0.1307) / 0.3081)
    assert images.min() >= -0.1307 / 0.3081 - 1e-5 and images.max() <= (1 - 0.1307) / 0.3081 + 1e-5


@pytest.mark.parametrize("normalization", ["minus_one_one", "mean_std"])
def test_a_run_s_tanh_generator_emits_pixels_in_its_teacher_s_input_space(normalization):
    """What a method builds from a run's context: its generator maps the tanh pixels into the space the private and
    test splits were loaded in (a run's context once dropped the space, so a mean/std teacher read the tanh's [-1, 1]
    as they were)."""
    from dpsd.methods.base import RunContext
    from dpsd.methods.dpsd import DPSDTrainer
    from dpsd.privacy.accounting import Ledger

    cfg = compose(["method=dpsd", "privacy=none", f"model.teacher.input.normalization={normalization}"])
    data = load_data(cfg)
    teacher = build_classifier("small_cnn", 1, data.image_size, 10).eval()
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    assert ctx.info.space == data.space
    generator = DPSDTrainer(ctx).generator
    assert generator.to_space == (normalization == "mean_std")  # minus_one_one: the tanh's pixels are the space's
    images = generator(torch.randn(64, 100)).detach()
    low, high = [(edge - m) / s for edge in (0.0, 1.0) for m, s in zip(data.space.mean, data.space.std)]
    assert images.min() >= low - 1e-5 and images.max() <= high + 1e-5


def test_dafl_s_generator_standardises_each_batch_and_has_its_eps():
    torch.manual_seed(0)
    generator = build_generator(100, 1, 32, 64, output="tanh_batchnorm", block_bn_eps=0.8).train()
    images = generator(torch.randn(256, 100)).detach()
    assert abs(float(images.mean())) < 1e-4 and abs(float(images.std()) - 1) < 1e-2
    eps = [m.eps for m in generator.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert eps == [1e-5, 0.8, 0.8, 1e-5]
    last = list(generator.modules())[-1]
    assert isinstance(last, torch.nn.BatchNorm2d) and not last.affine
    with pytest.raises(ConfigError, match="tanh, tanh_batchnorm"):
        build_generator(100, 1, 32, 64, output="sigmoid")


def test_the_teacher_cache_key_holds_the_input_convention():
    configs = [compose(overrides) for overrides in
               ([], ["model.teacher.input.normalization=mean_std"], ["model.teacher.input.image_size=32"])]
    assert len({teacher_key(cfg, input_convention(cfg)).filename for cfg in configs}) == 3
    # a run's teacher is keyed by the convention its data was loaded in, the one its config names
    assert all(load_data(cfg).convention == input_convention(cfg) for cfg in configs)


def test_the_historical_convention_keeps_a_cell_s_hash():
    """Configs recorded before the input node existed hash as they did: the node at its historical value
    is left out of the hash; any other value is part of the cell's identity."""
    cfg = compose([])
    without = OmegaConf.to_container(cfg)
    del without["model"]["teacher"]["input"]
    del without["model"]["generator"]["output"], without["model"]["generator"]["block_bn_eps"]
    assert config_hash(cfg) == config_hash(OmegaConf.create(without))
    assert config_hash(compose(["model.teacher.input.normalization=mean_std"])) != config_hash(cfg)
    assert config_hash(compose(["model.generator.output=tanh_batchnorm"])) != config_hash(cfg)


def test_the_first_convention_leaves_data_and_generators_as_they_were():
    """minus_one_one (every run recorded before the setting existed) maps nothing: the splits come back as the
    loader built them and a tanh generator's output is its tanh, so those runs compute what they computed."""
    from dpsd.data import into_space, load_dataset

    splits = load_dataset("digits")
    assert into_space(splits, InputSpace()) is splits
    generator = build_generator(100, 1, 8, 8)
    assert not generator.to_space
    assert float(generator(torch.randn(16, 100)).detach().abs().max()) <= 1


def test_the_teacher_stem_is_a_named_switch_of_torchvision_teachers_only():
    """The stem is in the teacher's cache key and, off its default, in the cell's hash; a bad value, or a stem on a
    teacher with its own first layer, is a one-line error before any data is read."""
    from dpsd.experiment import resolve_run

    tv = ["model/teacher=torchvision", "dataset=digits"]
    plain, imagenet = compose(tv), compose([*tv, "++model.teacher.stem=imagenet"])
    assert teacher_key(plain, input_convention(plain)) != teacher_key(imagenet, input_convention(imagenet))
    assert config_hash(compose(tv)) == config_hash(compose([*tv, "++model.teacher.stem=small_input"]))
    assert config_hash(compose(tv)) != config_hash(compose([*tv, "++model.teacher.stem=imagenet"]))
    with pytest.raises(ConfigError, match="model.teacher.stem must be one of small_input, imagenet, got 'seven'"):
        resolve_run(compose([*tv, "++model.teacher.stem=seven"]))
    for stem in STEMS:  # either value, the default too: the builders of such teachers take no stem
        with pytest.raises(ConfigError, match="model.teacher.arch=small_cnn has its own: drop the key"):
            resolve_run(compose(["dataset=digits", f"++model.teacher.stem={stem}"]))
        with pytest.raises(ConfigError, match="model.teacher.arch=lenet5 has its own: drop the key"):
            resolve_run(compose(["dataset=digits", "model/teacher=lenet5", f"++model.teacher.stem={stem}"]))
    resolve_run(compose([*tv, "++model.teacher.stem=imagenet"]))
