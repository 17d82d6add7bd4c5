"""Read window shards written by `beam_jobs.make_shards`: with tf.data, or as numpy arrays.

    import readers
    ds = readers.make_dataset("out/", split="train", batch_size=64)   # tf.data
    spec = readers.load_spec("out/")                                  # dataset.json

    from readers.numpy import batches, WindowSource                  # no TensorFlow

Nothing here imports Apache Beam. TensorFlow is imported on first use of `make_dataset`
only, so that `readers.format` (the format, shared with the Beam job), `load_spec` and
`readers.numpy` work without it (`pip install video-window-shards`, no extra); where it
is not installed, `make_dataset` is an ImportError that says to add the [tf] extra.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from readers.format import DatasetSpec, FeatureSpec, load_spec

if TYPE_CHECKING:
    from readers.dataset import make_dataset

__all__ = ["make_dataset", "load_spec", "DatasetSpec", "FeatureSpec"]


def __getattr__(name: str):
    if name == "make_dataset":
        from readers import quiet
        try:
            from readers.dataset import make_dataset
        except ModuleNotFoundError as e:
            raise quiet.missing_tensorflow(e, "readers.make_dataset") from None
        return make_dataset
    raise AttributeError(f"module 'readers' has no attribute {name!r}")
