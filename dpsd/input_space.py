"""The teacher's input space: how pixels become the numbers a network reads (an input convention).

Every dataset loader reads pixels in [0, 1]; a run's networks see ``(pixel - mean) / std`` per channel.
The convention belongs to the teacher (``model.teacher.input.normalization``) and every part of a run
honours it: the private and test splits are mapped into it, a generator's tanh output (pixels in
[-1, 1]) is mapped into it (:meth:`InputSpace.from_tanh`), and the noise rung draws N(0, 1) in it.
The same N(0, 1) noise is a different input under each convention: about the mean image under
``mean_std``, a bright grey image under ``minus_one_one`` (DESIGN.md, "Anchors before verdicts").

* ``minus_one_one``: mean 0.5, std 0.5 per channel, pixels in [-1, 1] (this harness's first convention);
* ``mean_std``: the dataset's published per-channel mean and std (:data:`PUBLISHED_STATISTICS`), as
  DAFL's scripts normalise MNIST (0.1307, 0.3081). Statistics of the private split itself would be a
  release about it, so a dataset without published ones cannot use this convention.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsd.errors import ConfigError

NORMALIZATIONS = ("minus_one_one", "mean_std")

PUBLISHED_STATISTICS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    # dataset: (per-channel mean, per-channel std) of pixels in [0, 1], as their sources publish them
    "mnist": ((0.1307,), (0.3081,)),  # torchvision's MNIST example; DAFL teacher-train.py / DAFL-train.py
    "fmnist": ((0.2860,), (0.3530,)),  # Fashion-MNIST training set, as commonly published
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),  # DAFL's CIFAR scripts
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # torchvision's ImageNet weights
    # scikit-learn's digits (pixels / 16), all 1,797 images (numpy mean and std): a public, fixed dataset
    "digits": ((0.3053,), (0.3760,)),
}


@dataclass(frozen=True)
class InputSpace:
    """Per-channel ``mean`` and ``std`` of the affine map from pixels in [0, 1] to network inputs."""

    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)

    def for_channels(self, channels: int) -> "InputSpace":
        """The same statistics for ``channels`` channels (a one-channel entry is repeated)."""
        if len(self.mean) == channels:
            return self
        if len(self.mean) != 1:
            raise ConfigError(f"input space has {len(self.mean)} channels' statistics, the data {channels}")
        return InputSpace(self.mean * channels, self.std * channels)

    def from_tanh(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``(scale, shift)`` per channel taking a tanh output t (pixels 2p - 1) to ``(p - mean) / std``."""
        scale = tuple(0.5 / s for s in self.std)
        shift = tuple((0.5 - m) / s for m, s in zip(self.mean, self.std))
        return scale, shift

    @property
    def is_minus_one_one(self) -> bool:
        return all(m == 0.5 for m in self.mean) and all(s == 0.5 for s in self.std)


@dataclass(frozen=True)
class InputConvention:
    """``model.teacher.input`` as a run's config sets it, resolved once by the run's driver and handed down: the
    image side (None: the dataset's own) and the :class:`InputSpace` of its normalisation, as configured (one
    channel's statistics stand for every channel's: :meth:`InputSpace.for_channels`)."""

    image_size: int | None = None
    space: InputSpace = InputSpace()


def input_space(normalization: str, dataset: str) -> InputSpace:
    """The :class:`InputSpace` of ``normalization`` for ``dataset``; one-line errors name what is accepted."""
    if normalization == "minus_one_one":
        return InputSpace()
    if normalization != "mean_std":
        raise ConfigError(f"model.teacher.input.normalization must be one of {', '.join(NORMALIZATIONS)}, "
                          f"got {normalization!r}")
    if dataset not in PUBLISHED_STATISTICS:
        raise ConfigError(f"model.teacher.input.normalization=mean_std needs published statistics, which "
                          f"{dataset!r} has none of here; datasets with them: {', '.join(PUBLISHED_STATISTICS)}")
    mean, std = PUBLISHED_STATISTICS[dataset]
    return InputSpace(mean, std)
