"""The input files tests write: latent TFRecords (serialized tensors or FloatLists), frame
folders, video files (stamped or rotated), images with EXIF orientations, and manifests.
TensorFlow, PIL and PyAV are imported by the writers that use them."""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np


def latent_example(frames: np.ndarray, recipe: Optional[Sequence[float]] = None,
                   video_id: Optional[str] = None, float_list: bool = False) -> bytes:
    """One serialized-tensor record (docs/format.md), or one of a FloatList sequence."""
    import tensorflow as tf

    feature = {}
    if float_list:
        feature["frames"] = tf.train.Feature(float_list=tf.train.FloatList(value=frames.ravel()))
    else:
        feature["frames"] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[tf.io.serialize_tensor(frames).numpy()]))
    if recipe is not None:
        feature["recipe"] = tf.train.Feature(float_list=tf.train.FloatList(value=recipe))
    if video_id is not None:
        feature["vid"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[video_id.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path: str, records: Sequence[bytes], compression: str = "") -> str:
    import tensorflow as tf

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path, options=compression or None) as w:
        for r in records:
            w.write(r)
    return path


def random_videos(rng: np.random.Generator, count: int, lengths=(20, 60), dim: int = 3,
                  dtype=np.float32) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.standard_normal((int(rng.integers(*lengths)), dim)).astype(dtype),
             rng.random(4).astype(np.float32)) for _ in range(count)]


def write_videos(directory: str, videos, files: int = 2, **kwargs) -> list[str]:
    """Spread (frames, recipe) videos round-robin over `files` TFRecord files."""
    per_file = [[] for _ in range(files)]
    for i, (frames, recipe) in enumerate(videos):
        per_file[i % files].append(latent_example(frames, recipe, **kwargs))
    return [write_records(os.path.join(directory, f"lat-{i}.tfrecord"), recs)
            for i, recs in enumerate(per_file)]


def solid_frames(count: int, size=(24, 32), start: int = 0) -> list[np.ndarray]:
    """Frames whose every pixel is 8 * their index (index mod 32): easy to tell apart,
    even through a lossy video codec."""
    return [np.full((*size, 3), 8 * ((start + i) % 32), np.uint8) for i in range(count)]


def write_frame_folder(directory, frames, fmt: str = "png", name: str = "frame_{}") -> list[str]:
    from PIL import Image

    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, frame in enumerate(frames):
        path = os.path.join(str(directory), f"{name.format(i)}.{fmt}")
        Image.fromarray(frame).save(path, quality=95) if fmt == "jpg" else \
            Image.fromarray(frame).save(path)
        paths.append(path)
    return paths


def write_video(path, frames, codec: str = "libx264", rate: int = 10,
                options: Optional[dict] = None, times: Optional[Sequence[float]] = None) -> str:
    """A video file of `frames` at `rate`, or stamped at `times` (seconds, to the ms)."""
    import fractions

    import av

    h, w = frames[0].shape[:2]
    ms = fractions.Fraction(1, 1000)
    with av.open(str(path), "w", options=options or {}) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        if times is not None:
            stream.codec_context.time_base = ms
        for i, frame in enumerate(frames):
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            if times is not None:
                video_frame.pts, video_frame.time_base = round(times[i] * 1000), ms
            for packet in stream.encode(video_frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def marked_frame(height: int, width: int, mark: tuple[int, int] = (6, 6)) -> np.ndarray:
    """A grey frame whose top-left `mark` (rows, columns) is white: where it lands shows
    the turn."""
    frame = np.full((height, width, 3), 40, np.uint8)
    frame[:mark[0], :mark[1]] = 255
    return frame


def write_rotated_video(path, frame: np.ndarray, count: int = 4, rotation: float = -90) -> str:
    """An h264 file of `count` copies of `frame` whose display matrix turns it by
    `rotation` degrees (counterclockwise; -90: a portrait phone video)."""
    import av

    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = frame.shape[1], frame.shape[0], "yuv420p"
        stream.set_display_rotation(rotation)
        for _ in range(count):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return str(path)


# Pillow's exif_transpose turns orientation o by the inverse of _INVERSE[o]: an image
# stored turned by _INVERSE[o], with EXIF orientation o, is shown upright.
_INVERSE = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
            6: "ROTATE_90", 7: "TRANSVERSE", 8: "ROTATE_270"}


def write_oriented_images(directory, upright, suffix: str, **save) -> None:
    """`directory`/f{o}.{suffix} for EXIF orientations o = 1 to 8: the Pillow image
    `upright` stored turned so that each is shown as `upright` is."""
    from PIL import Image

    os.makedirs(directory, exist_ok=True)
    for o in range(1, 9):
        stored = upright if o == 1 else upright.transpose(getattr(Image.Transpose,
                                                                 _INVERSE[o]))
        exif = Image.Exif()
        exif[0x0112] = o
        stored.save(os.path.join(str(directory), f"f{o}.{suffix}"), exif=exif, **save)


def write_manifest(path, rows: list[dict]) -> str:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)
