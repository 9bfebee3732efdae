"""Dataset registry: each loader builds the private (train) and held-out test split of one dataset.

Every item is ``(x, y)``: ``x`` a float32 ``C x H x W`` tensor in the run's input space, ``y`` an int. A
loader scales pixels to [-1, 1]; :func:`load_data` then maps them into the teacher's input convention
(``model.teacher.input``: its normalisation, :mod:`dpsd.input_space`, and its image side).
Small datasets (digits, MNIST, Fashion-MNIST, CIFAR, MedMNIST) are held in memory as tensors;
CelebA, COVIDx and ImageNet stay on disk and are decoded, resized and center-cropped on access.
File-based loaders read from ``data.root`` (each docstring gives its layout), report missing
files as one :class:`~dpsd.errors.ConfigError` line naming the files and folder they expected, and
check the files that are there first (:mod:`dpsd.datafiles`): a truncated or corrupt one is a
:class:`~dpsd.datafiles.DataCorrupt` line naming it and what is wrong.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset, TensorDataset
from torchvision import datasets, transforms
from torchvision.datasets import celeba, cifar

from dpsd import rendered_digits
from dpsd.augment import random_affine
from dpsd.datafiles import check_celeba, check_cifar, check_idx, check_images, image_loader, read_npz
from dpsd.errors import ConfigError
from dpsd.input_space import InputConvention, InputSpace, input_space
from dpsd.registry import Registry

DATASETS: Registry = Registry("dataset")

# name -> function of the loader's options giving (num_classes, channels, default image size)
_INFO: dict[str, Callable[..., tuple[int, int, int]]] = {}

DEFAULT_MEDMNIST_FLAG = "pathmnist"
_SET_ROOT_OR_DOWNLOAD = "set data.root, or data.download=true"
_SET_ROOT_NO_DOWNLOAD = "set data.root; this source cannot be downloaded automatically"


class DataAbsent(ConfigError):
    """A dataset's files are not where the config says (or data.root is unset): the config is fine,
    the data is missing. ``dpsd sweep`` lists such cells as data absent instead of failing them."""


@dataclass(frozen=True)
class DataInfo:
    """What a method may know about the private data without reading it."""

    num_classes: int
    channels: int
    image_size: int
    space: InputSpace = InputSpace()  # what the networks read: (pixel - mean) / std
    records: int | None = None  # the private split's size (a run's plan gets it; a plan made without data does not)


def input_convention(cfg) -> InputConvention:
    """``model.teacher.input`` of a run's config: the image side (None: the dataset's own) and the
    :class:`~dpsd.input_space.InputSpace` of its normalisation (``minus_one_one`` where the node is absent)."""
    node = cfg.get("model", None) and cfg.model.get("teacher", None) and cfg.model.teacher.get("input", None)
    if not node:
        return InputConvention()
    size = node.get("image_size", None)
    if size is not None and int(size) < 1:
        raise ConfigError(f"model.teacher.input.image_size must be >= 1 or null (the dataset's own), got {size}")
    return InputConvention(None if size is None else int(size),
                           input_space(str(node.get("normalization", "minus_one_one")), cfg.dataset.name))


def data_info(cfg, convention: InputConvention | None = None) -> DataInfo:
    """The :class:`DataInfo` of the dataset a run's config names, without reading any file, in ``convention``
    (the run's, resolved once by its driver; :func:`input_convention` of ``cfg`` where none is given)."""
    convention = input_convention(cfg) if convention is None else convention
    num_classes, channels, image_size = dataset_info(cfg.dataset.name, convention.image_size, **cfg.dataset.options)
    return DataInfo(num_classes, channels, image_size, convention.space.for_channels(channels))


def load_data(cfg, convention: InputConvention | None = None) -> "DataSplits":
    """The dataset a run's config names (``dataset``, ``data.root``, ``data.download``), in the teacher's input
    ``convention`` (the run's, resolved once by its driver; :func:`input_convention` of ``cfg`` where none is
    given), which the splits carry for the teachers trained on them."""
    convention = input_convention(cfg) if convention is None else convention
    splits = load_dataset(cfg.dataset.name, root=cfg.data.root, download=cfg.data.download,
                          image_size=convention.image_size, **cfg.dataset.options)
    return dataclasses.replace(into_space(splits, convention.space.for_channels(splits.channels)),
                               convention=convention)


class MappedSplit(Dataset):
    """A lazily decoded split whose images pass through ``transform`` on access."""

    def __init__(self, source: Dataset, transform: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.source, self.transform = source, transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.source[index]
        return self.transform(image), label


def into_space(splits: "DataSplits", space: InputSpace) -> "DataSplits":
    """``splits`` (images in [-1, 1]) mapped into ``space``: ``((x + 1) / 2 - mean) / std`` per channel."""
    if space.is_minus_one_one:
        return splits
    mean = torch.tensor(space.mean).view(-1, 1, 1)
    std = torch.tensor(space.std).view(-1, 1, 1)

    def transform(x: torch.Tensor) -> torch.Tensor:
        return ((x + 1) / 2 - mean) / std

    def mapped(split: Dataset) -> Dataset:
        if isinstance(split, TensorSplit):
            images, labels = split.tensors
            return TensorSplit(transform(images).contiguous(), labels)
        return MappedSplit(split, transform)

    return dataclasses.replace(splits, train=mapped(splits.train), test=mapped(splits.test), space=space)


@dataclass
class DataSplits:
    name: str
    train: Dataset  # the PRIVATE split
    test: Dataset  # held out: never used for training or selection
    num_classes: int
    channels: int
    image_size: int  # square side after any resize
    class_names: list[str]
    space: InputSpace = InputSpace()  # the input space the images are in (:func:`into_space`)
    convention: InputConvention = InputConvention()  # model.teacher.input they were loaded in (:func:`load_data`)


def load_dataset(
    name: str,
    root: str | os.PathLike | None = None,
    download: bool = False,
    image_size: int | None = None,
    **options,
) -> DataSplits:
    """Build dataset ``name``; ``image_size=None`` keeps its native (or documented default) size."""
    _, _, size = dataset_info(name, image_size, **options)
    path = None if root is None else Path(root).expanduser().resolve()
    return DATASETS.get(name)(path, download, size, **options)


def dataset_info(name: str, image_size: int | None = None, **options) -> tuple[int, int, int]:
    """``(num_classes, channels, image_size)`` of dataset ``name``, without reading any file."""
    _check_options(name, DATASETS.get(name), options)
    num_classes, channels, default_size = _INFO[name](**options)
    return num_classes, channels, image_size or default_size


def _check_options(name: str, loader: Callable, options: dict) -> None:
    signature = inspect.signature(loader)
    try:
        signature.bind(None, False, 0, **options)
    except TypeError:
        accepted = ", ".join(list(signature.parameters)[3:]) or "none"
        raise ConfigError(
            f"dataset {name!r} does not take option(s) {', '.join(options)}; its options: {accepted}"
        ) from None


def _register(name: str, info: tuple[int, int, int] | Callable[..., tuple[int, int, int]]):
    """Register a loader under ``name`` with its (num_classes, channels, default image size),
    given as a tuple or as a function of the loader's options."""

    def add(loader):
        _INFO[name] = info if callable(info) else lambda: info
        return DATASETS.register(name)(loader)

    return add


# ---------------------------------------------------------------------------------------------
# Shared building blocks


class TensorSplit(TensorDataset):
    """Images and labels held in memory; labels come out as Python ints."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = super().__getitem__(index)
        return image, int(label)


class WatchedSplit(Dataset):
    """The private split as a method's ``fit`` sees it, every access counted per record: an item read counts its
    image and its label, :meth:`image` the image alone, ``tensors`` every image and label, ``labels`` every label
    (all read as they are); :meth:`sealed_labels` hands the labels to a label mechanism, which consumes them and
    returns its event (``consumed``). The runner reconciles these counts with the run's ledger
    (:func:`dpsd.privacy.boundary.reconcile`); teachers train on :func:`teacher_view` (their answers are accounted
    by the events on them)."""

    def __init__(self, source: Dataset) -> None:
        self.source = source
        self.image_reads = np.zeros(len(source), dtype=np.int64)
        self.label_reads = np.zeros(len(source), dtype=np.int64)
        self.consumed: list = []  # the events of the mechanisms that consumed sealed labels

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.image_reads[index] += 1
        self.label_reads[index] += 1
        return self.source[index]

    def image(self, index: int) -> torch.Tensor:
        """Record ``index``'s image alone (its label not read)."""
        self.image_reads[index] += 1
        return self.source[index][0]

    def images(self, indices: Sequence[int]) -> torch.Tensor:
        """The images of records ``indices`` (their labels not read), stacked."""
        self.image_reads[list(indices)] += 1
        tensors = getattr(self.source, "tensors", None)
        if tensors is not None:
            return tensors[0][torch.as_tensor(list(indices), dtype=torch.long)]
        return torch.stack([self.source[i][0] for i in indices])

    @property
    def images_read(self) -> bool:
        return bool(self.image_reads.any())

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        if not hasattr(self.source, "tensors"):
            raise AttributeError("tensors")
        self.image_reads += 1
        self.label_reads += 1
        return self.source.tensors

    @property
    def labels(self) -> list[int]:
        """Every record's label, in order, read as it is (without touching the images where the split holds them
        apart)."""
        self.label_reads += 1
        return split_labels(self.source)

    def sealed_labels(self, device: torch.device | None = None) -> "SealedLabels":
        """Every record's label (on ``device``), sealed: only a label mechanism opens it (``consume``), and the
        event it returns is what the ledger must hold for them."""
        return SealedLabels(torch.as_tensor(split_labels(self.source), device=device), self.consumed)


class SealedLabels:
    """The private labels on their way into a label mechanism (:mod:`dpsd.privacy.mechanisms`), which calls
    :meth:`consume` with the event of the release it makes of them."""

    def __init__(self, labels: torch.Tensor, consumed: list) -> None:
        self._labels, self._consumed = labels, consumed

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def shape(self) -> torch.Size:
        return self._labels.shape

    def consume(self, event) -> torch.Tensor:
        self._consumed.append(event)
        return self._labels


def sealed_labels(split: Dataset, device: torch.device | None = None) -> "SealedLabels":
    """The labels of ``split`` on ``device``, sealed for a label mechanism (the runner's watched split counts
    them as consumed; any other split, e.g. a test's, seals them uncounted)."""
    if isinstance(split, WatchedSplit):
        return split.sealed_labels(device)
    return SealedLabels(torch.as_tensor(split_labels(split), device=device), [])


def image_of(split: Dataset, index: int) -> torch.Tensor:
    """Item ``index``'s image alone (on the watched split, or a subset of it, its label is not counted as read)."""
    if isinstance(split, Subset):
        return image_of(split.dataset, split.indices[index])
    return split.image(index) if isinstance(split, WatchedSplit) else split[index][0]


def images_of(split: Dataset, indices: Sequence[int]) -> torch.Tensor:
    """The images of ``split``'s items ``indices``, stacked (on the watched split, their labels not read)."""
    if isinstance(split, WatchedSplit):
        return split.images(indices)
    return torch.stack([split[i][0] for i in indices])


def split_labels(split: Dataset) -> list[int]:
    """The labels of ``split``, in order (from memory where it keeps them)."""
    if isinstance(split, WatchedSplit):
        return split.labels
    if hasattr(split, "tensors"):
        return split.tensors[1].tolist()
    if hasattr(split, "labels"):
        return list(split.labels)
    return [int(split[i][1]) for i in range(len(split))]


def teacher_view(split: Dataset) -> Dataset:
    """The unwatched private split under a :class:`WatchedSplit`, for training teachers (ensemble
    members, a client's teacher): a teacher is a function of the private data by design, accounted by
    the events on its answers, not a release of the images."""
    return split.source if isinstance(split, WatchedSplit) else split


class IndexedSplit(Dataset):
    """The items ``indices`` of a lazily transformed dataset ``source``, relabelled with ``labels``."""

    def __init__(self, source: Dataset, indices: Sequence[int], labels: Sequence[int]) -> None:
        self.source, self.indices, self.labels = source, list(indices), list(labels)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.source[self.indices[index]][0], self.labels[index]


def _tensor_split(images, labels, image_size: int, max_value: float = 255.0) -> TensorSplit:
    """In-memory split from ``N x H x W`` or ``N x H x W x C`` pixels in [0, max_value]."""
    x = torch.as_tensor(np.asarray(images), dtype=torch.float32)
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    x = x * (2.0 / max_value) - 1.0
    if x.shape[-1] != image_size:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True).clamp(-1, 1)
    return TensorSplit(x.contiguous(), torch.as_tensor(np.asarray(labels), dtype=torch.long).reshape(-1))


def _memory_splits(name, train, test, class_names, image_size, max_value=255.0) -> DataSplits:
    """DataSplits held in memory; ``train`` and ``test`` are (pixels, labels) pairs."""
    train_set, test_set = (_tensor_split(x, y, image_size, max_value) for x, y in (train, test))
    channels = train_set.tensors[0].shape[1]
    return DataSplits(name, train_set, test_set, len(class_names), channels, image_size, list(class_names))


def _lazy_splits(name, train: IndexedSplit, test: IndexedSplit, class_names, image_size) -> DataSplits:
    return DataSplits(name, train, test, len(class_names), 3, image_size, list(class_names))


def _image_transform(image_size: int) -> transforms.Compose:
    """PIL image -> float tensor in [-1, 1], resized (short side) and center-cropped to a square."""
    return transforms.Compose([
        transforms.Resize(image_size),
        transforms.CenterCrop(image_size),
        transforms.ToTensor(),
        transforms.Normalize((0.5,), (0.5,)),
    ])


def _whole_folder(folder: datasets.ImageFolder) -> IndexedSplit:
    return IndexedSplit(folder, range(len(folder)), folder.targets)


def _require_root(name: str, root: Path | None) -> Path:
    if root is None:
        raise DataAbsent(f"{name}: data.root must be set to the folder that holds its files")
    return root


@contextmanager
def _expecting(name: str, expected: str, folder: Path, download: bool,
               missing_hint: str = _SET_ROOT_OR_DOWNLOAD) -> Iterator[None]:
    """Turn a missing-file (or failed download) error raised inside the block by torchvision,
    medmnist or numpy into one ConfigError line naming the files and folder expected."""
    try:
        yield
    except (RuntimeError, OSError) as err:
        hint = f"download failed: {str(err).strip().splitlines()[0]}" if download else missing_hint
        raise DataAbsent(f"{name}: expected {expected} under {folder} ({hint})") from err


def _refuse_download(name: str, expected: str, folder: Path, download: bool) -> None:
    if download:
        raise ConfigError(f"{name} cannot be downloaded automatically; place {expected} under {folder}")


# ---------------------------------------------------------------------------------------------
# Loaders: (root, download, image_size, **options) -> DataSplits; load_dataset resolves image_size


@_register("digits", (10, 1, 8))
def load_digits(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """scikit-learn's bundled 8x8 digits (1,797 images, 10 classes; no files, root is ignored).

    Split 80% train / 20% test, stratified, with the fixed seed 0, independent of any run seed."""
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    digits = sklearn_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=0.2, stratify=digits.target, random_state=0
    )
    class_names = [str(d) for d in range(10)]
    return _memory_splits("digits", (x_train, y_train), (x_test, y_test), class_names, image_size, 16.0)


@_register("digits_moved", (10, 1, 8))
def load_digits_moved(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """scikit-learn's digits (:func:`load_digits`, the same split), every image, train and test, turned, zoomed and
    shifted once at ``image_size`` by its own random affine map (:func:`dpsd.augment.random_affine`: up to 15°, 0.9 to
    1.1, 10% of the side) drawn from the fixed seed 0. A public proxy with some of the variety of handwriting that
    the centred, size-normalised 8 x 8 digits lack (MNIST's digits sit where their centre of mass falls, slanted as
    written): a classifier on a few dozen of them has to learn what the moves do not change."""
    digits = load_digits(root, download, image_size)
    rng = torch.Generator().manual_seed(0)
    train, test = (TensorSplit(random_affine(split.tensors[0], rng).contiguous(), split.tensors[1])
                   for split in (digits.train, digits.test))
    return dataclasses.replace(digits, name="digits_moved", train=train, test=test)


@_register("font_digits", (10, 1, 28))
def load_font_digits(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """Digits rendered from matplotlib's fonts and prepared as MNIST's were (:mod:`dpsd.rendered_digits`: pen width,
    turn and slant, the 20 x 20 box, centre of mass, elastic distortion), 1,440 train images in 16 fonts and 2,000
    test images in 5 others, from fixed seeds; no files, root is ignored. A public proxy with pen-thin strokes, which
    scikit-learn's 8 x 8 digits scaled up lack."""
    train = rendered_digits.render_split(rendered_digits.TRAIN_FONTS, rendered_digits.TRAIN_SIZE, seed=0)
    test = rendered_digits.render_split(rendered_digits.TEST_FONTS, rendered_digits.TEST_SIZE, seed=1)
    return _memory_splits("font_digits", train, test, [str(d) for d in range(10)], image_size)


def _load_idx(name: str, dataset_cls, root: Path | None, download: bool, image_size: int) -> DataSplits:
    root = _require_root(name, root)
    files = ", ".join(Path(file).stem for file, _ in dataset_cls.resources)
    check_idx(root / dataset_cls.__name__ / "raw", ("train", "t10k"), 28, _INFO[name]()[0])
    with _expecting(name, f"the raw IDX files {files}", root / dataset_cls.__name__ / "raw", download):
        train, test = (dataset_cls(root, train=is_train, download=download) for is_train in (True, False))
    return _memory_splits(name, (train.data, train.targets), (test.data, test.targets), train.classes, image_size)


@_register("mnist", (10, 1, 28))
def load_mnist(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """MNIST: 60,000 / 10,000 28x28 grayscale digits, in memory, from the four uncompressed IDX
    files under ``root/MNIST/raw/`` (torchvision's layout)."""
    return _load_idx("mnist", datasets.MNIST, root, download, image_size)


@_register("fmnist", (10, 1, 28))
def load_fmnist(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """Fashion-MNIST: 60,000 / 10,000 28x28 grayscale clothing images, in memory, from the four
    uncompressed IDX files under ``root/FashionMNIST/raw/`` (torchvision's layout)."""
    return _load_idx("fmnist", datasets.FashionMNIST, root, download, image_size)


def _load_cifar(name: str, dataset_cls, root: Path | None, download: bool, image_size: int) -> DataSplits:
    root = _require_root(name, root)
    batches = [file for file, _ in dataset_cls.train_list + dataset_cls.test_list] + [dataset_cls.meta["filename"]]
    label_key = "fine_labels" if dataset_cls is datasets.CIFAR100 else "labels"
    check_cifar(root / dataset_cls.base_folder, dataset_cls.train_list + dataset_cls.test_list, dataset_cls.meta,
                label_key, _INFO[name]()[0], cifar.check_integrity)
    with _expecting(name, f"the python batches {', '.join(batches)}", root / dataset_cls.base_folder, download):
        train, test = (dataset_cls(root, train=is_train, download=download) for is_train in (True, False))
    return _memory_splits(name, (train.data, train.targets), (test.data, test.targets), train.classes, image_size)


@_register("cifar10", (10, 3, 32))
def load_cifar10(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """CIFAR-10: 50,000 / 10,000 32x32 colour images, in memory, from ``root/cifar-10-batches-py/``."""
    return _load_cifar("cifar10", datasets.CIFAR10, root, download, image_size)


@_register("cifar100", (100, 3, 32))
def load_cifar100(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """CIFAR-100 (fine labels): 50,000 / 10,000 32x32 colour images, in memory, from
    ``root/cifar-100-python/``."""
    return _load_cifar("cifar100", datasets.CIFAR100, root, download, image_size)


_HAIR_ATTRIBUTES = ("Black_Hair", "Blond_Hair", "Brown_Hair")


def _hair_labels(attr: torch.Tensor, names: list[str]) -> tuple[list[int], list[int]]:
    """Rows with exactly one of black / blond / brown hair set, labelled 0 / 1 / 2."""
    hair = attr[:, [names.index(a) for a in _HAIR_ATTRIBUTES]]
    keep = hair.sum(dim=1) == 1
    return keep.nonzero().flatten().tolist(), hair[keep].argmax(dim=1).tolist()


def _gender_labels(attr: torch.Tensor, names: list[str]) -> tuple[list[int], list[int]]:
    """Every row, labelled 0 = female, 1 = male (attribute Male)."""
    return list(range(len(attr))), attr[:, names.index("Male")].tolist()


def _load_celeba(name, labeller, class_names, root: Path | None, download: bool, image_size: int) -> DataSplits:
    root = _require_root(name, root)
    files = ["img_align_celeba/"] + [file for _, _, file in datasets.CelebA.file_list if not file.endswith(".zip")]
    transform = _image_transform(image_size)
    tables = [(file, md5, file not in ("list_eval_partition.txt", "identity_CelebA.txt"))
              for _, md5, file in datasets.CelebA.file_list if not file.endswith(".zip")]
    check_celeba(root / datasets.CelebA.base_folder, tables, celeba.check_integrity)
    with _expecting(name, ", ".join(files), root / datasets.CelebA.base_folder, download):
        train, test = (
            datasets.CelebA(root, split=split, target_type="attr", transform=transform, download=download)
            for split in ("train", "test")
        )
    train_split, test_split = (IndexedSplit(s, *labeller(s.attr, s.attr_names)) for s in (train, test))
    return _lazy_splits(name, train_split, test_split, class_names, image_size)


@_register("celeba_hair", (3, 3, 32))
def load_celeba_hair(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """CelebA-H (DPSD §IV-A, following DPDFD): CelebA faces labelled black / blonde / brown hair
    from the attributes Black_Hair, Blond_Hair, Brown_Hair, keeping only images with exactly one of
    the three set. Official train / test partitions of ``root/celeba/`` (torchvision's layout),
    resized and center-cropped to image_size (default 32), decoded lazily."""
    return _load_celeba("celeba_hair", _hair_labels, ["black", "blonde", "brown"], root, download, image_size)


@_register("celeba_gender", (2, 3, 32))
def load_celeba_gender(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """CelebA-G (DPSD §IV-A, following DPDFD): CelebA faces labelled female / male from the
    attribute Male. Official train / test partitions of ``root/celeba/`` (torchvision's layout),
    resized and center-cropped to image_size (default 32), decoded lazily."""
    return _load_celeba("celeba_gender", _gender_labels, ["female", "male"], root, download, image_size)


def _medmnist_flags() -> list[str]:
    """The 2D single-label MedMNIST flags."""
    import medmnist
    from medmnist.dataset import MedMNIST2D

    return [
        flag for flag, info in medmnist.INFO.items()
        if "multi-label" not in info["task"] and issubclass(getattr(medmnist, info["python_class"]), MedMNIST2D)
    ]


def _medmnist_entry(flag: str) -> dict:
    """``medmnist.INFO[flag]`` for a supported flag; ConfigError otherwise."""
    import medmnist

    if "multi-label" in medmnist.INFO.get(flag, {}).get("task", ""):
        raise ConfigError(f"medmnist flag {flag!r} is multi-label; multi-label flags are not supported")
    if flag not in _medmnist_flags():
        raise ConfigError(f"unknown medmnist flag {flag!r}; 2D single-label flags: {', '.join(_medmnist_flags())}")
    return medmnist.INFO[flag]


def _medmnist_info(flag: str = DEFAULT_MEDMNIST_FLAG) -> tuple[int, int, int]:
    info = _medmnist_entry(flag)
    return len(info["label"]), info["n_channels"], 28


@_register("medmnist", _medmnist_info)
def load_medmnist(
    root: Path | None, download: bool, image_size: int, flag: str = DEFAULT_MEDMNIST_FLAG
) -> DataSplits:
    """MedMNIST v2, one 2D single-label ``flag`` (default pathmnist) at 28x28, in memory, from
    the arrays train_images, train_labels, test_images, test_labels of ``root/medmnist/{flag}.npz``
    (medmnist's own file; download=true lets medmnist fetch it). Its val split is not used."""
    import medmnist

    info = _medmnist_entry(flag)
    folder = _require_root("medmnist", root) / "medmnist"
    with _expecting("medmnist", f"{flag}.npz", folder, download):
        if download:
            folder.mkdir(parents=True, exist_ok=True)
            getattr(medmnist, info["python_class"])(split="train", root=str(folder), download=True, size=28)
        if not (folder / f"{flag}.npz").is_file():
            raise FileNotFoundError(folder / f"{flag}.npz")
    arrays = read_npz(folder / f"{flag}.npz", ("train", "test"), info["n_channels"], len(info["label"]))
    train, test = ((arrays[f"{s}_images"], arrays[f"{s}_labels"]) for s in ("train", "test"))
    class_names = [info["label"][str(i)] for i in range(len(info["label"]))]
    return _memory_splits("medmnist", train, test, class_names, image_size)


@_register("covidx", (3, 3, 32))
def load_covidx(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """COVIDx chest X-rays as an image folder ``root/covidx/{train,test}/<class>/*.png|jpg``; the
    classes are the folder names (COVID-19, normal, pneumonia in the original release). Converted to
    RGB, resized and center-cropped to image_size (default 32), decoded lazily."""
    folder = _require_root("covidx", root) / "covidx"
    expected = "train/<class>/ and test/<class>/ image folders"
    _refuse_download("covidx", expected, folder, download)
    transform = _image_transform(image_size)
    with _expecting("covidx", expected, folder, download, _SET_ROOT_NO_DOWNLOAD):
        train, test = (datasets.ImageFolder(folder / s, transform=transform, loader=image_loader) for s in ("train", "test"))
    check_images(Path(path) for path, _ in train.samples + test.samples)
    if train.classes != test.classes:
        raise ConfigError(f"covidx: class folders differ between train ({train.classes}) and test ({test.classes})")
    return _lazy_splits("covidx", _whole_folder(train), _whole_folder(test), train.classes, image_size)


@_register("imagenet", (1000, 3, 64))
def load_imagenet(root: Path | None, download: bool, image_size: int) -> DataSplits:
    """ImageNet-1k (ILSVRC 2012) via torchvision from ``root/imagenet/``: the archives
    ILSVRC2012_devkit_t12.tar.gz, ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, which torchvision
    unpacks on first use into meta.bin, train/, val/. The test split is the official val split.
    Resized and center-cropped to image_size (default 64), decoded lazily."""
    folder = _require_root("imagenet", root) / "imagenet"
    expected = ("ILSVRC2012_devkit_t12.tar.gz, ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar "
                "(or torchvision's unpacked meta.bin, train/, val/)")
    _refuse_download("imagenet", expected, folder, download)
    transform = _image_transform(image_size)
    with _expecting("imagenet", expected, folder, download, _SET_ROOT_NO_DOWNLOAD):
        train, test = (datasets.ImageNet(folder, split=s, transform=transform, loader=image_loader)
                       for s in ("train", "val"))
    check_images(Path(path) for path, _ in train.samples + test.samples)
    class_names = [synonyms[0] for synonyms in train.classes]
    return _lazy_splits("imagenet", _whole_folder(train), _whole_folder(test), class_names, image_size)
