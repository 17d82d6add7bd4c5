"""Pictures of windows: contact sheets of frames, heatmaps of latents (Pillow only)."""
from __future__ import annotations

import functools
from typing import Callable, Optional, Union

import numpy as np
from PIL import Image, ImageDraw, ImageFont

THUMB_HEIGHT = 72
MAX_COLUMNS = 16
LABEL_STRIP = 36
HEATMAP_HEIGHT = 96       # a heatmap's height when its dims fit; a dim is never under 1 px
HEATMAP_WIDTH = 512
MAX_DIMS = 512            # more latent dims than this: the first ones, with a note
AXIS_WIDTH = 36
SCALE_WIDTH = 120
MARGIN = 4
GAP = 2                   # between frames of a contact sheet
FONT_SIZE = 13
TEXT_HEIGHT = FONT_SIZE + 5
# The latent colour map, low to high (a diverging blue-yellow-red); NaN is black.
COLOURS = ((44, 123, 182), (171, 217, 233), (255, 255, 191), (253, 174, 97), (215, 25, 28))


@functools.lru_cache(maxsize=1)
def _font() -> Union[ImageFont.FreeTypeFont, ImageFont.ImageFont]:
    """Pillow's own font at a readable size (its bitmap default is 11 px)."""
    return ImageFont.load_default(size=FONT_SIZE)


def frame_columns(length: int) -> np.ndarray:
    """The frames a contact sheet shows: at most MAX_COLUMNS, evenly over the window."""
    return np.unique(np.linspace(0, length - 1, min(length, MAX_COLUMNS)).round().astype(int))


def _thumb(frame: np.ndarray) -> Image.Image:
    """uint8 [H, W, C] -> an RGB thumbnail THUMB_HEIGHT high."""
    image = Image.fromarray(frame[..., 0] if frame.shape[-1] == 1 else frame).convert("RGB")
    width = max(1, round(image.width * THUMB_HEIGHT / image.height))
    return image.resize((width, THUMB_HEIGHT), Image.Resampling.BILINEAR)


def _label_curve(draw: ImageDraw.ImageDraw, labels: np.ndarray, mask: np.ndarray,
                 box: tuple[int, int, int, int]) -> None:
    """The labels of a window (the first channel of vectors) as a curve in `box`, scaled
    to the window's own range, which is written beside it."""
    x0, y0, x1, y1 = box
    values = labels.reshape(len(labels), -1)[:, 0]
    low, high = float(values.min()), float(values.max())
    span = high - low or 1.0
    draw.text((x1 + 3, y0), f"{high:.3g}", fill=(90, 90, 90), font=_font())
    draw.text((x1 + 3, y1), f"{low:.3g}", fill=(90, 90, 90), font=_font(), anchor="ld")
    points = [(x0 + (x1 - x0) * i / max(1, len(values) - 1),
               y1 - (y1 - y0) * (v - low) / span) for i, v in enumerate(values)]
    draw.rectangle(box, outline=(200, 200, 200))
    draw.line(points, fill=(30, 90, 200), width=2)
    for (x, y), real in zip(points, mask, strict=True):
        if not real:
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=(220, 40, 40))


def contact_sheet(windows: np.ndarray, masks: np.ndarray, labels: Optional[np.ndarray],
                  captions: list[str]) -> Image.Image:
    """One row per window: its frames with a thin gap between them (masked ones dimmed
    and crossed in red), and the labels as a curve under them."""
    columns = frame_columns(windows.shape[1])
    thumbs = [[_thumb(w[i]) for i in columns] for w in windows]
    width = max(sum(t.width + GAP for t in row) for row in thumbs) + 2 * MARGIN + 40
    row_height = THUMB_HEIGHT + TEXT_HEIGHT + (LABEL_STRIP if labels is not None else 0) + MARGIN
    sheet = Image.new("RGB", (width, row_height * len(windows) + MARGIN), "white")
    draw = ImageDraw.Draw(sheet)
    for r, row in enumerate(thumbs):
        top = MARGIN + r * row_height
        draw.text((MARGIN, top), captions[r], fill=(0, 0, 0), font=_font())
        x = MARGIN
        for i, thumb in zip(columns, row, strict=True):
            _paste_frame(sheet, draw, thumb, bool(masks[r][i]), x, top + TEXT_HEIGHT)
            x += thumb.width + GAP
        if labels is not None:
            strip = (MARGIN, top + TEXT_HEIGHT + 2 + THUMB_HEIGHT, x - GAP - 1,
                     top + TEXT_HEIGHT + THUMB_HEIGHT + LABEL_STRIP - 2)
            _label_curve(draw, labels[r][columns], masks[r][columns], strip)
    return sheet


def _paste_frame(sheet: Image.Image, draw: ImageDraw.ImageDraw, thumb: Image.Image,
                 real: bool, x: int, y: int) -> None:
    """A frame's thumbnail pasted at (x, y); a masked one dimmed and crossed in red."""
    if not real:
        thumb = Image.blend(thumb, Image.new("RGB", thumb.size, "black"), 0.6)
    sheet.paste(thumb, (x, y))
    if not real:
        draw.line([x, y, x + thumb.width - 1, y + THUMB_HEIGHT - 1], fill="red", width=2)
        draw.line([x, y + THUMB_HEIGHT - 1, x + thumb.width - 1, y], fill="red", width=2)


def colour_map(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] (clipped; NaN black) -> RGB uint8 along COLOURS."""
    stops = np.array(COLOURS, np.float64)
    where = np.clip(np.nan_to_num(values, nan=0.0), 0, 1) * (len(stops) - 1)
    low = np.minimum(where.astype(int), len(stops) - 2)
    frac = (where - low)[..., None]
    rgb = stops[low] * (1 - frac) + stops[low + 1] * frac
    rgb[np.isnan(values)] = 0
    return rgb.round().astype(np.uint8)


def heatmap_size(length: int, dims: int) -> tuple[int, int]:
    """(width, height) of a heatmap of `length` frames of `dims` values: at least a pixel
    a cell, at most MAX_DIMS dims."""
    shown = min(dims, MAX_DIMS)
    return (length * max(1, HEATMAP_WIDTH // length),
            shown * max(1, HEATMAP_HEIGHT // shown))


def heatmap(window: np.ndarray, low: float, high: float) -> Image.Image:
    """One window: frames across, its first MAX_DIMS values down, coloured from `low`
    to `high`; every cell at least one pixel (never a dim dropped by resizing)."""
    values = window.reshape(len(window), -1).astype(np.float64).T[:MAX_DIMS]    # [D, L]
    rgb = colour_map((values - low) / ((high - low) or 1.0))
    return Image.fromarray(rgb).resize(heatmap_size(*values.T.shape), Image.Resampling.NEAREST)


def value_range(window: np.ndarray) -> tuple[float, float]:
    """A window's own colour scale: its finite values' 1st to 99th percentile."""
    finite = window[np.isfinite(window)].astype(np.float64)
    if not finite.size:
        return 0.0, 1.0
    return float(np.percentile(finite, 1)), float(np.percentile(finite, 99))


def _colour_scale(sheet: Image.Image, draw: ImageDraw.ImageDraw, x: int, y: int, low: float,
                  high: float) -> None:
    """A horizontal bar of the colour map with its value range written at the ends."""
    bar = colour_map(np.linspace(0, 1, SCALE_WIDTH))[None].repeat(8, 0)
    sheet.paste(Image.fromarray(bar), (x, y))
    draw.text((x - 4, y), f"{low:.3g}", fill=(0, 0, 0), font=_font(), anchor="ra")
    draw.text((x + SCALE_WIDTH + 4, y), f"{high:.3g}", fill=(0, 0, 0), font=_font())


def heatmaps(windows: np.ndarray, masks: np.ndarray, metadata: Optional[np.ndarray],
             captions: list[str]) -> Image.Image:
    """One heatmap per latent window: frames across, latent dims down, each with its
    colour scale and value range (1st to 99th percentile), axis labels, its metadata,
    and a red tick under each masked frame. More than MAX_DIMS dims: the first MAX_DIMS
    are shown, and a note says so."""
    ranges = [value_range(w) for w in windows]
    maps = [heatmap(w, low, high) for w, (low, high) in zip(windows, ranges, strict=True)]
    dims = int(np.prod(windows.shape[2:]))
    shown = min(dims, MAX_DIMS)
    width = max(m.width for m in maps) + AXIS_WIDTH + 2 * MARGIN + SCALE_WIDTH + 120
    heights = [TEXT_HEIGHT * 2 + m.height + 8 + TEXT_HEIGHT + MARGIN for m in maps]
    sheet = Image.new("RGB", (width, sum(heights) + MARGIN), "white")
    draw = ImageDraw.Draw(sheet)
    top = MARGIN
    for r, (image, (low, high), height) in enumerate(zip(maps, ranges, heights, strict=True)):
        text = captions[r]
        if metadata is not None:
            text += "   metadata " + " ".join(f"{v:.3g}" for v in metadata[r])
        draw.text((MARGIN, top), text, fill=(0, 0, 0), font=_font())
        _colour_scale(sheet, draw, width - SCALE_WIDTH - 60, top + 4, low, high)
        note = f"dims 0-{shown - 1} of {dims} shown" if shown < dims else f"{dims} dims"
        draw.text((MARGIN, top + TEXT_HEIGHT), f"latent dims (down), frames (across); {note}",
                  fill=(90, 90, 90), font=_font())
        left, map_top = MARGIN + AXIS_WIDTH, top + 2 * TEXT_HEIGHT
        sheet.paste(image, (left, map_top))
        draw.text((left - 4, map_top), "0", fill=(90, 90, 90), font=_font(), anchor="ra")
        draw.text((left - 4, map_top + image.height), str(shown - 1), fill=(90, 90, 90),
                  font=_font(), anchor="rd")
        _masked_ticks(draw, masks[r], left, map_top + image.height, image.width)
        draw.text((left, map_top + image.height + 8), f"frame 0 ... {len(masks[r]) - 1}",
                  fill=(90, 90, 90), font=_font())
        top += height
    return sheet


def _masked_ticks(draw: ImageDraw.ImageDraw, mask: np.ndarray, left: int, bottom: int,
                  width: int) -> None:
    """A red tick under each masked frame of a heatmap `width` wide whose bottom edge
    is at `bottom`."""
    step = width / len(mask)
    for i, real in enumerate(mask):
        if not real:
            x = left + i * step
            draw.rectangle([x, bottom + 2, x + step, bottom + 7], fill=(220, 40, 40))


def decoded_frames(windows: np.ndarray, decode: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Latent windows [N, L, ...] -> uint8 frames [N, L, H, W, C] through a decoder whose
    output is in [0, 1]."""
    n, length = windows.shape[:2]
    frames = np.asarray(decode(windows.reshape(n * length, *windows.shape[2:])))
    frames = (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)
    return frames.reshape(n, length, *frames.shape[1:])
