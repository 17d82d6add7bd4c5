"""Every feature encoding by its name in dataset.json: one codec class each."""
from __future__ import annotations

from readers.format.codecs import BytesCodec, Codec, FloatCodec, Int64Codec, RawCodec  # noqa: F401
from readers.format.image_codecs import JpegCodec, PngCodec

CODECS: dict[str, type[Codec]] = {c.encoding: c for c in (
    FloatCodec, Int64Codec, BytesCodec, RawCodec, PngCodec, JpegCodec)}
ENCODINGS = tuple(CODECS)
IMAGE_ENCODINGS = tuple(name for name, c in CODECS.items() if c.decodes_images)
