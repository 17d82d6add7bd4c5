"""PyTorch encoders: a torch.export program (.pt2) or TorchScript (.pt)."""
from __future__ import annotations

import numpy as np

from beam_jobs.encoders.base import Encoder, EncoderError


def _device(torch, requested: str) -> str:
    if requested == "cuda" and not torch.cuda.is_available():
        raise EncoderError("--encoder_device cuda: PyTorch sees no CUDA device here")
    return "cuda" if requested != "cpu" and torch.cuda.is_available() else "cpu"


def load(path: str, kind: str, requested: str) -> Encoder:
    import torch

    device = torch.device(_device(torch, requested))
    if kind == "torch_export":
        module = torch.export.load(path).module().to(device)
    else:
        module = torch.jit.load(path, map_location=device)
        module.eval()
    pinned = device.type == "cuda"

    def call(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            batch = torch.from_numpy(x)
            if pinned:   # one copy to page-locked memory, then an asynchronous transfer
                batch = batch.pin_memory().to(device, non_blocking=True)
            out = module(batch)
        if isinstance(out, (tuple, list)):
            if len(out) != 1:
                raise EncoderError(f"the model returns {len(out)} outputs, expected one")
            out = out[0]
        return out.detach().to("cpu").numpy()

    return Encoder(call, kind, f"torch {torch.__version__}", str(device))
