"""Read window shards written by `beam_jobs.make_shards`: with tf.data, or as numpy arrays.

    import readers
    ds = readers.make_dataset("out/", split="train", batch_size=64)   # tf.data
    ds = readers.mix_datasets([("a/", 0.7), ("b/", 0.3)], "train", 64)  # a mixture
    spec = readers.load_spec("out/")                                  # dataset.json
    keep = readers.Select(min_valid_frames=12)      # select=keep: in both readers
    clip = readers.Clip(8, step=2)                  # clip=clip: in both readers

    from readers.numpy import batches, Clip, Select, WindowSource    # no TensorFlow

Nothing here imports Apache Beam. TensorFlow is imported on first use of `make_dataset`
(or `mix_datasets`) only, so that `readers.format` (the format, shared with the Beam
job), `load_spec` and `readers.numpy` work without it (`pip install video-window-shards`,
no extra); where it is not installed, `make_dataset` is an ImportError that says to add
the [tf] extra.

The folders are the parts: numpy/ (the numpy reader), tfdata/ (the tf.data reader),
inspect/ (`python -m readers.inspect` and its tools), report/ (its HTML page) and format/
(the format, shared with the job); the modules here are what both readers share.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from readers.clips import Clip
from readers.format import DatasetSpec, FeatureSpec, load_spec
from readers.select import Select

if TYPE_CHECKING:
    from readers.tfdata.dataset import make_dataset
    from readers.tfdata.mixed_dataset import mix_datasets

__all__ = ["make_dataset", "mix_datasets", "load_spec", "DatasetSpec", "FeatureSpec",
           "Select", "Clip"]


def __getattr__(name: str):
    if name in ("make_dataset", "mix_datasets"):
        from readers import quiet
        try:
            from readers.tfdata import dataset, mixed_dataset
        except ModuleNotFoundError as e:
            raise quiet.missing_tensorflow_error(e, f"readers.{name}") from None
        return dataset.make_dataset if name == "make_dataset" else mixed_dataset.mix_datasets
    raise AttributeError(f"module 'readers' has no attribute {name!r}")
