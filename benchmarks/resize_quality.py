"""`--resize fast` against `--resize exact`: how close, and how much cheaper, per frame.

    python benchmarks/resize_quality.py [--frames 24] [--work_dir DIR]

Writes --frames 540x960 JPEG frames of one video (benchmarks/pixel_sample.py, as the
second user story's), the same frames as PNG (compress level 1), and an h264 mp4 of
them (yuv420p, CRF 23, libx264's default). Each input is stored at 270x480 through the
job's own code (`FrameCodec.store_bytes` for images, `video_files.video_images` then
`FrameCodec.store` for the video, as `PixelVideo` does), raw, once with --resize fast
and once with --resize exact, in-process.

Prints per input the PSNR of fast against exact (the lowest frame's, and over all frames),
the largest difference of one pixel value (0-255), and the milliseconds per frame of each
path (decode and resize, best of --repeats passes; a micro-measure on a loaded machine,
not the job's throughput: that is benchmarks/bench_pixels_job.py). Then, for the video,
each swscale interpolation `--resize fast` could use, with the same measures.
"""
from __future__ import annotations

import argparse
import functools
import io
import os
import sys
import tempfile
import time
from typing import Callable, Iterable

import av
import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pixel_sample import frame_paths, write_frame_manifest  # noqa: E402

from beam_jobs.sources import media, video_files  # noqa: E402

SIZE = (270, 480)   # H, W
_SWS = av.video.reformatter.Interpolation
CANDIDATES = {"AREA + full chroma (the job's)": video_files.SWSCALE_INTERPOLATION,
              "AREA": _SWS.AREA, "BILINEAR": _SWS.BILINEAR, "BICUBIC": _SWS.BICUBIC,
              "LANCZOS": _SWS.LANCZOS, "BICUBIC + full chroma":
                  _SWS.BICUBIC | _SWS.FULL_CHR_H_INT, "FAST_BILINEAR": _SWS.FAST_BILINEAR}


def psnr(fast: np.ndarray, exact: np.ndarray) -> float:
    """Peak signal-to-noise ratio of `fast` against `exact`, uint8 arrays, in dB."""
    mse = np.mean((fast.astype(np.float64) - exact.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def compare(fast: list[np.ndarray], exact: list[np.ndarray]) -> tuple[float, float, int]:
    """(lowest frame's PSNR, PSNR over all frames, largest pixel difference)."""
    both = np.stack(fast), np.stack(exact)
    worst = int(np.abs(both[0].astype(np.int16) - both[1]).max())
    return min(map(psnr, fast, exact)), psnr(*both), worst


def best_ms(make: Callable[[], Iterable], count: int, repeats: int) -> float:
    """Milliseconds per frame of the fastest of `repeats` passes of `make()`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in make():
            pass
        times.append(time.perf_counter() - start)
    return min(times) / count * 1e3


def codec(fast: bool) -> media.FrameCodec:
    return media.FrameCodec(SIZE, encoding="raw", resize=True, fast_resize=fast)


def image_frames(files: list[bytes], fast: bool) -> Iterable[np.ndarray]:
    stored = codec(fast)
    return (stored.store_bytes(data).data for data in files)


def video_frames(path: str, fast: bool) -> Iterable[np.ndarray]:
    """The video's frames as the job stores them."""
    stored = codec(fast)
    return (stored.store(image) for image, _ in
            video_files.video_images(path, size=stored.video_scale()))


def scaled(decoded: list, interpolation) -> Iterable[np.ndarray]:
    """Decoded video frames scaled to SIZE by swscale with `interpolation`."""
    return (np.asarray(frame.to_image(height=SIZE[0], width=SIZE[1],
                                      interpolation=interpolation)) for frame in decoded)


def write_inputs(directory: str, frames: int) -> tuple[list[bytes], list[bytes], str]:
    """(JPEG files' bytes, PNG files' bytes, the mp4's path) of one sample video."""
    manifest = write_frame_manifest(directory, 1, frames)
    folder = os.path.join(os.path.dirname(manifest), f"frames-{frames}", "v000")
    jpegs = [open(path, "rb").read() for path in frame_paths(folder)]
    images = [Image.open(io.BytesIO(data)).convert("RGB") for data in jpegs]
    pngs = []
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, "PNG", compress_level=media.PNG_COMPRESS_LEVEL)
        pngs.append(buffer.getvalue())
    video = os.path.join(directory, f"sample-{frames}.mp4")
    with av.open(video, "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = images[0].width, images[0].height, \
            "yuv420p"
        for image in images:
            container.mux(stream.encode(av.VideoFrame.from_image(image)))
        container.mux(stream.encode())
    return jpegs, pngs, video


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        jpegs, pngs, video = write_inputs(args.work_dir or scratch, args.frames)
        n = len(jpegs)
        rows = {"JPEG files": lambda fast: image_frames(jpegs, fast),
                "PNG files": lambda fast: image_frames(pngs, fast),
                "h264 mp4": lambda fast: video_frames(video, fast)}
        print(f"{n} frames of 540x960 stored at {SIZE[0]}x{SIZE[1]}, fast against exact\n")
        print("| input | lowest frame PSNR dB | PSNR dB, all frames | largest difference "
              "| fast ms/frame | exact ms/frame |")
        print("|---|---|---|---|---|---|")
        for name, frames in rows.items():
            low, overall, worst = compare(list(frames(True)), list(frames(False)))
            fast_ms, exact_ms = (best_ms(functools.partial(frames, fast), n, args.repeats)
                                 for fast in (True, False))
            print(f"| {name} | {low:.1f} | {overall:.1f} | {worst} | {fast_ms:.1f} "
                  f"| {exact_ms:.1f} |")
        print("\nswscale interpolations for the video: decoded frames scaled while "
              "converted to RGB (decoding not timed)\n")
        print("| interpolation | lowest frame PSNR dB | largest difference | ms/frame |")
        print("|---|---|---|---|")
        exact = list(video_frames(video, False))
        with av.open(video) as container:
            decoded = list(container.decode(video=0))
        for name, interpolation in CANDIDATES.items():
            low, _, worst = compare(list(scaled(decoded, interpolation)), exact)
            ms = best_ms(functools.partial(scaled, decoded, interpolation), n, args.repeats)
            print(f"| {name} | {low:.1f} | {worst} | {ms:.1f} |")
        lanczos = best_ms(lambda: (frame.to_image().resize(SIZE[::-1], Image.Resampling.LANCZOS)
                                   for frame in decoded), n, args.repeats)
        print(f"| exact: full-size RGB, then Pillow's Lanczos | - | - | {lanczos:.1f} |")


if __name__ == "__main__":
    main()
