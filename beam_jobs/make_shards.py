"""Cut latent sequences into fixed-length windows, written as globally shuffled shards.

    python -m beam_jobs.make_shards --input 'data/latents-*.tfrecord' --output_dir out/ \\
        --window 100 --stride 50 [Beam pipeline options, e.g. --direct_num_workers 2]

Flags not listed under --help are passed to Beam as pipeline options. Without --runner
the job runs locally on Beam's FnApiRunner.
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_jobs import keys, output_dir, windows
from readers import spec as spec_lib

PROG = "python -m beam_jobs.make_shards"
_LOG = logging.getLogger("beam_jobs.make_shards")  # not __name__: "__main__" under -m
MAX_BUCKETS = 4096


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected dims like 200 or 16,16,4, got {text!r}")
    if not dims or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"dims must be > 0, got {text!r}")
    return dims


def _splits(text: str) -> dict[str, float]:
    try:
        return keys.parse_splits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0],
        epilog="Any other flag is a Beam pipeline option (--runner, --direct_num_workers, "
               "--direct_running_mode, --project, ...).")
    io = p.add_argument_group("input and output")
    io.add_argument("--input", required=True,
                    help="glob of TFRecord files, one video a record (local, gs://, or any "
                         "scheme Beam's FileSystems reads); .gz files are read as gzip")
    io.add_argument("--output_dir", required=True, help="where the shards and dataset.json go")
    io.add_argument("--overwrite", action="store_true",
                    help="replace a previous run's dataset in --output_dir (default: refuse)")
    fmt = p.add_argument_group("input format")
    fmt.add_argument("--sequence_feature", default="frames",
                     help="bytes feature with tf.io.serialize_tensor of float [T, ...], or a "
                          "FloatList with --sequence_shape (default: %(default)s)")
    fmt.add_argument("--sequence_shape", type=_shape, default=None,
                     help="dims of one frame of a FloatList sequence, e.g. 200 or 16,16,4")
    fmt.add_argument("--metadata_feature", default="recipe",
                     help="FloatList of fixed length attached to every window; absent in "
                          "the first record: no metadata (default: %(default)s)")
    fmt.add_argument("--id_feature", default=None,
                     help="bytes feature with the video id (default: '{file name}:{record index}')")
    win = p.add_argument_group("windows")
    win.add_argument("--window", type=_positive_int, required=True, help="frames per window L")
    win.add_argument("--stride", type=_positive_int, default=None,
                     help="frames between window starts S (default: L, no overlap)")
    win.add_argument("--tail", choices=windows.TAIL_POLICIES, default="align_end",
                     help="the end of a sequence: align_end adds one last full window ending "
                          "at the last frame; drop keeps full windows on the stride grid; pad "
                          "zero-pads and masks the last window (default: %(default)s)")
    out = p.add_argument_group("splits and shards")
    out.add_argument("--splits", type=_splits, default="train=1.0",
                     help="name=fraction,... ; a video goes to one split by a hash of "
                          "(seed, video id) (default: %(default)s)")
    out.add_argument("--num_shards", type=_positive_int, default=None,
                     help="shards per split (default: from --shard_size_mb)")
    out.add_argument("--shard_size_mb", type=_positive_float, default=200.0,
                     help="target shard size when --num_shards is absent (default: %(default)s)")
    out.add_argument("--seed", type=int, default=0,
                     help="seed of the split assignment and the shuffle (default: %(default)s)")
    out.add_argument("--compression", choices=spec_lib.COMPRESSIONS, default="none",
                     help="shard compression (default: %(default)s)")
    out.add_argument("--max_failure_fraction", type=_fraction, default=0.05,
                     help="fail the job when failed / all videos exceeds this "
                          "(default: %(default)s)")
    out.add_argument("--shuffle_bucket_mb", type=_positive_float, default=64.0,
                     help="memory one worker holds to shuffle: its spill buffer, and about "
                          "the size of one sorted bucket (default: %(default)s)")
    return p


def parse_args(argv: Optional[list[str]] = None) -> tuple[argparse.Namespace, list[str]]:
    parser = build_parser()
    args, pipeline_args = parser.parse_known_args(argv)
    if args.stride is None:
        args.stride = args.window
    try:
        matches = FileSystems.match([args.input])[0].metadata_list
    except Exception as e:
        parser.error(f"--input: cannot list {args.input!r}: {e}")
    args.input_files = sorted((m.path, m.size_in_bytes) for m in matches)
    if not args.input_files:
        parser.error(f"--input: no file matches {args.input!r}")
    problem = output_dir.prepare_output_dir(args.output_dir, args.overwrite)
    if problem:
        parser.error(problem)
    return args, pipeline_args


def _num_buckets(args: argparse.Namespace) -> int:
    """Buckets per split so that one sorted bucket is about --shuffle_bucket_mb."""
    input_bytes = sum(size * (4 if path.endswith(".gz") else 1)
                      for path, size in args.input_files)
    output_bytes = input_bytes * max(1.0, args.window / args.stride) * 1.1
    return max(1, min(MAX_BUCKETS, math.ceil(output_bytes / (args.shuffle_bucket_mb * 2**20))))


def _job_flags(args: argparse.Namespace) -> dict:
    flags = {k: v for k, v in vars(args).items() if k != "input_files"}
    flags["sequence_shape"] = list(args.sequence_shape) if args.sequence_shape else None
    return flags


def build_pipeline(pipeline: beam.Pipeline, args: argparse.Namespace,
                   fmt: "LatentFormat") -> None:  # noqa: F821 (imported in run)
    from beam_jobs.examples import VIDEO_COUNTS, CutWindows
    from beam_jobs.finalize import CountVideos, finalize
    from beam_jobs.shard_writer import WriteShuffledShards
    from beam_jobs.sources import FAILURES, ReadLatentRecords

    features = spec_lib.window_features(args.window, fmt.frame_shape, fmt.dtype,
                                        fmt.metadata_length)
    temp_dir = FileSystems.join(args.output_dir, output_dir.TEMP_DIR)
    videos = (pipeline
              | "ListInputs" >> beam.Create([path for path, _ in args.input_files])
              | "ReadLatents" >> beam.ParDo(ReadLatentRecords(fmt)).with_outputs(
                  FAILURES, main="videos"))
    cut = videos.videos | "CutWindows" >> beam.ParDo(CutWindows(
        features, args.window, args.stride, args.tail, args.splits, args.seed)).with_outputs(
        VIDEO_COUNTS, main="examples")
    written = cut.examples | "WriteShards" >> WriteShuffledShards(
        args.output_dir, temp_dir, args.splits, args.compression, args.num_shards,
        int(args.shard_size_mb * 2**20), _num_buckets(args),
        spill_bytes=int(args.shuffle_bucket_mb * 2**20))
    counts = cut[VIDEO_COUNTS] | "CountVideos" >> beam.CombineGlobally(CountVideos())
    failures = videos[FAILURES] | "GatherFailures" >> beam.combiners.ToList()
    (written
     | "GatherShards" >> beam.combiners.ToList()
     | "Finalize" >> beam.Map(
         finalize, beam.pvalue.AsSingleton(counts), beam.pvalue.AsSingleton(failures),
         output_dir=args.output_dir, temp_dir=temp_dir, features=features,
         window={"length": args.window, "stride": args.stride, "tail": args.tail},
         compression=args.compression, splits=list(args.splits), flags=_job_flags(args),
         max_failure_fraction=args.max_failure_fraction))


def _counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or 0 for c in counters)


def run(argv: Optional[list[str]] = None) -> beam.runners.runner.PipelineResult:
    """Run the job; SystemExit with a one-line message for bad flags or too many failures."""
    args, pipeline_args = parse_args(argv)
    # TensorFlow comes in with these, after the flags are known to be good.
    from beam_jobs.finalize import COMMITTED
    from beam_jobs.sources import BadRecord, LatentFormat, probe_latent_format

    try:
        fmt = probe_latent_format([path for path, _ in args.input_files], LatentFormat(
            args.sequence_feature, args.metadata_feature, args.id_feature, args.sequence_shape))
    except BadRecord as e:
        build_parser().error(f"--input: {e}")
    options = PipelineOptions(pipeline_args)
    if options.view_as(StandardOptions).runner is None:
        options.view_as(StandardOptions).runner = "FnApiRunner"
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, args, fmt)
    result = pipeline.run()
    result.wait_until_finish()
    if not _counter(result, COMMITTED):
        failed, ok = _counter(result, "videos_failed"), _counter(result, "videos_ok")
        sys.exit(f"{PROG}: error: {failed} of {failed + ok} videos failed "
                 f"({failed / max(1, failed + ok):.1%}), more than --max_failure_fraction "
                 f"{args.max_failure_fraction}; see "
                 f"{FileSystems.join(args.output_dir, spec_lib.FAILURES_JSONL)}. "
                 "No dataset.json was written.")
    _log_summary(args.output_dir)
    return result


def _log_summary(directory: str) -> None:
    path = FileSystems.join(directory, spec_lib.DATASET_JSON)
    with FileSystems.open(path) as f:
        dataset = spec_lib.DatasetSpec.from_json(f.read().decode("utf-8"), source=path)
    for name, split in dataset.splits.items():
        _LOG.info("%s: %d windows from %d videos in %d shards; %d videos shorter than "
                  "--window skipped", name, split.windows, split.videos, len(split.shards),
                  split.skipped_short)
    _LOG.info("%d failed records (see %s); wrote %s", dataset.failures,
              spec_lib.FAILURES_JSONL, path)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("beam_jobs").setLevel(logging.INFO)
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
