"""What a reader was asked to read, checked once: the split's shards and the selected
features of a dataset, with the errors both readers give for a wrong request.

`readers.make_dataset` (tf.data) and `readers.numpy` (WindowSource, batches) take the same
path, split, features and batch size: they go through this module so that they refuse the
same requests with the same words. Numpy only: readers.numpy imports it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from readers.format import DatasetSpec, FeatureSpec, Shard, load_spec


def require_positive(**counts: Optional[int]) -> None:
    """ValueError for the first count that is given and not > 0 (a tf.data AUTOTUNE, -1,
    too: these options take counts)."""
    for name, value in counts.items():
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")


@dataclasses.dataclass(frozen=True)
class Selection:
    """A split of a dataset and the features to read from it, as dataset.json has them.

    `features` keep dataset.json's order whatever the order asked for, so that a batch's
    columns come in the same order from both readers."""
    path: str
    split: str
    spec: DatasetSpec
    shards: tuple[Shard, ...]
    features: tuple[FeatureSpec, ...]
    in_pipeline: bool = False     # `shards` are one input pipeline's (`for_pipeline`)

    @classmethod
    def load(cls, path: str, split: str,
             features: Optional[Sequence[str]] = None) -> Selection:
        """dataset.json of `path`, and ValueError for a split it lacks or a feature it does
        not have (`features` None: all of them; a string: that one)."""
        spec = load_spec(path)
        if split not in spec.splits:
            raise ValueError(f"split {split!r} is not in {path}; it has {sorted(spec.splits)}")
        return cls(path, split, spec, tuple(spec.splits[split].shards),
                   _select(spec, features))

    @property
    def windows(self) -> int:
        return sum(shard.examples for shard in self.shards)

    def for_pipeline(self, pipeline: int, pipelines: int) -> Selection:
        """Every `pipelines`-th shard from `pipeline` on: one input pipeline's share, in
        whole shards (tf.data reads shards from start to end)."""
        if len(self.shards) < pipelines:
            raise ValueError(
                f"split {self.split!r} of {self.path} has {len(self.shards)} shards, fewer "
                f"than the {pipelines} input pipelines; rerun the job with --num_shards >= "
                f"{pipelines}")
        return dataclasses.replace(self, shards=self.shards[pipeline::pipelines],
                                   in_pipeline=True)

    def no_batch(self, windows: int, batch_size: int, *, holder: str = "has",
                 options: str = "", remedy: str = "") -> ValueError:
        """The error for a request of which not one batch comes out: `windows`, what
        `holder` gets ("has", "gives this host"), are fewer than `batch_size`; `options`
        name those that left the partial batch out, `remedy` what to change."""
        where = " in this input pipeline" if self.in_pipeline else ""
        return ValueError(f"split {self.split!r} of {self.path} {holder} {windows} windows"
                          f"{where}, fewer than batch_size {batch_size}: {options}not one "
                          f"batch comes out{remedy}")


def _select(spec: DatasetSpec, names: Optional[Sequence[str]]) -> tuple[FeatureSpec, ...]:
    if names is None:
        return tuple(spec.features)
    if isinstance(names, str):
        names = [names]
    known = [f.name for f in spec.features]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; this dataset has {known}")
    return tuple(f for f in spec.features if f.name in names)
