"""Which windows the report reads, and reading them: a fixed number, drawn with a seed
across splits and generations, read by random access (readers.numpy's WindowSource),
whatever the dataset's size.

Gzip shards have no index, so no random access: there the windows are drawn from the
first `HEAD_RECORDS` records of at most `HEAD_SHARDS` shards a split (the shuffle put
them there at random), each read from its shard's start. The shuffle check reads the
first records of shards in order the same way (`heads`), for any compression.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from readers import format as data_format
from readers.files import DatasetFiles
from readers.format import tfrecord, wire

HEAD_RECORDS = 64   # of a gzip shard, the records the sample is drawn from
HEAD_SHARDS = 16    # gzip shards a split the sample is drawn from, evenly over its list
READ_CHUNK = 64     # windows read at once (a pixel window decodes to L frames)


@dataclasses.dataclass(frozen=True)
class Ranges:
    """Spans of windows the sample may draw from, each of one split and one generation:
    window numbers [start, start + length) of its split (readers.numpy's numbering)."""
    split: np.ndarray       # object: the split's name
    run: np.ndarray         # object: the run id of the generation
    start: np.ndarray
    length: np.ndarray

    @classmethod
    def of(cls, spec: data_format.DatasetSpec) -> "Ranges":
        """A span per shard with windows: all of it; or, when the shards are gzip, the
        first HEAD_RECORDS of HEAD_SHARDS of them a split."""
        rows = []
        gzip = spec.compression != "none"
        for name, split in spec.splits.items():
            first, heads = 0, {s.file for s in head_shards(split, HEAD_SHARDS)}
            for shard in split.shards:
                length = (min(shard.examples, HEAD_RECORDS) * (shard.file in heads) if gzip
                          else shard.examples)
                if length:
                    rows.append((name, data_format.run_id_of(shard.file) or spec.run_id,
                                 first, length))
                first += shard.examples
        columns = list(zip(*rows, strict=True)) or [(), (), (), ()]
        return cls(np.array(columns[0], object), np.array(columns[1], object),
                   np.array(columns[2], np.int64), np.array(columns[3], np.int64))

    @property
    def size(self) -> int:
        return int(self.length.sum())

    def where(self, keep: np.ndarray) -> "Ranges":
        return Ranges(self.split[keep], self.run[keep], self.start[keep], self.length[keep])

    def groups(self) -> list[tuple[str, str]]:
        """(split, run id) of every group of spans, in dataset.json's order."""
        return list(dict.fromkeys(zip(self.split.tolist(), self.run.tolist(), strict=True)))

    def of_group(self, split: str, run: str) -> "Ranges":
        return self.where((self.split == split) & (self.run == run))

    def take(self, positions: np.ndarray) -> list[tuple[str, str, int]]:
        """(split, run id, window number) of positions in [0, size), counted along the
        spans."""
        ends = np.cumsum(self.length)
        which = np.searchsorted(ends, positions, side="right")
        offsets = positions - (ends[which] - self.length[which])
        return [(self.split[w], self.run[w], int(self.start[w] + o))
                for w, o in zip(which, offsets, strict=True)]


def spread(ranges: Ranges, count: int, seed: int) -> list[tuple[str, str, int]]:
    """`count` windows drawn without replacement over all of `ranges`, in split order."""
    rng = np.random.default_rng([seed, 1])
    count = min(count, ranges.size)
    positions = (np.sort(rng.choice(ranges.size, count, replace=False)) if count
                 else np.zeros(0, np.int64))
    return ranges.take(np.asarray(positions, np.int64))


def across_groups(ranges: Ranges, count: int, seed: int) -> list[tuple[str, str, int]]:
    """`count` windows (fewer when the dataset has fewer), dealt in turn to each (split,
    generation) that has windows left, so that every one shows some: the contact
    sheets."""
    groups = [ranges.of_group(*group) for group in ranges.groups()]
    shares, left = [0] * len(groups), count
    while left and any(share < group.size for share, group in zip(shares, groups, strict=True)):
        for i, group in enumerate(groups):
            if left and shares[i] < group.size:
                shares[i] += 1
                left -= 1
    picked = []
    for i, (group, share) in enumerate(zip(groups, shares, strict=True)):
        rng = np.random.default_rng([seed, 2, i])
        picked += group.take(np.sort(rng.choice(group.size, share, replace=False)))
    return picked


class Windows:
    """Windows of a dataset by (split, window number), as readers.numpy gives them."""

    def __init__(self, path: str, spec: data_format.DatasetSpec):
        self.path, self.spec = path, spec
        self._sources: dict[tuple[str, tuple[str, ...]], Any] = {}

    def read(self, split: str, numbers: Sequence[int], features: Sequence[str]
             ) -> Iterator[dict[str, np.ndarray]]:
        """Batches of at most READ_CHUNK of the windows `numbers`, in that order."""
        for i in range(0, len(numbers), READ_CHUNK):
            chunk = list(numbers[i:i + READ_CHUNK])
            if self.spec.compression == "none":
                yield self._source(split, features).read_batch(chunk)
            else:
                yield self._from_heads(split, chunk, features)

    def _source(self, split: str, features: Sequence[str]):
        from readers.numpy import WindowSource

        key = (split, tuple(features))
        if key not in self._sources:
            self._sources[key] = WindowSource(self.path, split, list(features))
        return self._sources[key]

    def _from_heads(self, split: str, numbers: list[int], features: Sequence[str]
                    ) -> dict[str, np.ndarray]:
        """Windows near the start of gzip shards, each shard read from its start."""
        shards = self.spec.splits[split].shards
        ends = np.cumsum([s.examples for s in shards])
        wanted: dict[int, list[int]] = {}
        for n in numbers:
            shard = int(np.searchsorted(ends, n, side="right"))
            wanted.setdefault(shard, []).append(n - int(ends[shard] - shards[shard].examples))
        found = {}
        for shard, locals_ in wanted.items():
            rows = heads(self.path, self.spec, shards[shard], max(locals_) + 1, features)
            readable = len(next(iter(rows.values())))
            if max(locals_) >= readable:      # a damaged shard: the caller leaves it out
                raise ValueError(f"{shards[shard].file}: {readable} records readable from "
                                 f"its start, record {max(locals_)} wanted; run "
                                 f"python -m readers.inspect {self.path} --verify")
            first = int(ends[shard] - shards[shard].examples)
            found.update({first + k: {name: column[k] for name, column in rows.items()}
                          for k in locals_})
        return {name: np.stack([found[n][name] for n in numbers]) for name in features}


def heads(path: str, spec: data_format.DatasetSpec, shard: data_format.Shard, count: int,
          features: Sequence[str]) -> dict[str, np.ndarray]:
    """The first `count` records of a shard, in order, decoded as readers.numpy decodes
    them (images with Pillow; float16 to float32); fewer when the shard has fewer, or is
    damaged before them.
    Reads about `count` records' bytes from the shard's start, whatever its size."""
    chosen = [spec.feature(name) for name in features]
    columns = {f.name: np.empty((count, *f.shape), f.codec.column_dtype) for f in chosen}
    compression = None if spec.compression == "none" else spec.compression
    done = 0
    with DatasetFiles(path).reader(shard.file, compression) as f:
        while done < count:
            try:
                record = tfrecord.read_frame(f)
            except (EOFError, OSError, zlib.error):   # a gzip stream cut short or damaged
                break
            if record is None or isinstance(record, tfrecord.Lost):
                break
            values = wire.example_values(chosen, record)
            for feature in chosen:
                feature.codec.store(columns[feature.name], done, values[feature.name])
            done += 1
    return {f.name: f.codec.finish(columns[f.name][:done], float_pixels=False,
                                   keep_float16=False) for f in chosen}


def head_shards(split: data_format.SplitInfo, most: int) -> list[data_format.Shard]:
    """At most `most` of a split's shards with records, evenly over its list."""
    shards = [s for s in split.shards if s.examples]
    if len(shards) <= most:
        return shards
    return [shards[i] for i in np.linspace(0, len(shards) - 1, most).round().astype(int)]


def is_pixels(spec: data_format.DatasetSpec) -> bool:
    """Frames [L, H, W, C] of uint8 (else latents)."""
    window = spec.feature("window")
    return window.dtype == "uint8" and len(window.shape) == 4


def optional(spec: data_format.DatasetSpec, name: str) -> Optional[data_format.FeatureSpec]:
    return next((f for f in spec.features if f.name == name), None)
