"""A video's content digest: how a video is recognised under another id (cut/duplicates.py).

The digest covers every byte of a video's frames, so its hash is the latent job's largest
cost after I/O: BLAKE3 hashes about 4.3 GB/s on one core here, SHA-256 (with the CPU's SHA
instructions) 1.8, BLAKE2b 0.9 (docs/benchmarks.md). A collision would silently drop a
video, so the hash must stay collision-resistant against a hostile input: BLAKE3 is, and a
digest keeps all its 256 bits (64 hex digits).

Datasets written before BLAKE3 hold 32 hex digits of SHA-256. Digests of two schemes never
match, so an append to such a dataset goes on with its scheme (`DatasetScheme`): one
dataset, one scheme, for life.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable

import apache_beam as beam
import blake3
import numpy as np

BLAKE3, SHA256 = "blake3", "sha256"
# a scheme's hash and the hex digits a digest keeps of it
_SCHEMES: dict[str, tuple[Callable[[], Any], int]] = {BLAKE3: (blake3.blake3, 64),
                                                      SHA256: (hashlib.sha256, 32)}


def scheme_of(digest: str) -> str:
    """The scheme of a stored digest, by its length."""
    return SHA256 if len(digest) == _SCHEMES[SHA256][1] else BLAKE3


class FrameDigest:
    """The digest of a video: the hash of its frames' bytes in order, then of each frame's
    validity, size and labels, then of one frame's dtype and shape and of the video's
    metadata. Frames given one at a time (`add`) or as one array (`add_sequence`, no work
    per frame) give the same digest."""

    def __init__(self, metadata: Any = None, scheme: str = BLAKE3):
        new, self._digits = _SCHEMES[scheme]
        self._hash, self._trailer, self._header = new(), bytearray(), b""
        self._metadata = b"" if metadata is None else _bytes(np.asarray(metadata))

    def _note(self, frame: Any) -> None:
        if not self._header and isinstance(frame, np.ndarray):
            self._header = f"{frame.dtype.str}{frame.shape}".encode()

    def add(self, data: Any, valid: bool = True, label: Any = None) -> None:
        self._note(data)
        data = _bytes(data) if isinstance(data, np.ndarray) else data
        self._hash.update(data)
        self._trailer += (b"\1" if valid else b"\0") + len(data).to_bytes(8, "little")
        if label is not None:
            self._trailer += _bytes(np.asarray(label))

    def add_sequence(self, sequence: np.ndarray) -> None:
        """All frames of a video at once: `sequence` [T, ...], every frame valid."""
        if not len(sequence):
            return
        self._note(sequence[0])
        self._hash.update(np.ascontiguousarray(sequence).view(np.uint8))
        record = b"\1" + (sequence[0].nbytes).to_bytes(8, "little")
        self._trailer += record * len(sequence)

    def hexdigest(self) -> str:
        digest = self._hash.copy()
        for part in (bytes(self._trailer), self._header, self._metadata):
            digest.update(part)
        return digest.hexdigest()[:self._digits]


def _bytes(array: np.ndarray) -> memoryview:
    return np.ascontiguousarray(array).view(np.uint8).data


class DatasetScheme(beam.PTransform):
    """PCollection[(digest, video id)] of a dataset's videos -> the one scheme its new
    videos' digests must have: SHA-256 where it has any such digest, else BLAKE3 (a new
    dataset, or one without digests)."""

    def expand(self, known_digests):
        return (known_digests
                | "Legacy" >> beam.Map(lambda known: scheme_of(known[0]) == SHA256)
                | "AnyLegacy" >> beam.CombineGlobally(any)
                | "Scheme" >> beam.Map(lambda legacy: SHA256 if legacy else BLAKE3))
