"""Small datasets written through readers/format alone (its writer core, the job's),
with numpy: no Beam, no TensorFlow, nothing of beam_jobs/. For the reader tests that
need no job (tests/readers_only/).

`write_dataset(out, videos, *flags)` writes what the job writes for the same videos and
flags: the shards (each split's windows in key order, cut into shards whose counts differ
by at most one), their offset indexes and window tables, the videos and failures files,
dataset.json (`DatasetSpec.to_json`, statistics included) and dataset_info.json, byte for
byte; tests/test_format_datasets.py checks that against the job for every kind of
`KIND_FLAGS`. Three things a reader never reads are the job's to know: the flags
dataset.json records (by default only those given here), the job's version (none unless
`job_version` is given) and each video's content digest in the videos file (empty unless
`digest` is given). Every dataset written passes `--verify`.

`kinds(root)` writes the small datasets of conftest.py's KINDS (but bfloat16, whose
arrays need TensorFlow or ml_dtypes) from the same videos (`kind_videos`).
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import uuid
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from readers import format as data_format
from readers.format import dataset_json, tfds_info, video_rows, writer
from readers.format.frame_stats import StoredFrameStats
from readers.format.keys import assign_split, parse_splits
from readers.format.moments import ExactMoments
from readers.format.windows import Window
from readers.format.writer import VideoWindows, WindowRecord

PNG_COMPRESS_LEVEL = 1   # beam_jobs/sources/media.py's: what the job stores PNG frames with


@dataclasses.dataclass(frozen=True)
class Video:
    """One input video, as the job reads it: `frames` [T, ...] latents, or uint8 pixels
    [T, H, W, C]; per-frame `labels` [T] or [T, C] and `metadata` [K] (float32) where
    the input has them. `split` None: the job's hash of (seed, id) decides. `source` and
    `record_index` are what the videos file says it came from, `fields` its manifest
    row's own keys (None: it has no manifest row)."""
    video_id: str
    frames: np.ndarray
    metadata: Optional[np.ndarray] = None
    labels: Optional[np.ndarray] = None
    split: Optional[str] = None
    source: str = ""
    record_index: Optional[int] = None
    fields: Optional[dict] = dataclasses.field(default=None, hash=False)


def _flags(argv: Sequence[str]) -> argparse.Namespace:
    """The job's flags this writer takes, with the job's defaults."""
    parser = argparse.ArgumentParser(prog="format_datasets", allow_abbrev=False)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--stride", type=int)
    parser.add_argument("--tail", default="align_end")
    parser.add_argument("--splits", type=parse_splits, default={"train": 1.0})
    parser.add_argument("--num_shards", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--frame_encoding", default="jpeg")
    parser.add_argument("--jpeg_quality", type=int, default=90)
    parser.add_argument("--homepage")
    flags = parser.parse_args([str(a) for a in argv])
    flags.stride = flags.stride or flags.window
    return flags


def _encoded(frame: np.ndarray, encoding: str, quality: int) -> bytes:
    """A uint8 [H, W, C] frame as the job stores it: PNG or JPEG bytes by Pillow."""
    from PIL import Image

    image = Image.fromarray(frame[..., 0] if frame.shape[-1] == 1 else frame)
    buffer = io.BytesIO()
    if encoding == "png":
        image.save(buffer, "PNG", compress_level=PNG_COMPRESS_LEVEL)
    else:
        image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


class _Cut:
    """The features of a dataset of `videos` and each video's windows as examples."""

    def __init__(self, videos: Sequence[Video], flags: argparse.Namespace):
        first = videos[0]
        self.flags = flags
        self.pixels = first.frames.dtype == np.uint8 and first.frames.ndim == 4
        length = flags.window
        frame_shape = tuple(first.frames.shape[1:])
        if self.pixels:
            window = data_format.FeatureSpec("window", (length, *frame_shape), "uint8",
                                             flags.frame_encoding)
        else:
            window = data_format.FeatureSpec.for_array("window", (length, *frame_shape),
                                                       first.frames.dtype.name)
        self.label_shape = None if first.labels is None else tuple(first.labels.shape[1:])
        self.features = data_format.window_features(
            window, 0 if first.metadata is None else len(first.metadata), self.label_shape)
        self.encoded = window.encoding in data_format.IMAGE_ENCODINGS
        self.encode = data_format.ExampleEncoder(self.features)
        self.window = Window(flags.window, flags.stride, flags.tail)

    def starts(self, video: Video) -> list[int]:
        return self.window.starts(len(video.frames))

    def records(self, video: Video, starts: list[int], stats: StoredFrameStats
                ) -> Iterator[WindowRecord]:
        """The record of each window, its frames' statistics added to `stats` as the job
        adds them (a latent sequence in one pass, pixels and labels a window at a
        time)."""
        length, frames = self.flags.window, video.frames
        windows = VideoWindows(self.flags.seed, video.video_id, video.metadata,
                               lambda key, values: self.encode(values))
        whole = not self.pixels and video.labels is None   # the job's one-pass case
        if whole:
            stats.add_sequence(frames, starts, length)
        stored = ([_encoded(frame, self.flags.frame_encoding, self.flags.jpeg_quality)
                   for frame in frames] if self.encoded else None)
        pad = (_encoded(np.zeros(frames.shape[1:], np.uint8), self.flags.frame_encoding,
                        self.flags.jpeg_quality) if self.encoded else None)
        for start in starts:
            real = min(length, len(frames) - start)
            labels = (None if video.labels is None
                      else video.labels[start:start + real].astype(np.float32))
            values = writer.window_values(frames[start:start + real], length, labels=labels)
            if not whole:
                stats.add_window(start, list(frames[start:start + real]), values)
            if self.encoded:
                values["window"] = writer.window_values(
                    stored[start:start + real], length, pad_frame=pad)["window"]
            yield windows.record(start, values)


def _write(out: str, name: str, data: bytes) -> None:
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def _frame(cut: _Cut, video: Video, flags: argparse.Namespace) -> dict:
    """dataset.json's `frame`, as the latent and the pixel sources write it."""
    shape = list(video.frames.shape[1:])
    if not cut.pixels:
        return {"kind": "latents", "shape": shape, "dtype": video.frames.dtype.name}
    return {"kind": "pixels", "shape": shape, "dtype": "uint8",
            "channel_order": "RGB" if shape[-1] == 3 else "L", "value_range": [0, 255],
            "encoding": flags.frame_encoding, "resized": False, "resampled_fps": None}


def write_dataset(out, videos: Sequence[Video], *argv: str, run_id: Optional[str] = None,
                  recorded_flags: Optional[dict] = None, label_names: Optional[list] = None,
                  digest: Optional[Callable[[Video], str]] = None,
                  job_version: Optional[str] = None) -> str:
    """Write the dataset the job writes into `out` for `videos` and the job's flags
    `argv` (--window, --stride, --tail, --splits, --num_shards, --seed, --compression,
    --frame_encoding, --jpeg_quality, --homepage); its path. Every video has windows or
    is too short (no bad frames, no failures). `recorded_flags`: the flags dataset.json
    records (default: those given); `label_names`: the labels' header; `digest`: each
    video's content digest in the videos file (default: none); `job_version`: the job's
    version dataset.json records (default: none)."""
    flags = _flags(argv)
    out = str(out)
    os.makedirs(out, exist_ok=True)
    run_id = run_id or uuid.uuid4().hex[:12]
    cut = _Cut(videos, flags)
    records = {split: [] for split in flags.splits}
    counts = {split: dict(videos=0, windows=0, skipped_short=0, frames=0, bad_frames=0)
              for split in flags.splits}
    totals = {split: {} for split in flags.splits}
    rows = []
    for video in videos:
        split = video.split or assign_split(flags.seed, video.video_id, flags.splits)
        starts = cut.starts(video)
        stats = StoredFrameStats(cut.features, pixels=False)
        records[split] += cut.records(video, starts, stats)
        for name, moments in stats.result().items():   # added exactly, as the job adds them
            exact = ExactMoments.of(moments)
            totals[split][name] = (totals[split][name].merge(exact) if name in totals[split]
                                   else exact)
        counts[split]["videos" if starts else "skipped_short"] += 1
        counts[split]["windows"] += len(starts)
        counts[split]["frames"] += len(video.frames)
        rows.append({"video_id": video.video_id, "split": split, "source": video.source,
                     "record_index": video.record_index, "frames": len(video.frames),
                     "windows": len(starts), "bad_frames": 0, "source_fps": None,
                     "digest": digest(video) if digest else "",
                     "metadata": video_rows.metadata_values(video.metadata),
                     "fields": video.fields or {}})
    sidecars = {kind: data_format.sidecar_name(kind, run_id) for kind in ("videos", "failures")}
    lines = sorted(((row["split"], row["video_id"]), json.dumps(row, sort_keys=True) + "\n")
                   for row in rows)
    _write(out, sidecars["videos"], "".join(line for _, line in lines).encode("utf-8"))
    _write(out, sidecars["failures"], b"")
    splits = {}
    for split in flags.splits:
        shards, files = writer.split_files(split, records[split], flags.num_shards or 1,
                                           flags.compression, run_id)
        for name, data in files.items():
            _write(out, name, data)
        splits[split] = data_format.SplitInfo(**counts[split], shards=shards)
    given = {name: getattr(flags, name) for name in (
        "window", "stride", "tail", "splits", "num_shards", "seed", "compression",
        *(("frame_encoding", "jpeg_quality") if cut.pixels else ()), "homepage")}
    spec = dataset_json.run_dataset(
        window=cut.window,
        features=cut.features, compression=flags.compression, splits=splits,
        generation=data_format.Generation(
            run_id, sum(c["videos"] for c in counts.values()),
            sum(c["windows"] for c in counts.values()),
            sum(c["skipped_short"] for c in counts.values()), 0, 0, job_version,
            data_format.FORMAT_VERSION),
        sidecars=list(sidecars.values()),
        stats={split: {name: moments.stats() for name, moments in totals[split].items()}
               for split in flags.splits},
        flags=recorded_flags if recorded_flags is not None else given,
        job_version=job_version, input_kind="manifest" if cut.pixels else "latents",
        frame=_frame(cut, videos[0], flags),
        labels=None if cut.label_shape is None else {
            "shape": list(cut.label_shape), "names": label_names, "masked_value": 0.0})
    _write(out, data_format.DATASET_JSON, spec.to_json().encode("utf-8"))
    for name, data in tfds_info.files(spec).items():
        _write(out, name, data)
    assert_sound(out)
    return out


def assert_sound(out: str) -> None:
    """`readers.inspect --verify` finds nothing wrong with the dataset in `out`."""
    from readers.inspect.verify import verify

    problems = verify(out, data_format.load_spec(out))
    assert not problems, problems[:5]


# The flags of each kind of conftest.py's KINDS (windows of 4 every 2) but bfloat16.
KIND_FLAGS = {
    "latent": ["--splits", "train=0.6,test=0.39,empty=0.01", "--num_shards", "2"],
    "gzip": ["--compression", "gzip"],
    "float16": ["--num_shards", "2"],
    "long": ["--num_shards", "2"],
    "raw": ["--frame_encoding", "raw", "--num_shards", "2"],
    "png": ["--frame_encoding", "png", "--num_shards", "2",
            "--homepage", "https://example.org/cams?q=1&r=é"],
    "jpeg": ["--frame_encoding", "jpeg"],
}
LABEL_NAMES = ["heat", "smoke"]   # the pixel kinds' labels' header


def _latents(rng: np.random.Generator, count: int, lengths: tuple[int, int], dim: int = 3
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """input_files.random_videos's draws: (frames float32 [T, dim], recipe float32 [4])."""
    return [(rng.standard_normal((int(rng.integers(*lengths)), dim)).astype(np.float32),
             rng.random(4).astype(np.float32)) for _ in range(count)]


def kind_videos(root: str = "") -> dict[str, list]:
    """The videos of KINDS's inputs, as conftest.py writes them under `root` (the job's
    inputs) and `kinds` cuts them: "lat" (10 latent videos of 12 to 39 frames), "half"
    (3, float16), "brain" (2, float32: bfloat16 in the job's input), "longin" (12 of 150
    to 299 frames, ids of one and two digits), "pixels" (videos a and b of 7 and 9
    frames 24x32, labels heat and smoke, metadata [1.5, i], fields camera and site).
    Latent videos are spread round-robin over two files (one for half, brain, longin)
    as input_files.write_videos spreads them; their ids are the job's, `FILE:RECORD`."""
    rng = np.random.default_rng(5)
    drawn = {"lat": (_latents(rng, 10, (12, 40)), 2), "half": (_latents(rng, 3, (12, 20)), 1),
             "brain": (_latents(rng, 2, (10, 16)), 1), "longin": (_latents(rng, 12, (150, 300)), 1)}
    made = {}
    for name, (videos, files) in drawn.items():
        dtype = np.float16 if name == "half" else np.float32
        made[name] = [Video(f"lat-{i % files}.tfrecord:{i // files}", frames.astype(dtype),
                            recipe, source=os.path.join(root, name, f"lat-{i % files}.tfrecord"),
                            record_index=i // files)
                      for i, (frames, recipe) in enumerate(videos)]
    made["pixels"] = []
    for i, (video, length) in enumerate((("a", 7), ("b", 9))):
        frames = rng.integers(0, 255, (length, 24, 32, 3), np.uint8)
        labels = np.stack([np.arange(length), 2 * np.arange(length) + i], 1).astype(np.float32)
        made["pixels"].append(Video(video, frames, np.array([1.5, i], np.float32), labels,
                                    source=os.path.join(root, "m.jsonl"), record_index=i,
                                    fields={"camera": f"cam{i}", "site": "Köln"}))
    return made


_KIND_INPUT = {"latent": "lat", "gzip": "lat", "float16": "half", "long": "longin",
               "raw": "pixels", "png": "pixels", "jpeg": "pixels"}


def write_kind(out, name: str, videos: dict, **options) -> str:
    """KINDS's dataset `name` from `kind_videos`, written into `out`."""
    return write_dataset(out, videos[_KIND_INPUT[name]], "--window", "4", "--stride", "2",
                         *KIND_FLAGS[name],
                         label_names=LABEL_NAMES if _KIND_INPUT[name] == "pixels" else None,
                         **options)


def kinds(root) -> dict[str, str]:
    """Every kind of KIND_FLAGS written under `root`: name -> path."""
    videos = kind_videos()
    return {name: write_kind(os.path.join(str(root), name), name, videos)
            for name in KIND_FLAGS}
