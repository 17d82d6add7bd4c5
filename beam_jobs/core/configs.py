"""The job's flags as checked values: one frozen config per group of `--help`, and the
`JobConfig` that holds them with what the inputs resolved to.

Each config's fields are its group's flags, named as the flags are and in --help order
(job/flags.py builds them, and holds the defaults; tests/test_cli.py checks the match),
so dataset.json records a run's flags by walking these. Frozen: what differs later (the
shuffle mode once the runner is known, a ModelHandler given to `run`) is a new config,
made with dataclasses.replace.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from readers.format.windows import Tail, Window


@dataclasses.dataclass(frozen=True)
class IoConfig:
    """input and output: where the run reads and writes, and how it runs."""
    input: tuple[str, ...]          # the globs, local ones made absolute
    output_dir: str                 # normalized
    overwrite: bool
    append: bool
    retry_failed: bool
    detach: bool
    break_lease: bool
    all_cores: bool
    progress_interval: float
    allow_nonfinite: bool
    homepage: Optional[str]


@dataclasses.dataclass(frozen=True)
class LatentConfig:
    """latent input: the features of a latent TFRecord."""
    sequence_feature: str
    sequence_shape: Optional[tuple[int, ...]]
    metadata_feature: str
    id_feature: Optional[str]


# Pixel input's bounds, the defaults of their flags, here so that a run of latents (and
# its workers) never imports the pixel sources, nor PyAV with them.
DEFAULT_MAX_FRAME_BYTES = 256 << 20  # an 8K 16-bit RGB TIFF is 200 MB
# Seconds: far over a steady frame interval (1 s in a 1 fps time-lapse) or a burst of
# dropped frames, and at --fps 30 at most 150 copies of one frame.
DEFAULT_MAX_TIMESTAMP_GAP = 5.0


@dataclasses.dataclass(frozen=True)
class PixelConfig:
    """pixel input: how frames are decoded, checked and stored."""
    frame_size: Optional[tuple[int, int]]
    resize: str                     # "fast" or "exact"
    channels: int
    fps: Optional[float]
    max_timestamp_gap: float
    max_frames: Optional[int]
    frame_encoding: str
    jpeg_quality: int
    on_bad_frame: str
    max_frame_bytes: int
    keep_orientation: bool


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """frame encoder: a model file (--encoder) or a Beam ModelHandler (`handler`, given
    to make_shards.run) that turns frames into latents."""
    encoder: Optional[str]
    encoder_input_scale: float
    encoder_input_offset: float
    encoder_layout: str
    encoder_device: str
    encoder_batch_size: int
    latent_dtype: str
    handler: Any = None             # not a flag: run(argv, encoder=handler)

    @property
    def encodes_frames(self) -> bool:
        """Whether an encoder turns the frames into latents."""
        return bool(self.encoder or self.handler)


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """windows: where windows start in a video."""
    window: int                     # frames per window, L
    stride: int                     # frames between starts (--window when not given)
    tail: Tail

    def to_window(self) -> Window:
        """The windows these flags cut, as a dataset and its readers know them."""
        return Window(self.window, self.stride, self.tail)


@dataclasses.dataclass(frozen=True)
class ShardsConfig:
    """splits and shards: where a video goes, how windows are shuffled into shards, and
    when a run fails instead."""
    splits: dict[str, float]
    num_shards: Optional[int]
    shard_size_mb: float
    seed: int
    compression: str
    max_failure_fraction: float
    shuffle: str                    # "place", "spill" or "group" once run() knows the runner
    shuffle_bucket_mb: float
    spill_buffer_mb: float


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What --input resolved to."""
    files: tuple[tuple[str, int], ...]   # (path, size) of every input, sorted
    kind: str                            # "latents", "manifest" or "videos"
    root: str                            # the inputs' common fixed directory


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """The job's flags, a config per --help group, and the inputs they resolved to."""
    io: IoConfig
    latents: LatentConfig
    pixels: PixelConfig
    encoder: EncoderConfig
    windows: WindowConfig
    shards: ShardsConfig
    inputs: Inputs

    GROUPS = ("io", "latents", "pixels", "encoder", "windows", "shards")

    def flag_groups(self) -> tuple:
        """The flag configs, in --help order."""
        return tuple(getattr(self, name) for name in self.GROUPS)
