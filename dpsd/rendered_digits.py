"""Digits rendered from the fonts matplotlib ships, prepared as MNIST's were: a public proxy with pen-thin strokes.

MNIST's digits (LeCun et al. 1998, the database's description) were each size-normalised to fit a 20 × 20 box with
their aspect ratio kept, anti-aliased, and centred in a 28 × 28 image by their centre of mass. Here each image is one
of the ten digits in one of :data:`FONTS`, drawn white on black at :data:`RENDER_SIZE` px with a random pen width,
turned and slanted by a random affine map, then size-normalised and centred as MNIST's, then distorted elastically
(Simard et al. 2003, §2: a random displacement field smoothed by a Gaussian of σ px and scaled by α). Train and test
fonts are disjoint (every fifth of :data:`FONTS`, from the first, is a test font: one of each family, in mixed styles), as MNIST's train and test writers are.

Every draw comes from fixed seeds, independent of any run seed: the same images on every machine with the same
matplotlib fonts. No file is read but the fonts; no private record enters it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FONTS = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansMono-Oblique.ttf", "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
    "cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmtt10.ttf", "cmti10.ttf",
)
"""matplotlib's bundled TrueType fonts that draw the ten digits (``mpl-data/fonts/ttf``)."""
TEST_FONTS = FONTS[::5]
"""The fonts of the test split; the train split's are the others."""
TRAIN_FONTS = tuple(font for font in FONTS if font not in TEST_FONTS)
TRAIN_SIZE = 1440
"""24 parts of 60 records, MNIST's part size with 1,000 teachers."""
TEST_SIZE = 2000
RENDER_SIZE = 64
"""The font size (px) digits are drawn at before they are size-normalised."""
PEN_WIDTHS = (0, 1, 2, 3)
"""Extra pen width (px at :data:`RENDER_SIZE`), one drawn uniformly per image."""
MAX_DEGREES = 12.0
"""A turn uniform in ±this many degrees."""
MAX_SHEAR = 0.3
"""A horizontal slant uniform in ±this (x moves by shear × y)."""
BOX = 20
"""MNIST's size-normalisation box (px)."""
SIDE = 28
ELASTIC_SIGMA = 4.0
ELASTIC_ALPHA = 34.0
"""Simard et al. (2003)'s values for MNIST's 28 px digits."""


def font_folder() -> Path:
    """Where matplotlib keeps its bundled TrueType fonts."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def render_split(fonts: tuple[str, ...], size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` images (``size x 28 x 28``, uint8) and labels, the labels cycling 0-9, each image's font, pen, affine
    map and elastic field drawn from ``seed``."""
    from PIL import ImageFont

    rng = np.random.default_rng(seed)
    loaded = [ImageFont.truetype(str(font_folder() / name), RENDER_SIZE) for name in fonts]
    labels = np.arange(size) % 10
    images = np.stack([render_digit(str(label), loaded[rng.integers(len(loaded))], rng) for label in labels])
    return images, labels


def render_digit(digit: str, font, rng: np.random.Generator) -> np.ndarray:
    """One 28 × 28 uint8 image of ``digit`` in ``font``: pen, affine map, MNIST's normalisation, elastic field."""
    from PIL import Image, ImageDraw

    canvas = 3 * RENDER_SIZE
    image = Image.new("L", (canvas, canvas))
    ImageDraw.Draw(image).text((canvas / 2, canvas / 2), digit, font=font, fill=255, anchor="mm",
                               stroke_width=int(rng.choice(PEN_WIDTHS)), stroke_fill=255)
    angle = np.radians(rng.uniform(-MAX_DEGREES, MAX_DEGREES))
    shear = rng.uniform(-MAX_SHEAR, MAX_SHEAR)
    # PIL maps each output pixel back to an input one: the inverse of (turn, then slant) about the centre.
    forward = np.array([[1.0, shear], [0.0, 1.0]]) @ np.array([[np.cos(angle), -np.sin(angle)],
                                                              [np.sin(angle), np.cos(angle)]])
    inverse = np.linalg.inv(forward)
    centre = np.array([canvas / 2, canvas / 2])
    offset = centre - inverse @ centre
    image = image.transform(image.size, Image.AFFINE, (*inverse[0], offset[0], *inverse[1], offset[1]),
                            resample=Image.BILINEAR)
    return elastic(mnist_normalise(image), rng)


def mnist_normalise(image) -> np.ndarray:
    """MNIST's preparation: the ink's bounding box scaled to fit :data:`BOX` with its aspect kept (anti-aliased),
    placed in a :data:`SIDE` image with its centre of mass at the centre. Returns float pixels in [0, 255]."""
    from PIL import Image

    glyph = image.crop(image.getbbox())
    scale = BOX / max(glyph.size)
    width, height = (max(1, round(side * scale)) for side in glyph.size)
    glyph = np.asarray(glyph.resize((width, height), Image.LANCZOS), dtype=np.float64).clip(0, 255)
    rows, cols = np.indices(glyph.shape)
    mass = glyph.sum()
    top = int(round(SIDE / 2 - (rows * glyph).sum() / mass))
    left = int(round(SIDE / 2 - (cols * glyph).sum() / mass))
    top, left = min(max(top, 0), SIDE - height), min(max(left, 0), SIDE - width)
    out = np.zeros((SIDE, SIDE))
    out[top:top + height, left:left + width] = glyph
    return out


def elastic(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Simard et al. (2003)'s elastic distortion: each pixel moved by a uniform random field in [-1, 1] smoothed by a
    Gaussian of :data:`ELASTIC_SIGMA` and scaled by :data:`ELASTIC_ALPHA`, bilinear; uint8 out."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    shift = [gaussian_filter(rng.uniform(-1, 1, pixels.shape), ELASTIC_SIGMA, mode="constant") * ELASTIC_ALPHA
             for _ in range(2)]
    rows, cols = np.indices(pixels.shape)
    moved = map_coordinates(pixels, [rows + shift[0], cols + shift[1]], order=1, mode="constant")
    return moved.clip(0, 255).round().astype(np.uint8)


__all__ = ["FONTS", "TEST_FONTS", "TRAIN_FONTS", "render_digit", "render_split"]
