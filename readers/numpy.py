"""Windows as numpy arrays, for trainers without TensorFlow (PyTorch, JAX, plain loops).

    from readers.numpy import WindowSource, batches

    source = WindowSource("out/", "train")       # len(source), source[i] -> dict of arrays
    for batch in batches("out/", "train", batch_size=64, seed=0, epoch=3, start_step=120):
        ...

Neither TensorFlow nor Beam is imported. Records are found with the offset index beside
each shard (one seek each, so any window in any order) and read from the protobuf wire
format with the layouts of `readers.format.layout`: each record's fixed-width values go
straight from the file into their row of the batch; CRCs are checked. The values are those of
`readers.make_dataset` (each feature's codec, readers.format.codecs, decides them): float16
and bfloat16 become float32 unless `keep_float16`, PNG and JPEG frames are decoded (with
Pillow), `float_pixels` gives float32 in [0, 1].

A `WindowSource` is a PyTorch map-style `Dataset` and a Grain `RandomAccessDataSource`
as it is: it has `len()` and `[i]`, and it pickles (open files are not part of its
state), so it works in DataLoader worker processes. Gzip shards have no index: random
access is not possible there (use the tf.data reader).
"""
from __future__ import annotations

import bisect
import collections
import concurrent.futures
import itertools
import os
import struct
from typing import Any, Iterable, Iterator, Optional, Sequence

import google_crc32c
import numpy as np

from readers import format as data_format, scatter
from readers.format import index, tfrecord


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _read_files(paths: Sequence[str], starts: Optional[Sequence[int]] = None,
                ends: Optional[Sequence[int]] = None) -> list[bytes]:
    """Files, or their byte ranges [start, end), local or of any fsspec scheme, of one
    scheme. Remote ones are asked for all at once: gcsfs sends the requests concurrently,
    so a batch of windows on gs:// waits about one request's latency, not one per window."""
    starts = list(starts) if starts is not None else [None] * len(paths)
    ends = list(ends) if ends is not None else [None] * len(paths)
    if paths and _is_remote(paths[0]):
        import fsspec
        fs, _ = fsspec.core.url_to_fs(paths[0])
        return fs.cat_ranges(list(paths), starts, ends, on_error="raise")
    out = []
    for path, start, end in zip(paths, starts, ends):
        with open(path.removeprefix("file://"), "rb") as f:
            f.seek(start or 0)
            out.append(f.read() if end is None else f.read(end - (start or 0)))
    return out


class WindowSource:
    """The windows of one split, by index: `len(source)`, `source[i]` -> {name: array}."""

    def __init__(self, path: str, split: str = "train",
                 features: Optional[Sequence[str]] = None, *, float_pixels: bool = False,
                 keep_float16: bool = False):
        self.path, self.split = path, split
        self.spec = data_format.load_spec(path)
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
        self._columns = {f.name: (f.shape, f.codec.column_dtype) for f in self.features}
        self._fixed_width = [f.name for f in self.features if f.codec.stored_dtype is not None]
        self._shards = [s for s in self.spec.splits[split].shards]
        missing = [s.file for s in self._shards if not s.index]
        if missing:
            raise ValueError(f"{path}: shard {missing[0]} has no offset index (written by "
                             "a job older than 0.2.0); rerun the job for random access")
        self._ends = list(itertools.accumulate(s.examples for s in self._shards))
        self._starts = [end - s.examples for end, s in zip(self._ends, self._shards)]
        self._size = self._ends[-1] if self._ends else 0
        self._offsets: dict[int, np.ndarray] = {}
        self._files: dict[int, int] = {}
        self._plans = scatter.Plans(self.features)
        self._remote = _is_remote(path)
        self._paths = [os.path.join(path.removeprefix("file://"), s.file) for s in self._shards]

    def __len__(self) -> int:
        return self._size

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_files"] = {}       # descriptors stay in their process
        return state

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Windows `indices`, one dict each, read as one `read_batch`: a PyTorch
        DataLoader's workers fetch their batches through it (on gs://, a batch's requests
        all at once)."""
        batch = self.read_batch(indices)
        return [{name: column[row] if column.dtype == object else column[row, ...]
                 for name, column in batch.items()} for row in range(len(indices))]

    def _locate(self, i: int) -> tuple[int, int]:
        """(shard, record in that shard) of window i; a negative i counts back."""
        if not -self._size <= i < self._size:
            raise IndexError(f"window {i} of a split of {self._size}")
        i %= self._size
        shard = bisect.bisect_right(self._ends, i)
        return shard, i - self._starts[shard]

    def _load_indexes(self, shards: Iterable[int]) -> None:
        """The offset indexes of `shards` not yet in memory, read together."""
        if len(self._offsets) == len(self._shards):      # all read: the usual case
            return
        missing = sorted({shard for shard in shards if shard not in self._offsets})
        paths = [os.path.join(self.path, self._shards[shard].index) for shard in missing]
        for shard, data in zip(missing, _read_files(paths)):
            entry = self._shards[shard]
            self._offsets[shard] = index.decode(data, entry.index, entry.examples)

    def _span(self, shard: int, local: int) -> tuple[int, int]:
        offsets = self._offsets[shard]
        return int(offsets[local]), int(offsets[local + 1])

    def _frame(self, shard: int, local: int, fetched: Optional[bytes]
               ) -> tuple[bytearray, int]:
        """A record's TFRecord frame in memory of its own, its CRCs checked, and its size."""
        start, end = self._span(shard, local)
        frame = bytearray(end - start)
        self._read(shard, [frame], start, end, fetched)
        view = np.frombuffer(frame, np.uint8)   # the CRC function takes arrays
        self._check(shard, local, start, frame,
                    [view[tfrecord.HEADER_BYTES:-tfrecord.FOOTER_BYTES]],
                    tfrecord.header(end - start - tfrecord.FRAME_OVERHEAD))
        return frame, end - start

    def _check(self, shard: int, local: int, start: int, frame: bytearray,
               data: list[np.ndarray], header: bytes) -> None:
        """A frame's length and CRCs: `frame` starts with its header, which must be
        `header` (it hangs on the size alone), and ends with its footer, the CRC of its
        example, which `data` holds in pieces."""
        crc = 0
        for piece in data:
            crc = google_crc32c.extend(crc, piece)
        footer = len(frame) - tfrecord.FOOTER_BYTES
        if (frame[:tfrecord.HEADER_BYTES] != header
                or tfrecord.mask(crc) != struct.unpack_from("<I", frame, footer)[0]):
            raise OSError(f"shard {self._shards[shard].file} is corrupt at record {local} "
                          f"(byte {start}); run python -m readers.inspect {self.path} --verify")

    def _read(self, shard: int, pieces: list, start: int, end: int,
              fetched: Optional[bytes]) -> None:
        """Bytes [start, end) of a shard, into `pieces` (writable buffers, in order, that
        add up to end - start bytes): one preadv, or from `fetched`, those bytes of a
        remote shard."""
        path = self._paths[shard]
        if fetched is not None:
            done = 0
            for piece in pieces:
                view = memoryview(piece).cast("B")
                view[:] = fetched[done:done + len(view)]
                done += len(view)
            read = len(fetched)
        else:
            fd = self._files.get(shard)
            if fd is None:
                fd = self._files[shard] = os.open(path, os.O_RDONLY)
            # pread: no shared file position, so threads may share the descriptor
            read = os.preadv(fd, pieces, start)
        if read < end - start:
            raise OSError(f"shard {self._shards[shard].file} ends before byte {end}")

    def read_batch(self, indices: Sequence[int]) -> dict[str, Any]:
        """Windows `indices` stacked: {name: array [len, ...]}, `video_id` an object array
        of bytes.

        Every example of a dataset has the same features and shapes, so the records of one
        size take a few layouts (readers.format.Layout), each learnt from the first record
        that has it, read whole.
        Each later record of that size is read by one preadv in pieces: its fixed-width
        features' values straight into their rows of the batch (one copy, from the page
        cache), the rest into a small buffer; its CRCs are checked over the pieces, and
        the bytes outside the lists must match the layout's, else it is read whole again
        and its own layout learnt. The records of a remote split are fetched first, all
        at once, and taken from memory in the same way."""
        batch = scatter.Batch(self._columns, self._fixed_width, len(indices))
        located = [self._locate(int(i)) for i in indices]
        self._load_indexes(shard for shard, _ in located)
        spans = [self._span(shard, local) for shard, local in located]
        fetched = (_read_files([self._paths[shard] for shard, _ in located],
                               *zip(*spans)) if self._remote and located
                   else [None] * len(located))
        for row, ((shard, local), (start, end), data) in enumerate(
                zip(located, spans, fetched)):
            plan = self._plans.first(end - start)
            if plan is not None:
                rest = batch.rest(plan)
                pieces = batch.pieces(plan, row, rest)
                self._read(shard, pieces, start, end, data)
                crc_data = pieces[:]
                crc_data[0::2] = rest.data
                self._check(shard, local, start, rest.buffer, crc_data, plan.header)
                layout = plan.layout_of(rest.buffer)
                if layout is not None:
                    batch.store(plan, layout, row, rest)
                    continue
            frame, size = self._frame(shard, local, data)
            try:
                layout = data_format.layout(self.features, frame, tfrecord.HEADER_BYTES,
                                            size - tfrecord.FOOTER_BYTES)
            except ValueError as e:
                raise ValueError(f"shard {self._shards[shard].file}, record {local}: {e}") from None
            plan = self._plans.learn(size, layout)
            rest = batch.rest(plan)
            done = 0
            for piece in batch.pieces(plan, row, rest):
                piece[:] = np.frombuffer(frame, np.uint8, len(piece), done)
                done += len(piece)
            batch.store(plan, layout, row, rest)
        return {f.name: f.codec.finish(batch.columns[f.name], float_pixels=self.float_pixels,
                                       keep_float16=self.keep_float16)
                for f in self.features}


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
        images = any(f.codec.decodes_images for f in source.features)
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

