"""Cut long videos into fixed-length windows, written as globally shuffled shards.

    python -m beam_jobs.make_shards --input 'data/latents-*.tfrecord' --output_dir out/ \\
        --window 100 --stride 50 [Beam pipeline options, e.g. --direct_num_workers 2]
    python -m beam_jobs.make_shards --input videos.jsonl --output_dir out/ --window 32 \\
        --stride 16 --frame_size 270x480

Flags not listed under --help are passed to Beam as pipeline options. Without --runner
the job runs locally on Beam's FnApiRunner.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
import time
from typing import Any, Callable, Optional

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import (DirectOptions, PipelineOptions,
                                                  StandardOptions, TestOptions)

from beam_jobs import output_dir
from beam_jobs.flags import PROG, parse_args, refuse
from readers import spec as spec_lib

_LOG = logging.getLogger("beam_jobs.make_shards")  # not __name__: "__main__" under -m
MAX_BUCKETS = 4096
# Output per video, for sizing the shuffle buckets of pixel inputs, whose size is not
# known before decoding; an over-estimate only makes more, smaller buckets.
_FRAMES_PER_VIDEO_GUESS = 1000
_BYTES_PER_PIXEL = {"png": 0.6, "jpeg": 0.15}   # of raw, roughly


@dataclasses.dataclass
class Source:
    """What the pipeline needs of an input kind: its videos, and their window features."""
    features: list[spec_lib.FeatureSpec]
    read: Callable[[beam.Pipeline], tuple[Any, Any]]   # -> (videos, failure rows)
    output_bytes: float                                # an estimate, for bucket sizing
    pad_frame: Any = None                              # None: zeros like a frame
    encoder: Any = None                                # an encode.EncoderSpec
    total_videos: Optional[int] = None                 # when known before the run


def _latent_source(args: argparse.Namespace) -> Source:
    from beam_jobs.latents import FAILURES, LatentFormat, ReadLatentRecords, probe_latent_format

    fmt = probe_latent_format([path for path, _ in args.input_files], LatentFormat(
        args.sequence_feature, args.metadata_feature, args.id_feature, args.sequence_shape))
    window = spec_lib.FeatureSpec.for_array("window", (args.window, *fmt.frame_shape),
                                            fmt.dtype)

    def read(pipeline):
        videos = (pipeline
                  | "ListInputs" >> beam.Create([path for path, _ in args.input_files])
                  | "ReadLatents" >> beam.ParDo(ReadLatentRecords(fmt)).with_outputs(
                      FAILURES, main="videos"))
        return videos.videos, videos[FAILURES]

    input_bytes = sum(size * (4 if path.endswith(".gz") else 1)
                      for path, size in args.input_files)
    return Source(spec_lib.window_features(window, fmt.metadata_length), read,
                  input_bytes * max(1.0, args.window / args.stride))


def _pixel_source(args: argparse.Namespace) -> Source:
    from beam_jobs.manifest import read_manifest
    from beam_jobs.media import FrameCodec
    from beam_jobs.pixels import PixelFormat, PixelVideo, probe_pixel_format, video_file_entries

    if args.input_kind == "manifest":
        entries, manifest_failures = read_manifest(args.input, args.splits)
    else:
        entries, manifest_failures = video_file_entries([p for p, _ in args.input_files]), []
    # An encoder takes decoded frames: they stay raw arrays until it turns them to latents.
    encoding = "raw" if args.encoder else args.frame_encoding
    codec = FrameCodec(args.frame_size or (0, 0), args.channels, encoding,
                       args.jpeg_quality, resize=args.frame_size is not None)
    fmt = probe_pixel_format(entries, PixelFormat(codec, fps=args.fps,
                                                  max_frames=args.max_frames,
                                                  on_bad_frame=args.on_bad_frame))
    encoder = _probe_encoder(args, fmt.codec.frame_shape) if args.encoder else None
    if encoder:
        window = spec_lib.FeatureSpec.for_array(
            "window", (args.window, *encoder.latent_shape), encoder.latent_dtype)
        pad_frame = np.zeros(encoder.latent_shape, encoder.latent_dtype)
    else:
        window = spec_lib.FeatureSpec("window", (args.window, *fmt.codec.frame_shape),
                                      "uint8", encoding)
        pad_frame = fmt.codec.padding()

    def read(pipeline):
        videos = pipeline | "ListVideos" >> beam.Create([PixelVideo(e, fmt) for e in entries])
        failures = pipeline | "ManifestFailures" >> beam.Create(manifest_failures)
        return videos, failures

    frame_bytes = (math.prod(window.shape[1:]) * np.dtype(window.dtype).itemsize
                   * _BYTES_PER_PIXEL.get(window.encoding, 1.0))
    frames = len(entries) * (args.max_frames or _FRAMES_PER_VIDEO_GUESS)
    return Source(spec_lib.window_features(window, fmt.metadata_length, fmt.label_shape),
                  read, frames * frame_bytes * max(1.0, args.window / args.stride),
                  pad_frame=pad_frame, encoder=encoder, total_videos=len(entries))


def _probe_encoder(args: argparse.Namespace, frame_shape: tuple[int, int, int]):
    """Load the encoder once here, so that a model that cannot serve stops the job
    before any video is processed."""
    from beam_jobs.encode import EncoderError, EncoderSpec, probe

    try:
        return probe(EncoderSpec(args.encoder, args.encoder_input_scale,
                                 args.encoder_batch_size, args.latent_dtype), frame_shape)
    except EncoderError as e:
        refuse(f"--encoder: {e}")


def _num_buckets(output_bytes: float, bucket_mb: float) -> int:
    """Buckets per split so that one sorted bucket is about `bucket_mb`."""
    return max(1, min(MAX_BUCKETS, math.ceil(1.1 * output_bytes / (bucket_mb * 2**20))))


def _job_flags(args: argparse.Namespace) -> dict:
    flags = {k: v for k, v in vars(args).items() if k not in ("input_files", "input_kind")}
    for name in ("sequence_shape", "frame_size"):
        flags[name] = list(flags[name]) if flags[name] else None
    return flags


def build_pipeline(pipeline: beam.Pipeline, args: argparse.Namespace, source: Source,
                   workers: int = 1) -> None:
    from beam_jobs.examples import BAD_FRAMES, VIDEO_COUNTS, CutWindows
    from beam_jobs.finalize import CountVideos, finalize
    from beam_jobs.shard_writer import WriteShuffledShards
    from beam_jobs.video import FAILURES

    temp_dir = FileSystems.join(args.output_dir, output_dir.TEMP_DIR)
    videos, read_failures = source.read(pipeline)
    cut = videos | "CutWindows" >> beam.ParDo(CutWindows(
        source.features, args.window, args.stride, args.tail, args.splits, args.seed,
        source.pad_frame, source.encoder, source.total_videos, workers,
        args.progress_interval)).with_outputs(
        VIDEO_COUNTS, FAILURES, BAD_FRAMES, main="examples")
    written = cut.examples | "WriteShards" >> WriteShuffledShards(
        args.output_dir, temp_dir, args.splits, args.compression, args.num_shards,
        int(args.shard_size_mb * 2**20),
        _num_buckets(source.output_bytes, args.shuffle_bucket_mb),
        spill_bytes=int(args.shuffle_bucket_mb * 2**20))
    counts = cut[VIDEO_COUNTS] | "CountVideos" >> beam.CombineGlobally(CountVideos())
    failures = ((read_failures, cut[FAILURES]) | "AllFailures" >> beam.Flatten()
                | "GatherFailures" >> beam.combiners.ToList())
    bad_frames = cut[BAD_FRAMES] | "GatherBadFrames" >> beam.combiners.ToList()
    (written
     | "GatherShards" >> beam.combiners.ToList()
     | "Finalize" >> beam.Map(
         finalize, beam.pvalue.AsSingleton(counts), beam.pvalue.AsSingleton(failures),
         beam.pvalue.AsSingleton(bad_frames),
         output_dir=args.output_dir, temp_dir=temp_dir, features=source.features,
         window={"length": args.window, "stride": args.stride, "tail": args.tail},
         compression=args.compression, splits=list(args.splits), flags=_job_flags(args),
         encoder=source.encoder.to_json() if source.encoder else None,
         max_failure_fraction=args.max_failure_fraction))


def _counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or 0 for c in counters)


def run(argv: Optional[list[str]] = None) -> beam.runners.runner.PipelineResult:
    """Run the job; SystemExit with a one-line message for bad flags or too many failures."""
    args, pipeline_args = parse_args(argv)
    # TensorFlow comes in with these, after the flags are known to be good.
    from beam_jobs.finalize import COMMITTED
    from beam_jobs.video import BadRecord

    try:
        source = (_latent_source if args.input_kind == "latents" else _pixel_source)(args)
    except BadRecord as e:
        refuse(f"--input: {e}")
    options = _pipeline_options(pipeline_args, args.all_cores,
                                "multi_processing" if args.input_kind == "latents"
                                else "multi_threading")
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, args, source, options.view_as(DirectOptions).direct_num_workers)
    started = time.monotonic()
    result = pipeline.run()
    result.wait_until_finish()
    if options.view_as(TestOptions).dry_run:
        _LOG.info("dry run: the job graph builds; nothing was run or written")
        return result
    if not _counter(result, COMMITTED):
        failed, ok = _counter(result, "videos_failed"), _counter(result, "videos_ok")
        sys.exit(f"{PROG}: error: {failed} of {failed + ok} videos failed "
                 f"({failed / max(1, failed + ok):.1%}), more than --max_failure_fraction "
                 f"{args.max_failure_fraction}; see "
                 f"{FileSystems.join(args.output_dir, spec_lib.FAILURES_JSONL)}. "
                 "No dataset.json was written.")
    _log_summary(args.output_dir, time.monotonic() - started)
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

    path = FileSystems.join(directory, spec_lib.DATASET_JSON)
    with FileSystems.open(path) as f:
        dataset = spec_lib.DatasetSpec.from_json(f.read().decode("utf-8"), source=path)
    shards = FileSystems.match([FileSystems.join(directory, "*.tfrecord*")])[0].metadata_list
    sizes = {m.path.rsplit("/", 1)[-1]: m.size_in_bytes for m in shards}
    _LOG.info("wrote %s\n%s", path, summary_table(dataset, sizes, elapsed))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("beam_jobs").setLevel(logging.INFO)
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
