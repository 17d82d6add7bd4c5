"""One distribution: the reader (no Beam) and, with the [beam] extra, the job.

install_requires is also what a Dataflow worker installs from this sdist (--setup_file):
everything the job imports but Beam, which the worker's container has.
"""
import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"',
                    (Path(__file__).parent / "beam_jobs" / "__init__.py").read_text()).group(1)

TENSORFLOW = "tensorflow-cpu==2.21.0"  # a GPU trainer may swap in its own tensorflow 2.21
MEDIA = ["pillow==12.3.0", "av==18.1.0", "fsspec==2026.9.0", "gcsfs==2026.10.1"]
BEAM = ["apache-beam[gcp]==2.77.0"]
ONNX = ["onnxruntime==1.32.0", "onnx==1.23.2"]     # ONNX encoders (onnx: Beam's handler)
TORCH = ["torch==2.13.0"]                          # PyTorch encoders, the DataLoader adapter
GRAIN = ["grain==0.2.18"]                          # the Grain adapter
BENCH = ["psutil==7.2.2",                          # benchmarks/: process trees measured
         "tensorflow-datasets==4.9.10"]            # TFDS, a contender of the job
DEV = ["pytest==9.0.3", "hypothesis==6.155.2", "gcp-storage-emulator==2026.7.19",
       "tfrecord==1.14.6",                         # the tfrecord package reads our shards
       *ONNX, *BENCH]                              # CI tests the ONNX encoders too

setup(
    name="video-window-shards",
    version=VERSION,
    description="Long videos to globally shuffled, fixed-shape TFRecord window shards, "
                "and a tf.data reader for them",
    python_requires=">=3.10",
    packages=find_packages(include=["beam_jobs", "beam_jobs.*", "readers", "readers.*"]),
    install_requires=[TENSORFLOW, "numpy>=1.26", "google-crc32c==1.9.0", *MEDIA],
    extras_require={"beam": BEAM, "onnx": ONNX, "torch": TORCH, "grain": GRAIN,
                    "bench": BEAM + BENCH, "dev": BEAM + DEV},
    entry_points={"console_scripts": ["readers.inspect = readers.inspect:main"]},
)
