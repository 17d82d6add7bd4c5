"""Stream window shards written by `beam_jobs.make_shards` with tf.data.

    import readers
    ds = readers.make_dataset("out/", split="train", batch_size=64)

TensorFlow only: nothing here imports Apache Beam. TensorFlow itself is imported on
first use of `make_dataset` or `load_spec`, so that `readers.format` (the format, shared
with the Beam job) can be imported without it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from readers.format import DatasetSpec, FeatureSpec

if TYPE_CHECKING:
    from readers.dataset import load_spec, make_dataset

__all__ = ["make_dataset", "load_spec", "DatasetSpec", "FeatureSpec"]


def __getattr__(name: str):
    if name in ("make_dataset", "load_spec"):
        from readers import dataset
        return getattr(dataset, name)
    raise AttributeError(f"module 'readers' has no attribute {name!r}")
