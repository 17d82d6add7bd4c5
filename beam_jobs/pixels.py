"""Pixel videos: frame folders and video files, decoded one frame at a time."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator, Optional

import numpy as np

from beam_jobs import media
from beam_jobs.manifest import VideoEntry, expand_frames, load_labels
from beam_jobs.video import BadRecord, Frame


@dataclasses.dataclass(frozen=True)
class PixelFormat:
    """What every pixel video of the dataset must look like, and how to decode it."""
    codec: media.FrameCodec
    label_shape: Optional[tuple[int, ...]] = None   # () or (C,); None: no labels
    metadata_length: int = 0
    fps: Optional[float] = None
    max_frames: Optional[int] = None
    on_bad_frame: str = "mask"                     # or "fail"


@dataclasses.dataclass(frozen=True)
class PixelVideo:
    """A manifest entry to be decoded; a video for `examples.CutWindows`."""
    entry: VideoEntry
    fmt: PixelFormat

    @property
    def video_id(self) -> str:
        return self.entry.video_id

    @property
    def source(self) -> str:
        return self.entry.video or self.entry.source

    @property
    def record_index(self) -> Optional[int]:
        return None if self.entry.video else self.entry.record_index

    @property
    def split(self) -> Optional[str]:
        return self.entry.split

    @property
    def metadata(self) -> Optional[np.ndarray]:
        if not self.fmt.metadata_length:
            return None
        return np.asarray(self.entry.metadata, dtype=np.float32)

    def frames(self) -> Iterator[Frame]:
        """Stored frames with their labels; raises BadRecord when the video is unusable."""
        fmt = self.fmt
        labels = self._labels()
        metadata = self.entry.metadata or ()
        if len(metadata) != fmt.metadata_length:
            raise BadRecord(f"metadata has {len(metadata)} values, expected "
                            f"{fmt.metadata_length}")
        zero_label = None if labels is None else np.zeros(fmt.label_shape, np.float32)
        pad = None
        count = readable = 0
        for count, stored in enumerate(self._stored_frames(), start=1):
            if labels is not None and count > len(labels):
                raise BadRecord(f"{len(labels)} labels, but the video has more frames")
            if stored is None:
                pad = fmt.codec.padding() if pad is None else pad
                yield Frame(pad, False, zero_label)
            else:
                readable += 1
                yield Frame(stored, True, None if labels is None else labels[count - 1])
            if count == fmt.max_frames:
                break
        if labels is not None and count < len(labels) and count != fmt.max_frames:
            raise BadRecord(f"{len(labels)} labels for {count} frames")
        if not readable:
            raise BadRecord("no readable frame" if count else "no frames")

    def _labels(self) -> Optional[np.ndarray]:
        if self.fmt.label_shape is None:
            return None
        if self.entry.labels is None:
            raise BadRecord("no labels (the dataset's videos have labels)")
        labels = load_labels(self.entry.labels)
        if labels.shape[1:] != self.fmt.label_shape:
            raise BadRecord(f"labels are {_per_frame(labels.shape[1:])} per frame, the "
                            f"dataset's are {_per_frame(self.fmt.label_shape)}")
        return labels

    def _stored_frames(self) -> Iterator[Any]:
        """Each frame as stored, or None for a missing or unreadable image."""
        codec = self.fmt.codec
        if self.entry.video:
            for image in media.video_images(self.entry.video, self.fmt.fps):
                yield codec.store(image)
            return
        for path in expand_frames(self.entry.frames):
            try:
                stored = codec.store_bytes(media.read_bytes(path))
            except BadRecord:
                raise
            except Exception as e:  # Pillow and fsspec raise many kinds
                if self.fmt.on_bad_frame == "fail":
                    raise BadRecord(f"frame {path}: {type(e).__name__}: {e}") from None
                stored = None
            yield stored


def _per_frame(shape: tuple[int, ...]) -> str:
    return f"{shape[0]} values" if shape else "one number"


def video_file_entries(paths: list[str]) -> list[VideoEntry]:
    """A glob of video files as entries: the id is the file stem."""
    return [VideoEntry(os.path.splitext(os.path.basename(p))[0], p, i, None, p, None, None,
                       None) for i, p in enumerate(paths)]


def probe_pixel_format(entries: list[VideoEntry], fmt: PixelFormat,
                       max_entries: int = 20) -> PixelFormat:
    """Pin frame size (unless resizing), label shape and metadata length to the first
    entry with a readable frame. Raises BadRecord with the last reason when none has."""
    reason = "no videos"
    for entry in entries[:max_entries]:
        try:
            image = _first_image(entry)
            label_shape = None if entry.labels is None else load_labels(entry.labels).shape[1:]
        except BadRecord as e:
            reason = f"{entry.video_id}: {e}"
            continue
        except Exception as e:
            reason = f"{entry.video_id}: {type(e).__name__}: {e}"
            continue
        codec = fmt.codec if fmt.codec.resize else dataclasses.replace(
            fmt.codec, size=(image.height, image.width))
        return dataclasses.replace(fmt, codec=codec, label_shape=label_shape,
                                   metadata_length=len(entry.metadata or ()))
    raise BadRecord(f"none of the first {min(len(entries), max_entries)} videos has a "
                    f"readable frame; last: {reason}")


def _first_image(entry: VideoEntry):
    if entry.video:
        for image in media.video_images(entry.video):
            return image
        raise BadRecord("no frames")
    for path in expand_frames(entry.frames):
        try:
            return media.open_image(path)
        except Exception:
            continue
    raise BadRecord("no readable frame")
