"""What is wrong with a dataset's files, in one line naming the file, before any of it is trained on.

Each file-based source gets a check of the files that are there (a missing file is the loader's
:class:`~dpsd.data.DataAbsent`, naming what it expected): sizes against the header (IDX), magic
numbers (IDX, images), array keys, shapes and counts (CIFAR pickles, MedMNIST npz, CelebA's
tables), label ranges and the official md5 where the source publishes one. Image bodies decoded
lazily (COVIDx, ImageNet) are checked when read, by :func:`image_loader`, which names the file too.
"""

from __future__ import annotations

import csv
import pickle
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from dpsd.errors import ConfigError


class DataCorrupt(ConfigError):
    """A dataset file is there but truncated, corrupt or of the wrong shape: one line naming it."""


# IDX type byte -> item size (https://yann.lecun.com/exdb/mnist/: "THE IDX FILE FORMAT")
_IDX_ITEM_SIZE = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}
# the first bytes of the image formats torchvision's ImageFolder reads
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM", b"GIF8", b"II*\x00", b"MM\x00*", b"P5", b"P6", b"RIFF")


def _idx_shape(path: Path, ndim: int) -> tuple[int, ...]:
    """The dimensions an uint8 IDX file's header gives, after checking its magic number and size."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        head = file.read(4 + 4 * ndim)
    if len(head) < 4:
        raise DataCorrupt(f"{path}: {size} bytes, too short for an IDX header")
    expected_magic = bytes([0, 0, 0x08, ndim])
    if head[:4] != expected_magic:
        raise DataCorrupt(f"{path}: magic number 0x{head[:4].hex()}, expected 0x{expected_magic.hex()} "
                          f"(an IDX file of {ndim}-d unsigned bytes)")
    if len(head) < 4 + 4 * ndim:
        raise DataCorrupt(f"{path}: {size} bytes, too short for its {ndim}-d IDX header")
    shape = tuple(int.from_bytes(head[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    needed = 4 + 4 * ndim + int(np.prod(shape)) * _IDX_ITEM_SIZE[0x08]
    if size != needed:
        what = "truncated" if size < needed else "longer than its header says"
        raise DataCorrupt(f"{path}: {size:,} bytes, its header ({' x '.join(map(str, shape))}) needs {needed:,} ({what})")
    return shape


def check_idx(folder: Path, prefixes: Sequence[str], image_side: int, num_classes: int) -> None:
    """MNIST-style raw files ``<prefix>-images-idx3-ubyte`` and ``<prefix>-labels-idx1-ubyte``:
    magic numbers, sizes against the headers, ``image_side`` square images, as many labels as
    images, labels in ``[0, num_classes)``. Files that are not there are left to the loader."""
    for prefix in prefixes:
        images, labels = folder / f"{prefix}-images-idx3-ubyte", folder / f"{prefix}-labels-idx1-ubyte"
        if not (images.is_file() and labels.is_file()):
            continue
        count, rows, cols = _idx_shape(images, 3)
        if (rows, cols) != (image_side, image_side):
            raise DataCorrupt(f"{images}: images of {rows} x {cols} pixels, expected {image_side} x {image_side}")
        (label_count,) = _idx_shape(labels, 1)
        if label_count != count:
            raise DataCorrupt(f"{labels}: {label_count:,} labels for the {count:,} images of {images.name}")
        values = np.fromfile(labels, dtype=np.uint8, offset=8)
        if values.size and values.max() >= num_classes:
            raise DataCorrupt(f"{labels}: label {int(values.max())} outside 0..{num_classes - 1}")


def _unpickle(path: Path) -> object:
    try:
        with open(path, "rb") as file:
            return pickle.load(file, encoding="latin1")
    except Exception as err:  # a truncated or foreign file: EOFError, UnpicklingError, ...
        raise DataCorrupt(f"{path}: not a readable pickle ({type(err).__name__}: {_first_line(err)})") from None


def check_cifar(folder: Path, batches: Iterable[tuple[str, str]], meta: dict, label_key: str,
                num_classes: int, integrity) -> None:
    """CIFAR python batches: each a pickled dict with ``data`` (N x 3072 bytes) and ``label_key``
    (N labels in range), the meta file with its ``key``, then each file's official md5
    (``integrity(path, md5)``, torchvision's check)."""
    for name, md5 in batches:
        path = folder / name
        if not path.is_file():
            continue
        batch = _unpickle(path)
        if not isinstance(batch, dict) or "data" not in batch or label_key not in batch:
            keys = ", ".join(map(str, batch)) if isinstance(batch, dict) else type(batch).__name__
            raise DataCorrupt(f"{path}: expected a dict with data and {label_key}, found {keys}")
        data, labels = np.asarray(batch["data"]), np.asarray(batch[label_key])
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DataCorrupt(f"{path}: data of shape {data.shape}, expected N x 3072 (3 x 32 x 32 bytes)")
        if len(labels) != len(data):
            raise DataCorrupt(f"{path}: {len(labels)} labels for {len(data)} images")
        if labels.size and not 0 <= labels.min() <= labels.max() < num_classes:
            raise DataCorrupt(f"{path}: labels outside 0..{num_classes - 1}")
        if not integrity(str(path), md5):
            raise DataCorrupt(f"{path}: md5 differs from the official file's ({md5}): corrupt or replaced")
    path = folder / meta["filename"]
    if path.is_file():
        found = _unpickle(path)
        if not isinstance(found, dict) or meta["key"] not in found:
            raise DataCorrupt(f"{path}: expected a dict with {meta['key']}")
        if not integrity(str(path), meta["md5"]):
            raise DataCorrupt(f"{path}: md5 differs from the official file's ({meta['md5']}): corrupt or replaced")


def read_npz(path: Path, splits: Sequence[str], channels: int, num_classes: int) -> dict[str, np.ndarray]:
    """The arrays ``<split>_images`` and ``<split>_labels`` of a MedMNIST npz, checked: a readable
    zip, every array there, images N x 28 x 28 (x 3 for colour), N labels in range."""
    try:
        with np.load(path) as archive:
            missing = [f"{s}_{kind}" for s in splits for kind in ("images", "labels") if f"{s}_{kind}" not in archive]
            if missing:
                raise DataCorrupt(f"{path}: no array {', '.join(missing)} (it holds {', '.join(archive.files)})")
            arrays = {key: archive[key] for key in (f"{s}_{kind}" for s in splits for kind in ("images", "labels"))}
    except DataCorrupt:
        raise
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, KeyError) as err:
        raise DataCorrupt(f"{path}: not a readable npz ({type(err).__name__}: {_first_line(err)})") from None
    image_shape = (28, 28, 3) if channels == 3 else (28, 28)
    for split in splits:
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"].reshape(-1)
        if images.shape[1:] != image_shape:
            raise DataCorrupt(f"{path}: {split}_images of shape {images.shape}, expected N x {' x '.join(map(str, image_shape))}")
        if len(labels) != len(images):
            raise DataCorrupt(f"{path}: {len(labels)} {split}_labels for {len(images)} {split}_images")
        if labels.size and not 0 <= labels.min() <= labels.max() < num_classes:
            raise DataCorrupt(f"{path}: {split}_labels outside 0..{num_classes - 1}")
    return arrays


def check_celeba(folder: Path, tables: Sequence[tuple[str, str, bool]], integrity) -> None:
    """CelebA's tables ``(file, md5, has a header)``: a count line that matches the rows (where
    there is a header), whole rows of integers, the same rows in every table, each table's official
    md5; then every image the partition table lists, under ``img_align_celeba/``."""
    rows_seen: dict[str, int] = {}
    names: list[str] = []
    for name, md5, header in tables:
        path = folder / name
        if not path.is_file():
            continue
        with open(path, newline="") as file:
            lines = [row for row in csv.reader(file, delimiter=" ", skipinitialspace=True) if row]
        body = lines[2:] if header else lines
        if header and (not lines or not lines[0][0].isdigit() or int(lines[0][0]) != len(body)):
            raise DataCorrupt(f"{path}: its first line announces {lines[0][0] if lines else 'nothing'} rows, "
                              f"it has {len(body)} (truncated?)")
        widths = {len(row) for row in body}
        if len(widths) > 1:
            line = next(i for i, row in enumerate(body) if len(row) != len(body[0]))
            raise DataCorrupt(f"{path}: row {line + 1} has {len(body[line])} fields, the first has {len(body[0])}")
        if not all(value.lstrip("-").isdigit() for row in body for value in row[1:]):
            raise DataCorrupt(f"{path}: a row holds a value that is not an integer")
        rows_seen[name] = len(body)
        if not names:
            names = [row[0] for row in body]
        if not integrity(str(path), md5):
            raise DataCorrupt(f"{path}: md5 differs from the official file's ({md5}): corrupt or replaced")
    if len(set(rows_seen.values())) > 1:
        raise DataCorrupt(f"{folder}: its tables list different numbers of images "
                          f"({', '.join(f'{k} {v}' for k, v in rows_seen.items())})")
    if (folder / "img_align_celeba").is_dir():
        check_images(folder / "img_align_celeba" / name for name in names)


def check_images(paths: Iterable[Path]) -> None:
    """Every image file there, not empty, starting with the magic number of an image format."""
    for path in paths:
        try:
            with open(path, "rb") as file:
                head = file.read(8)
        except FileNotFoundError:
            raise DataCorrupt(f"{path}: listed but not there") from None
        if not head:
            raise DataCorrupt(f"{path}: empty file")
        if not head.startswith(_IMAGE_MAGIC):
            raise DataCorrupt(f"{path}: magic number 0x{head[:4].hex()} is not an image format's")


def image_loader(path: str):
    """torchvision's default image loader, with a decode error turned into one line naming the file."""
    from PIL import Image

    try:
        with open(path, "rb") as file:
            return Image.open(file).convert("RGB")
    except (OSError, SyntaxError, ValueError) as err:
        raise DataCorrupt(f"{path}: cannot be decoded ({_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
