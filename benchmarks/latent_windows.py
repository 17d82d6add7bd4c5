"""The job's windows without the job: what a user would write instead, for bench_job.py.

    python benchmarks/latent_windows.py 'latents/*.tfrecord' OUTPUT_DIR

runs the plain loop: read each latent TFRecord file of serialized-tensor records
(one video a record: `frames`, a tf.io.serialize_tensor of float32 [T, D], and `recipe`,
4 floats), parse it, cut windows of WINDOW frames every STRIDE (as the job's default
--tail align_end), encode each window with the project's own Example encoder
(readers.format: the features the job writes) and write it, framed as a TFRecord, to
one of OUTPUTS files in turn. No shuffle: a file holds each video's windows in order.

`windows` is shared with the TFDS builder (tfds_windows.py), so that both yield the
job's windows: the same video ids (the job's default for files of one directory,
`<file name>:<record index>`), starts, masks and metadata.
"""
from __future__ import annotations

import glob
import os
import sys
from typing import Iterator

import numpy as np

from readers import format as data_format
from readers.format.tfrecord import Lost, frame, read_frame
from readers.format.windows import window_starts

WINDOW, STRIDE, TAIL = 100, 50, "align_end"
FRAME_SIZE, METADATA_LENGTH = 200, 4     # beam_jobs.sample's latents
OUTPUTS = 4
# the features of the job's window examples for these latents
FEATURES = data_format.window_features(
    data_format.FeatureSpec.for_array("window", (WINDOW, FRAME_SIZE), "float32"),
    METADATA_LENGTH)


def windows(pattern: str) -> Iterator[dict]:
    """The values of each window of each video of the files `pattern` matches, file by
    file in name order, a video's windows in order of their starts."""
    import tensorflow as tf
    from tensorflow.core.framework.tensor_pb2 import TensorProto

    for path in sorted(glob.glob(pattern)):
        name = os.path.basename(path)
        with open(path, "rb") as f:
            index = 0
            while (record := read_frame(f)) is not None:
                if isinstance(record, Lost):
                    raise ValueError(f"{path} record {index}: {record.reason}")
                example = tf.train.Example.FromString(record).features.feature
                sequence = tf.make_ndarray(TensorProto.FromString(
                    example["frames"].bytes_list.value[0]))
                metadata = np.array(example["recipe"].float_list.value, np.float32)
                video_id = f"{name}:{index}".encode("utf-8")
                mask = np.ones(WINDOW, np.float32)
                for start in window_starts(len(sequence), WINDOW, STRIDE, TAIL):
                    yield {"window": sequence[start:start + WINDOW], "mask": mask,
                           "metadata": metadata, "video_id": video_id,
                           "start": np.int64(start)}
                index += 1


def plain_loop(pattern: str, output_dir: str) -> int:
    """Every window into OUTPUTS files in turn; the number of windows."""
    os.makedirs(output_dir, exist_ok=True)
    outputs = [open(os.path.join(output_dir, f"windows-{i}-of-{OUTPUTS}.tfrecord"), "wb")
               for i in range(OUTPUTS)]
    count = 0
    encode = data_format.ExampleEncoder(FEATURES)
    for values in windows(pattern):
        outputs[count % OUTPUTS].write(frame(encode(values)))
        count += 1
    for f in outputs:
        f.close()
    return count


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    print(f"{plain_loop(sys.argv[1], sys.argv[2])} windows")
