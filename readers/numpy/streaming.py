"""readers.numpy's streaming order: windows read in large sequential ranges of their shards,
mixed in a bounded buffer, for a store where every request waits (gs://).

The random-access order (`epoch_order`) asks for every window alone: on GCS each is a
request of about 30 ms, so a process reads a few thousand windows a second at best
however many it asks for at once. Here a split's shards are cut into chunks of up to
CHUNK_BYTES of consecutive records, each read with one request. An epoch's order:

1. the chunks, permuted by (seed, epoch);
2. taken in groups of up to `buffer_bytes` (at least one chunk);
3. the windows of each group permuted (by (seed, epoch) too).

With a selection (readers.select), the chunks that hold no selected window are left out
(never read), and a chunk's windows in the order are its selected ones. So a batch draws
its windows from the few chunks of one group, of random shards and
places, as tf.data's interleave and shuffle buffer do; the random-access order draws
them from the whole split. The order is a pure function of (seed, epoch) like the
random-access one, so `start_step` and `EpochBatches.resume` resume it exactly.

`Chunks` holds the chunks of the group being read and of the next (read meanwhile),
each fetched by one ranged read, and hands the decoder each record's bytes from them:
about `2 * buffer_bytes` in memory. Numpy only.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np

from readers.arguments import one_of
from readers.shards import Shards

CHUNK_BYTES = 8 << 20
BUFFER_BYTES = 64 << 20
ORDERS = ("random", "stream")


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Consecutive records of one shard: windows [first, first + count) of the split, bytes
    [start, end) of the shard."""
    shard: int
    first: int
    count: int
    start: int
    end: int


def chunks_of(shards: Shards, chunk_bytes: int = CHUNK_BYTES,
              windows: Optional[np.ndarray] = None) -> list[Chunk]:
    """The split's chunks, in order (every shard's offset index is read, all at once);
    with `windows` (a selection's: the split's numbers, sorted), those of the shards
    that hold one of them only."""
    wanted = range(shards.count) if windows is None else shards.holding(windows)
    shards.load_indexes(wanted)
    out = []
    for shard in wanted:
        offsets = shards.offsets(shard)
        first, base = 0, shards.first_window(shard)
        while first < len(offsets) - 1:
            # the last record that ends within chunk_bytes of the first's start (at least one)
            last = max(first + 1, int(np.searchsorted(offsets, offsets[first] + chunk_bytes,
                                                      "right")) - 1)
            out.append(Chunk(shard, base + first, last - first, int(offsets[first]),
                             int(offsets[last])))
            first = last
    return out


def stream_order(chunks: Sequence[Chunk], *, seed: int, epoch: int,
                 buffer_bytes: int = BUFFER_BYTES, selected: Optional[np.ndarray] = None
                 ) -> np.ndarray:
    """All the split's windows in an epoch's streaming order (the module's docstring);
    with `selected` (the split's numbers of a selection's windows, sorted), its windows
    by their place in it (0..len - 1), from the chunks that hold one only."""
    firsts = np.array([c.first for c in chunks], np.int64)
    ends = firsts + np.array([c.count for c in chunks], np.int64)
    if selected is not None:   # each chunk's selected windows: [lo, hi) of `selected`
        firsts, ends = np.searchsorted(selected, firsts), np.searchsorted(selected, ends)
    holding = np.flatnonzero(ends > firsts)
    rng = np.random.default_rng([seed, epoch, 1])
    order, group, group_bytes = [], [], 0
    for k in holding[rng.permutation(len(holding))]:
        chunk = chunks[k]
        group.append(np.arange(firsts[k], ends[k]))
        group_bytes += chunk.end - chunk.start
        if group_bytes >= buffer_bytes:
            order.append(rng.permutation(np.concatenate(group)))
            group, group_bytes = [], 0
    if group:
        order.append(rng.permutation(np.concatenate(group)))
    return np.concatenate(order) if order else np.zeros(0, np.int64)


class Chunks:
    """The bytes of each record of a remote split's batches, from whole chunks: a chunk is
    fetched (one ranged read) before the first batch that needs it, in order of first
    need, up to `ahead_bytes` beyond those being read, and let go after its last batch.

    `fetch(step)` is called once a step, in order (the bookkeeping); `records` may run
    in any thread (it waits for the chunks' reads)."""

    def __init__(self, shards: Shards, chunks: Sequence[Chunk], windows: np.ndarray,
                 batch_size: int, ahead_bytes: int, threads: int = 8):
        """`windows`: those the batches read, in order, `batch_size` a step (numpy
        throughout: an epoch of 100 million windows is one array, not lists of them)."""
        self._shards, self._chunks, self._batch_size = shards, list(chunks), batch_size
        self._firsts = np.array([c.first for c in self._chunks])
        self._of = self.chunk_of(windows).astype(np.int32)      # each window's chunk
        needed, first = np.unique(self._of, return_index=True)
        last = len(self._of) - 1 - np.unique(self._of[::-1], return_index=True)[1]
        self._queue = collections.deque(needed[np.argsort(first)].tolist())  # by first need
        self._last_step = dict(zip(needed.tolist(), (last // batch_size).tolist(), strict=True))
        self._ahead = ahead_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(threads)
        self._held: dict[int, concurrent.futures.Future] = {}

    def chunk_of(self, windows: Union[Sequence[int], np.ndarray]) -> np.ndarray:
        return np.searchsorted(self._firsts, np.asarray(windows), "right") - 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, step: int) -> dict[int, concurrent.futures.Future]:
        """The reads of the chunks batch `step` needs (asked for now if not yet), and
        more ahead in order of first need while those held stay under the bytes ahead."""
        needed = set(self._of[step * self._batch_size:(step + 1) * self._batch_size].tolist())
        held = sum(self._size(c) for c in self._held)
        while self._queue and (self._queue[0] in needed or held < self._ahead):
            c = self._queue.popleft()
            chunk = self._chunks[c]
            self._held[c] = self._pool.submit(self._shards.read_range, chunk.shard,
                                              chunk.start, chunk.end)
            held += self._size(c)
        reads = {c: self._held[c] for c in needed}
        for c in needed:
            if self._last_step[c] == step:
                del self._held[c]
        return reads

    def records(self, reads: dict[int, concurrent.futures.Future],
                windows: Union[Sequence[int], np.ndarray]) -> list[memoryview]:
        """The bytes of each of `windows`, from the chunk reads `fetch` gave for them."""
        located = [self._shards.locate(int(i)) for i in windows]
        out = []
        for c, (start, end) in zip(self.chunk_of(windows).tolist(),
                                   self._shards.spans(located), strict=True):
            first = self._chunks[c].start
            out.append(memoryview(reads[c].result())[start - first:end - first])
        return out

    def _size(self, c: int) -> int:
        return self._chunks[c].end - self._chunks[c].start


def check_order(order: Any, buffer_bytes: Optional[int]) -> str:
    """`order`, one of ORDERS; ValueError for another, or for a `buffer_bytes` given to
    the random-access order, which has no buffer."""
    one_of("order", order, ORDERS)
    if buffer_bytes is not None and order != "stream":
        raise ValueError("buffer_bytes is the streaming order's (order='stream')")
    return order
