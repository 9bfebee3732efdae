"""Dataset registry: every loader on tiny files written here, real MNIST when present, and the
one-line errors for missing files, unknown names and bad options."""

from __future__ import annotations

import os
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.datasets import celeba, cifar

from dpsd.data import DATASETS, dataset_info, load_dataset
from dpsd.datafiles import DataCorrupt
from dpsd.errors import ConfigError

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RNG = np.random.default_rng(0)


def pixels(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, size=shape, dtype=np.uint8)


def everything(split):
    """All (images, labels) of a split, through a DataLoader as a method would see them."""
    images, labels = zip(*DataLoader(split, batch_size=64))
    return torch.cat(images), torch.cat(labels)


def assert_split(split, shape, labels):
    images, found = everything(split)
    assert images.dtype == torch.float32 and images.shape[1:] == shape
    assert images.min() >= -1 and images.max() <= 1 and images.max() > images.min()
    assert isinstance(split[0][1], int)
    assert found.tolist() == labels


def assert_matches_info(data, **options):
    assert dataset_info(data.name, **options) == (data.num_classes, data.channels, data.image_size)
    assert len(data.class_names) == data.num_classes


def save_image(path: Path, mode: str = "RGB", size=(20, 16)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    channels = 3 if mode == "RGB" else 1
    Image.fromarray(pixels(size[1], size[0], channels).squeeze(), mode=mode).save(path)


def no_md5_check(path, md5=None) -> bool:
    return os.path.isfile(path)


# ---------------------------------------------------------------------------------------------
# Tiny files in each source's own layout


def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX: magic (0, 0, uint8 type 0x08, number of dims), big-endian sizes, then the bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist_like(root: Path, folder: str, train_labels, test_labels) -> None:
    raw = root / folder / "raw"
    for prefix, labels in (("train", train_labels), ("t10k", test_labels)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", pixels(len(labels), 28, 28))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.array(labels))


def write_cifar(root: Path, folder: str, train_files, test_file, label_key, meta_file, meta_key, classes):
    (root / folder).mkdir(parents=True)
    for name, labels in list(train_files.items()) + [(test_file, TEST_LABELS)]:
        batch = {"data": pixels(len(labels), 3 * 32 * 32), label_key: labels}
        (root / folder / name).write_bytes(pickle.dumps(batch))
    (root / folder / meta_file).write_bytes(pickle.dumps({meta_key: classes}))


TEST_LABELS = [1, 0, 2]

# CelebA rows: (file, partition 0 train / 2 test, black, blond, brown, male)
CELEBA_ROWS = [
    ("000001.jpg", 0, 1, 0, 0, 1),
    ("000002.jpg", 0, 0, 1, 0, 0),
    ("000003.jpg", 0, 1, 1, 0, 0),  # two hair colours: dropped from celeba_hair
    ("000004.jpg", 0, 0, 0, 1, 1),
    ("000005.jpg", 0, 0, 0, 0, 0),  # no hair colour: dropped from celeba_hair
    ("000006.jpg", 1, 0, 0, 1, 0),  # validation partition: unused
    ("000007.jpg", 2, 0, 0, 1, 0),
    ("000008.jpg", 2, 0, 1, 1, 1),  # dropped from celeba_hair
    ("000009.jpg", 2, 1, 0, 0, 1),
]


def write_celeba(root: Path) -> None:
    base = root / "celeba"
    for row in CELEBA_ROWS:
        save_image(base / "img_align_celeba" / row[0])

    def table(name, header, values):
        lines = [str(len(CELEBA_ROWS)), " ".join(header)] if header else []
        lines += [f"{row[0]} " + " ".join(str(v) for v in values(row)) for row in CELEBA_ROWS]
        (base / name).write_text("\n".join(lines) + "\n")

    attributes = ["Bald", "Black_Hair", "Blond_Hair", "Brown_Hair", "Male"]
    table("list_attr_celeba.txt", attributes, lambda r: [-1] + [2 * v - 1 for v in r[2:]])
    table("list_eval_partition.txt", None, lambda r: [r[1]])
    table("identity_CelebA.txt", None, lambda r: [1])
    table("list_bbox_celeba.txt", ["image_id", "x_1", "y_1", "width", "height"], lambda r: [0, 0, 20, 16])
    table("list_landmarks_align_celeba.txt", ["lefteye_x", "lefteye_y"], lambda r: [5, 5])


# ---------------------------------------------------------------------------------------------
# Each loader on its tiny files


def test_mnist_and_fmnist_from_tiny_idx_files(tmp_path):
    write_mnist_like(tmp_path, "MNIST", [5, 0, 4, 1], TEST_LABELS)
    write_mnist_like(tmp_path, "FashionMNIST", [9, 0, 0], TEST_LABELS)
    for name, train_labels in (("mnist", [5, 0, 4, 1]), ("fmnist", [9, 0, 0])):
        data = load_dataset(name, root=tmp_path)
        assert_split(data.train, (1, 28, 28), train_labels)
        assert_split(data.test, (1, 28, 28), TEST_LABELS)
        assert_matches_info(data)
    assert load_dataset("mnist", root=tmp_path, image_size=32).train[0][0].shape == (1, 32, 32)


def test_cifar10_and_cifar100_from_tiny_pickles(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar, "check_integrity", no_md5_check)  # the tiny batches fail torchvision's md5
    batches = {f"data_batch_{i}": [i, i + 1] for i in range(1, 6)}
    write_cifar(tmp_path, "cifar-10-batches-py", batches, "test_batch", "labels", "batches.meta",
                "label_names", [f"c{i}" for i in range(10)])
    write_cifar(tmp_path, "cifar-100-python", {"train": [99, 0, 42]}, "test", "fine_labels", "meta",
                "fine_label_names", [f"f{i}" for i in range(100)])

    cifar10 = load_dataset("cifar10", root=tmp_path)
    assert_split(cifar10.train, (3, 32, 32), [label for labels in batches.values() for label in labels])
    assert_split(cifar10.test, (3, 32, 32), TEST_LABELS)
    assert cifar10.class_names[:2] == ["c0", "c1"]
    cifar100 = load_dataset("cifar100", root=tmp_path)
    assert_split(cifar100.train, (3, 32, 32), [99, 0, 42])
    for data in (cifar10, cifar100):
        assert_matches_info(data)


def test_cifar_pixels_keep_their_channel_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar, "check_integrity", no_md5_check)
    write_cifar(tmp_path, "cifar-10-batches-py", {f"data_batch_{i}": [0] for i in range(1, 6)}, "test_batch",
                "labels", "batches.meta", "label_names", [f"c{i}" for i in range(10)])
    raw = pickle.loads((tmp_path / "cifar-10-batches-py" / "data_batch_1").read_bytes())["data"][0]
    expected = torch.tensor(raw.reshape(3, 32, 32), dtype=torch.float32) / 127.5 - 1
    assert torch.allclose(load_dataset("cifar10", root=tmp_path).train[0][0], expected, atol=1e-6)


@pytest.mark.parametrize(
    "name, train_labels, test_labels",
    [("celeba_hair", [0, 1, 2], [2, 0]), ("celeba_gender", [1, 0, 0, 1, 0], [0, 1, 1])],
)
def test_celeba_labels_and_filtering(tmp_path, monkeypatch, name, train_labels, test_labels):
    monkeypatch.setattr(celeba, "check_integrity", no_md5_check)  # the tiny lists fail torchvision's md5
    write_celeba(tmp_path)
    data = load_dataset(name, root=tmp_path)
    assert_split(data.train, (3, 32, 32), train_labels)
    assert_split(data.test, (3, 32, 32), test_labels)
    assert_matches_info(data)
    assert load_dataset(name, root=tmp_path, image_size=12).test[0][0].shape == (3, 12, 12)


def test_celeba_hair_keeps_exactly_one_hair_colour(tmp_path, monkeypatch):
    monkeypatch.setattr(celeba, "check_integrity", no_md5_check)
    write_celeba(tmp_path)
    data = load_dataset("celeba_hair", root=tmp_path)
    kept = [data.train.source.filename[i] for i in data.train.indices]
    assert kept == ["000001.jpg", "000002.jpg", "000004.jpg"]
    assert data.class_names == ["black", "blonde", "brown"]


def write_medmnist(folder, flag: str, channels: int, train_labels, test_labels) -> None:
    """medmnist's npz: {split}_images N x 28 x 28 (x 3), {split}_labels N x 1, far fewer rows than its INFO."""
    shape = (28, 28, 3) if channels == 3 else (28, 28)
    os.makedirs(folder, exist_ok=True)
    np.savez(Path(folder) / f"{flag}.npz",
             train_images=pixels(len(train_labels), *shape), train_labels=np.array(train_labels)[:, None],
             val_images=pixels(1, *shape), val_labels=np.zeros((1, 1)),
             test_images=pixels(len(test_labels), *shape), test_labels=np.array(test_labels)[:, None])


@pytest.mark.parametrize("flag, channels, classes", [("pathmnist", 3, 9), ("breastmnist", 1, 2)])
def test_medmnist_from_tiny_npz(tmp_path, flag, channels, classes):
    train_labels, test_labels = [0, classes - 1, 1, 0], [1, 0]
    write_medmnist(tmp_path / "medmnist", flag, channels, train_labels, test_labels)
    data = load_dataset("medmnist", root=tmp_path, flag=flag)
    assert_split(data.train, (channels, 28, 28), train_labels)
    assert_split(data.test, (channels, 28, 28), test_labels)
    assert_matches_info(data, flag=flag)


def test_medmnist_download_is_left_to_medmnist(tmp_path, monkeypatch):
    from medmnist.dataset import MedMNIST

    def fetch(dataset):  # stands in for medmnist's download into its root
        write_medmnist(dataset.root, dataset.flag, 1, [0, 1], [1])

    monkeypatch.setattr(MedMNIST, "download", fetch)
    data = load_dataset("medmnist", root=tmp_path, download=True, flag="pneumoniamnist")
    assert (len(data.train), len(data.test), data.class_names) == (2, 1, ["normal", "pneumonia"])

    def fail(dataset):
        raise RuntimeError("\n        Automatic download failed! Please download x.npz manually.\n        1. ...")

    monkeypatch.setattr(MedMNIST, "download", fail)
    expected = r"expected bloodmnist.npz under .*\(download failed: Automatic download failed!"
    with pytest.raises(ConfigError, match=expected):
        load_dataset("medmnist", root=tmp_path, download=True, flag="bloodmnist")


def test_covidx_image_folder(tmp_path):
    classes = ["COVID-19", "normal", "pneumonia"]
    for split, per_class in (("train", 2), ("test", 1)):
        for c in classes:
            for i in range(per_class):
                save_image(tmp_path / "covidx" / split / c / f"{i}.png", mode="L")  # grayscale X-rays
    data = load_dataset("covidx", root=tmp_path)
    assert_split(data.train, (3, 32, 32), [0, 0, 1, 1, 2, 2])
    assert_split(data.test, (3, 32, 32), [0, 1, 2])
    assert data.class_names == classes
    assert_matches_info(data)


def test_imagenet_from_unpacked_folders(tmp_path):
    # torchvision's ImageNet skips its archives when meta.bin and the split folders exist
    folder = tmp_path / "imagenet"
    wnids = ["n01440764", "n01443537"]
    folder.mkdir()
    torch.save(({wnids[0]: ("tench", "Tinca tinca"), wnids[1]: ("goldfish",)}, wnids), folder / "meta.bin")
    for split, per_class in (("train", 2), ("val", 1)):
        for wnid in wnids:
            for i in range(per_class):
                save_image(folder / split / wnid / f"{wnid}_{i}.JPEG")
    data = load_dataset("imagenet", root=tmp_path)
    assert_split(data.train, (3, 64, 64), [0, 0, 1, 1])
    assert_split(data.test, (3, 64, 64), [0, 1])
    assert data.class_names == ["tench", "goldfish"]
    assert dataset_info("imagenet") == (1000, 3, 64)


def test_digits_split_is_deterministic_stratified_and_disjoint():
    first, second = load_dataset("digits"), load_dataset("digits")
    for a, b in zip(first.train.tensors + first.test.tensors, second.train.tensors + second.test.tensors):
        assert torch.equal(a, b)
    assert (len(first.train), len(first.test)) == (1437, 360)
    assert_split(first.test, (1, 8, 8), first.test.tensors[1].tolist())
    assert set(first.test.tensors[1].tolist()) == set(range(10))
    assert_matches_info(first)

    from sklearn.datasets import load_digits

    # train and test together are exactly the 1,797 images (a partition: disjoint, nothing lost)
    rows = lambda images: Counter(bytes(image.numpy().astype(np.uint8)) for image in images)
    scaled = torch.tensor(load_digits().images, dtype=torch.float32)[:, None] / 8 - 1
    assert rows(first.train.tensors[0]) + rows(first.test.tensors[0]) == rows(scaled)


# ---------------------------------------------------------------------------------------------
# Real MNIST


@pytest.mark.skipif(not (SHARED_DATA / "MNIST" / "raw").is_dir(),
                    reason=f"real MNIST not found under {SHARED_DATA}/MNIST/raw")
def test_real_mnist():
    data = load_dataset("mnist", root=SHARED_DATA)
    assert (len(data.train), len(data.test)) == (60_000, 10_000)
    assert data.train[0][0].shape == (1, 28, 28) and data.train[0][1] == 5
    assert data.num_classes == 10 and data.train.tensors[0].min() == -1 and data.train.tensors[0].max() == 1


# ---------------------------------------------------------------------------------------------
# Errors: one line, naming what is expected where


@pytest.mark.parametrize("name, folder, files", [
    ("mnist", "MNIST/raw", "train-images-idx3-ubyte"),
    ("fmnist", "FashionMNIST/raw", "t10k-labels-idx1-ubyte"),
    ("cifar10", "cifar-10-batches-py", "data_batch_1"),
    ("cifar100", "cifar-100-python", "train, test, meta"),
    ("celeba_hair", "celeba", "list_attr_celeba.txt"),
    ("celeba_gender", "celeba", "img_align_celeba/"),
    ("medmnist", "medmnist", "pathmnist.npz"),
    ("covidx", "covidx", "train/<class>/"),
    ("imagenet", "imagenet", "ILSVRC2012_devkit_t12.tar.gz"),
])
def test_missing_files_name_the_expected_path(tmp_path, name, folder, files):
    with pytest.raises(ConfigError) as error:
        load_dataset(name, root=tmp_path)
    message = str(error.value)
    assert "\n" not in message and f"{tmp_path / folder} " in message and files in message

    with pytest.raises(ConfigError, match="data.root must be set"):
        load_dataset(name, root=None)


@pytest.mark.parametrize("name", ["covidx", "imagenet"])
def test_sources_without_download_refuse_it(tmp_path, name):
    with pytest.raises(ConfigError, match=f"{name} cannot be downloaded automatically; place .* under {tmp_path}"):
        load_dataset(name, root=tmp_path, download=True)


def test_unknown_names_and_options():
    with pytest.raises(ConfigError, match="unknown dataset 'mnsit'; known: celeba_gender, celeba_hair, cifar10"):
        load_dataset("mnsit")
    with pytest.raises(ConfigError, match="unknown dataset"):
        dataset_info("mnsit")
    with pytest.raises(ConfigError, match="multi-label flags are not supported"):
        dataset_info("medmnist", flag="chestmnist")
    with pytest.raises(ConfigError, match="unknown medmnist flag 'organmnist3d'; 2D single-label flags: pathmnist"):
        load_dataset("medmnist", root="unused", flag="organmnist3d")
    with pytest.raises(ConfigError, match="'mnist' does not take option.* flag; its options: none"):
        dataset_info("mnist", flag="pathmnist")


def test_registry_holds_exactly_the_documented_datasets():
    assert DATASETS.names() == sorted([
        "digits", "digits_moved", "font_digits", "mnist", "fmnist", "cifar10", "cifar100", "celeba_hair", "celeba_gender",
        "medmnist", "covidx", "imagenet",
    ])
    assert dataset_info("digits") == (10, 1, 8) and dataset_info("digits", image_size=16) == (10, 1, 16)
    assert load_dataset("digits", image_size=16).train[0][0].shape == (1, 16, 16)


def test_moved_digits_are_the_digits_each_moved_once_the_same_way_every_load():
    plain, moved, again = (load_dataset(name, image_size=28) for name in ("digits", "digits_moved", "digits_moved"))
    for split in ("train", "test"):
        images, labels = getattr(moved, split).tensors
        assert torch.equal(labels, getattr(plain, split).tensors[1])  # the same split, the same labels
        assert torch.equal(images, getattr(again, split).tensors[0])  # a fixed map: every load moves them alike
        change = (images - getattr(plain, split).tensors[0]).abs().flatten(1).mean(dim=1)
        assert (change > 0.01).float().mean() > 0.95 and images.min() >= -1 and images.max() <= 1


def test_font_digits_are_mnist_shaped_balanced_the_same_every_load_and_test_fonts_are_unseen_in_training():
    from dpsd import rendered_digits

    first, again = load_dataset("font_digits"), load_dataset("font_digits")
    assert dataset_info("font_digits") == (10, 1, 28)
    assert set(rendered_digits.TEST_FONTS).isdisjoint(rendered_digits.TRAIN_FONTS)
    assert set(rendered_digits.TEST_FONTS) | set(rendered_digits.TRAIN_FONTS) == set(rendered_digits.FONTS)
    for split, size in (("train", 1440), ("test", 2000)):
        images, labels = getattr(first, split).tensors
        assert images.shape == (size, 1, 28, 28) and torch.equal(images, getattr(again, split).tensors[0])
        assert torch.bincount(labels).tolist() == [size // 10] * 10
        ink = (images > -1 + 1e-6).float()
        assert images.min() >= -1 and images.max() <= 1
        assert ink[:, :, :2].sum() + ink[:, :, -2:].sum() < 0.01 * ink.sum()  # MNIST's 4 px margin, give or take
    # the centre of mass sits near the centre, as MNIST's does
    images = first.train.tensors[0][:, 0] + 1
    centre = (images * torch.arange(28.0).view(1, 28, 1)).sum(dim=(1, 2)) / images.sum(dim=(1, 2))
    assert (centre - 13.5).abs().mean() < 1.5


# ---------------------------------------------------------------------------------------------
# Truncated, corrupt or misshapen files: one line naming the file and what is wrong


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def corrupt_error(name: str, root: Path, **options) -> str:
    with pytest.raises(DataCorrupt) as error:
        load_dataset(name, root=root, **options)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_idx_files_are_checked_for_magic_size_shape_and_labels(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(tmp_path, "MNIST", [5, 0, 4, 1], TEST_LABELS)
    truncate(raw / "train-images-idx3-ubyte", 1000)
    assert corrupt_error("mnist", tmp_path) == (
        f"{raw / 'train-images-idx3-ubyte'}: 1,000 bytes, its header (4 x 28 x 28) needs 3,152 (truncated)")
    for file in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (raw / file).write_bytes(RNG.integers(0, 256, size=5000, dtype=np.uint8).tobytes())  # garbage bytes
    assert corrupt_error("mnist", tmp_path).startswith(f"{raw / 'train-images-idx3-ubyte'}: magic number 0x")
    write_mnist_like(tmp_path, "MNIST", [5, 0, 4, 1], TEST_LABELS)
    write_idx(raw / "t10k-labels-idx1-ubyte", np.array([1, 0]))
    assert corrupt_error("mnist", tmp_path) == f"{raw / 't10k-labels-idx1-ubyte'}: 2 labels for the 3 images of t10k-images-idx3-ubyte"
    write_idx(raw / "t10k-images-idx3-ubyte", pixels(2, 32, 32))
    assert corrupt_error("mnist", tmp_path) == f"{raw / 't10k-images-idx3-ubyte'}: images of 32 x 32 pixels, expected 28 x 28"
    write_mnist_like(tmp_path, "FashionMNIST", [9, 12, 0], TEST_LABELS)
    assert corrupt_error("fmnist", tmp_path) == f"{tmp_path / 'FashionMNIST' / 'raw' / 'train-labels-idx1-ubyte'}: label 12 outside 0..9"


def test_cifar_batches_are_checked_for_pickles_shapes_and_md5(tmp_path, monkeypatch):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(tmp_path, "cifar-10-batches-py", {f"data_batch_{i}": [0] for i in range(1, 6)}, "test_batch",
                "labels", "batches.meta", "label_names", [f"c{i}" for i in range(10)])
    assert corrupt_error("cifar10", tmp_path) == (  # torchvision's md5 check, per file
        f"{folder / 'data_batch_1'}: md5 differs from the official file's (c99cafc152244af753f735de768cd75f): corrupt or replaced")
    monkeypatch.setattr(cifar, "check_integrity", no_md5_check)
    truncate(folder / "data_batch_3", 100)
    assert corrupt_error("cifar10", tmp_path).startswith(f"{folder / 'data_batch_3'}: not a readable pickle (")
    (folder / "data_batch_3").write_bytes(pickle.dumps({"data": pixels(1, 1024), "labels": [0]}))
    assert corrupt_error("cifar10", tmp_path) == f"{folder / 'data_batch_3'}: data of shape (1, 1024), expected N x 3072 (3 x 32 x 32 bytes)"
    write_cifar(tmp_path, "cifar-100-python", {"train": [99, 0, 42]}, "test", "labels", "meta",
                "fine_label_names", [f"f{i}" for i in range(100)])
    assert corrupt_error("cifar100", tmp_path) == (
        f"{tmp_path / 'cifar-100-python' / 'train'}: expected a dict with data and fine_labels, found data, labels")


def test_celeba_tables_and_images_are_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(celeba, "check_integrity", no_md5_check)
    folder = tmp_path / "celeba"
    write_celeba(tmp_path)
    attributes = folder / "list_attr_celeba.txt"
    attributes.write_text("".join(attributes.read_text().splitlines(keepends=True)[:-2]))
    assert corrupt_error("celeba_hair", tmp_path) == f"{attributes}: its first line announces 9 rows, it has 7 (truncated?)"
    write_celeba(tmp_path)
    (folder / "img_align_celeba" / "000004.jpg").write_bytes(b"")
    assert corrupt_error("celeba_gender", tmp_path) == f"{folder / 'img_align_celeba' / '000004.jpg'}: empty file"


def test_medmnist_npz_is_checked(tmp_path):
    folder = tmp_path / "medmnist"
    write_medmnist(folder, "pathmnist", 3, [0, 8, 1, 0], [1, 0])
    truncate(folder / "pathmnist.npz", 2000)
    assert corrupt_error("medmnist", tmp_path, flag="pathmnist").startswith(f"{folder / 'pathmnist.npz'}: not a readable npz (")
    write_medmnist(folder, "pathmnist", 1, [0, 8, 1, 0], [1, 0])  # grayscale arrays for a colour flag
    assert corrupt_error("medmnist", tmp_path, flag="pathmnist") == (
        f"{folder / 'pathmnist.npz'}: train_images of shape (4, 28, 28), expected N x 28 x 28 x 3")
    np.savez(folder / "pathmnist.npz", train_images=pixels(1, 28, 28, 3))
    assert corrupt_error("medmnist", tmp_path, flag="pathmnist") == (
        f"{folder / 'pathmnist.npz'}: no array train_labels, test_images, test_labels (it holds train_images)")


def test_image_folders_are_checked_and_a_truncated_image_is_named_when_read(tmp_path):
    folder = tmp_path / "covidx"
    for split in ("train", "test"):
        for c in ("normal", "pneumonia"):
            save_image(folder / split / c / "0.png", mode="L")
    bad = folder / "train" / "normal" / "0.png"
    bad.write_bytes(b"<html>not an image</html>")
    assert corrupt_error("covidx", tmp_path) == f"{bad}: magic number 0x3c68746d is not an image format's"
    save_image(bad, mode="L", size=(64, 64))
    truncate(bad, 60)  # the magic number survives; the body does not
    data = load_dataset("covidx", root=tmp_path)
    with pytest.raises(DataCorrupt, match=f"^{bad}: cannot be decoded"):
        data.train[0]
