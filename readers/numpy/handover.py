"""Batches a PyTorch DataLoader's worker hands to the trainer without a copy.

A worker's batch goes to the trainer through a queue: PyTorch copies each tensor into a
shared-memory segment made for it, sends each segment's file descriptor over a socket of
its own, and the trainer maps each one and faults its pages in one by one. Here a worker
reads a batch's columns straight into one shared segment (a memfd), and the batch
(`HandedBatch`) pickles as that segment's one descriptor and where each value lies in
it: no byte is copied to hand it over, and the trainer maps the segment with its pages
populated in one call. What does not lie in the segment (the ids, a value a transform
made anew) pickles as it would without this module.

Segments are reused. A new one costs its pages' first touch (the kernel zeroes each):
about 2 ms for a batch of 64 latent windows (5 MB), as much as reading the batch. So a
worker keeps the segments it made (`_Pool`, at most POOLED) and fills one again once
the trainer is done with it: when the last of a batch's values is freed there, the
trainer writes a byte into the segment's last page, which the worker reads before it
reuses it. A trainer that keeps more batches than that makes the worker allocate a new
segment for each further one, as without a pool; the memory a worker holds is at most
POOLED of its largest batches, besides what the trainer holds.

Only in a DataLoader's worker process on Linux (`arena()`: memfd_create); elsewhere a
batch is read into the process's own memory, as ever. Numpy and the standard library:
torch is used only where a DataLoader already imported it.
"""
from __future__ import annotations

import mmap
import os
import sys
import threading
import weakref
from multiprocessing.reduction import DupFd
from typing import Any, Optional

import numpy as np

POOLED = 8               # segments a worker keeps for reuse
_PAGE = mmap.PAGESIZE
_FREE, _HANDED = 1, 0    # what a segment's last page's first byte says


def arena() -> Optional["Arena"]:
    """An Arena for the next batch where this process is a DataLoader's worker and the
    system has memfd_create; None elsewhere."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(os, "memfd_create"):
        return None
    if torch.utils.data.get_worker_info() is None:
        return None
    return Arena()


class Arena:
    """The shared memory of one batch: `allocate` takes a segment (once), `handed`
    wraps the batch read into it."""

    def __init__(self):
        self.segment: Optional[_Segment] = None

    def allocate(self, nbytes: int) -> np.ndarray:
        """`nbytes` of memory in a free segment of this worker's (readers.numpy.scatter's
        `allocate`)."""
        self.segment = _POOL.take(nbytes)
        return self.segment.memory

    def handed(self, batch: dict[str, Any]) -> dict[str, Any]:
        """`batch` as the worker hands it over: a HandedBatch over the segment, or the
        batch as it is where nothing was allocated."""
        if self.segment is None:
            return batch
        handed = HandedBatch(batch)
        handed.segment = self.segment
        return handed


class _Segment:
    """A memfd mapped here: room for a batch of `capacity` bytes (`memory`, the batch
    it holds now: its first `nbytes`), then a page whose first byte the trainer sets
    when it is done with the batch. Its descriptor stays open as long as the segment
    lives (pickling duplicates it)."""

    def __init__(self, capacity: int):
        self.capacity, self.nbytes = capacity, 0
        self.flag_offset = -(-max(capacity, 1) // _PAGE) * _PAGE
        self.fd = os.memfd_create("readers-batch", os.MFD_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)
        os.ftruncate(self.fd, self.flag_offset + _PAGE)
        self._mapped = np.frombuffer(mmap.mmap(self.fd, self.flag_offset + _PAGE), np.uint8)
        self._flag = self._mapped[self.flag_offset:self.flag_offset + 1]
        self.address = self._mapped.__array_interface__["data"][0]
        self.memory = self._mapped[:0]

    @property
    def free(self) -> bool:
        return bool(self._flag[0] == _FREE)

    def take(self, nbytes: int) -> "_Segment":
        """This segment for a batch of `nbytes` (at most its capacity), handed over."""
        self._flag[0] = _HANDED
        self.nbytes, self.memory = nbytes, self._mapped[:nbytes]
        return self


class _Pool:
    """A worker's segments, each handed over or free again."""

    def __init__(self):
        self._kept: list[_Segment] = []
        self._lock = threading.Lock()    # a dataset may read in threads of a worker

    def take(self, nbytes: int) -> _Segment:
        """The smallest free segment of room for `nbytes`; else a new one, kept in the
        place of a free one too small, or beside the others while fewer than POOLED."""
        with self._lock:
            return self._take(nbytes)

    def _take(self, nbytes: int) -> _Segment:
        free = [segment for segment in self._kept if segment.free]
        fits = [segment for segment in free if segment.capacity >= nbytes]
        if fits:
            return min(fits, key=lambda segment: segment.capacity).take(nbytes)
        segment = _Segment(nbytes)
        if free:
            self._kept.remove(free[0])
        if len(self._kept) < POOLED:
            self._kept.append(segment)
        return segment.take(nbytes)


_POOL = _Pool()   # a worker process's (a forked one's starts empty: see _forget)


def _forget() -> None:
    """A forked process does not reuse its parent's segments."""
    global _POOL
    _POOL = _Pool()


os.register_at_fork(after_in_child=_forget)


class HandedBatch(dict):
    """A batch whose arrays (or tensors over them: a DataLoader's `default_convert`
    makes tensors of them without a copy) lie in one segment: pickled, the segment's
    descriptor and each value's place in it; unpickled, a plain dict of the same values
    over the segment mapped in the unpickling process."""

    segment: _Segment

    def __copy__(self) -> "HandedBatch":
        handed = HandedBatch(self)
        handed.segment = self.segment
        return handed

    def __reduce__(self):
        segment = self.segment
        placed = {key: _place(value, segment) for key, value in self.items()}
        return _rebuild, (DupFd(segment.fd), segment.nbytes, segment.flag_offset,
                          {key: place for key, place in placed.items() if place is not None},
                          {key: value for key, value in self.items() if placed[key] is None},
                          list(self))


def _place(value: Any, segment: _Segment) -> Optional[tuple]:
    """(offset, shape, strides, dtype, is a tensor) of a numpy array or a CPU tensor
    whose memory lies in `segment`'s batch bytes; None for anything else."""
    tensor = not isinstance(value, np.ndarray)
    if tensor:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return None
        value = value.numpy()   # a view: the same memory
    if value.dtype.hasobject:
        return None
    first = value.__array_interface__["data"][0]
    # the bytes it spans, whatever its strides' signs (numpy's byte_bounds, which moved)
    reach = [s * (n - 1) for s, n in zip(value.strides, value.shape, strict=True)] \
        if value.size else []
    low = first + sum(r for r in reach if r < 0)
    high = first + sum(r for r in reach if r > 0) + (value.itemsize if value.size else 0)
    if not (segment.address <= low and high <= segment.address + segment.nbytes):
        return None
    return first - segment.address, value.shape, value.strides, value.dtype.str, tensor


def _rebuild(descriptor: Any, nbytes: int, flag_offset: int, placed: dict[str, tuple],
             others: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """A handed batch in the process that unpickles it: the segment's batch bytes mapped
    with their pages populated (one call, not a fault a page), each placed value a view
    of them (a tensor where it was one), the others as they came. When the last view is
    freed, the segment is marked free for its worker (`_release`)."""
    fd = descriptor.detach()   # multiprocessing's DupFd: the descriptor, received
    try:
        shared = mmap.mmap(fd, max(nbytes, 1),
                           flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    except BaseException:
        os.close(fd)
        raise
    weakref.finalize(shared, _release, fd, flag_offset)
    values = dict(others)
    for key, (offset, shape, strides, dtype, tensor) in placed.items():
        array = np.ndarray(shape, np.dtype(dtype), shared, offset, strides)
        values[key] = sys.modules["torch"].from_numpy(array) if tensor else array
    return {key: values[key] for key in keys}


def _release(fd: int, flag_offset: int) -> None:
    """The trainer is done with a batch: its segment's flag set (a write through the
    descriptor, after the batch's mapping is gone), the descriptor closed."""
    try:
        os.pwrite(fd, bytes([_FREE]), flag_offset)
    finally:
        os.close(fd)
