"""Frames from images (Pillow) and video files (PyAV): resized, checked, stored.

Every path is opened through fsspec, so local, gs://, s3:// and memory:// paths work alike.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Any, Iterator, Optional

import av
import fsspec
import numpy as np
from PIL import Image

from beam_jobs.video import BadRecord

JPEG_MAGIC = b"\xff\xd8"
PNG_COMPRESS_LEVEL = 1  # zlib level 1: most of level 6's size at a fraction of its time


@dataclasses.dataclass(frozen=True)
class FrameCodec:
    """How one decoded image becomes a stored frame of the dataset.

    `size` (H, W) is the frame size of the dataset: images of another size are resized
    to it when `resize` is set (--frame_size), else the video fails.
    """
    size: tuple[int, int]
    channels: int = 3
    encoding: str = "jpeg"
    jpeg_quality: int = 90
    resize: bool = False

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return (*self.size, self.channels)

    def store_bytes(self, data: bytes) -> Any:
        """An encoded image file -> the stored frame; raises on undecodable bytes.

        A JPEG already of the dataset's size and mode is kept as it is when the dataset
        stores JPEG (decoded once to check it, never re-encoded).
        """
        image = Image.open(io.BytesIO(data))
        if (self.encoding == "jpeg" and data[:2] == JPEG_MAGIC and image.mode == self.mode
                and image.size == self.size[::-1]):
            image.load()
            return data
        return self.store(image)

    def store(self, image: Image.Image) -> Any:
        """A Pillow image -> raw uint8 [H, W, C] or encoded bytes, per the encoding."""
        if image.mode != self.mode:
            image = image.convert(self.mode)
        if image.size != self.size[::-1]:
            if not self.resize:
                raise BadRecord(f"a frame is {image.height}x{image.width}, the dataset's frames "
                                f"are {self.size[0]}x{self.size[1]}; pass --frame_size HxW "
                                "to resize")
            image = image.resize(self.size[::-1], Image.Resampling.LANCZOS)
        if self.encoding == "raw":
            return np.asarray(image, dtype=np.uint8).reshape(self.frame_shape)
        buffer = io.BytesIO()
        if self.encoding == "png":
            image.save(buffer, "PNG", compress_level=PNG_COMPRESS_LEVEL)
        else:
            image.save(buffer, "JPEG", quality=self.jpeg_quality)
        return buffer.getvalue()

    def padding(self) -> Any:
        """The stored form of an all-zero frame (missing frames and padding)."""
        return self.store(Image.new(self.mode, self.size[::-1]))


def read_bytes(path: str) -> bytes:
    with fsspec.open(path, "rb") as f:
        return f.read()


def open_image(path: str) -> Image.Image:
    """A decoded image, for looking at its size."""
    image = Image.open(io.BytesIO(read_bytes(path)))
    image.load()
    return image


def video_images(path: str, fps: Optional[float] = None) -> Iterator[Image.Image]:
    """The frames of a video file as RGB images, resampled to `fps` when given.

    Resampling keeps, for each target time k / fps, the first frame at or after it:
    frames are dropped to lower the rate and repeated to raise it.
    """
    try:
        with fsspec.open(path, "rb") as f, av.open(f) as container:
            if not container.streams.video:
                raise BadRecord(f"{path} has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            rate = float(stream.average_rate or stream.guessed_rate or 25)
            next_time = 0.0
            for index, frame in enumerate(container.decode(stream)):
                if fps is None:
                    yield frame.to_image()
                    continue
                time = frame.time if frame.time is not None else index / rate
                image = None
                while next_time <= time + 1e-6:
                    image = image or frame.to_image()
                    yield image
                    next_time += 1.0 / fps
    except BadRecord:  # a ValueError too, already saying what is wrong
        raise
    except (av.FFmpegError, OSError, ValueError) as e:
        raise BadRecord(f"cannot decode video {path}: {e}") from None
