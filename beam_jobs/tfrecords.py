"""TFRecord files through Beam's FileSystems, read honestly: a bad record is skipped
alone, lost framing is counted.

TensorFlow's and Beam's readers stop at the first bad CRC, so one flipped byte in the
middle of a file silently drops everything after it. Here, with the frames read by
`readers.format.tfrecord.read_frame`:

- data whose CRC fails under a sound length frame is one lost record: it is reported,
  and reading goes on with the next frame;
- when a length frame itself is broken (or the file ends inside a frame, or a gzip
  stream breaks), the rest of the file cannot be found: it is reported once, with the
  bytes it held and an estimate of the records in them (at the mean record size so far).
"""
from __future__ import annotations

import gzip
import zlib
from typing import Iterator, Optional, Union

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from readers.format.tfrecord import FRAME_OVERHEAD, Lost, read_frame

_GZIP_MAGIC = b"\x1f\x8b"


def read_records(path: str, size: Optional[int] = None, typical_record: int = 0
                 ) -> Iterator[tuple[int, Union[bytes, Lost]]]:
    """(index, record or Lost) for a TFRecord file, gzip when its name ends in .gz.

    `size` is the file's size in bytes (for counting what lost framing took);
    `typical_record` the record size to estimate with before any record was read.
    """
    if size is None:
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    with raw:
        if path.endswith(".gz"):
            magic = raw.read(2)
            raw.seek(0)
            if magic != _GZIP_MAGIC:
                yield 0, _rest_lost("named .gz but not a gzip file", size, 0, 0,
                                    typical_record, 1.0)
                return
        f = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
        index, consumed = 0, 0
        while True:
            before = raw.tell()
            try:
                record = read_frame(f)
            except (OSError, EOFError, zlib.error) as e:  # a broken gzip stream
                record = Lost(f"the gzip stream breaks: {e}", 1, 0, True)
            if record is None:
                return
            if isinstance(record, Lost) and record.framing:
                ratio = (consumed / before) if before and path.endswith(".gz") else 1.0
                yield index, _rest_lost(record.reason, size, before, consumed / index
                                        if index else typical_record, typical_record, ratio)
                return
            yield index, record
            index += 1
            consumed += (len(record) + FRAME_OVERHEAD if isinstance(record, bytes)
                         else record.bytes_lost)


def _rest_lost(reason: str, size: int, offset: int, mean_record: float, typical: int,
               ratio: float) -> Lost:
    """The rest of a file from byte `offset` on, as one Lost with a record estimate.
    `ratio`: uncompressed bytes per file byte so far (gzip)."""
    left = max(0, size - offset)
    per_record = mean_record or typical
    records = max(1, round(left * ratio / per_record)) if per_record else 1
    return Lost(f"{reason} at byte {offset}: the remaining {left:,} bytes of the file "
                f"(about {records:,} records) cannot be read", records, left, True)
