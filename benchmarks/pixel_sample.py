"""Synthetic frame folders and their manifest, for the pixel benchmarks (not a benchmark).

    python benchmarks/pixel_sample.py DIR [--videos 4] [--frames 64]

Writes DIR/frames-{F}/v{i:03d}/frame_{t}.jpg (540x960 RGB, JPEG quality 90, about 100 KB
each, as the second user story's images) and DIR/videos-{V}x{F}.jsonl, one row a video:
{"video_id", "frames": the folder, "labels": one float per frame}.

A frame is smooth colour gradients, Gaussian noise (so it does not compress to nothing)
and a few discs that move from frame to frame. The gradient and a small bank of noise
fields are made once per video and shifted per frame, so writing costs about as much
as encoding the JPEG.
"""
from __future__ import annotations

import argparse
import json
import os
import re

import numpy as np
from PIL import Image, ImageDraw

HEIGHT, WIDTH = 540, 960
JPEG_QUALITY = 90
NOISE_SIGMA = 6.0        # ~105 KB per 540x960 JPEG at quality 90
NOISE_FIELDS = 4
DISCS = 6


def _video_base(video: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """A float32 gradient [H, 2W, 3] (wide, to slide across) and noise fields [H, W, 3]."""
    rng = np.random.default_rng(video)
    y = np.linspace(0, 1, HEIGHT, dtype=np.float32)[:, None]
    x = np.linspace(0, 2, 2 * WIDTH, dtype=np.float32)[None, :]
    phase = video * 0.7
    base = np.stack([128 + 100 * np.sin(6 * x + 3 * y + phase),
                     128 + 100 * np.sin(4 * y - 5 * x + 2 * phase),
                     128 + 100 * np.cos(7 * x * y + phase)], axis=-1)
    noise = [rng.normal(0, NOISE_SIGMA, (HEIGHT, WIDTH, 3)).astype(np.float32)
             for _ in range(NOISE_FIELDS)]
    return base, noise


def frame_image(video: int, t: int, base: np.ndarray, noise: list[np.ndarray]) -> Image.Image:
    """Frame t of a video: the gradient slid by t, shifted noise, moving discs."""
    shift = (7 * t) % WIDTH
    pixels = base[:, shift:shift + WIDTH] + np.roll(noise[t % NOISE_FIELDS], 13 * t, axis=0)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for k in range(DISCS):
        cx = (video * 131 + k * 173 + t * (5 + k)) % WIDTH
        cy = (video * 71 + k * 97 + t * (3 + k)) % HEIGHT
        r = 30 + 10 * k
        draw.ellipse([cx - r, cy - r, cx + r, cy + r],
                     fill=((k * 40) % 256, 255 - k * 30, (k * 90 + video) % 256))
    return image


def frame_paths(folder: str) -> list[str]:
    names = [n for n in os.listdir(folder) if n.lower().endswith((".jpg", ".jpeg"))]
    return [os.path.join(folder, n) for n in
            sorted(names, key=lambda n: int(re.findall(r"\d+", n)[-1]))]


def write_frame_manifest(directory: str, videos: int, frames: int) -> str:
    """Write the frame folders and videos.jsonl under `directory`; return the manifest.

    Frames already there (same name) are kept, so a rerun over the same directory
    only writes what is missing.
    """
    rows = []
    for v in range(videos):
        folder = os.path.join(directory, f"frames-{frames}", f"v{v:03d}")
        os.makedirs(folder, exist_ok=True)
        base = noise = None
        for t in range(frames):
            path = os.path.join(folder, f"frame_{t}.jpg")
            if os.path.exists(path):
                continue
            if base is None:
                base, noise = _video_base(v)
            frame_image(v, t, base, noise).save(path, "JPEG", quality=JPEG_QUALITY)
        labels = [round(float(np.sin(0.1 * t + v)) * 500 + 1000, 3) for t in range(frames)]
        rows.append({"video_id": f"fire_{v:03d}", "frames": folder, "labels": labels})
    manifest = os.path.join(directory, f"videos-{videos}x{frames}.jsonl")
    with open(manifest, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return manifest


def frame_bytes(manifest: str) -> tuple[int, int]:
    """(frames, bytes on disk) of a manifest's frame folders."""
    count = total = 0
    with open(manifest) as f:
        for line in f:
            folder = json.loads(line)["frames"]
            for name in os.listdir(folder):
                count += 1
                total += os.path.getsize(os.path.join(folder, name))
    return count, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--videos", type=int, default=4)
    parser.add_argument("--frames", type=int, default=64)
    args = parser.parse_args()
    manifest = write_frame_manifest(args.directory, args.videos, args.frames)
    count, total = frame_bytes(manifest)
    print(f"{manifest}: {count} frames, {total / count / 1024:.0f} KB per frame")


if __name__ == "__main__":
    main()
