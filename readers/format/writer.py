"""How windows become a dataset's bytes, in one place: a window's values (its frames
padded, its mask, its labels), its tf.train.Example (`ExampleEncoder`, over
wire.py's fields), a window as a record (its example, its sort key and its
window table columns), a shard's side files and the `Shard` dataset.json lists, and a
plain shard writer.

The Beam job and a plain writer share this core, as TensorFlow Datasets' `BeamWriter`
and its `Writer` share theirs: the job's DoFns (beam_jobs/cut/examples.py,
beam_jobs/shuffle) are thin wrappers that move records and write files through Beam's
storage, and tests/format_datasets.py writes the same bytes for the same videos with
numpy alone (tests/test_format_datasets.py checks every file against job runs).
"""
from __future__ import annotations

import functools
import zlib
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from readers.format import index, tfrecord, window_table
from readers.format.feature import Feature
from readers.format.keys import window_key
from readers.format.names import index_name, shard_name, table_name
from readers.format.splits import Shard
from readers.format.tfrecord import FRAME_OVERHEAD
from readers.format.wire import field, header


class WindowRecord(NamedTuple):
    """One window as its shard holds it. Records sort as a split's shards hold them: by
    key, then by example bytes (a 64-bit key collision)."""
    key: int       # window_key(seed, video id, start): its place in its split's shards
    example: bytes # its serialized tf.train.Example
    video: int     # window_table.video_hash(video id): its row of the window table
    valid: int     # its real frames (its mask's 1s): its row of the window table


def encode_example(features: Sequence[Feature], values: Mapping[str, Any]) -> bytes:
    """Serialize one window as a tf.train.Example; `values` holds one value per feature
    (`ExampleEncoder`, for one example: a writer of many keeps an encoder)."""
    return ExampleEncoder(features)(values)


class ExampleEncoder:
    """Serializes windows of `features` as tf.train.Example, giving the bytes
    TensorFlow's `SerializeToString(deterministic=True)` gives (map entries sorted by
    key). Each codec hands its Feature as parts (`Codec.encode_parts`: headers, and an
    array's own buffer), joined once: a window's values are copied once, not once per
    level of nesting.

    What every example shares is worked out here, once: the entries' order, each key,
    and all the framing of a feature whose Feature is the same but for its values'
    buffer (`Codec.fixed_head`: a fixed-shape float32 or raw array). Such a feature then
    costs an example its buffer and nothing more: a latent window of the benchmark's
    (five features, 80 KB) takes 11 us instead of 29 framed field by field."""

    def __init__(self, features: Sequence[Feature]):
        self._entries: list[tuple[str, Any, bytes, Optional[int]]] = []
        for f in sorted(features, key=lambda f: f.name.encode("utf-8")):
            key = field(1, f.name.encode("utf-8"))
            head = f.codec.fixed_head()
            if head is None:       # framed per value: (name, codec, key, None)
                self._entries.append((f.name, f.codec, key, None))
                continue
            # the Feature's size, every time (a fixed-width value's fewest bytes are all)
            size = len(head) + f.codec.min_bytes()
            entry = key + header(2, size)
            prefix = header(1, len(entry) + size) + entry + head
            self._entries.append((f.name, f.codec, prefix, len(prefix) - len(head) + size))

    def __call__(self, values: Mapping[str, Any]) -> bytes:
        parts: list = []
        size = 0
        for name, codec, head, entry_size in self._entries:
            if entry_size is not None:       # head: all of the entry before the values
                parts += (head, codec.values_buffer(values[name]))
                size += entry_size
                continue
            feature = codec.encode_parts(values[name])
            feature_size = sum(len(part) for part in feature)
            entry = head + header(2, feature_size)
            outer = header(1, len(entry) + feature_size)
            parts += (outer, entry, *feature)
            size += len(outer) + len(entry) + feature_size
        return b"".join([header(1, size), *parts])

    def frame_size(self, values: Mapping[str, Any]) -> int:
        """The bytes of the TFRecord frame of the example `values` make (framing and
        CRCs included), from the values of the features framed per value alone (an id,
        a start): a fixed-width feature's size is the same for every value. What the
        job plans a shard's byte offsets by before a window is cut."""
        size = 0
        for name, codec, head, entry_size in self._entries:
            if entry_size is not None:
                size += entry_size
                continue
            feature_size = sum(len(part) for part in codec.encode_parts(values[name]))
            entry_size = len(head) + len(header(2, feature_size)) + feature_size
            size += len(header(1, entry_size)) + entry_size
        return len(header(1, size)) + size + FRAME_OVERHEAD


def window_values(frames: Sequence[Any] | np.ndarray, length: int,
                  valid: Optional[Sequence[bool]] = None,
                  labels: Optional[Sequence[Any] | np.ndarray] = None,
                  pad_frame: Any = None) -> dict:
    """A window's values as its example holds them, from its n <= `length` frames (a
    padded tail window has fewer): `window`, the frames then `length` - n `pad_frame`s
    (zeros like a frame when None; encoded frames need theirs), one array, or a list
    when the frames are encoded images (bytes); `mask`, 1 for each frame that is
    `valid` (all when None), 0 for padding; `labels` when given, each frame's then
    zeros."""
    pad = length - len(frames)
    encoded = isinstance(frames[0], (bytes, bytearray, memoryview))
    if pad and pad_frame is None:
        if encoded:
            raise ValueError("padding encoded frames needs the pad_frame to pad with")
        pad_frame = np.zeros_like(frames[0])
    if encoded:
        window: Any = [*frames, *[pad_frame] * pad]
    elif isinstance(frames, np.ndarray) and not pad:
        window = frames            # a slice of a sequence: no copy
    else:
        window = np.stack([*frames, *[pad_frame] * pad])
    if valid is None:
        mask = _real_frames(length, length - pad)
    else:
        mask = np.array([*valid, *[False] * pad], np.float32)
    values = {"window": window, "mask": mask}
    if labels is not None:
        values["labels"] = np.stack([*labels, *[np.zeros_like(labels[0])] * pad])
    return values


@functools.lru_cache(maxsize=None)
def _real_frames(length: int, real: int) -> np.ndarray:
    """The mask of a window of `length` whose first `real` frames are all valid: made
    once, read-only, shared by every such window."""
    mask = (np.arange(length) < real).astype(np.float32)
    mask.setflags(write=False)
    return mask


class VideoWindows:
    """One video's windows as records: what each window carries of its video (its id's
    UTF-8, its metadata, the table's hash) computed once a video. `encode(key, values)`
    makes a record's bytes from the window's values (an `ExampleEncoder` of the
    dataset's features, given as `lambda key, values: encoder(values)`)."""

    def __init__(self, seed: int, video_id: str, metadata: Any,
                 encode: Callable[[int, dict], bytes]):
        self._seed, self._id, self._metadata, self._encode = seed, video_id, metadata, encode
        self._id_bytes = video_id.encode("utf-8")
        self.video = window_table.video_hash(video_id)

    def record(self, start: int, values: dict) -> WindowRecord:
        """The record of the window at `start`; `values` holds its window, mask (and
        labels), and gets its metadata, video id and start."""
        values.update(metadata=self._metadata, video_id=self._id_bytes, start=np.int64(start))
        key = window_key(self._seed, self._id, start)
        return WindowRecord(key, self._encode(key, values), self.video,
                            int(np.count_nonzero(values["mask"])))


def side_files(name: str, offsets: Sequence[int], videos: Sequence[int],
               valid: Sequence[int], compression: str) -> tuple[Shard, dict[str, bytes]]:
    """Shard `name`'s side files, by name: its offset index (uncompressed shards; a gzip
    stream cannot be entered mid-way) and its window table; and what dataset.json lists
    of it. `offsets`: where each of its frames starts uncompressed, then its end;
    `videos` and `valid`: its records' window table columns, in order."""
    index_text = index.encode(offsets)
    files = {}
    index_file = None
    if compression == "none":
        index_file = index_name(name)
        files[index_file] = index_text
    table = table_name(name)
    files[table] = window_table.encode(videos, valid, name, index_text)
    return Shard(name, len(offsets) - 1, index_file, offsets[-1] if index_file else None,
                 table, window_table.crc32c(files[table])), files


def gzip(data: bytes) -> bytes:
    """A gzip stream as Beam's GZIP files write it (zlib's default level, mtime 0)."""
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return compressor.compress(data) + compressor.flush()


def shard_files(name: str, records: Iterable[WindowRecord], compression: str
                ) -> tuple[Shard, dict[str, bytes]]:
    """A plain writer's shard `name` of `records`, in the order given: every file of it
    by name (the shard, framed and compressed as the job writes it, and its side files),
    and what dataset.json lists of it. In memory: for small datasets."""
    frames, videos, valid = [], [], []
    for record in records:
        frames.append(tfrecord.frame(record.example))
        videos.append(record.video)
        valid.append(record.valid)
    offsets = np.cumsum([0] + [len(frame) for frame in frames]).tolist()
    shard, files = side_files(name, offsets, videos, valid, compression)
    data = b"".join(frames)
    return shard, {name: data if compression == "none" else gzip(data), **files}


def shard_ranges(total: int, num_shards: int) -> list[tuple[int, int]]:
    """The rank range [lo, hi) of each of `num_shards` shards of a split's `total`
    records, in its order: counts that differ by at most one."""
    return [(i * total // num_shards, (i + 1) * total // num_shards)
            for i in range(num_shards)]


def split_files(split: str, records: Iterable[WindowRecord], num_shards: int,
                compression: str, run_id: str) -> tuple[tuple[Shard, ...], dict[str, bytes]]:
    """A plain writer's split: its records in order, cut into `num_shards` shards (at
    most one a record; none for no record), and every file of each."""
    ordered = sorted(records)
    count = min(num_shards, len(ordered))
    shards, files = [], {}
    for i, (lo, hi) in enumerate(shard_ranges(len(ordered), count)):
        shard, made = shard_files(shard_name(split, i, count, compression, run_id),
                                  ordered[lo:hi], compression)
        shards.append(shard)
        files.update(made)
    return tuple(shards), files
