"""TensorFlow Datasets as a contender of the job, for bench_job.py: our own builder.

    python benchmarks/tfds_windows.py 'latents/*.tfrecord' DATA_DIR

`LatentWindows` is a `tfds.core.GeneratorBasedBuilder` that yields the job's windows
(latent_windows.windows: the same features, video ids and starts) keyed by
`<video id>:<start>`; the command runs its `download_and_prepare` with TFDS's defaults:
the examples are shuffled by a hash of their keys at write time (in memory up to 1 GB,
then through temporary bucket files on disk), no statistics are computed, and the split
lands as TFRecord files under DATA_DIR/latent_windows/1.0.0/.

This is the tool users would otherwise pick: a builder is what the TFDS documentation
teaches for a dataset of one's own.
"""
from __future__ import annotations

import sys

import numpy as np
import tensorflow_datasets as tfds
from latent_windows import FEATURES, windows


class LatentWindows(tfds.core.GeneratorBasedBuilder):
    """The windows of the latent files `pattern` matches, one split: train."""
    VERSION = tfds.core.Version("1.0.0")

    def __init__(self, *, pattern: str, **kwargs):
        self._pattern = pattern
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            f.name: tfds.features.Tensor(shape=f.shape, dtype=np.dtype(
                object if f.dtype == "string" else f.dtype)) for f in FEATURES}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for values in windows(self._pattern):
            yield f"{values['video_id'].decode('utf-8')}:{values['start']}", values


def main(pattern: str, data_dir: str) -> None:
    builder = LatentWindows(pattern=pattern, data_dir=data_dir)
    builder.download_and_prepare()
    print(f"{builder.info.splits['train'].num_examples} windows")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1], sys.argv[2])
