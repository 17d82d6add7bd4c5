"""The encoder's own types: a loaded model (`Encoder`), what the job asks of one
(`EncoderSpec`), and the error that says it cannot serve. Each framework's module makes
an `Encoder`; encoders/__init__.py picks the module by the model's kind."""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, Callable, Optional

import fsspec
import numpy as np


class EncoderError(ValueError):
    """The model cannot be loaded, or its output cannot be windowed."""


@dataclasses.dataclass
class Encoder:
    """A loaded model: float32 frames [B, ...] -> latents [B, ...] as numpy."""
    call: Callable[[np.ndarray], np.ndarray]
    kind: str
    library: str           # the library that runs it, with its version
    device: str            # where it runs: cpu, cuda:0, ...

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        return self.call(frames)


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    path: Optional[str] = None          # a model file or directory
    handler: Any = None                 # or a Beam ModelHandler
    input_scale: float = 1 / 255        # the model's input: pixels * scale + offset
    input_offset: float = 0.0
    layout: str = "channels_last"       # channels_first: frames fed as [B, C, H, W]
    batch_size: int = 32
    latent_dtype: str = "float32"
    device: str = "auto"                # asked for: auto, cpu or cuda
    latent_shape: tuple[int, ...] = ()  # fixed by `probe`
    input_shape: tuple[int, ...] = ()   # (H, W, C) of one frame
    kind: str = ""                      # fixed by `probe`, with the two below
    library: str = ""

    @property
    def name(self) -> str:
        return self.path or f"a {type(self.handler).__name__}"

    def to_json(self) -> dict:
        return {"path": self.path, "kind": self.kind, "library": self.library,
                "handler": None if self.handler is None else type(self.handler).__name__,
                "device_requested": self.device, "input_shape": list(self.input_shape),
                "input_scale": self.input_scale, "input_offset": self.input_offset,
                "layout": self.layout, "output_shape": list(self.latent_shape),
                "latent_dtype": self.latent_dtype, "batch_size": self.batch_size,
                "sha256": checksum(self.path) if self.path else None}


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
