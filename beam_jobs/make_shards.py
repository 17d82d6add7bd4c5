"""Cut long videos into fixed-length windows, written as globally shuffled shards.

    python -m beam_jobs.make_shards --input 'data/latents-*.tfrecord' --output_dir out/ \\
        --window 100 --stride 50 [Beam pipeline options, e.g. --direct_num_workers 2]
    python -m beam_jobs.make_shards --input videos.jsonl --output_dir out/ --window 32 \\
        --stride 16 --frame_size 270x480

Flags not listed under --help are passed to Beam as pipeline options. Without --runner
the job runs locally on Beam's FnApiRunner.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import time
from typing import Any, Callable, Optional

_STARTED = time.monotonic()  # the command's start: the summary's elapsed time counts from it

try:
    import apache_beam as beam
except ModuleNotFoundError as e:  # `pip install .` is the reader alone
    if e.name != "apache_beam":
        raise
    _MISSING = ("the job needs Apache Beam, which is not installed: install with "
                "pip install -e '.[beam]'")
    if __name__ == "__main__":
        sys.exit(f"python -m beam_jobs.make_shards: error: {_MISSING}")
    raise ModuleNotFoundError(_MISSING, name="apache_beam") from None
import numpy as np
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import (DirectOptions, GoogleCloudOptions,
                                                  PipelineOptions, StandardOptions,
                                                  TestOptions)

from beam_jobs import output_dir, paths, storage
from beam_jobs.flags import PROG, JobConfig, parse_args, recorded_flags, refuse, runner_name
from readers import format as data_format

_LOG = logging.getLogger("beam_jobs.make_shards")  # not __name__: "__main__" under -m
# Runners that run in this process or on this machine: their GroupByKey is held in memory.
LOCAL_RUNNERS = ("fnapirunner", "directrunner", "bundlebaseddirectrunner",
                 "switchingdirectrunner", "prismrunner")


@dataclasses.dataclass
class Source:
    """What the pipeline needs of an input kind: its videos, and their window features."""
    features: list[data_format.FeatureSpec]
    read: Callable[[beam.Pipeline], tuple[Any, Any]]   # -> (videos, failure rows)
    output_bytes: float                                # an estimate, for bucket sizing
    pad_frame: Any = None                              # None: zeros like a frame
    encoder: Any = None                                # an encode.EncoderSpec
    total_videos: Optional[int] = None                 # when known before the run
    frame: dict = dataclasses.field(default_factory=dict)  # dataset.json: one frame
    labels: Optional[dict] = None                      # dataset.json: shape, names


def _latent_source(config: JobConfig) -> Source:
    from beam_jobs.sources.base import FAILURES
    from beam_jobs.sources.latents import LatentFormat, ReadLatentRecords, probe_latent_format

    fmt = probe_latent_format(config.input_files, LatentFormat(
        config.sequence_feature, config.metadata_feature, config.id_feature, config.sequence_shape,
        root=config.input_root, allow_nonfinite=config.allow_nonfinite))
    window = data_format.FeatureSpec.for_array("window", (config.window, *fmt.frame_shape),
                                            fmt.dtype)

    def read(pipeline):
        videos = (pipeline
                  | "ListInputs" >> beam.Create(config.input_files)
                  | "ReadLatents" >> beam.ParDo(ReadLatentRecords(fmt)).with_outputs(
                      FAILURES, main="videos"))
        return videos.videos, videos[FAILURES]

    input_bytes = sum(size * (4 if path.endswith(".gz") else 1)
                      for path, size in config.input_files)
    return Source(data_format.window_features(window, fmt.metadata_length), read,
                  input_bytes * max(1.0, config.window / config.stride),
                  frame={"kind": "latents", "shape": list(fmt.frame_shape),
                         "dtype": fmt.dtype})


def _pixel_source(config: JobConfig) -> Source:
    from beam_jobs.sources.manifest import ManifestError, read_manifest
    from beam_jobs.sources.media import FrameCodec
    from beam_jobs.sources.pixels import (PixelFormat, PixelVideo, estimate_frames,
                                          probe_pixel_format, video_file_entries)

    if config.input_kind == "manifest":
        entries, manifest_failures = [], []
        for path, _ in config.input_files:
            try:
                more, failures = read_manifest(path, config.splits)
            except ManifestError as e:
                refuse(f"--input: {e}")
            entries += more
            manifest_failures += failures
    else:
        entries = video_file_entries([p for p, _ in config.input_files], config.input_root)
        manifest_failures = []
    # An encoder takes decoded frames: they stay raw arrays until it turns them to latents.
    encoding = "raw" if config.encodes_frames else config.frame_encoding
    codec = FrameCodec(config.frame_size or (0, 0), config.channels, encoding,
                       config.jpeg_quality, resize=config.frame_size is not None)
    fmt = probe_pixel_format(entries, PixelFormat(
        codec, fps=config.fps, max_frames=config.max_frames, on_bad_frame=config.on_bad_frame,
        max_frame_bytes=config.max_frame_bytes, allow_nonfinite=config.allow_nonfinite))
    encoder = (_probe_encoder(config, fmt.codec.frame_shape)
               if config.encodes_frames else None)
    if encoder:
        window = data_format.FeatureSpec.for_array(
            "window", (config.window, *encoder.latent_shape), encoder.latent_dtype)
        pad_frame = np.zeros(encoder.latent_shape, encoder.latent_dtype)
    else:
        window = data_format.FeatureSpec("window", (config.window, *fmt.codec.frame_shape),
                                      "uint8", encoding)
        pad_frame = fmt.codec.padding()

    def read(pipeline):
        videos = pipeline | "ListVideos" >> beam.Create([PixelVideo(e, fmt) for e in entries])
        failures = pipeline | "ManifestFailures" >> beam.Create(manifest_failures)
        return videos, failures

    frame_bytes = (math.prod(encoder.latent_shape) * np.dtype(encoder.latent_dtype).itemsize
                   if encoder else fmt.stored_frame_bytes)
    frames = estimate_frames(entries, fmt)
    pixels = {"kind": "pixels", "shape": list(fmt.codec.frame_shape), "dtype": "uint8",
              "channel_order": fmt.codec.mode, "value_range": [0, 255],
              "encoding": encoding, "resized": fmt.codec.resize,
              "resampled_fps": config.fps}
    frame = pixels if not encoder else {
        "kind": "latents from the encoder", "shape": list(encoder.latent_shape),
        "dtype": encoder.latent_dtype, "encoder_input": pixels}
    labels = None if fmt.label_shape is None else {
        "shape": list(fmt.label_shape), "names": list(fmt.label_names or []) or None,
        "masked_value": 0.0}
    return Source(data_format.window_features(window, fmt.metadata_length, fmt.label_shape),
                  read, frames * frame_bytes * max(1.0, config.window / config.stride),
                  pad_frame=pad_frame, encoder=encoder, total_videos=len(entries),
                  frame=frame, labels=labels)


def _probe_encoder(config: JobConfig, frame_shape: tuple[int, int, int]):
    """Load the encoder once here, so that a model that cannot serve stops the job
    before any video is processed."""
    from beam_jobs.encoders import EncoderError, EncoderSpec, probe

    try:
        return probe(EncoderSpec(
            config.encoder, config.encoder_handler, config.encoder_input_scale,
            config.encoder_input_offset, config.encoder_layout, config.encoder_batch_size,
            config.latent_dtype, config.encoder_device), frame_shape)
    except EncoderError as e:
        refuse(f"--encoder: {e}")


def _num_buckets(output_bytes: float, bucket_mb: float) -> int:
    """Buckets per split so that one sorted bucket is about `bucket_mb` (no cap: the
    bucket count grows with the data, a bucket's size does not)."""
    return max(1, math.ceil(1.1 * output_bytes / (bucket_mb * 2**20)))


def shuffle_mode(requested: str, runner: str) -> str:
    """--shuffle auto: spill on local runners (their GroupByKey is held in memory), group
    on any other (a distributed shuffle; per-bundle spills would be millions of files).
    `runner` is the runner's class name (flags.runner_name)."""
    if requested != "auto":
        return requested
    return "spill" if runner.rsplit(".", 1)[-1].lower() in LOCAL_RUNNERS else "group"


def build_pipeline(pipeline: beam.Pipeline, config: JobConfig, source: Source,
                   run: output_dir.RunDir, workers: int = 1) -> None:
    from beam_jobs.cut import BAD_FRAMES, VIDEO_COUNTS, CutWindows, ProgressConfig, WindowConfig
    from beam_jobs.duplicates import DroppedKeys
    from beam_jobs.finalize import DatasetConfig, finalize
    from beam_jobs.shard_writer import ShardConfig, WriteShuffledShards
    from beam_jobs.sources.base import FAILURES

    windows = WindowConfig(config.window, config.stride, config.tail, dict(config.splits), config.seed)
    videos, read_failures = source.read(pipeline)
    cut = videos | "CutWindows" >> beam.ParDo(CutWindows(
        source.features, windows, source.pad_frame, source.encoder,
        ProgressConfig(source.total_videos, workers, config.progress_interval),
        config.allow_nonfinite)).with_outputs(VIDEO_COUNTS, FAILURES, BAD_FRAMES,
                                            main="examples")
    # One small row per video, gathered: videos.jsonl, the counts, and duplicate ids.
    video_rows = cut[VIDEO_COUNTS] | "GatherVideos" >> beam.combiners.ToList()
    dropped = video_rows | "DroppedKeys" >> DroppedKeys(windows)
    written = cut.examples | "WriteShards" >> WriteShuffledShards(run, ShardConfig(
        tuple(config.splits), config.compression, config.num_shards,
        max(1, int(config.shard_size_mb * 2**20)),
        _num_buckets(source.output_bytes, config.shuffle_bucket_mb),
        max(1, int(config.spill_buffer_mb * 2**20)), config.shuffle),
        beam.pvalue.AsSingleton(dropped))
    failures = ((read_failures, cut[FAILURES]) | "AllFailures" >> beam.Flatten()
                | "GatherFailures" >> beam.combiners.ToList())
    bad_frames = cut[BAD_FRAMES] | "GatherBadFrames" >> beam.combiners.ToList()
    config = DatasetConfig(
        tuple(source.features), windows, config.compression, config.max_failure_fraction,
        recorded_flags(config), source.encoder.to_json() if source.encoder else None,
        config.input_kind, source.frame, source.labels)
    (written
     | "GatherShards" >> beam.combiners.ToList()
     | "Finalize" >> beam.Map(
         finalize, beam.pvalue.AsSingleton(video_rows), beam.pvalue.AsSingleton(failures),
         beam.pvalue.AsSingleton(bad_frames), run=run, config=config))


def _counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or 0 for c in counters)


def run(argv: Optional[list[str]] = None, started: Optional[float] = None,
        encoder: Any = None) -> beam.runners.runner.PipelineResult:
    """Run the job; SystemExit with a one-line message for bad flags or too many failures.
    `started` (time.monotonic()) is when the command started, for the summary's elapsed
    time (default: now). `encoder`: any Beam RunInference ModelHandler, used as the frame
    encoder instead of an --encoder file (its load_model once per worker, its
    run_inference on each batch of --encoder_batch_size frames)."""
    started = time.monotonic() if started is None else started
    config, pipeline_args = parse_args(argv)
    if encoder is not None and (config.encoder or config.input_kind == "latents"):
        refuse("encoder=: a ModelHandler encodes frames: give it without --encoder, with "
               "a manifest or video files as --input")
    options = PipelineOptions(pipeline_args)
    config = dataclasses.replace(config, encoder_handler=encoder, shuffle=shuffle_mode(
        config.shuffle, runner_name(pipeline_args)))
    # A dry run (Dataflow's --dry_run=True) only builds the job: it must not touch the
    # output directory, which may be gs:// on a machine without credentials or network.
    dry_run = options.view_as(TestOptions).dry_run
    if dry_run:
        return _run(config, pipeline_args, output_dir.RunDir(config.output_dir, "dry-run", ""),
                    dry_run, started)
    # Spilling to a remote output would write an object per spill: spill to local disk.
    local_temp = (output_dir.local_temp_base(options.view_as(GoogleCloudOptions).temp_location)
                  if config.shuffle == "spill" and paths.has_scheme(config.output_dir)
                  else None)
    try:
        claim = output_dir.prepare(config.output_dir, config.overwrite,
                                   [p for p, _ in config.input_files], config.input, local_temp)
    except output_dir.OutputDirError as e:
        refuse(str(e))
    try:
        return _run(config, pipeline_args, claim.run, dry_run, started)
    except BaseException:
        output_dir.abandon(claim.run)  # a run that stops leaves only what proves itself
        raise
    finally:
        output_dir.release(claim)


def _run(config: JobConfig, pipeline_args: list[str], run_dir: output_dir.RunDir,
         dry_run: bool, started: float) -> beam.runners.runner.PipelineResult:
    # TensorFlow comes in with these, after the flags are known to be good.
    from beam_jobs.finalize import COMMITTED
    from beam_jobs.sources.base import BadRecord

    try:
        source = (_latent_source if config.input_kind == "latents" else _pixel_source)(config)
    except BadRecord as e:
        refuse(f"--input: {e}")
    options = _pipeline_options(pipeline_args, config.all_cores,
                                "multi_processing" if config.input_kind == "latents"
                                else "multi_threading")
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config, source, run_dir,
                   options.view_as(DirectOptions).direct_num_workers)
    result = pipeline.run()
    result.wait_until_finish()
    if dry_run:
        _LOG.info("dry run: the job graph builds; nothing was run or written")
        return result
    if not _counter(result, COMMITTED):
        failed, ok = _counter(result, "videos_failed"), _counter(result, "videos_ok")
        sys.exit(f"{PROG}: error: {failed} of {failed + ok} videos failed "
                 f"({failed / max(1, failed + ok):.1%}), more than --max_failure_fraction "
                 f"{config.max_failure_fraction}; see "
                 f"{run_dir.output(data_format.FAILURES_JSONL)}. No dataset.json was written.")
    _log_summary(config.output_dir, time.monotonic() - started)
    return result


def _pipeline_options(pipeline_args: list[str], all_cores: bool,
                      running_mode: str) -> PipelineOptions:
    """Beam's options; FnApiRunner when no runner is named; with --all_cores one worker
    per core in `running_mode`, unless the flags say otherwise.

    Pixel inputs use threads: Pillow, PyAV and TensorFlow release the GIL while they
    decode, resize, encode and run the model, and threads share one process (no second
    start-up, memory:// paths work). Latent inputs are numpy and protobuf work in Python,
    which needs processes.
    """
    options = PipelineOptions(pipeline_args)
    standard, direct = options.view_as(StandardOptions), options.view_as(DirectOptions)
    if standard.runner is None:
        standard.runner = "FnApiRunner"
    if all_cores and "--direct_num_workers" not in " ".join(pipeline_args):
        direct.direct_num_workers = os.cpu_count() or 1
    if all_cores and "--direct_running_mode" not in " ".join(pipeline_args):
        direct.direct_running_mode = running_mode
    return options


def _log_summary(directory: str, elapsed: float) -> None:
    from beam_jobs.progress import summary_table

    path = paths.join(directory, data_format.DATASET_JSON)
    dataset = data_format.DatasetSpec.from_json(storage.read_bytes(path).decode("utf-8"),
                                             source=path)
    sizes = {name: entry.size for name, entry in storage.list_dir(directory).items()}
    _LOG.info("wrote %s\n%s", path, summary_table(dataset, sizes, elapsed))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("beam_jobs").setLevel(logging.INFO)
    # Worker processes' warnings come back through the local job service, among them a
    # protobuf dump per worker about a directory Beam looks for; their errors still show.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(
        logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # worker processes inherit it
    run(sys.argv[1:], started=_STARTED)


if __name__ == "__main__":
    main()
