"""Windows as numpy arrays, for trainers without TensorFlow (PyTorch, JAX, plain loops).

    from readers.numpy import WindowSource, batches

    source = WindowSource("out/", "train")       # len(source), source[i] -> dict of arrays
    for batch in batches("out/", "train", batch_size=64, seed=0, epoch=3, start_step=120):
        ...

Neither TensorFlow nor Beam is imported. Records are found with the offset index beside
each shard (one seek each, so any window in any order) and parsed from the protobuf wire
format by `readers.spec.decode_example`; CRCs are checked. The values are those of
`readers.make_dataset`: float16 and bfloat16 become float32 unless `keep_float16`, PNG
and JPEG frames are decoded (with Pillow), `float_pixels` gives float32 in [0, 1].

A `WindowSource` is a PyTorch map-style `Dataset` and a Grain `RandomAccessDataSource`
as it is: it has `len()` and `[i]`, and it pickles (open files are not part of its
state), so it works in DataLoader worker processes. Gzip shards have no index: random
access is not possible there (use the tf.data reader).
"""
from __future__ import annotations

import bisect
import collections
import concurrent.futures
import io
import itertools
import os
import struct
from typing import Any, Iterator, Optional, Sequence, Union

import google_crc32c
import numpy as np

from readers import spec as spec_lib

_HEADER = struct.Struct("<QI")


def _masked_crc(data: np.ndarray) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def load_spec(path: str) -> spec_lib.DatasetSpec:
    """`path/dataset.json` without TensorFlow (local paths, or any fsspec scheme)."""
    json_path = os.path.join(path, spec_lib.DATASET_JSON)
    try:
        text = _read_file(json_path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is not a finished dataset: it has no {spec_lib.DATASET_JSON} "
            "(the job writes it last; is the job still running, or did it fail?)") from None
    return spec_lib.DatasetSpec.from_json(text.decode("utf-8"), source=json_path)


def _read_file(path: str, start: int = 0, end: Optional[int] = None) -> bytes:
    if "://" in path and not path.startswith("file://"):
        import fsspec
        fs, remote = fsspec.core.url_to_fs(path)
        return fs.cat_file(remote, start=start, end=end)
    with open(path.removeprefix("file://"), "rb") as f:
        f.seek(start)
        return f.read() if end is None else f.read(end - start)


class WindowSource:
    """The windows of one split, by index: `len(source)`, `source[i]` -> {name: array}."""

    def __init__(self, path: str, split: str = "train",
                 features: Optional[Sequence[str]] = None, *, float_pixels: bool = False,
                 keep_float16: bool = False):
        self.path, self.split = path, split
        self.spec = load_spec(path)
        if split not in self.spec.splits:
            raise ValueError(f"split {split!r} is not in {path}; it has "
                             f"{sorted(self.spec.splits)}")
        if self.spec.compression != "none":
            raise ValueError(f"{path} has {self.spec.compression} shards: random access "
                             "needs uncompressed shards and their index (use the tf.data "
                             "reader, readers.make_dataset)")
        names = [f.name for f in self.spec.features]
        unknown = [n for n in (features or ()) if n not in names]
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; this dataset has {names}")
        self.features = [f for f in self.spec.features if features is None or f.name in features]
        self.float_pixels, self.keep_float16 = float_pixels, keep_float16
        self._shards = [s for s in self.spec.splits[split].shards]
        missing = [s.file for s in self._shards if not s.index]
        if missing:
            raise ValueError(f"{path}: shard {missing[0]} has no offset index (written by "
                             "a job older than 0.2.0); rerun the job for random access")
        self._ends = list(itertools.accumulate(s.examples for s in self._shards))
        self._size = self._ends[-1] if self._ends else 0
        self._offsets: dict[int, np.ndarray] = {}
        self._files: dict[int, int] = {}

    def __len__(self) -> int:
        return self._size

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_files"] = {}       # descriptors stay in their process
        return state

    def __getitem__(self, i: int) -> dict[str, Any]:
        frame, size = self._frame(i)
        return self._parse(frame, 12, size - 4)

    def _locate(self, i: int) -> tuple[int, int]:
        if not -self._size <= i < self._size:
            raise IndexError(f"window {i} of a split of {self._size}")
        i %= self._size
        shard = bisect.bisect_right(self._ends, i)
        return shard, i - (int(self._ends[shard - 1]) if shard else 0)

    def _index(self, shard: int) -> np.ndarray:
        offsets = self._offsets.get(shard)
        if offsets is None:
            entry = self._shards[shard]
            data = _read_file(os.path.join(self.path, entry.index))
            offsets = np.frombuffer(data, "<u8")
            if len(offsets) != entry.examples + 1:
                raise ValueError(f"{entry.index}: {len(offsets) - 1} records indexed, "
                                 f"dataset.json says {entry.examples}")
            self._offsets[shard] = offsets
        return offsets

    def record(self, i: int) -> memoryview:
        """The serialized example of window i, its frame and CRCs checked."""
        frame, size = self._frame(i)
        return memoryview(frame)[12:size - 4]

    def _frame(self, i: int, buffer: Optional[bytearray] = None) -> tuple[bytearray, int]:
        """Window i's TFRecord frame, its CRCs checked, and its size: in memory of its
        own, or in `buffer` when given and large enough (reused by `read_batch`); the
        arrays parsed from it are writable, as PyTorch wants them."""
        shard, local = self._locate(i)
        offsets = self._index(shard)
        start, end = int(offsets[local]), int(offsets[local + 1])
        size = end - start
        frame = self._read(shard, start, end, buffer)
        view = np.frombuffer(frame, np.uint8, size)   # the CRC function takes arrays
        if (_HEADER.unpack_from(frame) != (size - 16, _masked_crc(view[:8]))
                or _masked_crc(view[12:-4]) != struct.unpack_from("<I", frame, size - 4)[0]):
            raise OSError(f"shard {self._shards[shard].file} is corrupt at record {local} "
                          f"(byte {start}); run python -m readers.inspect {self.path} --verify")
        return frame, size

    def _read(self, shard: int, start: int, end: int,
              buffer: Optional[bytearray] = None) -> bytearray:
        """Bytes [start, end) of a shard, into `buffer` (grown if short) or a new one."""
        size = end - start
        path = os.path.join(self.path, self._shards[shard].file)
        if "://" in path and not path.startswith("file://"):
            data = _read_file(path, start, end)
        else:
            fd = self._files.get(shard)
            if fd is None:
                fd = self._files[shard] = os.open(path.removeprefix("file://"), os.O_RDONLY)
            if buffer is None or len(buffer) < size:
                buffer = bytearray(2 * size)
            # pread: no shared file position, so threads may share the descriptor
            data = buffer if os.preadv(fd, [memoryview(buffer)[:size]], start) == size else b""
        if len(data) < size:
            raise OSError(f"shard {self._shards[shard].file} ends before byte {end}")
        return data if isinstance(data, bytearray) else bytearray(data)

    def read_batch(self, indices: Sequence[int]) -> dict[str, Any]:
        """Windows `indices` stacked: {name: array [len, ...]}, `video_id` an object array
        of bytes. Each record is read into one reused buffer and its values copied
        straight into the batch's arrays (no array per window)."""
        buffer = bytearray(0)
        columns: dict[str, np.ndarray] = {}
        for row, i in enumerate(indices):
            frame, size = self._frame(int(i), buffer)
            buffer = frame
            values = self._parse(frame, 12, size - 4)
            if not columns:
                columns = {name: np.empty(len(indices), object) if isinstance(value, bytes)
                           else np.empty((len(indices), *value.shape), value.dtype)
                           for name, value in values.items()}
            for name, column in columns.items():
                column[row] = values[name]
        return columns

    def parse(self, record: Union[bytes, bytearray]) -> dict[str, Any]:
        """A serialized example -> {name: value}, as readers.make_dataset gives them."""
        return self._parse(record, 0, len(record))

    def _parse(self, buffer: Union[bytes, bytearray], start: int, end: int) -> dict[str, Any]:
        values = spec_lib.decode_example(self.features, buffer, start, end)
        return {f.name: self._finish(f, values[f.name]) for f in self.features}

    def _finish(self, f: spec_lib.FeatureSpec, value: Any) -> Any:
        if f.encoding in spec_lib.IMAGE_ENCODINGS:
            value = np.stack([_decode_image(data, f.shape[1:]) for data in value])
        if isinstance(value, np.ndarray):
            if f.dtype in ("float16", "bfloat16") and not self.keep_float16:
                value = _to_float32(value, f.dtype)
            elif self.float_pixels and value.dtype == np.uint8:
                value = value.astype(np.float32) / 255.0
        return value


def _to_float32(value: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":   # the upper half of a float32's bits: no ml_dtypes needed
        return (value.view("<u2").astype(np.uint32) << 16).view(np.float32)
    return value.astype(np.float32)


def _decode_image(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image = image.convert("RGB" if shape[-1] == 3 else "L")
        array = np.asarray(image, dtype=np.uint8)
    return array.reshape(shape)


def epoch_order(size: int, *, shuffle: bool, seed: int, epoch: int, shard_index: int,
                num_shards: int) -> np.ndarray:
    """This host's windows for an epoch: a permutation of all of them (a pure function
    of seed and epoch), cut into `num_shards` equal contiguous slices (the few windows
    left over are left out, so that every host takes the same number of steps)."""
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index must be in [0, {num_shards}), got {shard_index}")
    order = (np.random.default_rng([seed, epoch]).permutation(size) if shuffle
             else np.arange(size))
    per_host = size // num_shards
    return order[shard_index * per_host:(shard_index + 1) * per_host]


def batches(path: str, split: str, batch_size: int, *, shuffle: bool = True, seed: int = 0,
            epoch: int = 0, shard_index: int = 0, num_shards: int = 1,
            drop_remainder: bool = True, start_step: int = 0,
            features: Optional[Sequence[str]] = None, float_pixels: bool = False,
            keep_float16: bool = False, threads: Optional[int] = None, prefetch: int = 4
            ) -> Iterator[dict[str, Any]]:
    """Batches of one epoch as dicts of numpy arrays ([batch_size, ...]; `video_id` an
    object array of bytes), in an order that is a pure function of (seed, epoch): step k
    of an epoch is always the same batch, so `start_step=k` resumes exactly where a run
    that stopped after k steps would have gone on. `shard_index`/`num_shards` give this
    host its slice. Batches are read and parsed ahead by a pool of `threads`, `prefetch`
    batches at a time. By default one thread for latents (parsing holds Python's lock:
    more threads only contend for it) and one per core for PNG and JPEG frames (Pillow
    decodes without the lock)."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    source = WindowSource(path, split, features, float_pixels=float_pixels,
                          keep_float16=keep_float16)
    if threads is None:
        images = any(f.encoding in spec_lib.IMAGE_ENCODINGS for f in source.features)
        threads = (os.cpu_count() or 1) if images else 1
    order = epoch_order(len(source), shuffle=shuffle, seed=seed, epoch=epoch,
                        shard_index=shard_index, num_shards=num_shards)
    steps = len(order) // batch_size if drop_remainder else -(-len(order) // batch_size)
    if steps == 0:
        raise ValueError(f"split {split!r} of {path} gives this host {len(order)} windows, "
                         f"fewer than batch_size {batch_size}: not one batch comes out")

    def batch(step: int) -> dict[str, Any]:
        return source.read_batch(order[step * batch_size:(step + 1) * batch_size])

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        pending: collections.deque = collections.deque()
        for step in range(start_step, steps):
            pending.append(pool.submit(batch, step))
            if len(pending) > prefetch:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

