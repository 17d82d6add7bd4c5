"""Pictures of windows: contact sheets of frames, heatmaps of latents (Pillow only)."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
from PIL import Image, ImageDraw

THUMB_HEIGHT = 72
MAX_COLUMNS = 16
LABEL_STRIP = 28
HEATMAP_HEIGHT = 96
MARGIN = 4


def _columns(length: int) -> np.ndarray:
    """At most MAX_COLUMNS frame indices, evenly over the window."""
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
    draw.text((x1 + 3, y0), f"{high:.3g}", fill=(90, 90, 90))
    draw.text((x1 + 3, y1 - 10), f"{low:.3g}", fill=(90, 90, 90))
    points = [(x0 + (x1 - x0) * i / max(1, len(values) - 1),
               y1 - (y1 - y0) * (v - low) / span) for i, v in enumerate(values)]
    draw.rectangle(box, outline=(200, 200, 200))
    draw.line(points, fill=(30, 90, 200), width=2)
    for (x, y), real in zip(points, mask):
        if not real:
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=(220, 40, 40))


def contact_sheet(windows: np.ndarray, masks: np.ndarray, labels: Optional[np.ndarray],
                  captions: list[str]) -> Image.Image:
    """One row per window: its frames (masked ones dimmed and crossed in red), and the
    labels as a curve under them."""
    columns = _columns(windows.shape[1])
    thumbs = [[_thumb(w[i]) for i in columns] for w in windows]
    width = max(sum(t.width for t in row) for row in thumbs) + 2 * MARGIN + 40
    row_height = THUMB_HEIGHT + 14 + (LABEL_STRIP if labels is not None else 0) + MARGIN
    sheet = Image.new("RGB", (width, row_height * len(windows) + MARGIN), "white")
    draw = ImageDraw.Draw(sheet)
    for r, row in enumerate(thumbs):
        top = MARGIN + r * row_height
        draw.text((MARGIN, top), captions[r], fill=(0, 0, 0))
        x = MARGIN
        for i, thumb in zip(columns, row):
            y = top + 12
            if not masks[r][i]:
                thumb = Image.blend(thumb, Image.new("RGB", thumb.size, "black"), 0.6)
            sheet.paste(thumb, (x, y))
            if not masks[r][i]:
                draw.line([x, y, x + thumb.width - 1, y + THUMB_HEIGHT - 1], fill="red", width=2)
                draw.line([x, y + THUMB_HEIGHT - 1, x + thumb.width - 1, y], fill="red", width=2)
            x += thumb.width
        if labels is not None:
            strip = (MARGIN, top + 14 + THUMB_HEIGHT, x - 1, top + 12 + THUMB_HEIGHT + LABEL_STRIP)
            _label_curve(draw, labels[r][columns], masks[r][columns], strip)
    return sheet


def _colormap(values: np.ndarray) -> np.ndarray:
    """[0, 1] -> RGB uint8, blue through white to red."""
    v = np.clip(values, 0, 1)[..., None]
    blue, white, red = np.array([40, 70, 200]), np.array([245, 245, 245]), np.array([200, 40, 40])
    rgb = np.where(v < 0.5, blue + (white - blue) * v * 2, white + (red - white) * (v - 0.5) * 2)
    return rgb.astype(np.uint8)


def heatmaps(windows: np.ndarray, masks: np.ndarray, metadata: Optional[np.ndarray],
             captions: list[str]) -> Image.Image:
    """One heatmap per latent window (time across, latent dims down), with its metadata."""
    rows = []
    for w in windows:
        flat = w.reshape(len(w), -1).astype(np.float32).T          # [D, L]
        low, high = np.percentile(flat, 1), np.percentile(flat, 99)
        rows.append(Image.fromarray(_colormap((flat - low) / ((high - low) or 1.0))).resize(
            (max(4 * w.shape[0], 256), HEATMAP_HEIGHT), Image.Resampling.NEAREST))
    width = max(r.width for r in rows) + 2 * MARGIN
    row_height = HEATMAP_HEIGHT + 26 + MARGIN
    sheet = Image.new("RGB", (width, row_height * len(rows) + MARGIN), "white")
    draw = ImageDraw.Draw(sheet)
    for r, image in enumerate(rows):
        top = MARGIN + r * row_height
        text = captions[r]
        if metadata is not None:
            text += "  metadata " + " ".join(f"{v:.3g}" for v in metadata[r])
        draw.text((MARGIN, top), text, fill=(0, 0, 0))
        sheet.paste(image, (MARGIN, top + 12))
        step = image.width / len(masks[r])
        for i, real in enumerate(masks[r]):    # masked frames: a red tick under the map
            if not real:
                x = MARGIN + i * step
                draw.rectangle([x, top + 14 + HEATMAP_HEIGHT, x + step, top + 20 + HEATMAP_HEIGHT],
                               fill=(220, 40, 40))
    return sheet


def decoded_frames(windows: np.ndarray, decode: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Latent windows [N, L, ...] -> uint8 frames [N, L, H, W, C] through a decoder whose
    output is in [0, 1]."""
    n, length = windows.shape[:2]
    frames = np.asarray(decode(windows.reshape(n * length, *windows.shape[2:])))
    frames = (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)
    return frames.reshape(n, length, *frames.shape[1:])
