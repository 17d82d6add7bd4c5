"""Any Beam RunInference ModelHandler as the job's encoder (the Python API only):
`load_model` once per worker, `run_inference` on each batch of frames, in order."""
from __future__ import annotations

import numpy as np

from beam_jobs.encoders.base import Encoder


def _torch_inputs(handler) -> bool:
    """Beam's PyTorch tensor handlers take torch tensors, not numpy arrays."""
    cls = type(handler)
    return cls.__module__.endswith("pytorch_inference") and "Tensor" in cls.__name__


def _to_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):   # a torch tensor, wherever it lives
        value = value.detach().to("cpu").numpy()
    return np.asarray(value)


def load(handler) -> Encoder:
    model = handler.load_model()
    torch_inputs = _torch_inputs(handler)

    def call(x: np.ndarray) -> np.ndarray:
        frames = list(x)
        if torch_inputs:
            import torch
            frames = [torch.from_numpy(f) for f in frames]
        results = handler.run_inference(frames, model)
        return np.stack([_to_numpy(r.inference) for r in results])

    return Encoder(call, "beam_handler", f"apache_beam {type(handler).__name__}",
                   "the handler's own")
