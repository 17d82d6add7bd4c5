"""The optional frame encoder: frames [B, H, W, C] -> latents [B, ...], in the job.

Why a DoFn with `apache_beam.utils.shared.Shared` and not `RunInference`: RunInference
batches the elements of a PCollection, so frames would have to travel as elements and be
grouped back into videos (a GroupByKey, which FnApiRunner holds in memory) to be windowed
in order. Here the encoder runs inside the frame stream of one video, in batches of
--encoder_batch_size, and the model is loaded once per worker process through Shared.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
from typing import Callable, Iterator

import fsspec
import numpy as np

from beam_jobs.sources.base import BadRecord, Frame, check_finite
from readers import quiet

LATENT_DTYPES = ("float32", "float16")


class EncoderError(ValueError):
    """The model cannot be loaded, or its output cannot be windowed."""


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    path: str
    input_scale: float = 1 / 255       # uint8 pixels * scale -> the model's float32 input
    batch_size: int = 32
    latent_dtype: str = "float32"
    latent_shape: tuple[int, ...] = ()  # fixed by `probe`
    input_shape: tuple[int, ...] = ()   # (H, W, C) of one frame

    def to_json(self) -> dict:
        return {"path": self.path, "input_shape": list(self.input_shape),
                "input_scale": self.input_scale, "output_shape": list(self.latent_shape),
                "latent_dtype": self.latent_dtype, "batch_size": self.batch_size,
                "sha256": checksum(self.path)}


@contextlib.contextmanager
def _local_copy(path: str) -> Iterator[str]:
    """The model at `path` as a local path; gs://, memory:// and other schemes are
    copied to a temp directory, removed again once the model is loaded."""
    if "://" not in path or path.startswith("file://"):
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


def load_encoder(path: str) -> Callable[[np.ndarray], np.ndarray]:
    """A function float32 [B, H, W, C] -> latents [B, ...] from a .keras file or a
    SavedModel directory (called through its serving signature).

    A .keras file loads in Keras' safe mode (no arbitrary code); a SavedModel runs the
    graph it carries, which can read and write files: load only models you trust.
    """
    import tensorflow as tf

    try:
        with _local_copy(path) as local:
            if local.endswith(".keras"):
                import keras
                model = keras.saving.load_model(local, compile=False, safe_mode=True)
                return lambda x: keras.ops.convert_to_numpy(model(x, training=False))
            loaded = tf.saved_model.load(local)
            signature = loaded.signatures["serving_default"]
    except Exception as e:
        raise EncoderError(f"cannot load {path}: {type(e).__name__}: {e}") from None
    (input_name,) = signature.structured_input_signature[1]
    outputs = list(signature.structured_outputs)
    if len(outputs) != 1:
        raise EncoderError(f"{path}: the serving signature has {len(outputs)} outputs, "
                           "expected one")

    def call(x: np.ndarray) -> np.ndarray:
        return signature(**{input_name: tf.constant(x)})[outputs[0]].numpy()

    return call


def probe(spec: EncoderSpec, frame_shape: tuple[int, int, int]) -> EncoderSpec:
    """Load the model and check on a batch of zeros that its output can be windowed."""
    encode = load_encoder(spec.path)
    try:
        out = np.asarray(encode(np.zeros((2, *frame_shape), np.float32)))
    except Exception as e:
        raise EncoderError(f"{spec.path} fails on frames of shape {list(frame_shape)}: "
                           f"{type(e).__name__}: {e}") from None
    if out.ndim < 2 or out.shape[0] != 2:
        raise EncoderError(f"{spec.path} maps a batch of 2 frames to shape {list(out.shape)}; "
                           "it must keep the batch dimension: [B, ...]")
    if out.dtype.kind != "f":
        raise EncoderError(f"{spec.path} outputs {out.dtype}, not floats")
    return dataclasses.replace(spec, latent_shape=tuple(out.shape[1:]),
                               input_shape=tuple(frame_shape))


def checksum(path: str) -> str:
    """sha256 of a model file, or over a model directory's files (relative names and
    contents, in sorted order)."""
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.isdir(root):
        return hashlib.sha256(fs.cat_file(root)).hexdigest()
    digest = hashlib.sha256()
    for name in sorted(fs.find(root)):
        digest.update(os.path.relpath(name, root).encode("utf-8"))
        digest.update(fs.cat_file(name))
    return digest.hexdigest()


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
                out = np.asarray(encode(np.stack(batch).astype(np.float32) * spec.input_scale))
            except Exception as e:
                raise BadRecord(f"the encoder failed: {type(e).__name__}: {e}") from None
            if out.shape != (len(batch), *spec.latent_shape):
                raise BadRecord(f"the encoder gave {list(out.shape)} for {len(batch)} frames")
            if not allow_nonfinite:
                check_finite(out, "the encoder's latents")
            latents = iter(out.astype(spec.latent_dtype))
        for frame in pending:
            yield frame._replace(data=next(latents) if frame.valid else zeros)
        pending.clear()

    for frame in frames:
        pending.append(frame)
        valid += frame.valid
        if valid == spec.batch_size:
            yield from flush()
            valid = 0
    yield from flush()
