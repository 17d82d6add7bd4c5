"""A feature as the code that encodes and reads it sees one: its name, shape, dtype and
encoding, and its encoding's codec. Protocols, so that the codecs and the wire format
take any such feature and import no spec (features.FeatureSpec is the one dataset.json
makes, and codecs.Codec the codec it binds)."""
from __future__ import annotations

from typing import Any, Optional, Protocol

import numpy as np


class FeatureCodec(Protocol):
    """What the wire format asks of a feature's codec (read only: a codec's class may
    set them)."""

    @property
    def list_kind(self) -> str: ...    # "bytes", "float" or "int64"

    @property
    def stored_dtype(self) -> Optional[np.dtype]: ...  # of values stored as one plain array

    def encode_parts(self, value: Any) -> list: ...

    def fixed_head(self) -> Optional[bytes]: ...

    def min_bytes(self) -> int: ...

    def values_buffer(self, value: Any) -> Any: ...

    def from_wire(self, kind: str, record: Any, start: int, end: int) -> Any: ...


class Feature(Protocol):
    """A feature of a window example."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def encoding(self) -> str: ...

    @property
    def codec(self) -> FeatureCodec: ...
