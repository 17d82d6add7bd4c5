"""Windows as numpy arrays, for trainers without TensorFlow (PyTorch, JAX, plain loops).

    from readers.numpy import WindowSource, batches

    source = WindowSource("out/", "train")       # len(source), source[i] -> dict of arrays
    for batch in batches("out/", "train", batch_size=64, seed=0, epoch=3, start_step=120):
        ...

Neither TensorFlow nor Beam is imported. Records are found with the offset index beside
each shard (one seek each, so any window in any order) and read from the protobuf wire
format with the layouts of `readers.format.layout`: each record's fixed-width values go
straight from the file into their row of the batch; CRCs are checked. The values are those of
`readers.make_dataset` (each feature's codec, readers.format.codecs, decides them): float16
and bfloat16 become float32 unless `keep_float16`, PNG and JPEG frames are decoded (with
Pillow), `float_pixels` gives float32 in [0, 1].

A `WindowSource` is a PyTorch map-style `Dataset` and a Grain `RandomAccessDataSource`
as it is: it has `len()` and `[i]`, and it pickles (open files are not part of its
state), so it works in DataLoader worker processes; its repr names what it reads, so
Grain resumes a checkpoint in a new process. Gzip shards have no index: random access
is not possible there (use the tf.data reader).

`transform=fn` (on `WindowSource` and `batches`) runs `fn(batch) -> dict` on each batch
where the batch is read: in `batches`' threads, in a DataLoader's or Grain's workers.

`select=readers.Select(...)` (on `WindowSource` and `batches`) reads only the windows it
keeps, numbered 0..n-1, resolved when the source opens from the window tables beside
the shards (readers.select), never by reading a record.

`Mixture` and `MixtureBatches` (mixture.py and mixture_batches.py, exported here)
mix sources by weight. `Select` and `Clip` are here and in `readers` alike.

Both epoch plans, `EpochBatches` and `MixtureBatches`, are epoch_plan.py's `EpochPlan`: a
state resumes on the ranks that saved it, or, with `shard_index` and `num_shards`, on
another number of them. `BatchSource(plan)` is a plan's batches as a source of batches,
for a loader that asks for items by number (Grain).

This module is the API only, from the modules of this folder: `WindowSource` is
window_source.py's, `EpochBatches` and `batches` epoch_batches.py's; the request is
checked by readers.request (as make_dataset's is), records are found and read by
readers.shards, and decoded into batches by scatter.py.
"""
from __future__ import annotations

# The API, from the modules that hold it: the source (window_source), an epoch's plan
# and its reader (epoch_batches), mixtures and their plans (mixture, mixture_batches),
# selections (readers.select) and clips (readers.clips), the last two as `readers`
# exports them.
from readers.clips import Clip  # noqa: F401
from readers.numpy.epoch_batches import EpochBatches, batches, epoch_order  # noqa: F401
from readers.numpy.epoch_plan import BatchSource  # noqa: F401
from readers.numpy.mixture import Mixture  # noqa: F401
from readers.numpy.mixture_batches import MixtureBatches  # noqa: F401
from readers.numpy.window_source import Transform, WindowSource  # noqa: F401
from readers.select import Select  # noqa: F401
