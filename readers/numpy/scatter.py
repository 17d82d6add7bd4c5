"""How readers.numpy decodes a batch: each record by one scatter read (preadv) in pieces,
its fixed-width values straight into their rows of the batch, the rest of it into a small
buffer, and each feature's codec makes the columns what the reader returns.

A `Decoder` reads batches with the plans it has learnt; a `Plan` says how the frames of one
size are cut into those pieces; `Plans` keeps the plans learnt so far; a `Batch` holds the
columns being filled and a `Rest` buffer per plan. Where the bytes come from, and their
CRCs, is `readers.shards`; where each feature sits in an Example, `readers.format.Layout`;
what a feature's values become in a batch, its codec (`readers.format.codecs`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from readers import format as data_format
from readers.clips import CLIP_OFFSET, Clip, clipped_shape
from readers.format import PER_FRAME
from readers.format.tfrecord import FOOTER_BYTES, HEADER_BYTES, header
from readers.shards import Shards


def private_memory(nbytes: int) -> np.ndarray:
    """`nbytes` of this process's memory, where a batch's columns go unless a reader
    asks for others (readers.numpy.handover: memory a DataLoader's worker hands over)."""
    return np.empty(nbytes, np.uint8)


_ALIGN = 64    # each column's first byte, in a batch's memory: a cache line's


def carved(allocate: Callable[[int], np.ndarray], sizes: dict[Any, int]
           ) -> dict[Any, np.ndarray]:
    """One block of `allocate`d memory cut into a piece of each of `sizes` (bytes by
    name), each piece starting at a multiple of _ALIGN bytes."""
    starts, end = {}, 0
    for name, size in sizes.items():
        starts[name] = end
        end += -(-size // _ALIGN) * _ALIGN
    block = allocate(end)
    return {name: block[starts[name]:starts[name] + size] for name, size in sizes.items()}


class Decoder:
    """Batches of `features` from any records of a split, as readers.numpy returns them:
    the plans it learns serve every later batch."""

    def __init__(self, features: Sequence[data_format.FeatureSpec], *, float_pixels: bool,
                 keep_float16: bool, clip: Optional[Clip] = None, window: int = 0):
        self.features = list(features)
        self.float_pixels, self.keep_float16 = float_pixels, keep_float16
        self.clip, self.window = clip, window
        if clip is not None:
            clip.check_fits(window)
        self._columns = {f.name: (clipped_shape(f.name, f.shape, clip), f.codec.column_dtype)
                         for f in self.features}
        self._fixed_width = [f.name for f in self.features if f.codec.stored_dtype is not None]
        self._outputs = {f.name: (self._columns[f.name][0], dtype) for f in self.features
                         if (dtype := self._finished_apart(f)) is not None}
        if clip is not None:
            self._outputs[CLIP_OFFSET] = ((), np.dtype(np.int64))
        self._plans = Plans(self.features)

    def _finished_apart(self, feature: data_format.FeatureSpec) -> Optional[np.dtype]:
        """The dtype of a feature's column as the readers give it, where `finish` makes
        it in memory of its own (numbers of another dtype than those stored); None where
        it gives the stored column itself (or a view), or no numbers."""
        shape, dtype = self._columns[feature.name]
        if dtype.hasobject:
            return None
        stored = np.zeros((1, *shape), dtype)
        finished = feature.codec.finish(stored, float_pixels=self.float_pixels,
                                        keep_float16=self.keep_float16)
        if np.shares_memory(finished, stored) or finished.dtype.kind in "OSU":
            return None
        return finished.dtype

    def read_batch(self, shards: Shards, indices: Union[Sequence[int], np.ndarray],
                   epoch: int = 0, records: Optional[Sequence[Union[bytes, memoryview]]] = None,
                   allocate: Callable[[int], np.ndarray] = private_memory) -> dict[str, Any]:
        """Windows `indices` of `shards` stacked: {name: array [len, ...]}; with a clip,
        each window's clip of `epoch` and `clip_offset`. The columns' memory is one block
        that `allocate` gives (of as many bytes as it is asked for, uint8).

        Every example of a dataset has the same features and shapes, so the records of one
        size take a few layouts (readers.format.Layout), each learnt from the first record
        that has it, read whole.
        Each later record of that size is read by one preadv in pieces: its fixed-width
        features' values straight into their rows of the batch (one copy, from the page
        cache), the rest into a small buffer; its CRCs are checked over the pieces, and
        the bytes outside the lists must match the layout's, else it is read whole again
        and its own layout learnt. A clip's frames go into the rows the same way, and the
        frames it skips into a scratch buffer (the CRC covers them too; with a frame step,
        the window, whose kept frames are then copied out); encoded frames it skips are
        never decoded. The records of a remote split are fetched first, all at
        once (or come as `records`, their bytes from readers.numpy.streaming), and taken from
        memory in the same way."""
        batch = Batch(self._columns, self._fixed_width, len(indices), self.clip, self.window,
                      allocate, self._outputs)
        offsets = (self.clip.offsets(self.window, indices, epoch).tolist()
                   if self.clip is not None else [None] * len(indices))
        located = [shards.locate(int(i)) for i in indices]
        spans = shards.spans(located)
        fetched = records if records is not None else shards.fetch(located, spans)
        for row, ((shard, in_shard), (start, end), data, offset) in enumerate(
                zip(located, spans, fetched, offsets, strict=True)):
            plan = self._plans.first(end - start)
            if plan is not None:
                rest = batch.rest(plan)
                pieces, crc_data = batch.pieces(plan, row, rest, offset)
                shards.read(shard, pieces, start, end, data)
                shards.check(shard, in_shard, start, rest.buffer, crc_data, plan.header)
                layout = plan.layout_of(rest.buffer)
                if layout is not None:
                    batch.store(plan, layout, row, rest, offset)
                    continue
            self._read_whole(shards, shard, in_shard, data, batch, row, offset)
        columns = {f.name: f.codec.finish(batch.columns[f.name], float_pixels=self.float_pixels,
                                          keep_float16=self.keep_float16,
                                          out=batch.outputs.get(f.name))
                   for f in self.features}
        if self.clip is not None:
            columns[CLIP_OFFSET] = batch.outputs[CLIP_OFFSET]
            columns[CLIP_OFFSET][:] = offsets
        return columns

    def _read_whole(self, shards: Shards, shard: int, in_shard: int, data: Any,
                    batch: Batch, row: int, offset: Optional[int]) -> None:
        """A record no plan fits, read whole into row `row`: its layout learnt (a plan
        for its size), its pieces copied out of the frame as a planned read would have
        put them, and stored. ValueError naming the shard and record when it is no
        example of the features."""
        frame, size = shards.frame(shard, in_shard, data)
        try:
            layout = data_format.layout(self.features, frame, HEADER_BYTES,
                                        size - FOOTER_BYTES)
        except ValueError as e:
            raise ValueError(f"shard {shards.name(shard)}, record {in_shard}: "
                             f"{e}") from None
        plan = self._plans.learn(size, layout)
        rest = batch.rest(plan)
        done = 0
        for piece in batch.pieces(plan, row, rest, offset)[0]:
            piece[:] = np.frombuffer(frame, np.uint8, len(piece), done)
            done += len(piece)
        batch.store(plan, layout, row, rest, offset)


# Records of one size read the same way as long as their direct features sit in the same
# places: in this job's examples always, since the lists that vary in size (video_id,
# start) sit between the fixed-width ones before and after them (keys sorted). Their rests
# may still differ inside (a longer id, a shorter varint): a plan keeps a few layouts.
MAX_SIZES, MAX_PLANS_PER_SIZE, MAX_LAYOUTS_PER_PLAN = 1024, 4, 8


class Plans:
    """The plans learnt so far, by frame size, the one to try first at the front."""

    def __init__(self, features: Sequence[data_format.FeatureSpec]):
        self.features = list(features)
        self._by_size: dict[int, list[Plan]] = {}

    def first(self, size: int) -> Optional[Plan]:
        plans = self._by_size.get(size)
        return plans[0] if plans else None

    def learn(self, size: int, layout: data_format.Layout) -> Plan:
        """The plan that reads frames of `size` as `layout` wants, now the first tried."""
        if len(self._by_size) >= MAX_SIZES:
            self._by_size.clear()
        plans = self._by_size.get(size, [])
        plan = next((p for p in plans if p.direct_spans == layout.direct), None)
        if plan is None:
            plan = Plan(layout, self.features)
        plan.learn(layout)
        # a new list, not one changed in place: threads of `batches` may read it meanwhile
        self._by_size[size] = [plan, *(p for p in plans if p is not plan)][:MAX_PLANS_PER_SIZE]
        return plan


class Plan:
    """How frames of one size whose direct features sit in the same places are read: the
    frame cut into pieces, in order: spans of a rest buffer (the frame's header, the
    example's rest, its footer) with a direct feature's row of the batch between each
    two; and the layouts their rests have been seen to take.
    """

    def __init__(self, layout: data_format.Layout, features: Sequence[data_format.FeatureSpec]):
        self.direct_spans = layout.direct
        self.header = header(layout.size)
        self.layouts: list[data_format.Layout] = []
        self.rest_size = HEADER_BYTES + layout.rest_size + FOOTER_BYTES
        self.direct = [name for name, _, _ in layout.direct]
        self.others = [f for f in features if f.name not in self.direct]
        # done: example bytes placed so far
        self.rest_spans, at, done = [], 0, -HEADER_BYTES
        for _, first, last in layout.direct:
            self.rest_spans.append((at, at + first - done))
            at, done = at + first - done, last
        self.rest_spans.append((at, self.rest_size))

    def learn(self, layout: data_format.Layout) -> None:
        if layout not in self.layouts:
            self.layouts = [layout, *self.layouts][:MAX_LAYOUTS_PER_PLAN]

    def layout_of(self, rest: bytearray) -> Optional[data_format.Layout]:
        """The layout a frame's rest has, if it is one of those seen."""
        for layout in self.layouts:
            if layout.fits(rest, HEADER_BYTES):
                return layout
        return None


class Rest:
    """A plan's rest buffer in one batch, and its spans as arrays (preadv writes into
    them; the CRC function reads them), with and without the header and footer."""

    def __init__(self, plan: Plan):
        self.buffer = bytearray(plan.rest_size)
        view = np.frombuffer(self.buffer, np.uint8)
        self.pieces = [view[a:b] for a, b in plan.rest_spans]
        self.data = [view[max(a, HEADER_BYTES):min(b, plan.rest_size - FOOTER_BYTES)]
                     for a, b in plan.rest_spans]


class Batch:
    """The columns of one batch being read, as stored, and a rest buffer per plan.

    With a clip, a direct per-frame feature's frames before the clip go to a scratch
    buffer; those after it spill over into the next rows of the column, which are read
    later (the column's buffer has room for the last row's), so that the clip and what
    follows it are one piece; with a frame step the window goes whole to the scratch
    buffer and `store` copies the kept frames out."""

    def __init__(self, columns: dict[str, tuple[tuple[int, ...], np.dtype]],
                 fixed_width: Sequence[str], n: int, clip: Optional[Clip] = None,
                 window: int = 0, allocate: Callable[[int], np.ndarray] = private_memory,
                 outputs: Optional[dict[str, tuple[tuple[int, ...], np.dtype]]] = None):
        """`columns` as stored and `outputs`, the columns a batch gives that are not
        those (of another dtype; clip offsets), each (shape of a row, dtype): the
        outputs and the stored columns that are not made into outputs in one block of
        `allocate`d memory, the rest (Python objects, the stored columns of outputs) in
        this process's."""
        self.clip, self.window = clip, window
        outputs = outputs or {}
        cut = [name for name in fixed_width if clip is not None and name in PER_FRAME]
        self._frame_bytes = {name: math.prod(columns[name][0][1:]) * columns[name][1].itemsize
                             for name in cut}
        sizes = {("stored", name): self._storage_bytes(name, shape, dtype, n)
                 for name, (shape, dtype) in columns.items()
                 if not dtype.hasobject and name not in outputs}
        sizes.update({("output", name): n * math.prod(shape) * dtype.itemsize
                      for name, (shape, dtype) in outputs.items()})
        memory = carved(allocate, sizes)
        self.outputs = {name: memory["output", name].view(dtype).reshape(n, *shape)
                        for name, (shape, dtype) in outputs.items()}
        self.columns: dict[str, np.ndarray] = {}
        self._storage: dict[str, np.ndarray] = {}
        for name, (shape, dtype) in columns.items():
            if dtype.hasobject:            # Python objects (ids): numpy's own memory
                self.columns[name] = np.empty((n, *shape), dtype)
                continue
            piece = memory.get(("stored", name))
            if piece is None:
                piece = private_memory(self._storage_bytes(name, shape, dtype, n))
            if name in self._frame_bytes and clip is not None:
                # a clipped per-frame column over storage with room for the frames after
                # the last row's clip (they spill over, and are read with it in one piece)
                self._storage[name] = piece
                self.columns[name] = piece[:n * clip.length * self._frame_bytes[name]].view(
                    dtype).reshape(n, *shape)
            else:
                self.columns[name] = piece.view(dtype).reshape(n, *shape)
        self.rows = {name: self.columns[name].reshape(n, math.prod(columns[name][0])).view(
                     np.uint8) for name in fixed_width}
        self._skipped = {name: np.empty(window * size, np.uint8)
                         for name, size in self._frame_bytes.items()}
        self._add_step_views(n)
        self._rests: dict[Plan, Rest] = {}

    def _storage_bytes(self, name: str, shape: tuple[int, ...], dtype: np.dtype, n: int) -> int:
        """The bytes column `name` takes: its rows; a clipped column's, and the frames
        after the last row's clip."""
        size = self._frame_bytes.get(name)
        if size is None or self.clip is None:
            return n * math.prod(shape) * dtype.itemsize
        return (n * self.clip.length + self.window - self.clip.length) * size

    def _add_step_views(self, n: int) -> None:
        """With a clip's frame step: the scratch buffer as a window's frames, and the
        rows as their clips' frames, for `store` to copy the kept frames across."""
        clip = self.clip
        if clip is None or clip.step <= 1:
            return
        self._window_frames = {name: self._skipped[name].reshape(self.window, size)
                               for name, size in self._frame_bytes.items()}
        self._clip_frames = {name: self.rows[name].reshape(n, clip.length, size)
                             for name, size in self._frame_bytes.items()}

    def rest(self, plan: Plan) -> Rest:
        rest = self._rests.get(plan)
        if rest is None:
            rest = self._rests[plan] = Rest(plan)
        return rest

    def pieces(self, plan: Plan, row: int, rest: Rest, offset: Optional[int]
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Where a frame of this plan for row `row` (its clip from `offset`) is read to,
        piece by piece; and the pieces its CRC covers (the same, but the rest's without
        the frame's header and footer)."""
        pieces, crc_data = [], []
        for k, name in enumerate(plan.direct):
            values = self._values(name, row, offset)
            pieces += [rest.pieces[k], *values]
            crc_data += [rest.data[k], *values]
        return pieces + [rest.pieces[-1]], crc_data + [rest.data[-1]]

    def _values(self, name: str, row: int, offset: Optional[int]) -> list[np.ndarray]:
        """The pieces a direct feature's values are read to: its row; with a clip, the
        frames before it to the scratch buffer, then the clip and the frames after it
        from the row on; with a frame step, the window to the scratch buffer (a piece a
        frame would cost Python more than `store`'s copy, docs/benchmarks.md)."""
        size = self._frame_bytes.get(name) if offset is not None else None
        clip = self.clip   # set where a frame has a size (a cut column) and an offset
        if size is None or clip is None or offset is None:
            return [self.rows[name][row]]
        if clip.step > 1:
            return [self._skipped[name]]
        row_start = row * clip.length * size
        rest = self._storage[name][row_start:row_start + (self.window - offset) * size]
        return [self._skipped[name][:offset * size], rest] if offset else [rest]

    def store(self, plan: Plan, layout: data_format.Layout, row: int, rest: Rest,
              offset: Optional[int]) -> None:
        """The values that the rest holds (the features that are not direct), into row
        `row` of their columns, a per-frame one's clip from `offset` only; and a frame
        step's kept frames out of the scratch buffer."""
        clip = self.clip   # set wherever an offset is given
        if offset is not None and clip is not None and clip.step > 1:
            frames = clip.frames(offset)
            for name in plan.direct:
                if name in self._window_frames:
                    self._clip_frames[name][row] = self._window_frames[name][frames]
        values = layout.values(plan.others, rest.buffer, HEADER_BYTES)
        for f in plan.others:
            value = values[f.name]
            if offset is not None and clip is not None and f.name in PER_FRAME:
                value = value[clip.frames(offset)]
            f.codec.store(self.columns[f.name], row, value)
