"""The report's contact sheets: one PNG a window, each within a byte budget, so that the
page's size is bounded by the number of windows shown.

Pixel windows: a strip of every k-th frame (k such that at most readers.preview's
MAX_COLUMNS frames show), masked frames dimmed and crossed, the labels drawn under the
frames (readers.preview.contact_sheet). Latent windows: frames across, a frame's values
down (at most readers.preview.MAX_DIMS), every window on one fixed colour scale that the
page states, and a strip under them that is red under each masked frame.
"""
from __future__ import annotations

import dataclasses
import io
import math
from typing import Optional

import numpy as np
from PIL import Image

from readers import preview

SHEET_BYTES = 480_000       # a sheet's PNG at most; a larger one is scaled down to fit
LATENT_WIDTH = 600          # a latent window's picture, when its frames fit (>= 1 px each)
LATENT_HEIGHT = 160         # ... and its values (>= 1 px each)
MASK_STRIP = 6              # under a latent picture: red under a masked frame
# The latent colour map, low to high (a diverging blue-yellow-red); NaN is black.
COLOURS = ((44, 123, 182), (171, 217, 233), (255, 255, 191), (253, 174, 97), (215, 25, 28))
_MASKED, _REAL = (220, 40, 40), (200, 200, 200)


@dataclasses.dataclass(frozen=True)
class Sheet:
    """One window's picture and what the page says of it."""
    png: bytes
    width: int
    height: int
    split: str
    run: str
    video_id: str
    start: int
    frames: list[int]                  # the window's frames the picture shows
    masked: list[int]                  # which of them are masked
    labels: Optional[list[float]]      # the first label value of each shown frame
    scaled: float = 1.0                # < 1: scaled down to fit SHEET_BYTES


def every_kth(length: int) -> int:
    """The step between frames a pixel strip shows: at most MAX_COLUMNS of them."""
    return max(1, math.ceil(length / preview.MAX_COLUMNS))


def latent_size(length: int, dims: int) -> tuple[int, int]:
    """(width, height) of a latent window's picture: frames by values, at least a pixel
    each, and the mask strip under it."""
    shown = min(dims, preview.MAX_DIMS)
    return (length * max(1, LATENT_WIDTH // length),
            shown * max(1, LATENT_HEIGHT // shown) + 2 + MASK_STRIP)


def colours(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] (clipped; NaN black) -> RGB uint8 along COLOURS."""
    stops = np.array(COLOURS, np.float64)
    where = np.clip(np.nan_to_num(values, nan=0.0), 0, 1) * (len(stops) - 1)
    low = np.minimum(where.astype(int), len(stops) - 2)
    frac = (where - low)[..., None]
    rgb = stops[low] * (1 - frac) + stops[low + 1] * frac
    rgb[np.isnan(values)] = 0
    return rgb.round().astype(np.uint8)


def latent_picture(window: np.ndarray, mask: np.ndarray, scale: tuple[float, float]
                   ) -> Image.Image:
    """Frames across, a frame's values down, on the fixed `scale` (low, high)."""
    values = window.reshape(len(window), -1).astype(np.float64).T[:preview.MAX_DIMS]
    width, height = latent_size(len(window), len(values))
    cell_h = (height - 2 - MASK_STRIP) // len(values)
    low, high = scale
    rgb = colours((values - low) / ((high - low) or 1.0))
    picture = Image.new("RGB", (width, height), "white")
    picture.paste(Image.fromarray(rgb).resize((width, len(values) * cell_h),
                                              Image.Resampling.NEAREST), (0, 0))
    strip = np.array([_REAL if real else _MASKED for real in mask], np.uint8)[None]
    picture.paste(Image.fromarray(strip).resize((width, MASK_STRIP), Image.Resampling.NEAREST),
                  (0, height - MASK_STRIP))
    return picture


def pixel_picture(window: np.ndarray, mask: np.ndarray, labels: Optional[np.ndarray],
                  caption: str) -> Image.Image:
    """Every k-th frame of one window (readers.preview.contact_sheet)."""
    k = every_kth(len(window))
    return preview.contact_sheet(window[None, ::k], mask[None, ::k],
                                 None if labels is None else labels[None, ::k], [caption])


def png_within(picture: Image.Image, budget: int = SHEET_BYTES) -> tuple[bytes, Image.Image, float]:
    """The picture's PNG, scaled down by steps until it is at most `budget` bytes."""
    scaled = 1.0
    while True:
        out = io.BytesIO()
        picture.save(out, "PNG", optimize=False, compress_level=6)
        if out.tell() <= budget or min(picture.size) < 16:
            return out.getvalue(), picture, scaled
        step = max(0.3, min(0.9, math.sqrt(budget / out.tell()) * 0.95))
        scaled *= step
        picture = picture.resize((max(1, round(picture.width * step)),
                                  max(1, round(picture.height * step))),
                                 Image.Resampling.LANCZOS)


def sheet(values: dict[str, np.ndarray], pick: tuple[str, str, int], pixels: bool,
          scale: tuple[float, float]) -> Sheet:
    """The sheet of one window read as readers.numpy gives it (row 0 of `values`)."""
    window, mask = values["window"][0], values["mask"][0] > 0
    labels = values["labels"][0] if "labels" in values else None
    video_id = bytes(values["video_id"][0]).decode("utf-8", "replace")
    start = int(values["start"][0])
    step = every_kth(len(window)) if pixels else 1
    frames = list(range(0, len(window), step))
    if pixels:
        picture = pixel_picture(window, mask, labels, f"{video_id} @ {start}")
    else:
        picture = latent_picture(window, mask, scale)
    png, picture, scaled = png_within(picture)
    first_labels = (None if labels is None else
                    [float(labels.reshape(len(window), -1)[i, 0]) for i in frames])
    return Sheet(png, picture.width, picture.height, pick[0], pick[1], video_id, start,
                 frames, [i for i in frames if not mask[i]], first_labels, scaled)
