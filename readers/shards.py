"""The bytes of one split's records, any record in any order: the shards' offset indexes,
local scatter reads (preadv) and remote ranged reads (fsspec), and each frame's checks.

readers.numpy decodes what this module reads (readers/numpy/scatter.py); here are only where a
window's record is and its bytes, local or on any fsspec scheme. Numpy only.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import os
import stat
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from readers.file_checks import not_a_file_error
from readers.format import index, is_remote, tfrecord
from readers.request import SplitRequest


@functools.lru_cache(maxsize=4096)
def _on_filesystem(path: str) -> str:
    """`path` as its fsspec filesystem names it: a chained URL's filesystem
    (`simplecache::gs://b/out/x`, `filecache::...`) takes the inner path, not the URL.
    Cached: a batch names a few shards many times."""
    import fsspec
    return fsspec.core.url_to_fs(path)[1]


def read_at_most(paths: Sequence[str], limits: Sequence[int]) -> list[bytes]:
    """Whole files, local or of any fsspec scheme (of one scheme), each refused in one
    line naming it when it holds more than its limit: a dataset's side files (offset
    indexes, window tables), whose entries in dataset.json bound their size, read as
    shards are. A local file is opened without waiting (a FIFO's open would wait for a
    writer forever) and refused, before a byte of it is read, when it is not a regular
    file (NotAFile: a FIFO, a directory, a device or a link to one) or larger than its
    limit; remote ones, all asked for at once, are read up to their limit and a byte."""
    if not (paths and is_remote(paths[0])):
        return [_read_local_at_most(path.removeprefix("file://"), limit)
                for path, limit in zip(paths, limits, strict=True)]
    read = read_files(paths, [0] * len(paths), [limit + 1 for limit in limits])
    for path, data, limit in zip(paths, read, limits, strict=True):
        if len(data) > limit:
            raise _too_large(path, f"more than {limit:,} bytes", limit)
    return read


def _read_local_at_most(path: str, limit: int) -> bytes:
    """A local file, stat'ed before it is opened (no device is opened) and again once
    open (what was opened is what is read)."""
    _check_regular_at_most(path, os.stat(path), limit)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        _check_regular_at_most(path, os.fstat(fd), limit)
        data = f.read(limit + 1)
    if len(data) > limit:     # grown since
        raise _too_large(path, f"more than {limit:,} bytes", limit)
    return data


def _check_regular_at_most(path: str, facts: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(facts.st_mode):
        raise not_a_file_error(path, facts.st_mode)
    if facts.st_size > limit:
        raise _too_large(path, f"{facts.st_size:,} bytes", limit)


def _too_large(path: str, size: str, limit: int) -> ValueError:
    return ValueError(f"{os.path.basename(path)}: {size}, where its entry in dataset.json allows "
                      f"{limit:,} at most: the dataset is damaged")


def read_files(paths: Sequence[str], starts: Optional[Sequence[int]] = None,
                ends: Optional[Sequence[int]] = None) -> list[bytes]:
    """Files, or their byte ranges [start, end), local or of any fsspec scheme, of one
    scheme. Remote ones are asked for all at once: gcsfs sends the requests concurrently,
    so a batch of windows on gs:// waits about one request's latency, not one per window."""
    nones: list[Optional[int]] = [None] * len(paths)
    firsts: Sequence[Optional[int]] = list(starts) if starts is not None else nones
    lasts: Sequence[Optional[int]] = list(ends) if ends is not None else nones
    if paths and is_remote(paths[0]):
        import fsspec
        fs, _ = fsspec.core.url_to_fs(paths[0])
        return fs.cat_ranges([_on_filesystem(p) for p in paths], firsts, lasts,
                             on_error="raise")
    out = []
    for path, start, end in zip(paths, firsts, lasts, strict=True):
        with open(path.removeprefix("file://"), "rb") as f:
            f.seek(start or 0)
            out.append(f.read() if end is None else f.read(end - (start or 0)))
    return out


class Shards:
    """The records of a split's shards, numbered across them as one sequence of windows.

    Offset indexes are read on first need (those of one batch together), checked against
    their shards (readers.format.index.decode) and kept; local shards are opened with
    their indexes and stay open, one descriptor each, that a pickled copy leaves behind
    (a DataLoader worker opens its own). A shard or index that is gone when it is opened
    is `SplitRequest.gone_error`'s error: a rewrite of the directory deletes the files
    of the run this reader reads, and an open shard is read on whole (Linux keeps an
    unlinked file while it is open); no other run's file is ever opened."""

    def __init__(self, request: SplitRequest):
        path, shards = request.path, request.shards
        compression = request.spec.compression
        if compression != "none":
            raise ValueError(f"{path} has {compression} shards: random access needs "
                             "uncompressed shards and their index (use the tf.data "
                             "reader, readers.make_dataset)")
        missing = [s.file for s in shards if not s.index]
        if missing:
            raise ValueError(f"{path}: shard {missing[0]} has no offset index (written by "
                             "a job older than 0.2.0); rerun the job for random access")
        self.path = path
        self._request = request
        self._shards = list(shards)
        self._ends = list(itertools.accumulate(s.examples for s in self._shards))
        self._starts = [end - s.examples for end, s in zip(self._ends, self._shards, strict=True)]
        self.size = self._ends[-1] if self._ends else 0
        self.remote = is_remote(path)
        self._paths = [os.path.join(path.removeprefix("file://"), s.file) for s in self._shards]
        self._offsets: dict[int, np.ndarray] = {}
        self._files: dict[int, int] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_files"] = {}       # descriptors stay in their process
        return state

    def name(self, shard: int) -> str:
        """The shard's file name, for error messages."""
        return self._shards[shard].file

    def locate(self, i: int) -> tuple[int, int]:
        """(shard, in_shard) of window i: its shard, and its record's number in that
        shard; a negative i counts back."""
        if not -self.size <= i < self.size:
            raise IndexError(f"window {i} of a split of {self.size}")
        i %= self.size
        shard = bisect.bisect_right(self._ends, i)
        return shard, i - self._starts[shard]

    def spans(self, located: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The byte span [start, end) in its shard of each record `locate` gave (shard,
        in_shard); the indexes of their shards not yet in memory are read first,
        together."""
        self._load_indexes(shard for shard, _ in located)
        return [self._span(shard, in_shard) for shard, in_shard in located]

    def fetch(self, located: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
              ) -> Sequence[Optional[bytes]]:
        """The frames of a remote split, all requested at once, each as long as its
        index says; None for each local one (`read` reads those straight into place)."""
        if not self.remote or not located:
            return [None] * len(located)
        shards = [shard for shard, _ in located]
        try:
            frames = read_files([self._paths[shard] for shard in shards], *zip(*spans, strict=True))
        except FileNotFoundError as e:
            raise self._gone_error(e, shards) from None
        for (shard, in_shard), (start, end), frame in zip(located, spans, frames, strict=True):
            if len(frame) != end - start:
                raise OSError(f"shard {self.name(shard)} ends before byte {end} (record "
                              f"{in_shard}); run python -m readers.inspect {self.path} --verify")
        return frames

    def first_window(self, shard: int) -> int:
        """The number in the split of the shard's first window."""
        return self._starts[shard]

    def offsets(self, shard: int) -> np.ndarray:
        """Where each of the shard's records starts, and its end (its index read first
        when it is not in memory: `load_indexes` reads several together)."""
        self._load_indexes([shard])
        return self._offsets[shard]

    def load_indexes(self, shards: Iterable[int]) -> None:
        """The offset indexes of `shards` read, those not yet in memory together."""
        self._load_indexes(shards)

    def holding(self, windows: np.ndarray) -> list[int]:
        """The shards that hold any of `windows` (the split's numbers, sorted)."""
        return np.unique(np.searchsorted(self._ends, windows, "right")).tolist()

    def read_range(self, shard: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of a shard, read at once (one request on a store)."""
        try:
            data = read_files([self._paths[shard]], [start], [end])[0]
        except FileNotFoundError as e:
            raise self._gone_error(e, [shard]) from None
        if len(data) != end - start:
            raise OSError(f"shard {self.name(shard)} ends before byte {end}; run "
                          f"python -m readers.inspect {self.path} --verify")
        return data

    @property
    def count(self) -> int:
        """How many shards."""
        return len(self._shards)

    def _load_indexes(self, shards: Iterable[int]) -> None:
        """The offset indexes of `shards` not yet in memory, read together; a local
        shard is opened with its index, which must end at the shard's end."""
        if len(self._offsets) == len(self._shards):      # all read: the usual case
            return
        missing = sorted({shard for shard in shards if shard not in self._offsets})
        names = [self._index_name(shard) for shard in missing]
        version = self._request.spec.format_version
        try:
            indexes = read_at_most([os.path.join(self.path, name) for name in names],
                                   [index.largest(self._shards[shard].examples, version)
                                    for shard in missing])
        except FileNotFoundError as e:
            raise self._gone_error(e, missing) from None
        min_frame = self._request.spec.min_frame_bytes
        for shard, name, data in zip(missing, names, indexes, strict=True):
            entry = self._shards[shard]
            size = None if self.remote else os.fstat(self._open(shard)).st_size
            self._offsets[shard] = index.decode(data, name, entry.examples,
                                                self._request.spec.format_version, size,
                                                min_frame)

    def _index_name(self, shard: int) -> str:
        """The offset index of a shard (__init__ refuses a shard without one)."""
        name = self._shards[shard].index
        if name is None:
            raise ValueError(f"shard {self._shards[shard].file} has no offset index")
        return name

    def _open(self, shard: int) -> int:
        """The descriptor of a local shard, opened on first need."""
        fd = self._files.get(shard)
        if fd is None:
            try:
                fd = self._files[shard] = os.open(self._paths[shard], os.O_RDONLY)
            except FileNotFoundError as e:
                raise self._gone_error(e, [shard]) from None
        return fd

    def _gone_error(self, error: FileNotFoundError, shards: Sequence[int]
                    ) -> FileNotFoundError:
        """`SplitRequest.gone_error` for the file of `shards` that `error` names (an index,
        or else a shard; the first one's when it names none)."""
        names = ([n for n in (self._shards[s].index for s in shards) if n is not None]
                 + [self._shards[s].file for s in shards])
        said = f"{error.filename} {error}"
        return self._request.gone_error(next((n for n in names if n in said),
                                             self._shards[shards[0]].file))

    def _span(self, shard: int, in_shard: int) -> tuple[int, int]:
        offsets = self._offsets[shard]
        return int(offsets[in_shard]), int(offsets[in_shard + 1])

    def frame(self, shard: int, in_shard: int, fetched: Optional[Union[bytes, memoryview]]
              ) -> tuple[bytearray, int]:
        """A record's TFRecord frame in memory of its own, its CRCs checked, and its size."""
        start, end = self._span(shard, in_shard)
        frame = bytearray(end - start)
        self.read(shard, [frame], start, end, fetched)
        view = np.frombuffer(frame, np.uint8)   # the CRC function takes arrays
        self.check(shard, in_shard, start, frame,
                   [view[tfrecord.HEADER_BYTES:-tfrecord.FOOTER_BYTES]],
                   tfrecord.header(end - start - tfrecord.FRAME_OVERHEAD))
        return frame, end - start

    def check(self, shard: int, in_shard: int, start: int, frame: bytearray,
              data: list[np.ndarray], header: bytes) -> None:
        """A frame's length and CRCs (tfrecord.frame_is_sound): `frame` starts with
        `header` and ends with the CRC of its example, which `data` holds in pieces."""
        if not tfrecord.frame_is_sound(frame, data, header):
            raise OSError(f"shard {self.name(shard)} is corrupt at record {in_shard} "
                          f"(byte {start}); run python -m readers.inspect {self.path} --verify")

    def read(self, shard: int, pieces: list, start: int, end: int,
             fetched: Optional[Union[bytes, memoryview]]) -> None:
        """Bytes [start, end) of a shard, into `pieces` (writable buffers, in order, that
        add up to end - start bytes): one preadv, or from `fetched`, those bytes of a
        remote shard."""
        if fetched is not None:
            done = 0
            for piece in pieces:
                view = memoryview(piece).cast("B")
                view[:] = fetched[done:done + len(view)]
                done += len(view)
            read = len(fetched)
        else:
            # pread: no shared file position, so threads may share the descriptor
            read = os.preadv(self._open(shard), pieces, start)
        if read < end - start:
            raise OSError(f"shard {self.name(shard)} ends before byte {end}")
