"""The codecs of encoded frames: a png or jpeg window is a BytesList of L images of one
uint8 [H, W, C] frame each, decoded by Pillow (readers.numpy) and by TensorFlow's decoders
(tf.data) to the same pixels (the Codec interface: codecs.py)."""
from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Optional

import numpy as np

from readers.format.codecs import Buffer, Codec, tf_to_unit, to_unit
from readers.format.feature import Feature
from readers.format.wire import field, list_values

if TYPE_CHECKING:
    import tensorflow as tf



class _ImageCodec(Codec):
    """One encoded image per frame of a uint8 [L, H, W, C] window; both readers decode
    them to the same pixels."""
    decodes_images = True
    dtypes = ("uint8",)
    column_dtype = np.dtype(np.uint8)

    @classmethod
    def check(cls, feature: Feature) -> None:
        shape = feature.shape
        if len(shape) != 4 or shape[-1] not in (1, 3):
            raise ValueError(f"a {cls.encoding} feature is frames [L, H, W, C] with C 1 or "
                             f"3, not {list(shape)}")
        super().check(feature)

    def min_bytes(self) -> int:
        return 2 * self.feature.shape[0]     # a tag and a length a frame, at least

    def encode(self, value: list[bytes]) -> bytes:
        f = self.feature
        if len(value) != f.shape[0]:
            raise ValueError(f"feature {f.name!r}: {len(value)} frames, not {f.shape[0]}")
        return field(1, b"".join(field(1, v) for v in value))

    def stored_as(self) -> dict:
        f = self.feature
        return {"list": "bytes_list", "values": f.shape[0],
                "content": f"one encoded image per frame ({self.encoding.upper()})",
                "image_format": self.encoding, "decoded_shape": list(f.shape[1:]),
                "decoded_dtype": f.dtype}

    def _value(self, record: Buffer, start: int, end: int) -> list[bytes]:
        values = list_values("bytes", record, start, end)
        if len(values) != self.feature.shape[0]:
            raise ValueError(f"feature {self.feature.name!r}: {len(values)} frames, not "
                             f"{self.feature.shape[0]}")
        return values

    def store(self, column: np.ndarray, row: int, value: list[bytes]) -> None:
        """Each frame decoded with Pillow, into its place in the row."""
        from PIL import Image

        shape = self.feature.shape[1:]
        for k, data in enumerate(value):
            with Image.open(io.BytesIO(data)) as opened:
                image = opened.convert("RGB" if shape[-1] == 3 else "L")
                column[row, k] = np.asarray(image, dtype=np.uint8).reshape(shape)

    def finish(self, stored: np.ndarray, *, float_pixels: bool, keep_float16: bool,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        return to_unit(stored, out) if float_pixels else stored

    def parse_feature(self) -> tf.io.FixedLenFeature:
        import tensorflow as tf

        return tf.io.FixedLenFeature(self.feature.shape[:1], tf.string)

    def decode(self, parsed: tf.Tensor, *, float_pixels: bool,
               keep_float16: bool) -> tf.Tensor:
        """[batch, L] encoded frames -> uint8 [batch, L, H, W, C], frames decoded in
        parallel (float32 with `float_pixels`); L is the frames given (a clip's)."""
        import tensorflow as tf

        decode_frame, frame_shape = self._tf_decoder(), self.feature.shape[1:]
        frames = tf.map_fn(
            lambda data: tf.ensure_shape(decode_frame(data, channels=frame_shape[-1]),
                                         frame_shape),
            tf.reshape(parsed, [-1]), fn_output_signature=tf.TensorSpec(frame_shape, tf.uint8),
            parallel_iterations=32)
        values = tf.reshape(frames, [-1, *parsed.shape[1:], *frame_shape])
        return tf_to_unit(values) if float_pixels else values

    def decode_clip(self, parsed: tf.Tensor, frames: tf.Tensor, *, float_pixels: bool,
                    keep_float16: bool) -> tf.Tensor:
        """Only the kept frames are decoded."""
        import tensorflow as tf

        return self.decode(tf.gather(parsed, frames, batch_dims=1), float_pixels=float_pixels,
                           keep_float16=keep_float16)

    def _tf_decoder(self):
        raise NotImplementedError


class PngCodec(_ImageCodec):
    encoding = "png"

    def _tf_decoder(self):
        import tensorflow as tf

        return tf.io.decode_png


class JpegCodec(_ImageCodec):
    encoding = "jpeg"

    def stored_as(self) -> dict:
        return {**super().stored_as(),
                "jpeg_dct": ("accurate integer (libjpeg ISLOW; TensorFlow's "
                             "dct_method='INTEGER_ACCURATE'), as the readers decode")}

    def _tf_decoder(self):
        import tensorflow as tf

        # libjpeg's accurate integer DCT: the values Pillow gives (readers.numpy), where
        # TensorFlow's default fast DCT differs by a few levels.
        return functools.partial(tf.io.decode_jpeg, dct_method="INTEGER_ACCURATE")
