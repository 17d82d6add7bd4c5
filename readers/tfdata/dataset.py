"""The tf.data pipeline over a finished output directory of `beam_jobs.make_shards`.

dataset.json -> shard list -> [the shards a selection keeps windows of] -> [this input
pipeline's shards] -> for each pass: shard permutation -> interleave (each shard checked
to give dataset.json's count; with a selection, its other records skipped) -> record
shuffle -> batch -> vectorized parse -> prefetch.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from readers import clips
from readers import format as data_format
from readers.arguments import flag, optional_whole_number, seed_number, whole_number
from readers.clips import CLIP_OFFSET, Clip
from readers.request import SplitRequest
from readers.select import Select, SelectedWindows, resolve
from readers.tfdata import checkpoints, malloc, tf_internals

# The shuffle buffer holds serialized records: size it in bytes, not records, so that
# a buffer of pixel windows stays as modest as one of latent windows. The windows are
# already shuffled globally at write time; this buffer only varies the order per epoch,
# and a large one costs: page faults on its memory, and a first batch only once it is full
# (docs/benchmarks.md, "Reader throughput").
SHUFFLE_BUFFER_BYTES = 16 << 20
MAX_SHUFFLE_BUFFER = 1024
MAX_CYCLE_LENGTH = 8
# Shards opened ahead of the ones being read, so that a shard boundary waits for no open.
PREFETCH_SHARDS = 2
# Each open shard's thread hands over its records in groups of up to this many bytes (at
# most MAX_GROUP records): a handover wakes a sleeping thread, which costs the CPU more than
# moving a record, all the more when another process is busy on the cores.
GROUP_BYTES = 1 << 20
MAX_GROUP = 8
REMOTE_READ_BUFFER = 8 << 20


def _example_bytes(features: Sequence[data_format.FeatureSpec]) -> int:
    """An upper estimate of one serialized example's size, from the feature shapes."""
    return sum(f.codec.size_estimate() + 64 for f in features)


def make_dataset(path: str, split: str = "train", batch_size: int = 64, *,
                 shuffle: bool = True, seed: Optional[int] = None, repeat: bool = False,
                 drop_remainder: bool = True, features: Optional[Sequence[str]] = None,
                 input_context: Optional[tf.distribute.InputContext] = None,
                 shuffle_buffer: Optional[int] = None,
                 cycle_length: Optional[int] = None, float_pixels: bool = False,
                 keep_float16: bool = False, structure: Any = None,
                 clip: Optional[Clip] = None, select: Optional[Select] = None
                 ) -> tf.data.Dataset:
    """Batches of windows from `path`, a directory written by `beam_jobs.make_shards`.

    Each element is a dict of feature name -> tensor with a static shape
    ([batch_size, ...] when drop_remainder is True, the default), or the nested tuple
    `structure` asks for.

    Args:
      path: the output directory (local or gs://).
      split: which split to read.
      batch_size: the global batch size; with `input_context`, each replica gets
        `input_context.get_per_replica_batch_size(batch_size)`.
      shuffle: reshuffle the shard list every epoch and shuffle records in a buffer.
        False reads the shards, and the records in each, in order.
      seed: a whole number in [0, 2**63): makes the shuffled order reproducible (and the
        interleave deterministic).
      repeat: repeat forever, each epoch in a new order.
      drop_remainder: drop the last partial batch so that the batch dimension is static.
      features: names of the features to parse (default: all of dataset.json's).
      input_context: a `tf.distribute.InputContext`: this input pipeline reads every
        num_input_pipelines-th shard, taken before any shuffle.
      shuffle_buffer: records in the shuffle buffer (default: what fits in 16 MB,
        at least batch_size, at most 1024).
      cycle_length: shards read at once (default: min(8, shards)).
      float_pixels: uint8 pixel windows come as float32 in [0, 1] (default: uint8 as stored).
      keep_float16: float16 and bfloat16 latents stay as stored (default: cast to
        float32).
      structure: a nested tuple of feature names, e.g. `(("window", "mask"), "labels")`:
        each element is that tuple of tensors instead of a dict, as Keras' `fit` takes it.
        Parses only those features unless `features` says otherwise.
      clip: a `readers.clips.Clip`: each window's clip, [batch, clip.length, ...] for the
        window, mask and labels (static), and `clip_offset` [batch], where in the window
        it starts. Random offsets come from a stream seeded by `clip.seed`, one value per
        batch in read order (each record's offset drawn from it without state), new each
        iteration (and restored with the iterator).
      select: a `readers.Select`: only the windows it keeps (readers.numpy's set),
        resolved now from the split's window tables (and the videos file when it chooses
        videos). A shard it keeps none of is never opened; in the others, the records it
        leaves out are skipped as they are read. Shuffling, `input_context` (over the
        shards kept) and checkpoints work as without; a checkpoint names the selection.

    Returns:
      A `tf.data.Dataset` of batches, prefetched.

    Raises:
      ValueError: no dataset.json (not a finished dataset), an unknown format version,
        split or feature name, a split without shards, or fewer windows than a batch
        (with drop_remainder=True and no repeat), or fewer shards than input pipelines;
        a count < 1, a `structure` naming clip_offset without a clip; a selection on a
        dataset without window tables (before format 6), or one that keeps no window.
        A corrupt or short shard is an error naming it when the batch that reads it is
        made.
      TypeError: a count or seed that is no whole number, a flag that is no bool, a clip
        that is no Clip, a select that is no Select.
    """
    batch_size = whole_number("batch_size", batch_size, 1)
    seed = None if seed is None else seed_number("seed", seed)
    shuffle_buffer = optional_whole_number("shuffle_buffer", shuffle_buffer, 1)
    cycle_length = optional_whole_number("cycle_length", cycle_length, 1)
    shuffle, repeat, drop_remainder, float_pixels, keep_float16 = (
        flag(name, value) for name, value in (
            ("shuffle", shuffle), ("repeat", repeat), ("drop_remainder", drop_remainder),
            ("float_pixels", float_pixels), ("keep_float16", keep_float16)))
    clip = clips.checked(clip)
    request = SplitRequest.load(path, split, _features_to_parse(features, structure, clip))
    window = request.spec.window.length
    if clip is not None:
        clip.check_fits(window)    # a clip longer than the windows: ValueError now, not in a map
    request, records, kept = _kept_shards(path, split, request, select)
    if input_context is not None:
        request = request.for_pipeline(input_context.input_pipeline_id,
                                       input_context.num_input_pipelines)
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    _check_a_batch(request, records, batch_size, drop_remainder=drop_remainder,
                   repeat=repeat)

    malloc.keep_freed_memory()   # each batch a fresh block of MB: see readers/tfdata/malloc.py
    deterministic = not shuffle or seed is not None
    shards, read = _shards(path, request, records)
    if shuffle:   # clean epochs, each in a new order
        ds = _shuffled_passes(shards, read, request, batch_size=batch_size, seed=seed,
                              repeat=repeat, deterministic=deterministic,
                              shuffle_buffer=shuffle_buffer, cycle_length=cycle_length)
    else:
        ds = tf.data.Dataset.from_tensor_slices(shards).flat_map(read)
        ds = ds.repeat() if repeat else ds
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    if clip is not None:   # a random number beside each batch: the seed of its clips
        ds = tf.data.Dataset.zip(ds, tf.data.Dataset.random(
            clip.seed, rerandomize_each_iteration=True))
    parse = _parser(request.features, window, clip, structure, float_pixels=float_pixels,
                    keep_float16=keep_float16)
    # A checkpoint of its iterator names the dataset and the reading, and is refused on
    # another's: restored, it would give the batches of the reading it was saved on.
    identity = _identity(path, request, clip, batch_size=batch_size, shuffle=shuffle,
                         seed=seed, repeat=repeat, drop_remainder=drop_remainder,
                         float_pixels=float_pixels, keep_float16=keep_float16,
                         input_context=input_context, kept=kept)
    return checkpoints.identified(
        _parsed(ds, parse, request.features, deterministic=deterministic), identity)


def _features_to_parse(features: Optional[Sequence[str]], structure: Any,
                       clip: Optional[Clip]) -> Optional[Sequence[str]]:
    """`features`, or by default the ones `structure` names (clip_offset aside: no record
    holds it); ValueError for a structure naming clip_offset without a clip."""
    named = [] if structure is None else tf.nest.flatten(structure)
    if CLIP_OFFSET in named and clip is None:
        raise ValueError(f"structure names {CLIP_OFFSET}, which only a clip gives: pass "
                         "clip=readers.clips.Clip(...), or leave it out of the structure")
    if features is None and structure is not None:
        features = [name for name in named if name != CLIP_OFFSET]
    return features


def _kept_shards(path: str, split: str, request: SplitRequest, select: Optional[Select]
                 ) -> tuple[SplitRequest, Optional[dict[str, np.ndarray]],
                            Optional[SelectedWindows]]:
    """(request, records, kept): with a `select` that keeps windows, the request of only
    the shards it keeps windows of, shard file -> the record numbers it keeps there, and
    the windows it keeps; (request, None, None) for every window. ValueError for a split
    without shards, or a `select` that keeps no window of it (readers.select.resolve)."""
    if not request.shards:
        raise ValueError(f"split {split!r} of {path} has no shards (no windows)")
    kept = resolve(select, request)    # None: every window
    if kept is None:
        return request, None, None
    records = dict(zip((s.file for s in request.shards), kept.in_shards(request.shards),
                       strict=True))
    request = dataclasses.replace(request, shards=tuple(
        s for s in request.shards if len(records[s.file])))
    return request, records, kept


def _check_a_batch(request: SplitRequest, records: Optional[dict[str, np.ndarray]],
                   batch_size: int, *, drop_remainder: bool, repeat: bool) -> None:
    """ValueError when the windows read (`records`' with a selection) are fewer than a
    batch that must be whole: with drop_remainder, or repeated, when a batch would take
    windows of several epochs (10**9: forever)."""
    windows = (request.windows if records is None else
               sum(len(records[s.file]) for s in request.shards))
    if windows < batch_size and (drop_remainder or repeat):
        raise request.no_batch_error(
            windows, batch_size, options="with drop_remainder=True "
            if drop_remainder else "whole (repeat=True would mix epochs in one): ",
            remedy="; lower batch_size" + ("" if repeat else ", or pass drop_remainder=False"))


def _shards(path: str, request: SplitRequest, records: Optional[dict[str, np.ndarray]]
            ) -> tuple[tuple[tf.Tensor, ...], Any]:
    """(shards, read): each shard's file, count and stand-in for its lost records, as
    columns of one row a shard, and the function that gives a shard's records from its
    row (see `shard_records`); with `records`, only the ones a selection keeps."""
    spec = request.spec
    files = [os.path.join(path, shard.file) for shard in request.shards]
    counts = [shard.examples for shard in request.shards]
    local = not data_format.is_remote(path)
    compression = data_format.tf_compression_type(spec.compression)
    lost = [f"No more readable records in shard {f}: it is corrupt or truncated, with fewer "
            f"than the {n} dataset.json lists, or gone ({path} rewritten or deleted while "
            f"this reader was open: open it again; python -m readers.inspect {path} --verify "
            "lists what is wrong)" for f, n in zip(files, counts, strict=True)]
    shards = (tf.constant(files), tf.constant(counts, tf.int64), tf.constant(lost))
    gone = (f"{path} was rewritten or deleted while this reader was open (it reads "
            f"{f'run {spec.run_id}' if spec.run_id else 'a dataset without a run id'}): ")
    read = functools.partial(shard_records, compression=compression, local=local, gone=gone)
    if records is not None:
        shards, read = _kept_records(shards, read, [records[s.file] for s in request.shards],
                                     counts)
    return shards, read


def _shuffled_passes(shards: tuple[tf.Tensor, ...], read, request: SplitRequest, *,
                     batch_size: int, seed: Optional[int], repeat: bool, deterministic: bool,
                     shuffle_buffer: Optional[int], cycle_length: Optional[int]
                     ) -> tf.data.Dataset:
    """The records of `shards` (columns, a row a shard, read by `read`), pass after pass
    (one without `repeat`), each in an order of its own: the shards permuted,
    `cycle_length` read at once, in groups of about GROUP_BYTES, and the records
    shuffled in a buffer of `shuffle_buffer` (default: about SHUFFLE_BUFFER_BYTES of
    them, at least a batch).

    Each pass's order is a pure function of its pair of seed words, the next of a random
    stream seeded by `seed` (new each iteration of the dataset, as Keras' `fit` iterates
    it once an epoch): its shard permutation and its buffer's seeds are stateless draws
    from them. The stream's place and the pass being read, its words with it, are what
    an iterator checkpoint keeps, so a restored iterator reads the very passes of a run
    never stopped. TensorFlow's own reshuffle each iteration does not: the parallel
    interleave leaves its spent input, the shard shuffle whose seed generator counts the
    passes, out of its checkpoint, and a restored iterator drew other shard orders from
    the next pass on."""
    example_bytes = _example_bytes(request.spec.features)
    group = max(1, min(MAX_GROUP, GROUP_BYTES // example_bytes))
    files = len(request.shards)
    cycle = cycle_length or min(MAX_CYCLE_LENGTH, files)
    buffer = shuffle_buffer or max(batch_size, min(
        MAX_SHUFFLE_BUFFER, SHUFFLE_BUFFER_BYTES // example_bytes))

    def one_pass(words: tf.Tensor) -> tf.data.Dataset:
        order_seed, buffer_seed = tf.unstack(tf.random.experimental.stateless_split(words))
        order = tf.random.experimental.stateless_shuffle(tf.range(files), order_seed)
        ds = tf.data.Dataset.from_tensor_slices(tuple(tf.gather(c, order) for c in shards))
        ds = tf_internals.interleave(ds, lambda *shard: read(*shard).batch(group), cycle,
                                     deterministic, PREFETCH_SHARDS).unbatch()
        return _buffer_shuffled(ds, buffer, tf.random.stateless_uniform(
            [2], buffer_seed, minval=None, maxval=None, dtype=tf.int64))

    passes = tf.data.Dataset.random(seed, rerandomize_each_iteration=True).batch(2)
    return (passes if repeat else passes.take(1)).flat_map(one_pass)


def _buffer_shuffled(records: tf.data.Dataset, buffer: int, seeds: tf.Tensor
                     ) -> tf.data.Dataset:
    """`records.shuffle(buffer)` by the two int64 `seeds`, in a function of the pipeline
    that checkpoints: `Dataset.shuffle` there takes a seed-generator resource, state that
    no iterator checkpoint saves ("DummySeedGenerator is stateful"); the op it is made
    of, given both seeds, needs none (the same order, from the public raw op)."""
    spec = records.element_spec
    return tf.data.experimental.from_variant(tf.raw_ops.ShuffleDataset(
        input_dataset=tf.data.experimental.to_variant(records),
        buffer_size=tf.constant(buffer, tf.int64), seed=seeds[0], seed2=seeds[1],
        reshuffle_each_iteration=False, output_types=[spec.dtype],
        output_shapes=[spec.shape]), spec)


def _parser(selected: Sequence[data_format.FeatureSpec], window: int, clip: Optional[Clip],
            structure: Any, *, float_pixels: bool, keep_float16: bool):
    """The function that parses a batch of serialized records (and with a clip, the
    batch's random number) into the batch of `selected`'s values: cut to the clip,
    and nested as `structure` asks."""
    parse_spec = {f.name: f.codec.parse_feature() for f in selected}

    def parse(serialized: tf.Tensor, random: Optional[tf.Tensor] = None):
        parsed = tf.io.parse_example(serialized, parse_spec)
        options = {"float_pixels": float_pixels, "keep_float16": keep_float16}
        cut = clip is not None and clip.length < window   # a whole window: nothing to cut
        values = {f.name: f.codec.decode(parsed[f.name], **options) for f in selected
                  if not cut or f.name not in data_format.PER_FRAME}
        if clip is not None:
            offsets = _clip_offsets(clip, window, serialized, random)
            values[CLIP_OFFSET] = offsets
        if cut and clip is not None:   # (cut says it; mypy needs it said)
            frames = offsets[:, None] + tf.range(0, clip.span, clip.step, tf.int64)
            values.update({f.name: f.codec.decode_clip(parsed[f.name], frames, **options)
                           for f in selected if f.name in data_format.PER_FRAME})
        if structure is None:
            return values
        return tf.nest.map_structure(lambda name: values[name], structure)
    return parse


def _parsed(batches: tf.data.Dataset, parse, selected: Sequence[data_format.FeatureSpec], *,
            deterministic: bool) -> tf.data.Dataset:
    """`batches` parsed by `parse`, prefetched.

    Parsing latents is a copy: a thread of its own only adds handoffs. Decoding PNG or
    JPEG frames is work worth spreading, in parallel maps. Without them, nothing is left
    to tune but the prefetch depth, which grows as it is drained without tf.data's
    autotuning too. With autotuning, whole epochs of latent windows ran at half speed
    from time to time (benchmarks/bench_reader.py)."""
    if any(f.codec.decodes_images for f in selected):
        return batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=deterministic).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.autotune.enabled = False
    return tf_internals.map_in_caller(batches, parse).prefetch(
        tf.data.AUTOTUNE).with_options(options)


def _identity(path: str, request: SplitRequest, clip: Optional[Clip], *, batch_size: int,
              shuffle: bool, seed: Optional[int], repeat: bool, drop_remainder: bool,
              float_pixels: bool, keep_float16: bool,
              input_context: Optional[tf.distribute.InputContext],
              kept: Optional[SelectedWindows] = None) -> dict[str, str]:
    """What an iterator's checkpoint names (readers.tfdata.checkpoints): the dataset and
    its run, the split (and this input pipeline's part), the features and their values, the
    clip, the order, and a selection (only where there is one: a checkpoint saved before
    selections existed restores on a reader of every window)."""
    part = ("" if input_context is None else f", input pipeline "
            f"{input_context.input_pipeline_id} of {input_context.num_input_pipelines}")
    return {"dataset": dataset_named(path, request.spec.run_id),
            "split": f"split {request.split!r}{part}",
            "features": f"features {[f.name for f in request.features]}"
                        f"{values_named(float_pixels, keep_float16)}",
            "clip": "no clip" if clip is None else f"clip {clip}",
            "order": _order_named(batch_size, drop_remainder=drop_remainder,
                                  shuffle=shuffle, seed=seed, repeat=repeat),
            **({} if kept is None else {"selection": kept.said()})}


def dataset_named(path: str, run_id: Optional[str]) -> str:
    """How an identity names a dataset: its directory (absolute where local) and run (both
    readers' checkpoints, readers.tfdata.mixed_dataset's too). Any URL is kept as given,
    file:// too (not `is_remote`, which counts file:// as local): saved checkpoints name
    datasets so."""
    return f"{path if '://' in path else os.path.abspath(path)} (run {run_id or 'without an id'})"


def values_named(float_pixels: bool, keep_float16: bool) -> str:
    """How an identity's features name the values' options ("" for neither)."""
    return "".join(text for wanted, text in ((float_pixels, ", float pixels"),
                                             (keep_float16, ", float16 kept")) if wanted)


def _order_named(batch_size: int, *, drop_remainder: bool, shuffle: bool,
                 seed: Optional[int], repeat: bool) -> str:
    """How an identity names the order: the batches, the shuffle and its seed, the
    repeat."""
    order = ("shuffled without a seed" if shuffle and seed is None else
             f"shuffled with seed {seed}" if shuffle else "in order")
    return (f"batches of {batch_size}{'' if drop_remainder else ' or fewer'}, "
            f"{order}{', repeated' if repeat else ''}")


def _kept_records(shards: tuple[tf.Tensor, ...], read, kept: list[np.ndarray],
                  counts: list[int]):
    """(shards, read) where each shard's records are only those a selection keeps:
    `kept[i]`, the record numbers of shard i. The shards' rows get the place of their
    first record in one flag per record of them all (a constant: a byte a record), and
    each record read is zipped with its number and kept when its flag is set."""
    starts = np.concatenate([[0], np.cumsum(counts[:-1], dtype=np.int64)]).astype(np.int64)
    flags = np.zeros(int(sum(counts)), bool)
    for start, records in zip(starts, kept, strict=True):
        flags[start + records] = True
    flags = tf.constant(flags)

    def read_kept(file, expected, lost, start):
        numbered = tf.data.Dataset.zip(read(file, expected, lost),
                                       tf.data.Dataset.range(expected))
        return numbered.filter(lambda record, i: tf.gather(flags, start + i)).map(
            lambda record, i: record)
    return (*shards, tf.constant(starts)), read_kept


def _clip_offsets(clip: Clip, window: int, serialized: tf.Tensor, random: tf.Tensor
                  ) -> tf.Tensor:
    """The clip offset of each record of a batch, int64 [batch]: fixed, or random from
    the batch's random number."""
    size = tf.shape(serialized, out_type=tf.int64)
    if clip.offset == "random":
        return tf.random.stateless_uniform(size, tf.stack([random, clip.seed]),
                                           maxval=clip.offset_count(window),
                                           dtype=tf.int64)
    return tf.fill(size, tf.constant(clip.fixed_offset(window), tf.int64))


def shard_records(file: tf.Tensor, expected: tf.Tensor, lost: tf.Tensor, compression: str,
                  local: bool = True, gone: str = "") -> tf.data.Dataset:
    """The `expected` records of one shard; when it is corrupt or short, copies of `lost`
    take the places of the lost records, and parsing stops at the first.

    A local shard that is not there when it is opened stops the reader with `gone` and
    its name: a rewrite of the directory (the job rerun with --overwrite) deletes the
    files of the run this reader reads, once the new run is committed, and a shard
    already open is read on whole. The check is one `matching_files` on the exact name
    (a stat; glob characters in the path escaped). On gs:// that op lists the whole
    directory, so there a shard gone before it is opened is TensorFlow's NotFound naming
    it (the 1-byte read below), and one gone while it is read is told by `lost`, which
    says so. Both cost a stat and a tiny read a shard opened, nothing beside reading it.

    TensorFlow's own error for a flipped byte says only "corrupted record at 1173132".
    Here a read error ends the shard (`ignore_errors`), stand-in records follow, and
    `take` keeps dataset.json's count, so the batches fall where they would. A stand-in
    is the error message itself, and no Example: its first byte, "N", is a protobuf tag
    of the undefined wire type 6, so `tf.io.parse_example` fails on it with "Could not
    parse example input, value: 'No more readable records in shard ...'". A whole shard
    costs nothing more: no function per record, no check per batch. A shard with more
    records than dataset.json lists is read up to its count (`readers.inspect --verify`
    reports it). Local shards are read without a buffer (each record straight into its
    tensor: one copy less); remote ones with 8 MB reads (fewer requests).
    """
    if local:
        found = tf.io.matching_files(tf.strings.regex_replace(file, r"([*?\[\\])", r"\\\1"))
        check = tf.debugging.Assert(tf.size(found) > 0,
                                    [tf.strings.join([gone, file, " is gone; open it again"])])
        with tf.control_dependencies([check]):
            file = tf.identity(file)
    # TFRecordDataset retries a file it cannot open, so under ignore_errors a shard gone
    # before it is opened never ended: a 1-byte read first (one small request on gs://)
    # lets that error through, TensorFlow's NotFound naming the file.
    opened = tf.data.FixedLengthRecordDataset(file, 1, buffer_size=1).take(1).skip(1)
    records = tf_internals.tfrecord_file(file, compression, 0 if local else REMOTE_READ_BUFFER)
    return opened.concatenate(records.ignore_errors()).concatenate(
        tf.data.Dataset.from_tensors(lost).repeat()).take(expected)

