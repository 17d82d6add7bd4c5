"""Keras (.keras, loaded in safe mode) and TensorFlow SavedModel encoders.

A SavedModel runs the graph it carries, which can read and write files: load only
models you trust. A .keras file runs no code of its own (Keras' safe mode)."""
from __future__ import annotations

import numpy as np

from beam_jobs.encoders.base import Encoder, EncoderError
from readers import quiet


def _device(tf, requested: str) -> str:
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cuda" and not gpus:
        raise EncoderError("--encoder_device cuda: TensorFlow sees no GPU here (a GPU build "
                           "of TensorFlow and a CUDA driver are needed)")
    return "/GPU:0" if gpus and requested != "cpu" else "/CPU:0"


def load(path: str, kind: str, requested: str) -> Encoder:
    tf = quiet.tensorflow()
    device = _device(tf, requested)
    library = f"tensorflow {tf.__version__}"
    with tf.device(device):
        if kind == "keras":
            import keras
            model = keras.saving.load_model(path, compile=False, safe_mode=True)

            def call_keras(x: np.ndarray) -> np.ndarray:
                with tf.device(device):
                    return keras.ops.convert_to_numpy(model(x, training=False))

            return Encoder(call_keras, kind, f"keras {keras.__version__} ({library})",
                           _name(device))
        signature = tf.saved_model.load(path).signatures["serving_default"]
    (input_name,) = signature.structured_input_signature[1]
    outputs = list(signature.structured_outputs)
    if len(outputs) != 1:
        raise EncoderError(f"{path}: the serving signature has {len(outputs)} outputs, "
                           "expected one")

    def call(x: np.ndarray) -> np.ndarray:
        with tf.device(device):
            return signature(**{input_name: tf.constant(x)})[outputs[0]].numpy()

    return Encoder(call, kind, library, _name(device))


def _name(device: str) -> str:
    return "cuda:0" if device.startswith("/GPU") else "cpu"
