"""TFRecord framing on any filesystem Beam knows (Beam's own reader and writer, CRCs checked)."""
from __future__ import annotations

from typing import BinaryIO, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil


def read_tfrecords(path: str) -> Iterator[tuple[int, bytes | ValueError]]:
    """(index, record) for each record of a (possibly gzip) TFRecord file, CRCs checked.

    A broken frame ends the file: its error is yielded in place of the record, since
    the records after it cannot be found.
    """
    with FileSystems.open(path, compression_type=CompressionTypes.AUTO) as f:
        index = 0
        while True:
            try:
                record = _TFRecordUtil.read_record(f)
            except (ValueError, OSError, EOFError) as e:
                yield index, ValueError(f"corrupt TFRecord, rest of the file skipped: {e}")
                return
            if record is None:
                return
            yield index, record
            index += 1


def write_tfrecord(f: BinaryIO, record: bytes) -> None:
    _TFRecordUtil.write_record(f, record)
