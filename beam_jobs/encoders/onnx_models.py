"""ONNX encoders, run with onnxruntime: CUDA when the worker has it, else the CPU."""
from __future__ import annotations

import numpy as np

from beam_jobs.encoders.base import Encoder, EncoderError

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


def providers(ort, requested: str) -> list[str]:
    """onnxruntime's execution providers for --encoder_device."""
    available = ort.get_available_providers()
    if requested == "cuda" and CUDA not in available:
        raise EncoderError(f"--encoder_device cuda: onnxruntime has no CUDA here (its "
                           f"providers: {', '.join(available)}; onnxruntime-gpu has it)")
    if requested != "cpu" and CUDA in available:
        return [CUDA, CPU]
    return [CPU]


def load(path: str, kind: str, requested: str) -> Encoder:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=providers(ort, requested))
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or len(outputs) != 1:
        raise EncoderError(f"{path}: the model has {len(inputs)} inputs and {len(outputs)} "
                           "outputs, expected one of each")
    name = inputs[0].name

    def call(x: np.ndarray) -> np.ndarray:
        return session.run(None, {name: x})[0]

    device = "cuda:0" if session.get_providers()[0] == CUDA else "cpu"
    return Encoder(call, kind, f"onnxruntime {ort.__version__}", device)
