"""Frames from video files (PyAV): decoded, turned upright, scaled, checked.

Every path is opened through fsspec, so local, gs://, s3:// and memory:// paths work
alike. What is never silently changed:

- A video that decodes fewer frames than its container declares fails (a file cut short).
- With --fps, a frame stamped more than --max_timestamp_gap seconds after every frame
  before it, or past the duration its container declares by more, fails its video:
  resampling would fill the gap with copies of one frame (a million for a 10-hour
  glitch at 30 fps).
- A path that is not a regular file (a FIFO, a device) is not read.

With --resize fast, swscale scales a frame as it converts it to RGB (beam_jobs/sources/
media.py says how images are resized, and how both are stored).
"""
from __future__ import annotations

import contextlib
import os
import stat
from typing import Any, Iterator, Optional

import av
import fsspec
from PIL import Image

from beam_jobs.core import paths
from beam_jobs.core.configs import DEFAULT_MAX_TIMESTAMP_GAP
from beam_jobs.core.frames import BadRecord

# A video may decode a frame or two fewer than its container declares (edit lists).
_SHORTFALL_FRAMES, _SHORTFALL_FRACTION = 2, 0.02
# --resize fast, measured against exact by benchmarks/resize_quality.py: swscale's area
# average; full horizontal chroma interpolation halves the largest difference from exact
# at saturated edges.
_SWSCALE = av.video.reformatter.Interpolation
SWSCALE_INTERPOLATION = _SWSCALE.AREA | _SWSCALE.FULL_CHR_H_INT


# PyAV's display-matrix angle (counterclockwise) -> the turn that shows the frame upright.
_TURNS = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180,
          -180: Image.Transpose.ROTATE_180, -90: Image.Transpose.ROTATE_270}


def _upright(frame, orient: bool, info: Optional[dict],
             size: Optional[tuple[int, int]] = None) -> Image.Image:
    """A decoded video frame as an image, turned as its display matrix says (what a
    player shows) unless `orient` is off; `info` gets the turn applied, clockwise degrees,
    when the stream declares one. With `size` (H, W, upright), swscale scales the frame
    as it converts it to RGB: to W x H before a quarter turn, else to H x W."""
    angle = round(frame.rotation or 0)
    turn = _TURNS.get(angle) if angle and orient else None
    image = _rgb(frame, _size_before_turn(size, angle, turn))
    if angle and info is not None:
        info["rotation"] = (-angle) % 360 if turn is not None else 0
    if turn is not None:
        image = image.transpose(turn)
    return image


def _size_before_turn(size: Optional[tuple[int, int]], angle: int,
                      turn: Optional[Image.Transpose]) -> Optional[tuple[int, int]]:
    """The (H, W) to scale a frame to before it is turned `angle` degrees: `size`
    swapped for a quarter turn that is applied, else `size`."""
    if size is not None and abs(angle) == 90 and turn is not None:
        return size[::-1]
    return size


def _rgb(frame, size: Optional[tuple[int, int]]) -> Image.Image:
    """A decoded frame as an RGB image, scaled by swscale to `size` (H, W) as it is
    converted; as it is when `size` is None or its own."""
    if size is None or (frame.height, frame.width) == size:
        return frame.to_image()   # what --resize exact does, and any frame not resized
    return frame.to_image(height=size[0], width=size[1],
                          interpolation=SWSCALE_INTERPOLATION)


def _check_video_file(path: str) -> None:
    if paths.is_remote(path):
        return
    try:
        st = os.stat(path.removeprefix("file://"))
    except OSError as e:
        raise BadRecord(f"cannot read video {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadRecord(f"video {path} is not a regular file")


@contextlib.contextmanager
def _open_video(path: str) -> Iterator[tuple[Any, Any, float, int]]:
    """(container, its first video stream, frame rate, declared frame count); a
    BadRecord for a file PyAV cannot read, also when decoding fails inside the block."""
    _check_video_file(path)
    try:
        with fsspec.open(path, "rb") as f, av.open(f) as container:
            if not container.streams.video:
                raise BadRecord(f"{path} has no video stream")
            stream = container.streams.video[0]
            rate = float(stream.average_rate or stream.guessed_rate or 25)
            yield container, stream, rate, declared_frames(container, stream, rate)
    except BadRecord:  # a ValueError too, already saying what is wrong
        raise
    except (av.FFmpegError, OSError, ValueError) as e:
        raise BadRecord(f"cannot decode video {path}: {e}") from None


def video_images(path: str, fps: Optional[float] = None, info: Optional[dict] = None,
                 max_gap: float = DEFAULT_MAX_TIMESTAMP_GAP, orient: bool = True,
                 size: Optional[tuple[int, int]] = None
                 ) -> Iterator[tuple[Image.Image, float]]:
    """(RGB image, time in seconds from the first frame) of each frame of a video file,
    resampled to `fps` when given: for each time k / fps, the first frame at or after it
    (frames are dropped to lower the rate, repeated to raise it); turned upright as its
    display matrix says, unless `orient` is off, and scaled to `size` (H, W) as it is
    converted, when given (`_upright`). `info`, when given, gets the
    source's frame rate ("source_fps") and the turn applied ("rotation"), if any.

    Raises BadRecord when the file cannot be decoded, when it decodes fewer frames than
    its container declares (a file cut short), or, with `fps`, when a frame's time is
    more than `max_gap` seconds past the latest before it or past the declared duration
    (checked as each frame comes, before any copy of it is made).
    """
    with _open_video(path) as (container, stream, rate, declared):
        if info is not None:
            info["source_fps"] = round(rate, 6)
        stream.thread_type = "AUTO"
        end = declared_seconds(container, stream) if fps else None
        first, latest, next_time, decoded = None, 0.0, 0.0, 0
        for index, frame in enumerate(container.decode(stream)):
            decoded += 1
            time = frame.time if frame.time is not None else index / rate
            first = time if first is None else first
            time -= first
            if fps is None:
                yield _upright(frame, orient, info, size), time
                continue
            _check_time(time, latest, end, max_gap)
            latest, image = max(latest, time), None
            while next_time <= time + 1e-6:
                image = image or _upright(frame, orient, info, size)
                yield image, next_time
                next_time += 1.0 / fps
        _check_not_cut_short(decoded, declared, path)


def _check_not_cut_short(decoded: int, declared: int, path: str) -> None:
    """BadRecord when a video decoded fewer of the frames its container declares than a
    tolerance allows: the file is cut short or damaged."""
    if declared and decoded < declared - max(_SHORTFALL_FRAMES,
                                             _SHORTFALL_FRACTION * declared):
        raise BadRecord(f"decoded {decoded} of the {declared} frames that {path} "
                        "declares: the file is cut short or damaged")


def _check_time(time: float, latest: float, end: Optional[float], max_gap: float) -> None:
    """BadRecord when a frame at `time` would make resampling invent more than `max_gap`
    seconds (copies of it fill the time since the `latest` frame before it): a jump
    past `latest`, or a time past the declared `end`."""
    bound = f"over --max_timestamp_gap {max_gap:g} (raise it to keep the video)"
    if time - latest > max_gap:
        raise BadRecord(f"a timestamp jump of {_seconds(time - latest)} after "
                        f"{_seconds(latest)}: {bound}")
    if end is not None and time > end + max_gap:
        raise BadRecord(f"a frame stamped {_seconds(time)}, past the {_seconds(end)} the "
                        f"container declares by {_seconds(time - end)}: {bound}")


def _seconds(value: float) -> str:
    return f"{round(value, 3):g} s"


def declared_seconds(container, stream) -> Optional[float]:
    """The duration a container declares for its video stream, else for itself; None
    when it declares none."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / av.time_base
    return None


def declared_frames(container, stream, rate: float) -> int:
    """The frame count a container declares: its frame count, else duration x rate."""
    if stream.frames:
        return int(stream.frames)
    return round((declared_seconds(container, stream) or 0.0) * rate)


def video_length(path: str) -> tuple[int, float]:
    """(frames, seconds) a video file's container declares, from its header alone."""
    with _open_video(path) as (_, _, rate, declared):
        return declared, declared / rate
