"""A tf.data checkpoint that knows which dataset it reads.

tf.data saves an iterator with the graph of its pipeline, shard names and all: restored
on the iterator of another dataset, it goes on reading the shards it was saved from (and
with `repeat`, TensorFlow fails inside; restored on a reader of other features, clip or
batch size, it fails with TensorFlow's words, or goes on with the saved reading's
batches). So the iterator of `make_dataset`'s dataset saves one more tensor, what it
reads (its directory and run, split, features, clip and order: an identity, as JSON),
and a restore on an iterator of another is a ValueError in one line naming what
differs, before any read.

It subclasses TensorFlow's own iterator (internal names), so only on the TensorFlow line
the project pins (tf_internals.ON_TESTED_LINE); elsewhere the dataset is returned as it is. A
dataset made from make_dataset's by more transformations is a plain one again.
"""
from __future__ import annotations

import json

import tensorflow as tf

from readers.tfdata.tf_internals import ON_TESTED_LINE


def _classes():
    if not ON_TESTED_LINE:
        return None
    try:
        from tensorflow.python.data.ops import dataset_ops, iterator_ops
    except ImportError:
        return None

    class DatasetIterator(iterator_ops.OwnedIterator):
        def __init__(self, dataset, identity: dict[str, str]):
            self._identity = identity
            super().__init__(dataset)

        def _serialize_to_tensors(self):
            return {**super()._serialize_to_tensors(),
                    "_DATASET": tf.constant(json.dumps(self._identity))}

        def _restore_from_tensors(self, restored_tensors):
            saved = _saved(restored_tensors["_DATASET"].numpy().decode("utf-8", "replace"))
            if saved != self._identity:
                raise ValueError(_refusal(saved, self._identity))
            return super()._restore_from_tensors(restored_tensors)

    class IdentifiedDataset(dataset_ops.UnaryUnchangedStructureDataset):
        def __init__(self, input_dataset, identity: dict[str, str]):
            self._input_dataset, self._identity = input_dataset, identity
            super().__init__(input_dataset, input_dataset._variant_tensor)

        def __iter__(self):
            if not tf.executing_eagerly():
                return super().__iter__()
            return DatasetIterator(self, self._identity)

    return IdentifiedDataset


def _saved(text: str) -> dict[str, str]:
    """The identity a checkpoint saved: JSON, or the dataset alone (in a checkpoint of a
    version before the identity named more)."""
    try:
        saved = json.loads(text)
    except ValueError:
        return {"dataset": text}
    if not (isinstance(saved, dict) and all(isinstance(v, str) for v in saved.values())):
        return {"dataset": text}
    return saved


def _refusal(saved: dict[str, str], now: dict[str, str]) -> str:
    """One line: the datasets, and the aspects that differ, as saved and as now."""
    differ = [key for key in {**now, **saved} if saved.get(key) != now.get(key)]
    changes = "; ".join(f"[{saved.get(key, 'not named')}] saved, "
                        f"[{now.get(key, 'not named')}] now" for key in differ)
    return (f"this tf.data checkpoint reads {saved.get('dataset')}; it cannot be restored on "
            f"a reader of {now['dataset']}: they differ in {', '.join(differ)} ({changes}): "
            "restore it on a reader of what it read, or start this one afresh")


_IDENTIFIED = _classes()
# The pipelines' graph, as a checkpoint saves it with its state: a change to it (2: each
# pass's order from seed words the checkpoint keeps, mixtures drawn from what is left)
# makes a new one, so that a checkpoint of an older one is refused in this module's
# line, not in TensorFlow's ("the dataset definition has changed").
PIPELINE = "readers' tf.data pipeline 2"


def identified(ds: tf.data.Dataset, identity: dict[str, str]) -> tf.data.Dataset:
    """`ds`, whose eager iterators save `identity` (what it reads, in words, by aspect:
    dataset, split, ...) and the PIPELINE with their state, and refuse to be restored
    from a checkpoint that saved another."""
    identity = {**identity, "pipeline": PIPELINE}
    return ds if _IDENTIFIED is None else _IDENTIFIED(ds, identity)
