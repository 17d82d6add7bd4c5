"""The optional frame encoder: frames [B, H, W, C] -> latents [B, ...], in the job.

Kinds, picked by the model's file (each library an optional extra, asked for by name
when missing, before any work):

    .keras                 Keras 3 (safe mode)                      [tf]
    a directory            TensorFlow SavedModel, serving_default    [tf]
    .onnx                  ONNX, run with onnxruntime                [onnx]
    .pt2                   a torch.export program                   [torch]
    .pt                    TorchScript                               [torch]
    a Beam ModelHandler    (Python API: run(argv, encoder=handler))  its own

Why a DoFn with `apache_beam.utils.shared.Shared` and not `RunInference`: RunInference
batches the elements of a PCollection, so frames would have to travel as elements and be
grouped back into videos (a GroupByKey, which FnApiRunner holds in memory) to be windowed
in order. Here the encoder runs inside the frame stream of one video, in batches of
--encoder_batch_size, and the model is loaded once per worker process through Shared. A
Beam ModelHandler fits that stream as it is: its `load_model` loads once per worker, its
`run_inference` encodes a batch.

On a worker with a GPU (CUDA for PyTorch and onnxruntime; TensorFlow's own GPU build)
the model runs there (--encoder_device auto), frames moved a batch at a time and latents
brought back as numpy; `cpu` or `cuda` force it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import shutil
import tempfile
from typing import Callable, Iterator

import fsspec
import numpy as np

from beam_jobs.core import paths
from beam_jobs.core.frames import BadRecord, Frame, check_finite
from beam_jobs.encoders.base import (  # noqa: F401 (re-exported: the encoders' public names)
    Encoder,
    EncoderError,
    EncoderSpec,
)

LATENT_DTYPES = ("float32", "float16")
DEVICES = ("auto", "cpu", "cuda")
LAYOUTS = ("channels_last", "channels_first")
# suffix -> (kind, the module it needs, the extra that installs it); anything else is a
# SavedModel directory
KINDS = {".keras": ("keras", "tensorflow", "tf"), ".onnx": ("onnx", "onnxruntime", "onnx"),
         ".pt2": ("torch_export", "torch", "torch"), ".pt": ("torchscript", "torch", "torch")}
SAVEDMODEL = ("savedmodel", "tensorflow", "tf")


def _kind(path: str) -> tuple[str, str, str]:
    """(kind, the module it needs, its extra) of the model at `path`, from its name."""
    return next((entry for suffix, entry in KINDS.items()
                 if path.lower().rstrip("/").endswith(suffix)), SAVEDMODEL)


def kind_of(path: str) -> str:
    """The kind of model at `path`, from its name: a directory is a SavedModel."""
    return _kind(path)[0]


def extra_of(path: str) -> str:
    """The extra that installs the library the model at `path` needs (a worker stages it)."""
    return _kind(path)[2]


def check_extra(path: str) -> None:
    """EncoderError in one line when the library the model at `path` needs is not
    installed."""
    _, module, extra = _kind(path)
    if not _installed(module):
        raise EncoderError(f"{os.path.basename(path.rstrip('/'))} needs {module}, which is "
                           f"not installed: install with pip install -e '.[{extra}]'")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):   # a module set to None in sys.modules
        return False


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """The model at `path` as a local path; gs://, memory:// and other schemes are
    copied to a temp directory, removed again once the model is loaded."""
    if not paths.is_remote(path):
        yield path.removeprefix("file://")
        return
    fs, remote = fsspec.core.url_to_fs(path)
    directory = tempfile.mkdtemp(prefix="encoder-")
    try:
        local = os.path.join(directory, os.path.basename(remote.rstrip("/")))
        fs.get(remote, local, recursive=fs.isdir(remote))
        yield local
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def load_encoder(spec: EncoderSpec) -> Encoder:
    """The model of `spec`, loaded on its device. EncoderError when it cannot be."""
    if spec.handler is not None:
        from beam_jobs.encoders import beam_handlers
        return beam_handlers.load(spec.handler)
    if spec.path is None:
        raise EncoderError("the encoder names neither a model file nor a model handler")
    kind = kind_of(spec.path)
    if kind in ("keras", "savedmodel"):
        from beam_jobs.encoders.tensorflow_models import load
    elif kind == "onnx":
        from beam_jobs.encoders.onnx_models import load
    else:
        from beam_jobs.encoders.torch_models import load
    try:
        with local_copy(spec.path) as local:
            return load(local, kind, spec.device)
    except EncoderError:
        raise
    except Exception as e:
        raise EncoderError(f"cannot load {spec.path}: {type(e).__name__}: {e}") from None


def model_input(frames: np.ndarray, spec: EncoderSpec) -> np.ndarray:
    """uint8 frames [B, H, W, C] -> the model's float32 input."""
    x = frames.astype(np.float32) * np.float32(spec.input_scale)
    if spec.input_offset:
        x += np.float32(spec.input_offset)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if spec.layout == "channels_first" else x


def probe(spec: EncoderSpec, frame_shape: tuple[int, int, int]) -> EncoderSpec:
    """Load the model and check on a batch of zeros that its output can be windowed."""
    encoder = load_encoder(spec)
    try:
        out = np.asarray(encoder(model_input(np.zeros((2, *frame_shape), np.uint8), spec)))
    except Exception as e:
        raise EncoderError(f"{spec.name} fails on frames of shape {list(frame_shape)}: "
                           f"{type(e).__name__}: {e}") from None
    if out.ndim < 2 or out.shape[0] != 2:
        raise EncoderError(f"{spec.name} maps a batch of 2 frames to shape {list(out.shape)}; "
                           "it must keep the batch dimension: [B, ...]")
    if out.dtype.kind != "f":
        raise EncoderError(f"{spec.name} outputs {out.dtype}, not floats")
    return dataclasses.replace(spec, latent_shape=tuple(out.shape[1:]),
                               input_shape=tuple(frame_shape), kind=encoder.kind,
                               library=encoder.library)


def encode_frames(frames: Iterator[Frame], encode: Callable[[np.ndarray], np.ndarray],
                  spec: EncoderSpec, allow_nonfinite: bool = False) -> Iterator[Frame]:
    """Frames of pixels -> frames of latents, in order, encoded `batch_size` at a time.

    Masked frames are not fed to the model: their latent is zeros. A model that fails on
    a batch, or gives NaN or Inf (unless `allow_nonfinite`), fails the video.
    """
    zeros = np.zeros(spec.latent_shape, spec.latent_dtype)
    pending: list[Frame] = []
    valid = 0

    def flush() -> Iterator[Frame]:
        batch = [f.data for f in pending if f.valid]
        latents = iter(())
        if batch:
            try:
                out = np.asarray(encode(model_input(np.stack(batch), spec)))
            except Exception as e:
                raise BadRecord(f"the encoder failed: {type(e).__name__}: {e}") from None
            if out.shape != (len(batch), *spec.latent_shape):
                raise BadRecord(f"the encoder gave {list(out.shape)} for {len(batch)} frames")
            if not allow_nonfinite:
                check_finite(out, "the encoder's latents")
            latents = iter(out.astype(spec.latent_dtype))
        for frame in pending:   # the pixels' histogram does not describe the latents
            yield frame._replace(data=next(latents) if frame.valid else zeros, histogram=None)
        pending.clear()

    for frame in frames:
        pending.append(frame)
        valid += frame.valid
        if valid == spec.batch_size:
            yield from flush()
            valid = 0
    yield from flush()
