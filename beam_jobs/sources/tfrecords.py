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

A record that `skip` names (`--append`: a video the dataset has) is not read: in an
uncompressed file its fields are walked a page at a time (`PagedRecord`), which reads
the tags, lengths and keys, not the values, and the file is sought past it. Its data's
CRC is then not checked: only the few bytes of its id are used, to skip it.
"""
from __future__ import annotations

import gzip
import zlib
from typing import BinaryIO, Callable, Iterator, NamedTuple, Optional, Union, cast

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from readers.format.tfrecord import (
    FOOTER_BYTES,
    FRAME_OVERHEAD,
    HEADER_BYTES,
    Lost,
    read_exactly,
    read_frame,
    read_length,
)

_GZIP_MAGIC = b"\x1f\x8b"


class Skipped(NamedTuple):
    """A record `skip` named: its video id."""
    video_id: str


class PagedRecord:
    """A record's bytes in a seekable file, read a page at a time as they are indexed:
    what `readers.format.wire` needs (`len`, an index, a slice), so that a walk over an
    Example's fields, which jumps over their values, reads only the pages it lands on."""
    PAGE = 4096

    def __init__(self, f: BinaryIO, start: int, length: int):
        self._f, self._start, self._length = f, start, length
        self._pages: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self._length

    def _page(self, number: int) -> bytes:
        if number not in self._pages:
            self._f.seek(self._start + number * self.PAGE)
            self._pages[number] = read_exactly(
                self._f, min(self.PAGE, self._length - number * self.PAGE))
        return self._pages[number]

    def __getitem__(self, at: Union[int, slice]) -> Union[int, bytes]:
        if isinstance(at, slice):
            first, last, _ = at.indices(self._length)
            return b"".join(
                self._page(n)[max(first - n * self.PAGE, 0):last - n * self.PAGE]
                for n in range(first // self.PAGE, -(-last // self.PAGE)))
        if not 0 <= at < self._length:
            raise IndexError(at)
        return self._page(at // self.PAGE)[at % self.PAGE]


# (index, the record: bytes or a PagedRecord) -> the id of a video to skip, or None
Skip = Callable[[int, Union[bytes, PagedRecord]], Optional[str]]


def read_records(path: str, size: Optional[int] = None, typical_record: int = 0,
                 skip: Optional[Skip] = None
                 ) -> Iterator[tuple[int, Union[bytes, Lost, Skipped]]]:
    """(index, record or Lost or Skipped) for a TFRecord file, gzip when its name ends in
    .gz.

    `size` is the file's size in bytes (for counting what lost framing took);
    `typical_record` the record size to estimate with before any record was read;
    `skip` names the records to skip (unread, in an uncompressed file).
    """
    if size is None:
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    with raw:
        refused = _not_a_tfrecord_file(raw, path, size, typical_record)
        if refused is not None:
            yield 0, refused
            return
        # a GzipFile reads as a binary file does (typeshed's GzipFile is no BinaryIO)
        f = (cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb")) if path.endswith(".gz")
             else raw)
        yield from _frames(raw, f, size, typical_record, skip)


def _not_a_tfrecord_file(raw: BinaryIO, path: str, size: int, typical_record: int
                         ) -> Optional[Lost]:
    """The whole file as one Lost when its first bytes say it is no TFRecord file: a
    media file (a glob of latents may catch one under another name), or a file named .gz
    that is no gzip file; else None, the file back at its start."""
    head = raw.read(12)   # one read: on GCS, one request
    raw.seek(0)
    kind = _media_kind(head)
    if kind is not None:   # a file named like no media, read as latents
        return Lost(f"by its first bytes, a {kind} file, not a TFRecord file: not read",
                    1, size, True)
    if path.endswith(".gz") and head[:2] != _GZIP_MAGIC:
        return _rest_lost("named .gz but not a gzip file", size, 0, 0, typical_record)
    return None


def _frames(raw: BinaryIO, f: BinaryIO, size: int, typical_record: int,
            skip: Optional[Skip]) -> Iterator[tuple[int, Union[bytes, Lost, Skipped]]]:
    """read_records' items of an open file: `raw`, read as `f` (itself, or its gzip
    stream). Records `skip` names are skipped unread where `f` is `raw`; the first
    broken frame, or a broken gzip stream, ends the file with one Lost for the rest."""
    index, consumed = 0, 0
    while True:
        before = raw.tell()
        if skip is not None and f is raw:
            video_id = _skip_unread(raw, before, size, index, skip)
            if video_id is not None:
                yield index, Skipped(video_id)
                index += 1
                consumed += raw.tell() - before
                continue
        try:
            record = read_frame(f)
        except (OSError, EOFError, zlib.error) as e:  # a broken gzip stream
            yield index, _gzip_rest(f"the gzip stream breaks ({e})", None, index,
                                    consumed, typical_record)
            return
        if record is None:
            return
        if isinstance(record, Lost) and record.framing:
            gzipped = f if f is not raw else None
            yield index, _framing_lost(record.reason, gzipped, size, before, index, consumed,
                                       typical_record)
            return
        consumed += _frame_bytes(record)
        yield index, _skipped_or(skip, index, record)
        index += 1


def _framing_lost(reason: str, gzipped: Optional[BinaryIO], size: int, offset: int,
                  read: int, consumed: int, typical: int) -> Lost:
    """The rest of a file whose length frame at `offset` is broken, after `read` records
    of `consumed` bytes: counted in what is left of the gzip stream `gzipped`, or of a
    plain file of `size` bytes at the mean record size so far (`typical` before any)."""
    if gzipped is not None:
        return _gzip_rest(reason, gzipped, read, consumed, typical)
    return _rest_lost(reason, size, offset, consumed / read if read else typical, typical)


def _frame_bytes(record: Union[bytes, Lost]) -> int:
    """The bytes a record's frame took: its data and framing, or those a Lost record
    (a failed CRC) held."""
    return len(record) + FRAME_OVERHEAD if isinstance(record, bytes) else record.bytes_lost


def _skipped_or(skip: Optional[Skip], index: int, record: Union[bytes, Lost]
                ) -> Union[bytes, Lost, Skipped]:
    """Skipped when `skip` names the record (one of a gzip file, read whole), else the
    record."""
    if skip is not None and isinstance(record, bytes) and (
            video_id := _named(skip, index, record)) is not None:
        return Skipped(video_id)
    return record


def _named(skip: Skip, index: int, record: Union[bytes, PagedRecord]) -> Optional[str]:
    """What `skip` says of a record; None (read it) when it cannot tell: a record that
    is not an Example is read, and fails where it is parsed."""
    try:
        return skip(index, record)
    except (ValueError, IndexError):
        return None


def _skip_unread(raw: BinaryIO, before: int, size: int, index: int, skip: Skip
                 ) -> Optional[str]:
    """The id of the record at `before` when `skip` names it, with the file then past
    it; else None, the file back at `before` (the frame is read as any other)."""
    length = read_length(raw)
    if isinstance(length, int) and before + FRAME_OVERHEAD + length <= size:
        video_id = _named(skip, index, PagedRecord(raw, before + HEADER_BYTES, length))
        if video_id is not None:
            raw.seek(before + HEADER_BYTES + length + FOOTER_BYTES)
            return video_id
    raw.seek(before)
    return None


# First bytes of the media files that a glob of latents may catch under another name.
_MAGIC = ((b"GIF87a", "GIF"), (b"GIF89a", "GIF"), (b"\x89PNG\r\n\x1a\n", "PNG"),
          (b"\xff\xd8\xff", "JPEG"), (b"\x1aE\xdf\xa3", "Matroska/WebM"))


def _media_kind(head: bytes) -> Optional[str]:
    """What media file `head` (a file's first 12 bytes) starts, if any: no TFRecord
    starts so (its first 8 bytes are a record's length, its next 4 their CRC)."""
    if head[4:8] == b"ftyp":
        return "MP4/QuickTime"
    if head[:4] == b"RIFF" and head[8:12] in (b"WEBP", b"AVI "):
        return "WebP" if head[8:12] == b"WEBP" else "AVI"
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def _gzip_rest(reason: str, f: Optional[BinaryIO], read: int, consumed: int,
               typical: int) -> Lost:
    """The rest of a gzip file after `read` readable records (`consumed` bytes
    uncompressed) as one Lost, counted in uncompressed bytes: those left in `f` when its
    stream still decompresses (a broken length frame), else none can be counted (a cut
    or damaged stream; a gzip file keeps its length at its end)."""
    left, broken = 0, f is None
    while f is not None:
        try:
            chunk = f.read(1 << 20)
        except (OSError, EOFError, zlib.error):
            broken = True
            break
        if not chunk:
            break
        left += len(chunk)
    per_record = consumed / read if read else typical
    records = max(1, round(left / per_record)) if per_record else 1
    lost = (f"the {left:,} uncompressed bytes after it (about {records:,} records)"
            if left else "the rest")
    unknown = ("; how many records a cut or damaged gzip stream held after the break "
               "cannot be told" if broken else "")
    return Lost(f"{reason} after {read:,} records ({consumed:,} bytes "
                f"uncompressed): {lost} cannot be read{unknown}", records, left, True)


def _rest_lost(reason: str, size: int, offset: int, mean_record: float, typical: int
               ) -> Lost:
    """The rest of a plain file from byte `offset` on, as one Lost with a record
    estimate."""
    left = max(0, size - offset)
    per_record = mean_record or typical
    records = max(1, round(left / per_record)) if per_record else 1
    return Lost(f"{reason} at byte {offset}: the remaining {left:,} bytes of the file "
                f"(about {records:,} records) cannot be read", records, left, True)
