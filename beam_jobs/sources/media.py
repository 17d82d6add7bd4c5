"""Frames from images (Pillow), and how every frame is stored: converted, resized,
checked. Video files are decoded by beam_jobs/sources/video_files.py (PyAV).

Every path is opened through fsspec, so local, gs://, s3:// and memory:// paths work
alike. What is never silently changed:

- 16-bit images (Pillow modes I;16*) are scaled to 8 bits by their bit depth, not
  clipped; 32-bit integer and float images fail the frame (their range is unknown).
- Alpha is dropped without compositing (RGBA -> RGB, LA -> L); palette images are
  expanded through their palette.
- A path that is not a regular file (a FIFO, a device) or that is larger than
  --max_frame_bytes is not read.

Resizing (--resize): `exact` decodes every frame at full size and resamples it with
Lanczos; `fast` lets the decoder do most of the shrinking (a JPEG's DCT scaling, an
integer `reduce` of other images, swscale scaling a video frame as it converts it to
RGB), then resamples the rest, within 35 dB of exact (docs/benchmarks.md). Frames that
are not resized are the same bytes either way.
"""
from __future__ import annotations

import dataclasses
import io
import os
import stat
from typing import Any, NamedTuple, Optional

import fsspec
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from beam_jobs.core import paths
from beam_jobs.core.configs import DEFAULT_MAX_FRAME_BYTES
from beam_jobs.core.frames import BadRecord

JPEG_MAGIC = b"\xff\xd8"
PNG_COMPRESS_LEVEL = 1  # zlib level 1: most of level 6's size at a fraction of its time
_DEEP_MODES = ("I;16", "I;16B", "I;16L", "I;16N")
# --resize fast, measured against exact by benchmarks/resize_quality.py: reduce by the
# largest integer factor that keeps the image at least the frame size, then Lanczos
# (Pillow's reducing_gap 1.0). Video frames: beam_jobs/sources/video_files.py.
_REDUCING_GAP = 1.0


class Stored(NamedTuple):
    """A frame as the dataset stores it, and its pixels' histogram (`histogram`)."""
    data: Any               # raw uint8 [H, W, C], or the encoded image's bytes
    histogram: np.ndarray   # int64 [C, 256]


def histogram(image: Image.Image) -> np.ndarray:
    """Per channel, how many pixels take each value 0..255: int64 [C, 256], Pillow's
    one pass in C (about 0.16 ms for 270x480 RGB, against 0.5 ms to make it an array
    first). Before JPEG compression, for an encoded frame: what the dataset's statistics
    count (docs/format.md)."""
    return np.asarray(image.histogram(), np.int64).reshape(len(image.getbands()), 256)


class BadFrame(ValueError):
    """One frame that cannot be used; masked, or failing its video with --on_bad_frame fail."""


@dataclasses.dataclass(frozen=True)
class FrameCodec:
    """How one decoded image becomes a stored frame of the dataset.

    `size` (H, W) is the frame size of the dataset: images of another size are resized
    to it when `resize` is set (--frame_size), else the video fails; `fast_resize`
    (--resize fast) lets the decoders shrink them first (module docstring). `orient`: an
    image's EXIF orientation is applied first (not with --keep_orientation); a stored
    JPEG never keeps its EXIF block, which a reader could apply a second time.
    """
    size: tuple[int, int]
    channels: int = 3
    encoding: str = "jpeg"
    jpeg_quality: int = 90
    resize: bool = False
    orient: bool = True
    fast_resize: bool = False

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return (*self.size, self.channels)

    def store_bytes(self, data: bytes) -> Stored:
        """An encoded image file -> the stored frame and its histogram; BadFrame for
        undecodable bytes.

        A JPEG already of the dataset's size and mode is kept as it is when the dataset
        stores JPEG (decoded once to check it, never re-encoded: the histogram is of
        exactly the pixels a reader decodes).
        """
        image, draft = self._decoded(data)
        if draft is not None:   # resampled the rest of the way, before it is turned
            size, box = draft
            image = image.resize(size, Image.Resampling.LANCZOS, box=box,
                                 reducing_gap=_REDUCING_GAP)
        turned = self.oriented(image)
        if (self.encoding == "jpeg" and data[:2] == JPEG_MAGIC and image.mode == self.mode
                and turned is image and image.size == self.size[::-1] and draft is None):
            return Stored(without_exif(data), histogram(image))
        return self.store_image(turned)

    def _decoded(self, data: bytes
                 ) -> tuple[Image.Image, Optional[tuple[tuple[int, int], tuple]]]:
        """An image file's bytes decoded (at a JPEG's draft scale, `_draft`, returned
        too); BadFrame for bytes Pillow cannot decode, or an animated image."""
        try:
            image: Image.Image = Image.open(io.BytesIO(data))
            draft = self._draft(image)
            image.load()
        except UnidentifiedImageError:
            raise BadFrame("not an image file Pillow can decode") from None
        except Exception as e:  # Pillow raises many kinds
            raise BadFrame(f"cannot decode the image: {type(e).__name__}: {e}") from None
        frames = getattr(image, "n_frames", 1)
        if frames > 1:   # Pillow would give its first frame alone
            raise BadFrame(f"an animated image of {frames} frames is a video, not a frame: "
                           "give it as a video file")
        return image, draft

    def _draft(self, image: Image.Image) -> Optional[tuple[tuple[int, int], tuple]]:
        """With --resize fast, asks a JPEG's decoder (before it decodes) for the smallest
        DCT scale, 1/2 to 1/8, that still gives at least the frame size, when the frame
        is at most half the image each way. Then (the frame size as the image lies, the
        box of the scaled image that holds the picture), else None. The frame size is
        turned as the EXIF orientation (read from the header) will turn the image. The
        box: where the image is not a multiple of the scale, the scaled image has a
        partial pixel row or column more (left out, a 1/8-scale frame is 7 dB further
        from exact)."""
        if not (self.fast_resize and self.resize and image.format == "JPEG"):
            return None
        width, height = self.size[::-1]
        if self.orient and image.getexif().get(EXIF_ORIENTATION, 1) in _TRANSPOSING:
            width, height = height, width
        if image.width < 2 * width or image.height < 2 * height:
            return None
        drafted = image.draft(self.mode, (width, height))
        return None if drafted is None else ((width, height), drafted[1])

    def oriented(self, image: Image.Image) -> Image.Image:
        """The image as a viewer shows it (its EXIF orientation applied), unless
        `orient` is off; the image itself when it needs no turn."""
        if not self.orient or image.getexif().get(EXIF_ORIENTATION, 1) in (1, None):
            return image
        return ImageOps.exif_transpose(image)

    def store(self, image: Image.Image) -> Any:
        """A Pillow image -> raw uint8 [H, W, C] or encoded bytes, per the encoding."""
        return self._encoded(self._prepared(image))

    def store_image(self, image: Image.Image) -> Stored:
        """A Pillow image -> the stored frame and the histogram of its pixels (before
        compression, for JPEG)."""
        image = self._prepared(image)
        return Stored(self._encoded(image), histogram(image))

    def _prepared(self, image: Image.Image) -> Image.Image:
        """The image in the dataset's mode and size: the pixels stored."""
        image = to_mode(image, self.mode)
        if image.size != self.size[::-1]:
            if not self.resize:
                raise BadRecord(f"a frame is {image.height}x{image.width}, the dataset's frames "
                                f"are {self.size[0]}x{self.size[1]}; pass --frame_size HxW "
                                "to resize")
            image = image.resize(self.size[::-1], Image.Resampling.LANCZOS,
                                 reducing_gap=_REDUCING_GAP if self.fast_resize else None)
        return image

    def _encoded(self, image: Image.Image) -> Any:
        """A prepared image as the encoding stores it."""
        if self.encoding == "raw":
            return np.asarray(image, dtype=np.uint8).reshape(self.frame_shape)
        buffer = io.BytesIO()
        if self.encoding == "png":
            image.save(buffer, "PNG", compress_level=PNG_COMPRESS_LEVEL)
        else:
            image.save(buffer, "JPEG", quality=self.jpeg_quality)
        return buffer.getvalue()

    def video_scale(self) -> Optional[tuple[int, int]]:
        """The (H, W) that video frames are scaled to as they are decoded (--resize
        fast with --frame_size), else None: full size, resized by `store`."""
        return self.size if self.resize and self.fast_resize else None

    def padding(self) -> Any:
        """The stored form of an all-zero frame (missing frames and padding)."""
        return self.store(Image.new(self.mode, self.size[::-1]))


def to_mode(image: Image.Image, mode: str) -> Image.Image:
    """`image` in mode RGB or L; 16-bit images scaled to 8 bits by their depth."""
    if image.mode in _DEEP_MODES:
        deep = np.asarray(image).astype(np.uint32)
        image = Image.fromarray(((deep * 255 + 32767) // 65535).astype(np.uint8), "L")
    elif image.mode in ("I", "F"):
        raise BadFrame(f"a {'32-bit integer' if image.mode == 'I' else 'float'} image: its "
                       "value range is unknown; convert it to 8 or 16 bits")
    return image if image.mode == mode else image.convert(mode)


def read_bytes(path: str, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; BadFrame otherwise."""
    if not paths.is_remote(path):
        local = path.removeprefix("file://")
        try:
            st = os.stat(local)
        except OSError as e:
            raise BadFrame(f"cannot read {path}: {e.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise BadFrame(f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise BadFrame(f"{path} is {st.st_size:,} bytes, over --max_frame_bytes {max_bytes:,}")
    try:
        with fsspec.open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except (OSError, ValueError) as e:
        raise BadFrame(f"cannot read {path}: {type(e).__name__}: {e}") from None
    if len(data) > max_bytes:
        raise BadFrame(f"{path} is over --max_frame_bytes {max_bytes:,}")
    return data


def open_image(path: str, max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
               codec: Optional[FrameCodec] = None) -> Image.Image:
    """A decoded image, for looking at its size: as `codec` orients it, when given."""
    image = Image.open(io.BytesIO(read_bytes(path, max_bytes)))
    image.load()
    return codec.oriented(image) if codec is not None else image


EXIF_ORIENTATION = 0x0112
_TRANSPOSING = (5, 6, 7, 8)   # EXIF orientations that swap width and height
_APP1 = b"\xff\xe1"


def without_exif(data: bytes) -> bytes:
    """A JPEG file's bytes without its EXIF segments (APP1 `Exif`), the image data
    untouched: segments before the scan are walked by their lengths."""
    out, at = [data[:2]], 2
    while at + 4 <= len(data) and data[at] == 0xFF and data[at + 1] not in (0xD9, 0xDA):
        end = at + 2 + int.from_bytes(data[at + 2:at + 4], "big")
        if not (data[at:at + 2] == _APP1 and data[at + 4:at + 10] == b"Exif\x00\x00"):
            out.append(data[at:end])
        at = end
    out.append(data[at:])
    return b"".join(out)
