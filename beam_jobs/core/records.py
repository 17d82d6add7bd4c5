"""What flows between the parts of the job: a window's keyed example (cut -> shuffle), a
video's count and the sums of its frames (cut -> commit), a written shard (shuffle ->
commit), and a failure row (every part that reads or cuts a video -> commit's
failures.jsonl)."""
from __future__ import annotations

import struct
from typing import NamedTuple, Optional

from beam_jobs.core import ids
from readers.format import Shard
from readers.format.moments import VideoMoments
from readers.format.writer import WindowRecord

FAILURES = "failures"   # the tagged output that carries failure rows
_MAX_REASON = 300


# A window on its way to its split's shards: (split, its record: its example, its sort
# key and its window table columns, so that no shard task parses it). A plain pair, not
# a NamedTuple around the record: Beam's coder takes a third longer over a NamedTuple
# that holds one (17 against 12 us a window, each time a window crosses a stage).
KeyedExample = tuple[str, WindowRecord]


# The shuffle's record of a window planned for --shuffle place (cut -> shuffle, in place
# of its example): its key and the bytes of its TFRecord frame, which the pass that
# writes the window puts at the offset their order gives it (beam_jobs/shuffle/place.py).
_PLANNED = struct.Struct("<QQ")


def planned(key: int, frame_bytes: int) -> bytes:
    """A window's planned record, in place of its example."""
    return _PLANNED.pack(key, frame_bytes)


def planned_fields(record: bytes) -> tuple[int, int]:
    """(key, frame bytes) of a planned record."""
    return _PLANNED.unpack(record)


class Checked(NamedTuple):
    """What each pass over a video read of it (--shuffle place reads the input twice):
    its frames and the CRC32C of their bytes then its metadata's, by its record; the two
    must agree."""
    source: str
    record_index: Optional[int]
    frames: int
    crc32c: int


class VideoCount(NamedTuple):
    """What one video gave; duplicate ids are found by grouping these."""
    split: str
    windows: int      # 0: the video was too short for one window
    bad_frames: int = 0
    frames: int = 0
    video_id: str = ""
    source: str = ""
    record_index: Optional[int] = None
    source_fps: Optional[float] = None   # a video file's frame rate
    encoder_device: Optional[str] = None # where the encoder ran on its frames
    digest: str = ""                     # of its frames as given (cut/examples.py)
    rotation: Optional[int] = None       # a video file's display turn applied, clockwise
    metadata: tuple = ()                 # as its row holds it (readers.format.video_rows)
    fields: Optional[dict] = None        # its manifest row's own (None: no manifest row)

    def to_json(self) -> dict:
        """A row of videos.jsonl."""
        row = {"video_id": self.video_id, "split": self.split, "source": self.source,
               "record_index": self.record_index, "frames": self.frames,
               "windows": self.windows, "bad_frames": self.bad_frames,
               "source_fps": self.source_fps, "digest": self.digest,
               "metadata": list(self.metadata), "fields": self.fields or {}}
        if self.encoder_device:
            row["encoder_device"] = self.encoder_device
        if self.rotation is not None:
            row["rotation"] = self.rotation
        return row


class VideoStats(NamedTuple):
    """The sums for the statistics of the frames one video's windows store (cut ->
    commit/split_stats.py, which leaves out those of videos whose windows are left out,
    by the key of their first window)."""
    split: str
    key: int                          # its first window's key
    sums: dict[str, VideoMoments]     # {feature: VideoMoments}


class SplitShard(NamedTuple):
    """A shard the shuffle wrote (shuffle -> commit): its split, and what dataset.json
    lists of it there. Ordered as the split lists its shards (their names number them)."""
    split: str
    shard: Shard


def failure(source: str, record_index: Optional[int], video_id: Optional[str],
            reason: str, records: int = 1) -> dict:
    """One row of failures.jsonl; `records`: how many input records or videos it stands
    for (more than one where a broken file took the rest of its records with it). Its
    text is valid Unicode (`ids.printable`), whatever names the source, the id and the
    reason quote."""
    return {"source": ids.printable(source), "record_index": record_index,
            "video_id": None if video_id is None else ids.printable(video_id),
            "reason": ids.printable(reason)[:_MAX_REASON], "records": records}
