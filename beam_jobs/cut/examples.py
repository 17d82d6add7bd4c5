"""Cut videos into keyed window examples, ready for the shuffled shard writer.

A video is anything with `video_id`, `metadata`, `split` (None: by hash), `source`,
`record_index` and a `frames(info)` iterator of `Frame`s that raises `BadRecord` when the
video turns out unusable (and may put facts about its source in the dict `info`); and,
when it comes from a manifest row, that row's own `fields`, which its row of the videos
file keeps. Latent
sequences and decoded pixel videos both fit. A video whose frames are already one array in
memory, all valid (a latent sequence), may also have it as `sequence` [T, ...]: its
windows are then slices of it, with no Python work per frame.

A video is recognised by its content: the digest of its frames as the source gives them
(before an encoder), each frame's bytes, whether it is valid and its labels, in order,
and its metadata (cut/digest.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, NamedTuple, Optional

import apache_beam as beam
import google_crc32c
import numpy as np
from apache_beam.utils import shared

from beam_jobs.core import ids, progress
from beam_jobs.core.frames import BadRecord, Frame
from beam_jobs.core.records import (
    FAILURES,
    Checked,
    KeyedExample,
    VideoCount,
    VideoStats,
    failure,
    planned,
)
from beam_jobs.cut.config import CutConfig, ProgressConfig
from beam_jobs.cut.digest import BLAKE3, DatasetScheme, FrameDigest
from beam_jobs.cut.windows import stream_windows
from beam_jobs.encoders import EncoderSpec, encode_frames, load_encoder
from readers import format as data_format
from readers.format.frame_stats import StoredFrameStats
from readers.format.writer import VideoWindows, window_values


class Abandoned(NamedTuple):
    """A video that failed after some of its windows were emitted: their keys, which the
    shard writer must leave out."""
    split: str
    video_id: str
    keys: tuple[int, ...]


# How a cut serves --shuffle place, which reads the input twice (shuffle/place.py): PLAN
# cuts each window to its key and frame size alone (records.planned), with all the rest a
# cut gives; WRITE cuts the windows' examples and nothing else (no digest, no
# statistics). Either gives each video's `Checked` row. None: a cut of every other mode.
PLAN, WRITE = "plan", "write"


@dataclasses.dataclass
class _Cut:
    """What one video gave so far: its windows' keys, frames read, bad frames (index,
    where, reason), the digest of its frames, the statistics of the frames it stores
    (neither in a WRITE cut), the CRC32C of its frames' bytes; and its windows as
    records (readers.format.writer)."""
    stats: Optional[StoredFrameStats]
    windows: VideoWindows
    keys: list[int] = dataclasses.field(default_factory=list)
    frames: int = 0
    bad: list = dataclasses.field(default_factory=list)
    digest: Optional[FrameDigest] = dataclasses.field(default_factory=FrameDigest)
    crc32c: int = 0


# The tagged outputs of the cut, besides its examples and failure rows.
_VIDEO_COUNTS, _BAD_FRAMES, _ABANDONED = "video_counts", "bad_frames", "abandoned"
_STATS, _CHECKED = "video_stats", "checked"


class CutOutputs(NamedTuple):
    """The PCollections that `CutWindows` gives."""
    examples: beam.PCollection     # KeyedExample, one per window
    videos: beam.PCollection       # VideoCount, one per video that was cut
    failures: beam.PCollection     # failure rows, one per unusable video
    bad_frames: beam.PCollection   # rows of bad_frames.jsonl
    abandoned: beam.PCollection    # Abandoned, one per video that failed half-way
    stats: beam.PCollection        # VideoStats, one per video that stores a frame
    checked: beam.PCollection      # Checked, one per video cut (--shuffle place only)


class CutWindows(beam.PTransform):
    """Videos -> `CutOutputs`: their windows as keyed examples, and a row per video.

    `known_digests`: (digest, video id) of the dataset an append adds to, whose scheme
    the videos' digests take (cut/digest.py); None: BLAKE3."""

    def __init__(self, features: list[data_format.FeatureSpec], config: CutConfig,
                 pad_frame: Any = None, encoder: Optional[EncoderSpec] = None,
                 progress_config: ProgressConfig = ProgressConfig(),
                 allow_nonfinite: bool = False, known_digests: Any = None,
                 placing: Optional[str] = None):
        super().__init__()
        self._cut = _CutVideo(features, config, pad_frame, encoder, progress_config,
                              allow_nonfinite, placing)
        self._known_digests = known_digests

    @beam.typehints.no_annotations   # a tuple of PCollections: mypy's, not Beam's
    def expand(self, videos) -> CutOutputs:
        schemes = () if self._known_digests is None else (beam.pvalue.AsSingleton(
            self._known_digests | "DigestScheme" >> DatasetScheme()),)
        cut = videos | "Cut" >> beam.ParDo(self._cut, *schemes).with_outputs(
            _VIDEO_COUNTS, FAILURES, _BAD_FRAMES, _ABANDONED, _STATS, _CHECKED,
            main="examples")
        return CutOutputs(cut.examples, cut[_VIDEO_COUNTS], cut[FAILURES], cut[_BAD_FRAMES],
                          cut[_ABANDONED], cut[_STATS], cut[_CHECKED])


class _CutVideo(beam.DoFn):
    """A video -> one `KeyedExample` per window, or a failure row if it is unusable.

    Frames stream through `stream_windows` (cut/windows.py: at most L of them held) and
    each window's example is emitted as soon as it is cut, so a long video never sits
    in memory. A video that fails half-way (labels that do not match its frame count, a
    file that breaks) has emitted some windows already: it gives, besides its failure
    row, an `Abandoned` row with their keys, and the shard writer leaves them out as it
    does the windows of duplicate ids.
    """

    def __init__(self, features: list[data_format.FeatureSpec], config: CutConfig,
                 pad_frame: Any = None, encoder: Optional[EncoderSpec] = None,
                 progress_config: ProgressConfig = ProgressConfig(),
                 allow_nonfinite: bool = False, placing: Optional[str] = None):
        self._features, self._placing = features, placing
        # what a window's record holds: its example, or (a PLAN cut) its planned record
        self._record_bytes = self._planned if placing == PLAN else self._example_bytes
        self._encode_example = data_format.ExampleEncoder(features)
        self._names = {f.name for f in features}
        self._encoded = features[0].encoding in data_format.IMAGE_ENCODINGS
        # pixel frames come with their histograms (sources/media.py), latents without
        self._pixels = features[0].dtype == "uint8" and encoder is None
        self._config, self._pad_frame = config, pad_frame
        self._encoder, self._shared_model = encoder, shared.Shared()
        self._progress_config = progress_config
        self._allow_nonfinite = allow_nonfinite
        self._counters = {name: progress.counter(name) for name in
                          ("videos_too_short", "windows", "frames", "bad_frames",
                           "windows_abandoned")}

    def setup(self):
        c = self._progress_config
        self._progress = progress.Progress(c.total_videos, c.workers, c.interval)
        if self._encoder:  # once per worker process, whatever the number of DoFn copies
            spec = self._encoder
            self._encode = self._shared_model.acquire(
                lambda: load_encoder(spec), tag=f"{spec.name}@{spec.device}")

    def finish_bundle(self):
        self._progress.log()

    def process(self, video, digest_scheme: str = BLAKE3):
        self._progress.start()
        split = self._config.split_of(video)
        info: dict = {}
        content = self._placing != WRITE    # the second pass knows them from the first
        cut = _Cut(StoredFrameStats(self._features, self._pixels) if content else None,
                   VideoWindows(self._config.seed, video.video_id, video.metadata,
                                self._record_bytes),
                   digest=FrameDigest(getattr(video, "metadata", None), digest_scheme)
                   if content else None)
        try:
            for example in self._examples(video, split, info, cut):
                cut.keys.append(example[1].key)
                yield example
        except BadRecord as e:
            self._progress.add(failures=1)
            yield beam.pvalue.TaggedOutput(FAILURES, failure(
                video.source, video.record_index, video.video_id, str(e)))
            if cut.keys:
                self._counters["windows_abandoned"].inc(len(cut.keys))
                yield beam.pvalue.TaggedOutput(_ABANDONED, Abandoned(
                    split, video.video_id, tuple(cut.keys)))
            return
        if self._placing is not None:
            yield beam.pvalue.TaggedOutput(_CHECKED, Checked(
                ids.printable(video.source), video.record_index, cut.frames,
                _with_metadata(cut.crc32c, video.metadata)))
        # A WRITE cut: the first pass gave what follows. (A bare `return`, which Beam's
        # check for a value returned beside `yield` does not take for one.)
        if cut.digest is None or cut.stats is None:
            return
        windows_cut = len(cut.keys)
        self._progress.add(videos=1, frames=cut.frames, windows=windows_cut)
        for name, value in (("videos_too_short", not windows_cut), ("windows", windows_cut),
                            ("frames", cut.frames), ("bad_frames", len(cut.bad))):
            self._counters[name].inc(int(value))
        source = ids.printable(video.source)  # a path: its name need not be UTF-8
        for index, where, reason in cut.bad:
            yield beam.pvalue.TaggedOutput(_BAD_FRAMES, {
                "video_id": video.video_id, "source": source, "frame": index,
                "where": ids.printable(where) if isinstance(where, str) else where,
                "reason": ids.printable(reason)})
        yield beam.pvalue.TaggedOutput(_VIDEO_COUNTS, VideoCount(
            split, windows_cut, len(cut.bad), cut.frames, video.video_id, source,
            video.record_index, info.get("source_fps"), info.get("encoder_device"),
            cut.digest.hexdigest(), info.get("rotation"),
            tuple(data_format.video_rows.metadata_values(video.metadata)),
            getattr(video, "fields", None)))
        sums = cut.stats.result()
        if sums:
            yield beam.pvalue.TaggedOutput(_STATS, VideoStats(split, cut.keys[0], sums))

    def _examples(self, video, split: str, info: dict, cut: "_Cut") -> Iterator[KeyedExample]:
        """The video's examples, one at a time; `cut` gets its frame count and bad frames
        (index, where, reason: not their pixels) as they are read, `info` what the source
        tells of itself (a video file's frame rate)."""
        def counted(frames):
            for cut.frames, frame in enumerate(frames, start=1):
                if cut.digest is not None:
                    cut.digest.add(frame.data, frame.valid, frame.label)
                if self._placing is not None:
                    cut.crc32c = google_crc32c.extend(cut.crc32c, _bytes_of(frame.data))
                if not frame.valid:
                    cut.bad.append((cut.frames - 1, frame.where, frame.reason))
                yield frame

        sequence = getattr(video, "sequence", None)
        if (isinstance(sequence, np.ndarray) and sequence.ndim >= 1 and not self._encoder
                and not self._encoded and self._pad_frame is None
                and "labels" not in self._names):
            yield from self._slices(video, sequence, split, cut)
            return
        frames = counted(video.frames(info))
        if self._encoder:
            info["encoder_device"] = self._encode.device
            frames = encode_frames(frames, self._encode, self._encoder,
                                   self._allow_nonfinite)
        w = self._config.windows
        for start, window in stream_windows(frames, w.length, w.stride, w.tail):
            values = self._window_values(window)
            if cut.stats is not None:
                cut.stats.add_window(start, window, values)
            yield split, cut.windows.record(start, values)

    def _slices(self, video, sequence: np.ndarray, split: str,
                cut: "_Cut") -> Iterator[KeyedExample]:
        """The examples of a video whose frames are one array in memory, all valid (a
        latent sequence): each window is a slice of it, not a stack of frames, with no
        work per frame. The same windows as the streaming path."""
        length = self._config.windows.length
        cut.frames = len(sequence)
        starts = self._config.windows.starts(len(sequence))
        if cut.digest is not None and cut.stats is not None:
            cut.digest.add_sequence(sequence)
            cut.stats.add_sequence(sequence, starts, length)
        if self._placing is not None:
            cut.crc32c = google_crc32c.value(_bytes_of(sequence))
        for start in starts:
            values = window_values(sequence[start:start + length], length)
            yield split, cut.windows.record(start, values)

    def _example_bytes(self, key: int, values: dict) -> bytes:
        """A window's example."""
        return self._encode_example(values)

    def _planned(self, key: int, values: dict) -> bytes:
        """A PLAN cut's record of a window, in place of its example: its key and the
        size of its frame."""
        return planned(key, self._encode_example.frame_size(values))

    def _window_values(self, frames: list[Frame]) -> dict:
        """window, mask and labels of L frames: the given ones, then padding."""
        labels = [f.label for f in frames] if "labels" in self._names else None
        return window_values([f.data for f in frames], self._config.windows.length,
                             [f.valid for f in frames], labels, self._pad_frame)


def _with_metadata(crc32c: int, metadata: Any) -> int:
    """`crc32c` (of a video's frames) extended by its `metadata`'s bytes: the rest of
    what its windows hold of it, which the two reads must agree on too (its id is in its
    windows' keys, which the second read must find planned)."""
    if metadata is None:
        return crc32c
    return google_crc32c.extend(crc32c, _bytes_of(np.asarray(metadata)))


def _bytes_of(data: Any) -> Any:
    """A frame's, a sequence's or metadata's bytes, for their CRC (an array's own
    buffer; encoded frames are bytes already). An ndarray, not digest.py's memoryview:
    google_crc32c takes no writable memoryview."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    return data
