"""The project's pinned third-party requirements, in one place (plain data: setup.py reads
this file with runpy, before anything is installed).

`pip install video-window-shards` installs READER alone: readers.numpy, its PyTorch and
Grain adapters and `readers.inspect --verify`, without TensorFlow or Beam. Each extra
adds what one part needs. A Dataflow worker installs the sdist that --setup_file stages
without extras, so the job stages the rest of what it imports (`worker_requirements`)
as a requirements file of its own (beam_jobs/runtime/staging.py).
"""
from __future__ import annotations

from typing import Optional

READER = ["numpy>=1.26", "google-crc32c==1.9.0", "pillow==12.3.0", "fsspec==2026.9.0"]
TENSORFLOW = ["tensorflow-cpu==2.21.0"]  # a GPU trainer may swap in its own tensorflow 2.21
GCS = ["gcsfs==2026.10.1"]                         # gs:// through fsspec (about 80 MB)
JOB = ["av==18.1.0", "blake3==1.0.11", *GCS]     # the job's own: video files, digests, gs://
# Beam, and what the launcher alone uses: psutil stops its worker processes on SIGTERM
BEAM = ["apache-beam[gcp]==2.77.0", "psutil==7.2.2"]
ONNX = ["onnxruntime==1.32.0", "onnx==1.23.2"]     # ONNX encoders (onnx: Beam's handler)
TORCH = ["torch==2.13.0"]                          # PyTorch encoders, the DataLoader adapter
GRAIN = ["grain==0.2.18"]                          # the Grain adapter
BENCH = ["tensorflow-datasets==4.9.10"]            # TFDS, a contender of the job (psutil,
                                                   # in BEAM, measures process trees)
# CI's gates before the suite (.ci/run, .ci/check): ruff (ruff.toml) and mypy (mypy.ini),
# with the stubs of the typed libraries that ship none (psutil, grpc).
LINT = ["ruff==0.17.6", "mypy==2.4.1", "types-psutil==7.2.2.20261111",
        "types-grpcio==1.85.0.20261028"]
# CI tests the ONNX and PyTorch encoders and the Grain and DataLoader adapters too. PyPI's
# torch for Linux x86_64 is the CUDA build (17 more packages, several GB); its CPU build
# (a 192 MB wheel, about 850 MB installed) is what CI's pip finds: docs/readers.md#pytorch.
DEV = ["pytest==9.0.3", "hypothesis==6.155.2", "gcp-storage-emulator==2026.7.19",
       "pytest-xdist==3.8.0", "filelock==4.3.1",    # every core; datasets built once for all
       "tfrecord==1.14.6",                         # the tfrecord package reads our shards
       *LINT, *ONNX, *TORCH, *GRAIN, *BENCH]

EXTRAS = {"tf": TENSORFLOW, "gcs": GCS, "beam": BEAM + JOB, "onnx": ONNX, "torch": TORCH,
          "grain": GRAIN, "bench": BEAM + JOB + TENSORFLOW + BENCH,
          "dev": BEAM + JOB + TENSORFLOW + DEV}


def worker_requirements(encoder_extra: Optional[str] = None) -> list[str]:
    """What a worker that has Beam and this package (READER) still needs to run the
    job: its media and storage libraries, and the extra of its encoder, if any."""
    return JOB + (EXTRAS[encoder_extra] if encoder_extra else [])
