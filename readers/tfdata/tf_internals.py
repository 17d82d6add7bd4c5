"""The three tf.data classes the reader builds its pipeline from, behind one check.

They are what `tf.data.TFRecordDataset(files, num_parallel_reads=N)` and `Dataset.map`
are made of, used directly because the public ways cost a trainer's host CPU every epoch
(docs/benchmarks.md, "Reader throughput"):

- `TFRecordDataset(file)` wraps one file in a flat_map whose function is instantiated
  again for every shard at every epoch's start;
- `Dataset.interleave` passes every record through one shared queue, where
  `ParallelInterleaveDataset` gives each open shard its own thread and buffer;
- `Dataset.map` cannot ask for `use_inter_op_parallelism=False`: the parse then runs in
  the thread that asks for the batch, not handed to the inter-op pool, whose threads spin
  while they wait for work.

They are internal names of TensorFlow, so they are used only on the TensorFlow line the
project pins and tests (beam_jobs/dependencies.py); any other version, or one where they
moved, gets the same datasets from the public API, slower but the same records in the
same order (`USING_INTERNALS` says which).
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

TESTED = "2.21."   # the pinned tensorflow's line


ON_TESTED_LINE = tf.__version__.startswith(TESTED)   # internal names may be used


def _internals():
    if not ON_TESTED_LINE:
        return None
    try:
        from tensorflow.python.data.ops.map_op import _MapDataset
        from tensorflow.python.data.ops.readers import ParallelInterleaveDataset, _TFRecordDataset
    except ImportError:
        return None
    return _TFRecordDataset, ParallelInterleaveDataset, _MapDataset


_INTERNALS = _internals()
USING_INTERNALS = _INTERNALS is not None


def tfrecord_file(file: tf.Tensor, compression: str, buffer_size: int) -> tf.data.Dataset:
    """The records of one TFRecord file."""
    if _INTERNALS:
        return _INTERNALS[0](file, compression, buffer_size)
    return tf.data.TFRecordDataset(file, compression, buffer_size)


def interleave(ds: tf.data.Dataset, function: Callable, cycle_length: int, deterministic: bool,
               prefetch_input_elements: int) -> tf.data.Dataset:
    """`function`'s datasets of `ds`'s elements, `cycle_length` at a time, a thread each,
    one element from each in turn (in any order unless `deterministic`)."""
    if _INTERNALS:
        return _INTERNALS[1](ds, function, cycle_length=cycle_length, block_length=1,
                             sloppy=not deterministic, buffer_output_elements=None,
                             prefetch_input_elements=prefetch_input_elements)
    return ds.interleave(function, cycle_length=cycle_length, block_length=1,
                         num_parallel_calls=cycle_length, deterministic=deterministic)


def map_in_caller(ds: tf.data.Dataset, function: Callable) -> tf.data.Dataset:
    """`ds.map(function)`, run in the thread that asks for the element."""
    if _INTERNALS:
        return _INTERNALS[2](ds, function, use_inter_op_parallelism=False)
    return ds.map(function)
