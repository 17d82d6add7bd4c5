"""The features of a window example: each one's name, shape, dtype and encoding
(`FeatureSpec`), and which a window example holds (`window_features`)."""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from readers.format.encodings import CODECS, Codec

MAX_EXAMPLE_BYTES = 2**31 - 1     # protobuf's limit on a message: no Example is larger


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    encoding: str

    def __post_init__(self):
        if self.encoding not in CODECS:
            raise ValueError(f"feature {self.name!r}: unknown encoding {self.encoding!r}")
        try:
            CODECS[self.encoding].check(self)
        except ValueError as e:
            raise ValueError(f"feature {self.name!r}: {e}") from None

    @classmethod
    def for_array(cls, name: str, shape: tuple[int, ...], dtype: str) -> "FeatureSpec":
        """The encoding that keeps `dtype` and parses fastest."""
        if dtype == "float32":
            return cls(name, tuple(shape), dtype, "float")
        if dtype == "int64":
            return cls(name, tuple(shape), dtype, "int64")
        return cls(name, tuple(shape), dtype, "raw")

    @functools.cached_property
    def codec(self) -> Codec:
        """What this feature's encoding decides: its wire bytes and how readers read them."""
        return CODECS[self.encoding](self)

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "encoding": self.encoding, "stored_as": self.codec.stored_as()}


# The features of shape [L, ...] that follow the window's frames (a reader's clip cuts them)
PER_FRAME = ("window", "mask", "labels")


def window_features(window: FeatureSpec, metadata_length: int = 0,
                    label_shape: Optional[tuple[int, ...]] = None) -> list[FeatureSpec]:
    """The features of one window example: window [L, ...], mask [L], labels [L, ...]
    when the videos have per-frame labels, metadata [K] when they have metadata, video_id
    and start.

    `window` is `FeatureSpec.for_array` of latents, or uint8 [L, H, W, C] pixels stored
    raw or as one encoded image per frame (encoding png or jpeg).
    """
    length = window.shape[0]
    features = [window, FeatureSpec("mask", (length,), "float32", "float")]
    if label_shape is not None:
        features.append(FeatureSpec("labels", (length, *label_shape), "float32", "float"))
    if metadata_length:
        features.append(FeatureSpec("metadata", (metadata_length,), "float32", "float"))
    return features + [FeatureSpec("video_id", (), "string", "bytes"),
                       FeatureSpec("start", (), "int64", "int64")]
