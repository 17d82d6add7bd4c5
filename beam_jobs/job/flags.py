"""The job's command line: its own flags, checked before any work and before TensorFlow
is imported (whose import logs lines of its own), so that a mistake ends in one line
(`Refused`), and built into one `JobConfig`: a config per --help group."""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Any, Callable, Optional

from beam_jobs.core import ids, paths
from beam_jobs.core.configs import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_TIMESTAMP_GAP,
    EncoderConfig,
    Inputs,
    IoConfig,
    JobConfig,
    LatentConfig,
    PixelConfig,
    ShardsConfig,
    WindowConfig,
)
from beam_jobs.encoders import DEVICES, LATENT_DTYPES, LAYOUTS, EncoderError, check_extra
from beam_jobs.job import command_line
from beam_jobs.job.errors import Refused
from beam_jobs.outdir.claim import check_inputs
from beam_jobs.outdir.inventory import OutputDirError
from beam_jobs.sources import inputs
from readers import format as data_format
from readers.format import keys, windows
from readers.format.numbers import SEEDS, whole_number_type

PROG = "python -m beam_jobs.make_shards"
FRAME_ENCODINGS = ("raw", "png", "jpeg")
RESIZE_PATHS = ("fast", "exact")
# What a dataset written before a flag existed was made with, where that is not the
# flag's default: frames were resized the exact way before --resize.
BEFORE_THE_FLAG = {"resize": "exact"}


def number(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite float in [low, high] ((low, high] when `low_open`), with
    a message that says which. Whole numbers are readers.format's `whole_number_type`,
    the check the readers and readers.inspect share."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if (value <= low if low_open else value < low) or value > high:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"must be in {bracket}{low:g}, {high:g}], got {text}")
        return value

    parse.__name__ = "number"
    return parse


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected dims like 200 or 16,16,4, got {text!r}") from None
    if not dims or min(dims) <= 0 or max(dims) > 1_000_000:
        raise argparse.ArgumentTypeError(f"dims must be in [1, 1000000], got {text!r}")
    return dims


def _frame_size(text: str) -> tuple[int, int]:
    dims = _shape(text)
    if len(dims) != 2 or max(dims) > 16384:
        raise argparse.ArgumentTypeError(f"expected HxW like 270x480 (at most 16384 each), "
                                         f"got {text!r}")
    return dims


def _splits(text: str) -> dict[str, float]:
    try:
        return keys.parse_splits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


_splits.__name__ = "splits"
_shape.__name__ = "shape"
_frame_size.__name__ = "size"


class _Parser(argparse.ArgumentParser):
    """argparse's own mistakes (a missing flag, a bad value) end as `Refused`, one line."""

    def error(self, message: str):
        raise Refused(message)


# The config each --help group builds: its fields are the group's flags, in order.
GROUP_CONFIGS = {"input and output": IoConfig, "latent input": LatentConfig,
                 "pixel input (manifests and video files)": PixelConfig,
                 "frame encoder (pixel input)": EncoderConfig, "windows": WindowConfig,
                 "splits and shards": ShardsConfig}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, allow_abbrev=False,
        description="Cut long videos (latent sequences, frame folders, video files) into "
                    "fixed-length windows, written as globally shuffled TFRecord shards.",
        epilog="Any other flag is a Beam pipeline option (--runner, --direct_num_workers, "
               "--direct_running_mode, --project, ...).")
    io = p.add_argument_group("input and output")
    io.add_argument("--input", required=True, nargs="+", action="extend", metavar="PATH",
                    help="one or more globs or paths (a shell-expanded glob works; the flag "
                         "may be repeated): TFRecord files of latent sequences, one video a "
                         "record (.gz read as gzip); manifests (.jsonl or .csv) of frame "
                         "folders and video files; or video files (id: the path relative "
                         "to the inputs' common fixed directory, without suffix). Local, "
                         "gs:// or any scheme Beam's FileSystems reads")
    io.add_argument("--output_dir", required=True,
                    help="where the shards and dataset.json go (local or gs://)")
    io.add_argument("--overwrite", action="store_true",
                    help="replace a finished dataset in --output_dir (default: refuse; the "
                         "leftovers of an unfinished run are always cleared)")
    io.add_argument("--append", action="store_true",
                    help="add to the dataset in --output_dir the input videos whose ids and "
                         "frames it does not have, as a new generation of shards (others are "
                         "skipped; earlier shards stay as they are); the flags that shape "
                         "windows must be those of its first run; without a dataset there, "
                         "build one")
    io.add_argument("--retry_failed", action="store_true",
                    help="with --append, read again the input videos that failed in an "
                         "earlier run (default: they are remembered in failures.jsonl and "
                         "skipped unread; a failure that comes again is not counted against "
                         "--max_failure_fraction)")
    io.add_argument("--detach", action="store_true",
                    help="on a distributed runner (Dataflow), submit the job and exit: the "
                         "job commits, cleans up and releases the directory on its own "
                         "(for Flex Templates and schedulers; default: wait for it)")
    io.add_argument("--break_lease", action="store_true",
                    help="take over --output_dir from a job on a distributed runner whose "
                         "runner cannot be asked about it or cannot confirm that it stopped "
                         "(default: refuse; a job its runner reports stopped is taken over "
                         "anyway, a running one never)")
    io.add_argument("--all_cores", action="store_true",
                    help="run locally on every core: threads for pixel inputs, processes "
                         "for latents (one process under 512 MiB of input); "
                         "--direct_num_workers and --direct_running_mode, if given, win")
    io.add_argument("--progress_interval", type=number(0, 86400),
                    default=10.0, help="seconds between progress lines of each worker; 0 "
                                       "logs a line after every video (default: "
                                       "%(default)s)")
    io.add_argument("--allow_nonfinite", action="store_true",
                    help="keep latents, labels and metadata holding NaN or Inf (default: "
                         "such a video is a failure)")
    io.add_argument("--homepage", type=_homepage, default=None, metavar="URL",
                    help="the page TFDS's builder.info.homepage names (default: the output "
                         "directory, where the job wrote the dataset)")
    fmt = p.add_argument_group("latent input")
    fmt.add_argument("--sequence_feature", default="frames",
                     help="bytes feature with tf.io.serialize_tensor of float [T, ...], or a "
                          "FloatList with --sequence_shape (default: %(default)s)")
    fmt.add_argument("--sequence_shape", type=_shape, default=None,
                     help="dims of one frame of a FloatList sequence, e.g. 200 or 16,16,4")
    fmt.add_argument("--metadata_feature", default="recipe",
                     help="FloatList of fixed length attached to every window; the dataset "
                          "has metadata when any of the first 100 records has it, and then "
                          "a record without it fails; '' for none (default: %(default)s)")
    fmt.add_argument("--id_feature", default=None,
                     help="bytes feature with the video id (default: '{file path relative "
                          "to the glob's fixed directory}:{record index}')")
    pix = p.add_argument_group("pixel input (manifests and video files)")
    pix.add_argument("--frame_size", type=_frame_size, default=None,
                     help="resize every frame to HxW (Lanczos); without it all frames of the "
                          "dataset must have one size")
    pix.add_argument("--resize", choices=RESIZE_PATHS, default="fast",
                     help="how --frame_size resizes: fast lets the decoders shrink frames "
                          "first (within 35 dB of exact), exact decodes them at full size "
                          "and resamples with Lanczos, byte for byte as before the flag "
                          "(default: %(default)s)")
    pix.add_argument("--channels", type=int, choices=(3, 1), default=3,
                     help="3 for RGB, 1 for grayscale (default: %(default)s)")
    pix.add_argument("--fps", type=number(0, 1000, low_open=True), default=None,
                     help="resample video files to this frame rate (default: every frame)")
    pix.add_argument("--max_timestamp_gap", type=number(0, 1e6, low_open=True),
                     default=DEFAULT_MAX_TIMESTAMP_GAP, metavar="SECONDS",
                     help="with --fps, a video with a frame stamped more than this after "
                          "every frame before it, or past the duration its container "
                          "declares by more, fails instead of repeating one frame to fill "
                          "the gap (default: %(default)s)")
    pix.add_argument("--max_frames", type=whole_number_type(1, 10**9), default=None,
                     help="use at most this many frames of a video")
    pix.add_argument("--frame_encoding", choices=FRAME_ENCODINGS, default="jpeg",
                     help="how frames are stored: raw uint8, or one png or jpeg per frame "
                          "(default: %(default)s)")
    pix.add_argument("--jpeg_quality", type=whole_number_type(1, 100), default=90,
                     help="JPEG quality of re-encoded frames (default: %(default)s)")
    pix.add_argument("--on_bad_frame", choices=("mask", "fail"), default="mask",
                     help="a missing or undecodable frame: zeros with mask 0 and label 0, or "
                          "fail the video (default: %(default)s)")
    pix.add_argument("--max_frame_bytes", type=whole_number_type(1, 2**40),
                     default=DEFAULT_MAX_FRAME_BYTES,
                     help="a frame file larger than this is a bad frame, not read (default: "
                          "%(default)s, 256 MiB)")
    pix.add_argument("--keep_orientation", action="store_true",
                     help="store frames as decoded, ignoring a video's display rotation and "
                          "an image's EXIF orientation (default: apply them, so frames are "
                          "stored as a viewer shows them)")
    enc = p.add_argument_group("frame encoder (pixel input)")
    enc.add_argument("--encoder", default=None,
                     help="a model mapping frames [B, H, W, C] (or [B, C, H, W], see "
                          "--encoder_layout) to latents [B, ...], local or gs://: a Keras "
                          ".keras file, a TensorFlow SavedModel directory, an ONNX .onnx "
                          "file, a torch.export .pt2 or a TorchScript .pt file; windows then "
                          "hold latents instead of pixels")
    enc.add_argument("--encoder_input_scale", type=number(0, 1e6, low_open=True),
                     default=1 / 255,
                     help="uint8 pixels are multiplied by this into the model's float32 "
                          "input (default: 1/255, i.e. [0, 1])")
    enc.add_argument("--encoder_input_offset", type=number(-1e6, 1e6), default=0.0,
                     help="then this is added: -1 with a scale of 2/255 gives [-1, 1] "
                          "(default: %(default)s)")
    enc.add_argument("--encoder_layout", choices=LAYOUTS, default="channels_last",
                     help="channels_first feeds the model [B, C, H, W], as most PyTorch "
                          "models want (default: %(default)s)")
    enc.add_argument("--encoder_device", choices=DEVICES, default="auto",
                     help="where the model runs: a GPU when the worker has one (auto), or "
                          "cpu or cuda by force (default: %(default)s)")
    enc.add_argument("--encoder_batch_size", type=whole_number_type(1, 65536), default=32,
                     help="frames per model call (default: %(default)s)")
    enc.add_argument("--latent_dtype", choices=LATENT_DTYPES, default="float32",
                     help="how latents are stored; float16 halves the storage "
                          "(default: %(default)s)")
    win = p.add_argument_group("windows")
    win.add_argument("--window", type=whole_number_type(1, 1_000_000), required=True,
                     help="frames per window L")
    win.add_argument("--stride", type=whole_number_type(1, 1_000_000), default=None,
                     help="frames between window starts S (default: L, no overlap)")
    win.add_argument("--tail", choices=windows.TAIL_POLICIES, default="align_end",
                     help="the end of a sequence: align_end adds one last full window ending "
                          "at the last frame; drop keeps full windows on the stride grid; pad "
                          "zero-pads and masks the last window (default: %(default)s)")
    out = p.add_argument_group("splits and shards")
    out.add_argument("--splits", type=_splits, default="train=1.0",
                     help="name=fraction,... ; a video goes to one split by a hash of "
                          "(seed, video id) (default: %(default)s)")
    out.add_argument("--num_shards", type=whole_number_type(1, data_format.MAX_SHARDS),
                     default=None, help="shards per split (default: from --shard_size_mb)")
    out.add_argument("--shard_size_mb", type=number(0.001, 1e6), default=200.0,
                     help="target shard size when --num_shards is absent (default: %(default)s)")
    out.add_argument("--seed", type=whole_number_type(0, SEEDS - 1), default=0,
                     help="seed of the split assignment and the shuffle (default: %(default)s)")
    out.add_argument("--compression", choices=data_format.COMPRESSIONS, default="none",
                     help="shard compression (default: %(default)s)")
    out.add_argument("--max_failure_fraction", type=number(0, 1), default=0.05,
                     help="fail the job when failed / all videos exceeds this "
                          "(default: %(default)s)")
    out.add_argument("--shuffle", choices=("auto", "place", "spill", "group"), default="auto",
                     help="how windows are shuffled into shards: place (the input read "
                          "twice, each window written once at its place: latent windows "
                          "into uncompressed local shards), spill (sorted files on disk, "
                          "then the shards; for local runners, whose GroupByKey is held in "
                          "memory) or group (one GroupByKey on the runner's shuffle; for "
                          "Dataflow and other distributed runners); auto picks place for "
                          "FnApiRunner, DirectRunner and Prism where it can write, else "
                          "spill, and group for any other (default: %(default)s)")
    out.add_argument("--shuffle_bucket_mb", type=number(0.001, 1e6), default=128.0,
                     help="size of one shuffle bucket: what one task sorts in memory "
                          "(default: %(default)s)")
    out.add_argument("--spill_buffer_mb", type=number(0.001, 1e6), default=32.0,
                     help="spill and place modes: what one worker buffers before it "
                          "writes a sorted file, written while the next fills (default: "
                          "%(default)s)")
    return p


def parse_args(argv: Optional[list[str]] = None, encoder_handler: Any = None
               ) -> tuple[JobConfig, list[str]]:
    """(the job's flags, checked, with the input's files, kind and root, and `output_dir`
    normalized; Beam's pipeline options, checked to be real ones). `encoder_handler`: a
    Beam ModelHandler given to make_shards.run, the encoder of pixel input. `Refused`
    with one line for anything wrong."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    command_line.refuse_repeats(list(argv if argv is not None else sys.argv[1:]), parser)
    pipeline_args = command_line.pipeline_args(parser, rest)
    _refuse_flags_that_conflict(args)
    output_dir = _output_dir(args.output_dir)
    patterns = tuple(inputs.absolute(p) for p in args.input)
    input_files, input_kind = _input_files(output_dir, patterns)
    _check_encoder(args.encoder, encoder_handler, input_kind)
    values = {**vars(args), "input": patterns, "output_dir": output_dir,
              "stride": args.window if args.stride is None else args.stride}
    groups = {cls: cls(**{name: values[name] for name in flag_names(cls)})
              for cls in GROUP_CONFIGS.values()}
    return JobConfig(
        groups[IoConfig], groups[LatentConfig], groups[PixelConfig],
        dataclasses.replace(groups[EncoderConfig], handler=encoder_handler),
        groups[WindowConfig], groups[ShardsConfig],
        Inputs(tuple(input_files), input_kind, paths.common_root(patterns))), pipeline_args


def _refuse_flags_that_conflict(args: argparse.Namespace) -> None:
    """`Refused` for --append with --overwrite, or --retry_failed without --append."""
    if args.append and args.overwrite:
        raise Refused("--append adds to the dataset in --output_dir, --overwrite replaces "
                      "it: give one")
    if args.retry_failed and not args.append:
        raise Refused("--retry_failed reads again the failed videos of the dataset an "
                      "--append adds to: give --append too")


def _input_files(output_dir: str, patterns: tuple[str, ...]
                 ) -> tuple[list[tuple[str, int]], str]:
    """The (path, size) of the input's files and their kind (inputs.resolve); `Refused`
    for a pattern that reaches into the output directory (checked before the files are
    listed: a glob over the output is that, not "mixed kinds"), or inputs that cannot
    be read as one dataset."""
    try:
        check_inputs(output_dir, (), patterns)
    except OutputDirError as e:
        raise Refused(str(e)) from None
    try:
        return inputs.resolve(patterns)
    except inputs.InputError as e:
        raise Refused(f"--input: {e}") from None


# What a dataset's homepage may be: a page, a bucket, a local directory. Not javascript:,
# data: or the like, which a catalog that shows the homepage as a link would run.
HOMEPAGE_SCHEMES = ("http", "https", "gs", "file")


def _homepage(given: str) -> str:
    if not given.strip() or not given.isprintable():
        raise argparse.ArgumentTypeError("a URL: printable text, not empty")
    scheme, colon, rest = given.partition(":")
    if not colon or scheme.lower() not in HOMEPAGE_SCHEMES or not rest.startswith("//"):
        raise argparse.ArgumentTypeError(
            f"{given!r:.80} is not an absolute URL of {', '.join(HOMEPAGE_SCHEMES)}")
    return given


def _output_dir(given: str) -> str:
    """--output_dir in its one spelling (paths.normalize), or `Refused`."""
    try:
        output_dir = paths.normalize(given)
    except ValueError as e:
        raise Refused(f"--output_dir {e}") from None
    if not ids.is_text(output_dir):  # its paths cross Beam's coders, which take UTF-8 only
        raise Refused(f"--output_dir '{ids.printable(output_dir)}' is not UTF-8 text; "
                      "give a directory whose name is")
    return output_dir


def _check_encoder(encoder: Optional[str], handler: Any, input_kind: str) -> None:
    """`Refused` for an encoder of latents, or whose library is not installed."""
    if encoder and input_kind == "latents":
        raise Refused("--encoder: encodes frames; --input holds latents already (give a "
                      "manifest or video files)")
    if encoder:
        try:
            check_extra(encoder)
        except EncoderError as e:
            raise Refused(f"--encoder: {e}") from None
    if handler is not None and (encoder or input_kind == "latents"):
        raise Refused("encoder=: a ModelHandler encodes frames: give it without --encoder, "
                      "with a manifest or video files as --input")


def flag_names(group) -> list[str]:
    """The flags a --help group's config holds, in order."""
    return [f.name for f in dataclasses.fields(group) if f.name != "handler"]


# The input kinds a flag applies to; a flag not named here applies to every kind.
# ENCODED stands for pixel input that an encoder turns into latents: the encoder's
# flags apply only then. dataset.json records the flags that apply to its input.
ENCODED = "encoded frames"
FLAG_KINDS: dict[str, frozenset[str]] = {
    **dict.fromkeys(flag_names(LatentConfig), frozenset({"latents"})),
    **dict.fromkeys(flag_names(PixelConfig), frozenset({"manifest", "videos"})),
    **dict.fromkeys(flag_names(EncoderConfig), frozenset({ENCODED})),
}


def recorded_flags(config: JobConfig) -> dict:
    """The flags that apply to this input (no frame flags for latents, no encoder flags
    without an encoder), in --help order, as dataset.json records them: text as valid
    Unicode (`ids.printable`; a path given on the command line need not be UTF-8)."""
    kinds = {config.inputs.kind} | ({ENCODED} if config.encoder.encodes_frames else set())

    def text(value):
        return ids.printable(value) if isinstance(value, str) else value

    recorded = {}
    for group in config.flag_groups():
        for name in flag_names(group):
            if FLAG_KINDS.get(name, kinds) & kinds:
                value = getattr(group, name)
                recorded[name] = [text(x) for x in value] if isinstance(value, tuple) \
                    else text(value)
    return recorded


def flag_defaults() -> dict:
    """What a dataset written before a flag existed was made with, as dataset.json
    records values (`recorded_flags`): every flag's default, or its `BEFORE_THE_FLAG`."""
    def recorded(action):
        value = action.default
        if isinstance(value, str) and action.type is not None:
            value = action.type(value)
        return list(value) if isinstance(value, tuple) else value

    return {**{a.dest: recorded(a) for a in build_parser()._actions if a.dest != "help"},
            **BEFORE_THE_FLAG}
