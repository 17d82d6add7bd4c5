"""`WindowSource`: the windows of one split by index, read without TensorFlow
(readers.numpy is the API; readers.numpy.epoch_batches plans an epoch's batches over a source).

A source finds its records with the offset index beside each shard (readers.shards) and
decodes a batch's records into their rows (readers.numpy.scatter); it pickles without its open
files, and its repr names all that decides what `source[i]` is.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Optional, Sequence, Union, cast

import numpy as np

from readers import clips
from readers.arguments import (
    callable_name,
    flag,
    optional_callable,
    whole_number,
    window_numbers,
)
from readers.clips import Clip
from readers.numpy import handover, scatter
from readers.request import SplitRequest
from readers.select import Select, resolve
from readers.shards import Shards

# What `transform` takes and gives: a batch {name: array [batch, ...]} -> a dict.
Transform = Callable[[dict[str, Any]], dict[str, Any]]
Allocate = Callable[[int], np.ndarray]   # bytes -> uint8 memory (readers.numpy.scatter)
# The selection a state was saved on (WindowSource.reading): a state saved before there
# were selections lacks it, and read every window (None).
SELECTION = "selection"


class WindowSource:
    """The windows of one split, by index: `len(source)`, `source[i]` -> {name: array}.

    Args:
      path: the output directory of beam_jobs.make_shards: local, gs:// (with the
        `[gcs]` extra) or any fsspec path.
      split: which split.
      features: names of the features to read (default: all of dataset.json's).
      float_pixels: uint8 pixel windows come as float32 in [0, 1] (default: as stored).
      keep_float16: float16 and bfloat16 latents stay as stored (default: float32).
      clip: a `readers.clips.Clip`: each window's clip (its frames, mask and labels cut
        alike) and `clip_offset`, instead of the whole window.
      epoch: whose random clips (`for_epoch` gives the same source for another).
      transform: `fn(batch) -> dict`, run on every batch this source reads, before it
        is returned: so in the process and thread that read it (a DataLoader's or
        Grain's worker, `batches`' threads), not in the training loop. It gets the
        batch as read, {name: array [batch, ...]}, a clip's included (its frames, mask
        and labels cut, and `clip_offset`); `source[i]` and `__getitems__` give it a
        batch (of one, for `source[i]`) and take rows out of what it returns, so there
        each value it returns must keep the batch's first dimension. It must pickle for
        worker processes started by spawn or forkserver: a module-level function or a
        functools.partial of one does, a lambda or a nested function does not. It is
        no part of a resume state: a resumed run passes the same transform, and its
        batches are those of a run never stopped only when it is deterministic, or
        draws its randomness from the batch (`start`, `video_id`, `clip_offset`).
      select: a `readers.Select`: only the windows it keeps, as windows 0..n-1 of this
        source (`len` is n), resolved now from the split's window tables and (when it
        chooses videos) the videos file; no shard is read for it. A resume state names
        it (readers.select).

    Raises:
      ValueError: no dataset.json, an unknown format version, split or feature, gzip
        shards (they have no index), a dataset.json the shards do not match, a clip
        longer than the windows, or an epoch < 0; a selection on a dataset without
        window tables (before format 6), one that names an id the dataset lacks, or
        one that keeps no window (as make_dataset).
      TypeError: a flag that is no bool, a clip that is no Clip, an epoch that is no
        whole number, a transform that is not callable, a select that is no Select.
    """

    def __init__(self, path: str, split: str = "train",
                 features: Optional[Sequence[str]] = None, *, float_pixels: bool = False,
                 keep_float16: bool = False, clip: Optional[Clip] = None, epoch: int = 0,
                 transform: Optional[Transform] = None, select: Optional[Select] = None):
        self.float_pixels = float_pixels = flag("float_pixels", float_pixels)
        self.keep_float16 = keep_float16 = flag("keep_float16", keep_float16)
        self.clip, self.epoch = clips.checked(clip), _epoch(epoch)
        self.transform = optional_callable("transform", transform)
        self._request = request = SplitRequest.load(path, split, features)
        self.path, self.split, self.spec = path, split, request.spec
        self.features = list(request.features)
        self._shards = Shards(request)
        self._selected = resolve(select, request)   # None: every window
        self._decoder = scatter.Decoder(self.features, float_pixels=float_pixels,
                                        keep_float16=keep_float16, clip=clip,
                                        window=request.spec.window.length)

    def for_epoch(self, epoch: int) -> "WindowSource":
        """This source, reading `epoch`'s clips (a copy: the shards and their indexes
        already read are shared, a DataLoader's workers get the epoch with it)."""
        other = copy.copy(self)
        other.epoch = _epoch(epoch)
        return other

    def __len__(self) -> int:
        return self._shards.size if self._selected is None else len(self._selected)

    def __repr__(self) -> str:
        """Everything that decides what `source[i]` is, and nothing of this process (no
        address): Grain checks a checkpoint's source against its loader's by repr, so a
        loader built the same way in a new process resumes. The path is as given (a
        copy elsewhere is another repr to Grain; `EpochBatches.resume` compares runs)."""
        return (f"WindowSource(path={self.path!r}, split={self.split!r}, "
                f"run_id={self.spec.run_id!r}, features={[f.name for f in self.features]!r}, "
                f"float_pixels={self.float_pixels}, keep_float16={self.keep_float16}, "
                f"clip={self.clip!r}, epoch={self.epoch}, "
                f"transform={callable_name(self.transform)}"
                # a selection only where there is one: the repr of a source of every
                # window is what it was before selections (Grain's saved checkpoints)
                f"{'' if self._selected is None else f', select={self._selected.said()}'})")

    @property
    def reading(self) -> dict[str, Any]:
        """What this source reads, as a resume state names it (JSON-ready): the dataset
        (its path as given), its run, the split and its windows, the features, the clip,
        the selection (readers.select: what was asked, the windows kept and their
        digest; None: every window)."""
        return {"dataset": self.path, "run_id": self.spec.run_id, "split": self.split,
                "windows": len(self), "features": [f.name for f in self.features],
                "clip": None if self.clip is None else dataclasses.asdict(self.clip),
                SELECTION: None if self._selected is None else dict(self._selected.described)}

    def __getitem__(self, i: Union[int, Sequence[int], slice, np.ndarray]) -> dict[str, Any]:
        """Window `i` as {name: array} (`video_id` a numpy bytes scalar, an `S` array's
        item); indices, a slice or a boolean mask give their `read_batch`, so that a
        PyTorch DataLoader with `batch_size=None` and a `BatchSampler` reads each batch
        as one. Indices mean what they mean to numpy (`indices`)."""
        if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
            return self.__getitems__([int(i)])[0]
        # a bool is an int to mypy; read_batch takes it as numpy does (a 0-d mask)
        return self.read_batch(cast(Union[Sequence[int], slice, np.ndarray], i))

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Windows `indices`, one dict each, read as one `read_batch`: a PyTorch
        DataLoader's workers fetch their batches through it (on gs://, a batch's requests
        all at once)."""
        batch = self.read_batch(indices)
        return [{name: _row(column, row) for name, column in batch.items()}
                for row in range(len(indices))]

    def read_batch(self, indices: Union[Sequence[int], slice, np.ndarray], *,
                   allocate: Optional[Allocate] = None) -> dict[str, Any]:
        """Windows `indices` stacked: {name: array [len, ...]}, `video_id` a numpy bytes
        (`S`) array (how: readers.numpy.scatter.Decoder.read_batch). `allocate`: where its
        columns go (`read_split_windows`)."""
        return self.read_split_windows(self.in_split(self.indices(indices)),
                                       allocate=allocate)

    # What a plan of this source's batches (EpochBatches, batches) reads it by: the
    # split's shards, the split's numbers of its windows, a read by those numbers.

    @property
    def shards(self) -> Shards:
        """The split's shards as this source reads them (readers.shards): their windows
        and sizes, whether they are remote; what readers.numpy.streaming cuts into chunks."""
        return self._shards

    @property
    def selected(self) -> Optional[np.ndarray]:
        """The split's window numbers of this source's windows, in order, where it has a
        selection (`select=`); None where it reads every window of the split."""
        return None if self._selected is None else self._selected.windows

    def in_split(self, indices: np.ndarray) -> np.ndarray:
        """The split's window numbers of windows `indices` of this source (with a
        selection, the selected windows'; else the same)."""
        return indices if self._selected is None else self._selected.windows[indices]

    def read_split_windows(self, windows: np.ndarray,
                           records: Optional[Sequence[Union[bytes, memoryview]]] = None, *,
                           allocate: Optional[Allocate] = None) -> dict[str, Any]:
        """The windows numbered `windows` in the split (`in_split`) stacked, as
        `read_batch` gives them; `records`: their frames, already fetched (the streaming
        order's). Every read ends here, in the thread or process that reads: the
        transform runs here. The columns go where `allocate` gives memory; by default,
        in a DataLoader's worker, into memory it hands over without a copy
        (readers.numpy.handover), elsewhere the process's own."""
        shared = handover.arena() if allocate is None else None
        batch = self._decoder.read_batch(
            self._shards, windows, self.epoch, records,
            allocate or (scatter.private_memory if shared is None else shared.allocate))
        if self.transform is not None:
            batch = self.transform(batch)
            if not isinstance(batch, dict):
                raise TypeError(f"transform {callable_name(self.transform)} returned "
                                f"{type(batch).__name__}, not a dict of the batch's values")
        return batch if shared is None else shared.handed(batch)

    def no_batch_error(self, windows: int, batch_size: int, *, holder: str = "has"
                       ) -> ValueError:
        """The error for a plan of which not one batch comes out: the `windows` that
        `holder` gets ("gives this host") are fewer than `batch_size`
        (readers.request's words, as make_dataset's)."""
        return self._request.no_batch_error(windows, batch_size, holder=holder)

    def indices(self, selector: Union[Sequence[int], slice, np.ndarray]) -> np.ndarray:
        """The window numbers a selector names, as numpy reads it (`window_numbers`):
        integers (negative ones count from the end), a slice, or a boolean mask of
        `len(self)`. TypeError for anything else (a float, a bool alone, a nested list),
        IndexError out of range."""
        return window_numbers(selector, len(self))


def _row(column: Any, row: int) -> Any:
    """Row `row` of a batch's column: a numpy array's as a 0-d array (an `S` array's as
    its numpy bytes item), anything else a transform returned (a tensor) as it indexes."""
    if isinstance(column, np.ndarray) and column.dtype.kind != "S":
        return column[row, ...]
    return column[row]


def _epoch(epoch: int) -> int:
    return whole_number("epoch", epoch, 0)
