"""Pixel videos: frame folders and video files, decoded one frame at a time."""
from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any, Iterator, Optional, Union

import apache_beam as beam
import numpy as np

from beam_jobs.core import paths
from beam_jobs.core.configs import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_TIMESTAMP_GAP,
    EncoderConfig,
    JobConfig,
)
from beam_jobs.core.frames import BadRecord, Frame, check_finite
from beam_jobs.encoders import EncoderError, EncoderSpec, probe
from beam_jobs.sources import media, video_files
from beam_jobs.sources.base import JoinKnown, Source, SourceError
from beam_jobs.sources.manifest import (
    ManifestError,
    VideoEntry,
    expand_frames,
    load_labels,
    read_manifest,
)
from readers import format as data_format


@dataclasses.dataclass(frozen=True)
class PixelFormat:
    """What every pixel video of the dataset must look like, and how to decode it."""
    codec: media.FrameCodec
    label_shape: Optional[tuple[int, ...]] = None   # () or (C,); None: no labels
    label_names: Optional[tuple[str, ...]] = None   # a labels CSV's header
    metadata_length: int = 0
    fps: Optional[float] = None
    max_frames: Optional[int] = None
    max_timestamp_gap: float = DEFAULT_MAX_TIMESTAMP_GAP
    on_bad_frame: str = "mask"                      # or "fail"
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    allow_nonfinite: bool = False
    stored_frame_bytes: int = 0                     # of the first frame, as stored


@dataclasses.dataclass(frozen=True)
class PixelVideo:
    """A manifest entry to be decoded; a video for `cut.CutWindows`."""
    entry: VideoEntry
    fmt: PixelFormat

    @property
    def video_id(self) -> str:
        return self.entry.video_id

    @property
    def source(self) -> str:
        return self.entry.source

    @property
    def record_index(self) -> Optional[int]:
        return self.entry.record_index

    @property
    def split(self) -> Optional[str]:
        return self.entry.split

    @property
    def fields(self) -> Optional[dict]:
        return self.entry.fields

    @property
    def metadata(self) -> Optional[np.ndarray]:
        if not self.fmt.metadata_length:
            return None
        return np.asarray(self.entry.metadata, dtype=np.float32)

    def frames(self, info: Optional[dict] = None) -> Iterator[Frame]:
        """Stored frames with their labels; raises BadRecord when the video is unusable.
        `info` gets a video file's frame rate ("source_fps")."""
        fmt = self.fmt
        labels = self._labels()
        self._check_metadata()
        # labels are read exactly when the dataset has a label shape (_labels)
        zero_label = None if fmt.label_shape is None else np.zeros(fmt.label_shape, np.float32)
        pad = None
        count = readable = 0
        for count, (stored, where, reason) in enumerate(self._stored_frames(info), start=1):
            if labels is not None and count > len(labels):
                raise BadRecord(f"{len(labels)} labels, but the video has more frames")
            if stored is None:
                pad = fmt.codec.padding() if pad is None else pad
                yield Frame(pad, False, zero_label, where, reason)
            else:
                readable += 1
                yield Frame(stored.data, True, None if labels is None else labels[count - 1],
                            where, histogram=stored.histogram)
            if count == fmt.max_frames:
                break
        _check_frames_read(labels, count, readable, fmt.max_frames)

    def _check_metadata(self) -> None:
        """BadRecord for metadata of another length than the dataset's, or (unless the
        dataset allows them) with a NaN or Inf."""
        metadata = self.entry.metadata or ()
        if len(metadata) != self.fmt.metadata_length:
            raise BadRecord(f"metadata has {len(metadata)} values, expected "
                            f"{self.fmt.metadata_length}" + (" (other rows have metadata)"
                                                             if not metadata else ""))
        if metadata and not self.fmt.allow_nonfinite:
            check_finite(np.asarray(metadata, np.float32), "metadata")

    def _labels(self) -> Optional[np.ndarray]:
        if self.fmt.label_shape is None:
            return None
        if self.entry.labels is None:
            raise BadRecord("no labels (other rows of the manifest have labels)")
        labels = load_labels(self.entry.labels).values
        if labels.shape[1:] != self.fmt.label_shape:
            raise BadRecord(f"labels are {_per_frame(labels.shape[1:])} per frame, the "
                            f"dataset's are {_per_frame(self.fmt.label_shape)}")
        if not self.fmt.allow_nonfinite:
            check_finite(labels, "labels")
        return labels

    def _stored_frames(self, info: Optional[dict]
                       ) -> Iterator[tuple[Optional[media.Stored], Any, Optional[str]]]:
        """(stored frame or None, where, reason) for each frame: None for a missing or
        unreadable image, with the reason; `where` is its path, or its time in seconds."""
        codec = self.fmt.codec
        if self.entry.video:
            for image, time in video_files.video_images(self.entry.video, self.fmt.fps, info,
                                                  self.fmt.max_timestamp_gap, codec.orient,
                                                  codec.video_scale()):
                yield codec.store_image(image), round(time, 6), None
            return
        for path in expand_frames(_frames_of(self.entry)):
            try:
                stored = codec.store_bytes(media.read_bytes(path, self.fmt.max_frame_bytes))
            except media.BadFrame as e:
                if self.fmt.on_bad_frame == "fail":
                    raise BadRecord(f"frame {path}: {e}") from None
                yield None, path, str(e)
                continue
            yield stored, path, None


def _check_frames_read(labels: Optional[np.ndarray], count: int, readable: int,
                       max_frames: Optional[int]) -> None:
    """BadRecord, once a video's `count` frames are read (`readable` of them), for
    labels of more frames than it has (unless it was cut at `max_frames`), or a video
    without a readable frame."""
    if labels is not None and count < len(labels) and count != max_frames:
        raise BadRecord(f"{len(labels)} labels for {count} frames")
    if not readable:
        raise BadRecord("no readable frame" if count else "no frames")


def _per_frame(shape: tuple[int, ...]) -> str:
    return f"{shape[0]} values" if shape else "one number"


def video_file_entries(files: list[str], root: str) -> list[VideoEntry]:
    """Video files as entries: the id is the path relative to `root`, without suffix."""
    return [VideoEntry(paths.default_id(p, root, strip_suffix=True), p, None, None, p, None,
                       None, None) for p in files]


def probe_pixel_format(entries: list[VideoEntry], fmt: PixelFormat,
                       max_entries: int = 20) -> PixelFormat:
    """Fix the dataset's schema from what the entries declare: labels when any entry
    has labels (their shape and names from the first that loads), metadata of the
    length of the first entry that has metadata; and the frame size (unless resizing)
    from the first of `max_entries` entries with a readable frame. Raises BadRecord with
    the last reason when none of them has a readable frame."""
    label_shape, label_names = _label_schema(entries)
    metadata_length = next((len(e.metadata) for e in entries if e.metadata), 0)
    fmt = dataclasses.replace(fmt, label_shape=label_shape, label_names=label_names,
                              metadata_length=metadata_length)
    reason = "no videos"
    for entry in entries[:max_entries]:
        try:
            image = _first_image(entry, fmt.max_frame_bytes, fmt.codec)
        except (BadRecord, media.BadFrame) as e:
            reason = f"{entry.video_id}: {e}"
            continue
        if not fmt.codec.resize:
            fmt = dataclasses.replace(fmt, codec=dataclasses.replace(
                fmt.codec, size=(image.height, image.width)))
        stored = fmt.codec.store(image)
        return dataclasses.replace(fmt, stored_frame_bytes=len(stored) if isinstance(
            stored, bytes) else stored.nbytes)
    raise BadRecord(f"none of the first {min(len(entries), max_entries)} videos has a "
                    f"readable frame; last: {reason}")


def _label_schema(entries: list[VideoEntry]
                  ) -> tuple[Optional[tuple[int, ...]], Optional[tuple[str, ...]]]:
    """(shape a frame, column names) of the labels of the first entry whose labels load;
    (None, None) when no entry has labels, and ((), None) when none loads (every video
    then fails, saying why)."""
    if not any(e.labels is not None for e in entries):
        return None, None
    for entry in entries:
        if entry.labels is None:
            continue
        try:
            labels = load_labels(entry.labels)
        except BadRecord:
            continue
        return labels.values.shape[1:], labels.names
    return (), None


def _first_image(entry: VideoEntry, max_bytes: int, codec: media.FrameCodec):
    """The first readable frame, oriented as the codec stores it."""
    if entry.video:
        for image, _ in video_files.video_images(entry.video, orient=codec.orient):
            return image
        raise BadRecord("no frames")
    for path in expand_frames(_frames_of(entry)):
        try:
            return media.open_image(path, max_bytes, codec)
        except Exception:  # noqa: BLE001 - Pillow raises many kinds; try the next frame
            continue
    raise BadRecord("no readable frame")


def _frames_of(entry: VideoEntry) -> Union[tuple[str, ...], str]:
    """The frames of a row that names no video (manifest.parse_row gives it frames)."""
    if entry.frames is None:
        raise BadRecord("the row names neither a video nor frames")
    return entry.frames


def estimate_frames(entries: list[VideoEntry], fmt: PixelFormat, sample: int = 20) -> float:
    """Frames all entries will give, from the first `sample` of them: frame lists
    counted, folders and globs listed, video files' declared frame counts (or durations
    at --fps), each capped at --max_frames. For sizing the shuffle's buckets."""
    counts = []
    for entry in entries[:sample]:
        try:
            if entry.video:
                frames, seconds = video_files.video_length(entry.video)
                count = seconds * fmt.fps if fmt.fps else frames
            else:
                count = len(expand_frames(_frames_of(entry)))
        except (BadRecord, media.BadFrame, OSError, ValueError):
            continue
        counts.append(min(count, fmt.max_frames or count))
    return len(entries) * (sum(counts) / len(counts) if counts else 1.0)


class _ReadManifest(beam.DoFn):
    """A manifest's path -> a PixelVideo per row that is a video, and a failure row
    (tagged "failures") per row that is not."""

    def __init__(self, fmt: PixelFormat, splits: tuple[str, ...]):
        self._fmt, self._splits = fmt, splits

    def process(self, path: bytes):
        entries, failures = read_manifest(os.fsdecode(path), self._splits)
        for entry in entries:
            yield PixelVideo(entry, self._fmt)
        for row in failures:
            yield beam.pvalue.TaggedOutput("failures", row)


class ReadPixelVideos(beam.PTransform):
    """The pipeline -> (a `PixelVideo` per entry, the manifests' failure rows, the ids
    skipped: those among `known`'s ids, when given (JoinKnown); their frames are never
    read).

    The job graph holds the input paths, not the rows: manifests are read inside the
    pipeline (a job of 50,000 rows submits the graph of one of 1,000), then their videos
    are spread over the workers. The paths travel as bytes (os.fsencode): Beam's coders
    take only valid UTF-8 text, and a file's name need not be."""

    def __init__(self, config: JobConfig, fmt: PixelFormat,
                 known: Optional[beam.PCollection] = None):
        super().__init__()
        self._kind, self._root = config.inputs.kind, config.inputs.root
        self._paths = [path for path, _ in config.inputs.files]
        self._splits, self._fmt, self._known = tuple(config.shards.splits), fmt, known

    def expand(self, pipeline):
        inputs = pipeline | "ListInputs" >> beam.Create(
            [os.fsencode(path) for path in self._paths])
        if self._kind == "videos":
            root, fmt = self._root, self._fmt
            videos = inputs | "VideoFiles" >> beam.Map(
                lambda path: PixelVideo(video_file_entries([os.fsdecode(path)], root)[0], fmt))
            failures = pipeline | "ManifestFailures" >> beam.Create([])
        else:
            read = inputs | "ReadManifests" >> beam.ParDo(
                _ReadManifest(self._fmt, self._splits)).with_outputs("failures", main="videos")
            videos, failures = read.videos, read.failures
        if self._known is None:
            skipped = pipeline | "NoneSkipped" >> beam.Create([])
            if self._kind != "videos":
                videos = videos | "SpreadVideos" >> beam.Reshuffle()
        else:   # the join spreads the videos too
            joined = (videos | "ById" >> beam.Map(lambda video: (video.video_id, video))
                      | "SkipKnown" >> JoinKnown(self._known))
            videos = joined.new
            skipped = joined.known | "SkippedIds" >> beam.Map(lambda pair: pair[0])
        return videos, failures, skipped


def build_source(config: JobConfig) -> Source:
    """Manifests or video files: labels, metadata and the frame size are those the
    first entries declare or hold (probe_pixel_format); with an encoder, windows hold
    its latents and the encoder is loaded once here (probe_encoder)."""
    entries = _entries(config)
    # An encoder takes decoded frames: they stay raw arrays until it turns them to latents.
    flags = config.pixels
    encoding = "raw" if config.encoder.encodes_frames else flags.frame_encoding
    codec = media.FrameCodec(flags.frame_size or (0, 0), flags.channels, encoding,
                             flags.jpeg_quality, resize=flags.frame_size is not None,
                             orient=not flags.keep_orientation,
                             fast_resize=flags.resize == "fast")
    fmt = probe_pixel_format(entries, PixelFormat(
        codec, fps=flags.fps, max_frames=flags.max_frames,
        max_timestamp_gap=flags.max_timestamp_gap, on_bad_frame=flags.on_bad_frame,
        max_frame_bytes=flags.max_frame_bytes, allow_nonfinite=config.io.allow_nonfinite))
    encoder = (probe_encoder(config.encoder, fmt.codec.frame_shape)
               if config.encoder.encodes_frames else None)
    if encoder:
        window = data_format.FeatureSpec.for_array(
            "window", (config.windows.window, *encoder.latent_shape), encoder.latent_dtype)
        pad_frame = np.zeros(encoder.latent_shape, encoder.latent_dtype)
    else:
        window = data_format.FeatureSpec(
            "window", (config.windows.window, *fmt.codec.frame_shape), "uint8", encoding)
        pad_frame = fmt.codec.padding()
    frame_bytes = (math.prod(encoder.latent_shape) * np.dtype(encoder.latent_dtype).itemsize
                   if encoder else fmt.stored_frame_bytes)
    pixels = {"kind": "pixels", "shape": list(fmt.codec.frame_shape), "dtype": "uint8",
              "channel_order": fmt.codec.mode, "value_range": [0, 255],
              "encoding": encoding, "resized": fmt.codec.resize,
              "resampled_fps": flags.fps}
    frame = pixels if not encoder else {
        "kind": "latents from the encoder", "shape": list(encoder.latent_shape),
        "dtype": encoder.latent_dtype, "encoder_input": pixels}
    labels = None if fmt.label_shape is None else {
        "shape": list(fmt.label_shape), "names": list(fmt.label_names or []) or None,
        "masked_value": 0.0}
    # Threads: Pillow, PyAV and TensorFlow release the GIL while they decode, resize,
    # encode and run the model, and threads share one process (no second start-up,
    # memory:// paths work).
    return Source(data_format.window_features(window, fmt.metadata_length, fmt.label_shape),
                  functools.partial(ReadPixelVideos, config, fmt),
                  estimate_frames(entries, fmt) * frame_bytes, "multi_threading",
                  pad_frame=pad_frame, encoder=encoder, total_videos=len(entries),
                  frame=frame, labels=labels)


def _entries(config: JobConfig) -> list[VideoEntry]:
    """The videos of the manifests, or the video files, for probing and sizing on the
    launcher (the pipeline reads them again, in ReadPixelVideos)."""
    if config.inputs.kind == "videos":
        return video_file_entries([p for p, _ in config.inputs.files], config.inputs.root)
    entries = []
    for path, _ in config.inputs.files:
        try:
            entries += read_manifest(path, config.shards.splits)[0]
        except ManifestError as e:
            raise SourceError(f"--input: {e}") from None
    return entries


def probe_encoder(flags: EncoderConfig, frame_shape: tuple[int, int, int]) -> EncoderSpec:
    """The encoder of --encoder (or run's encoder=), loaded once here, so that a model
    that cannot serve stops the job before any video is processed."""
    try:
        return probe(EncoderSpec(
            flags.encoder, flags.handler, flags.encoder_input_scale, flags.encoder_input_offset,
            flags.encoder_layout, flags.encoder_batch_size, flags.latent_dtype,
            flags.encoder_device), frame_shape)
    except EncoderError as e:
        raise SourceError(f"--encoder: {e}") from None
