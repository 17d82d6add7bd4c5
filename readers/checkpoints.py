"""A tf.data checkpoint that knows which dataset it reads.

tf.data saves an iterator with the graph of its pipeline, shard names and all: restored
on the iterator of another dataset, it goes on reading the shards it was saved from (and
with `repeat`, TensorFlow fails inside). So the iterator of `make_dataset`'s dataset
saves one more tensor, the dataset it reads (its directory, run and split), and a
restore on an iterator of another is a ValueError in one line, before any read.

It subclasses TensorFlow's own iterator (internal names), so only on the TensorFlow line
the project pins (tf_internals.ON_TESTED_LINE); elsewhere the dataset is returned as it is. A
dataset made from make_dataset's by more transformations is a plain one again.
"""
from __future__ import annotations

import tensorflow as tf

from readers.tf_internals import ON_TESTED_LINE


def _classes():
    if not ON_TESTED_LINE:
        return None
    try:
        from tensorflow.python.data.ops import dataset_ops, iterator_ops
    except ImportError:
        return None

    class DatasetIterator(iterator_ops.OwnedIterator):
        def __init__(self, dataset, identity: str):
            self._identity = identity
            super().__init__(dataset)

        def _serialize_to_tensors(self):
            return {**super()._serialize_to_tensors(), "_DATASET": tf.constant(self._identity)}

        def _restore_from_tensors(self, restored_tensors):
            saved = restored_tensors["_DATASET"].numpy().decode("utf-8", "replace")
            if saved != self._identity:
                raise ValueError(f"this tf.data checkpoint reads {saved}; it cannot be "
                                 f"restored on a reader of {self._identity}: restore it on "
                                 "a reader of that dataset, or start this one afresh")
            return super()._restore_from_tensors(restored_tensors)

    class IdentifiedDataset(dataset_ops.UnaryUnchangedStructureDataset):
        def __init__(self, input_dataset, identity: str):
            self._input_dataset, self._identity = input_dataset, identity
            super().__init__(input_dataset, input_dataset._variant_tensor)

        def __iter__(self):
            if not tf.executing_eagerly():
                return super().__iter__()
            return DatasetIterator(self, self._identity)

    return IdentifiedDataset


_IDENTIFIED = _classes()


def identified(ds: tf.data.Dataset, identity: str) -> tf.data.Dataset:
    """`ds`, whose eager iterators save `identity` with their state and refuse to be
    restored from a checkpoint that saved another."""
    return ds if _IDENTIFIED is None else _IDENTIFIED(ds, identity)
