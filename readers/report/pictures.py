"""The report's contact sheets: one PNG a window, each within a byte budget, so that the
page's size is bounded by the number of windows shown.

Pixel windows: readers.inspect.preview's contact sheet of one window (at most its
MAX_COLUMNS frames, masked frames dimmed and crossed, the labels drawn under the frames).
Latent windows: readers.inspect.preview's heatmap (frames across, values down), every
window on one fixed colour scale that the page states, and a strip under it that is red
under each masked frame.
"""
from __future__ import annotations

import dataclasses
import io
import math
from typing import Optional

import numpy as np
from PIL import Image

from readers.inspect import preview

SHEET_BYTES = 480_000       # a sheet's PNG at most; a larger one is scaled down to fit
MASK_STRIP = 6              # under a latent picture: red under a masked frame
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


def latent_size(length: int, dims: int) -> tuple[int, int]:
    """(width, height) of a latent window's picture: its heatmap and the mask strip."""
    width, height = preview.heatmap_size(length, dims)
    return width, height + 2 + MASK_STRIP


def latent_picture(window: np.ndarray, mask: np.ndarray, scale: tuple[float, float]
                   ) -> Image.Image:
    """The window's heatmap on the fixed `scale` (low, high), the mask strip under it."""
    picture = Image.new("RGB", latent_size(len(window), math.prod(window.shape[1:])), "white")
    picture.paste(preview.heatmap(window, *scale), (0, 0))
    strip = np.array([_REAL if real else _MASKED for real in mask], np.uint8)[None]
    picture.paste(Image.fromarray(strip).resize((picture.width, MASK_STRIP),
                                                Image.Resampling.NEAREST),
                  (0, picture.height - MASK_STRIP))
    return picture


def pixel_picture(window: np.ndarray, mask: np.ndarray, labels: Optional[np.ndarray],
                  caption: str) -> Image.Image:
    """One window's contact sheet (readers.inspect.preview.contact_sheet)."""
    return preview.contact_sheet(window[None], mask[None],
                                 None if labels is None else labels[None], [caption])


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
    frames = (preview.frame_columns(len(window)).tolist() if pixels
              else list(range(len(window))))
    if pixels:
        picture = pixel_picture(window, mask, labels, f"{video_id} @ {start}")
    else:
        picture = latent_picture(window, mask, scale)
    png, picture, scaled = png_within(picture)
    first_labels = (None if labels is None else
                    [float(labels.reshape(len(window), -1)[i, 0]) for i in frames])
    return Sheet(png, picture.width, picture.height, pick[0], pick[1], video_id, start,
                 frames, [i for i in frames if not mask[i]], first_labels, scaled)
