"""Look inside a dataset: a summary, a full verification, pictures and statistics.

    python -m readers.inspect OUT                   # the summary of dataset.json
    python -m readers.inspect OUT --verify          # read every record; exit 1 on problems
    python -m readers.inspect OUT --preview 8 --out preview.png [--decoder vae_decoder.keras]
    python -m readers.inspect OUT --stats [--all]   # the job's exact statistics, then a sample's
    python -m readers.inspect OUT --report report.html [--report_samples 12] [--verify]

The summary, --verify and --report read the files with numpy, fsspec and Pillow only
(the light install); --stats and --preview read through readers.make_dataset, and so
need TensorFlow. It never writes into the dataset, nor over anything but a regular
file: a --report or --out path it would not write is refused before anything is read
(readers/inspect/output.py).
"""
from __future__ import annotations

import argparse
import collections
import io
import os
import re
import sys
from typing import Iterable, Optional

import numpy as np

from readers import format as data_format
from readers import quiet, report
from readers.files import DatasetFiles
from readers.format.numbers import SEEDS, whole_number_type
from readers.inspect import output
from readers.inspect import stats as stats_text
from readers.inspect.verify import verify

MAX_PROBLEMS = 20
MAX_PREVIEW = 32   # windows in one preview picture (a row each)


def summary(path: str, dataset: data_format.DatasetSpec) -> str:
    w = dataset.window
    lines = [f"dataset {path} (format {dataset.format_version}, compression "
             f"{dataset.compression})",
             f"windows: length {w.length}, stride {w.stride}, tail {w.tail}",
             "features:"]
    lines += [f"  {f.name:10s} {str(list(f.shape)):18s} {f.dtype:8s} ({f.encoding})"
              for f in dataset.features]
    if dataset.encoder:
        e = collections.defaultdict(lambda: "?", dataset.encoder)
        lines.append(f"encoder: {e['path']} {e['input_shape']} -> {e['output_shape']} "
                     f"{e['latent_dtype']} (sha256 {str(e['sha256'])[:12]})")
    files = DatasetFiles(path)
    sizes = files.sizes()      # one listing, not a request or two a shard
    lines += _split_table(dataset, sizes)
    lines.append(stats_text.summary_line(dataset))
    lines += _generation_lines(dataset)
    lines += _failure_lines(files, dataset, sizes)
    return "\n".join(lines)


def _split_table(dataset: data_format.DatasetSpec, sizes: dict[str, int]) -> list[str]:
    """The summary's table of the splits' counts and sizes (`sizes`: file -> bytes), a
    line a split under a header, the name left-aligned and the figures right."""
    rows: list[tuple] = [("split", "videos", "skipped", "frames", "bad frames", "windows",
                          "shards", "MB")]
    for name, split in dataset.splits.items():
        size = sum(sizes.get(s.file, 0) for s in split.shards)
        rows.append((name, split.videos, split.skipped_short, split.frames, split.bad_frames,
                     split.windows, len(split.shards), f"{size / 2**20:,.1f}"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(v).rjust(wd) if i else str(v).ljust(wd)
                      for i, (v, wd) in enumerate(zip(r, widths, strict=True))) for r in rows]


def _generation_lines(dataset: data_format.DatasetSpec) -> list[str]:
    """The summary's runs that added windows, oldest first; none for a dataset of one."""
    if len(dataset.generations) <= 1:
        return []
    return [f"generations: {len(dataset.generations)} (runs that added windows, "
            "oldest first; failures below are the last run's)"] + [
        f"  {g.run_id}  {g.videos} videos, {g.windows} windows, "
        f"{g.skipped_existing} input videos skipped as already in the dataset"
        for g in dataset.generations]


def _failure_lines(files: DatasetFiles, dataset: data_format.DatasetSpec,
                   sizes: dict[str, int]) -> list[str]:
    """The summary's failures: their count and, from the failures file where there is
    one, the 5 most common reasons (or why they cannot be read)."""
    reasons: collections.Counter[str] = collections.Counter()
    unread = ""
    try:
        if dataset.sidecars.get("failures") in sizes:
            reasons = report.collect.side_file(files, dataset, "failures").by_reason
    except (OSError, ValueError) as e:
        said = report.collect.bounded(str(e).splitlines()[0])
        unread = f" (its reasons cannot be read: {said})"
    return ([f"failures: {dataset.failures}{unread}"
             + (", most common reasons (paths and numbers left out):" if reasons else "")]
            + [f"  {n:6d}  {reason}" for reason, n in reasons.most_common(5)])


def preview(path: str, dataset: data_format.DatasetSpec, split: str, count: int, seed: int,
            decoder: Optional[str]):
    """A contact sheet (pixels, or latents through `decoder`) or heatmaps of `count`
    windows drawn at random (deterministic with `seed`)."""
    from readers.inspect import preview as pictures
    from readers.tfdata.dataset import make_dataset

    batch = next(iter(make_dataset(path, split, batch_size=count, seed=seed,
                                   drop_remainder=False)))
    windows, masks = batch["window"].numpy(), batch["mask"].numpy()
    captions = [f"{v.decode()} @ {s}" for v, s in zip(batch["video_id"].numpy(),
                                                      batch["start"].numpy(), strict=True)]
    labels = batch["labels"].numpy() if "labels" in batch else None
    if decoder:
        import keras
        model = keras.saving.load_model(decoder, compile=False)
        windows = pictures.decoded_frames(
            windows, lambda x: keras.ops.convert_to_numpy(model(x, training=False)))
    if windows.dtype == np.uint8 and windows.ndim == 5:
        return pictures.contact_sheet(windows, masks, labels, captions)
    metadata = batch["metadata"].numpy() if "metadata" in batch else None
    return pictures.heatmaps(windows, masks, metadata, captions)


def _seed(text: str) -> int:
    """A seed both numpy (--report) and tf.data (--preview, --stats) take: checked here,
    so that a wrong one is blamed on --seed, not on what uses it."""
    value = whole_number_type()(text)
    if not 0 <= value < SEEDS:
        raise argparse.ArgumentTypeError(f"must be from 0 to 2**63 - 1, got {value}")
    return value


_seed.__name__ = "integer"


def _picture_format(out: str) -> str:
    """The picture format `out`'s extension names, where Pillow writes it; else PNG."""
    from PIL import Image

    named = Image.registered_extensions().get(os.path.splitext(out)[1].lower())
    return named if named in Image.SAVE else "PNG"


def _parser() -> argparse.ArgumentParser:
    """The command line's parser: its flags, their types and help."""
    parser = argparse.ArgumentParser(prog="python -m readers.inspect",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="an output directory of beam_jobs.make_shards")
    parser.add_argument("--split", default=None, help="for --preview and --stats "
                        "(default: the first split)")
    parser.add_argument("--verify", action="store_true",
                        help="read every record of every shard and check it against the spec")
    parser.add_argument("--preview", type=whole_number_type(1), metavar="N",
                        help=f"draw N random windows (at most {MAX_PREVIEW})")
    parser.add_argument("--out", default=None,
                        help="the preview's PNG file, outside the dataset's directory "
                             "(default: preview.png)")
    parser.add_argument("--decoder", help="a Keras model decoding latents to frames in [0, 1]")
    parser.add_argument("--stats", action="store_true", help="the job's statistics of "
                        "--split (exact, from dataset.json), then per-feature statistics "
                        "of --sample windows")
    parser.add_argument("--all", action="store_true", help="--stats over all windows")
    parser.add_argument("--sample", type=whole_number_type(1), default=1000,
                        help="--stats sample size, in windows (default: %(default)s)")
    parser.add_argument("--seed", type=_seed, default=0,
                        help="which windows --preview draws and --stats and --report "
                             "sample (default: %(default)s)")
    parser.add_argument("--report", metavar="PATH", help="write one self-contained HTML page "
                        "of the dataset (docs/report.md); with --verify, its result too. "
                        "PATH is a new file or a regular one outside the dataset, in a folder "
                        "that exists")
    parser.add_argument("--report_samples", type=whole_number_type(1), metavar="N", default=None,
                        help="--report's contact sheets; its statistics sample "
                             f"{report.STATS_PER_SHEET} windows a sheet (default: "
                             f"{report.SAMPLES})")
    return parser


def main(argv: Optional[Iterable[str]] = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    _refuse_flags_without_their_action(args, parser)
    _check_outputs(args, parser)
    if args.preview and args.preview > MAX_PREVIEW:
        print(f"--preview {args.preview}: drawing {MAX_PREVIEW} windows, the most one "
              "picture shows", file=sys.stderr)
        args.preview = MAX_PREVIEW
    op_errors = _tensorflow_errors(args, parser)
    dataset, split = _dataset_and_split(args, parser)
    try:
        _run(args, parser, dataset, split)
    except (FileNotFoundError, data_format.SpecError) as e:   # it changed, or lies
        parser.exit(1, f"{parser.prog}: error: {e}\n")
    except op_errors as e:   # tf.data's (--stats, --preview), without its node
        parser.exit(1, f"{parser.prog}: error: "
                       f"{re.sub(r'^{{.*?}} *', '', e.message.splitlines()[0])}\n")


def _refuse_flags_without_their_action(args: argparse.Namespace,
                                       parser: argparse.ArgumentParser) -> None:
    """A usage error for a flag that only shapes an action not asked for: --out and
    --decoder without --preview, --report_samples without --report."""
    if args.out and not args.preview:
        parser.error("--out: names the picture of --preview N; give --preview too")
    if args.decoder and not args.preview:
        parser.error("--decoder: decodes the latents of --preview N; give --preview too")
    if args.report_samples and args.report is None:
        parser.error("--report_samples: sizes the page of --report PATH; give --report too")


def _check_outputs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """A usage error naming the flag for a file to write (--report's page, --preview's
    picture) where inspect does not write (`output.check`), before any work."""
    preview_out = (args.out or "preview.png") if args.preview else None
    for flag, out in (("--report", args.report), ("--out", preview_out)):
        try:
            if out is not None:
                output.check(args.path, out)
        except ValueError as e:
            parser.error(f"{flag}: {e}")


def _tensorflow_errors(args: argparse.Namespace, parser: argparse.ArgumentParser
                       ) -> tuple:
    """The errors of tf.data to tell in one line, where --stats or --preview read
    through it (none otherwise); exit 2 saying so when TensorFlow is not installed."""
    if not (args.stats or args.preview):
        return ()
    try:
        asked = "--stats" if args.stats else "--preview"
        return (quiet.tensorflow(f"readers.inspect {asked}").errors.OpError,)
    except quiet.NoTensorFlow as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")


def _dataset_and_split(args: argparse.Namespace, parser: argparse.ArgumentParser
                       ) -> tuple[data_format.DatasetSpec, str]:
    """The dataset.json of `args.path` and the split asked (default: its first); exit 2
    when it cannot be read or lists no splits, a usage error for a split it lacks."""
    try:
        dataset = data_format.load_spec(args.path)
    except (OSError, ValueError, ImportError) as e:   # SpecError: which file, what is wrong;
        # ImportError: fsspec lacks the scheme's library (gcsfs for gs://)
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    if not dataset.splits:
        parser.exit(2, f"{parser.prog}: error: {args.path}: dataset.json lists no splits\n")
    split = args.split or next(iter(dataset.splits))
    if split not in dataset.splits:
        parser.error(f"--split: {split!r} is not one of {sorted(dataset.splits)}")
    return dataset, split


def _wrote(parser: argparse.ArgumentParser, flag: str, out: str, data: bytes,
           size: str) -> bool:
    """Whether `data` was saved to `out`, saying so in a line either way (an error
    naming `flag` when `out` cannot be written)."""
    try:
        output.save(out, data)
    except (OSError, ValueError) as e:   # fsspec's ValueError: a path it cannot write
        said = (str(e) or repr(e)).splitlines()[0]
        print(f"{parser.prog}: error: {flag}: {said}", file=sys.stderr)
        return False
    print(f"wrote {out} ({size})")
    return True


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser,
         dataset: data_format.DatasetSpec, split: str) -> None:
    """What the command line asks for, of a dataset.json that checked out."""
    print(summary(args.path, dataset))
    _refuse_a_split_without_windows(args, parser, dataset, split)
    if args.stats:
        _print_stats(args, dataset, split)
    if args.preview and not _wrote_preview(args, parser, dataset, split):
        sys.exit(1)
    problems = verify(args.path, dataset) if args.verify else None
    failed = bool(problems)
    if args.report is not None:
        failed |= not _wrote_report(args, parser, dataset, problems)
    if problems is not None:
        _tell_verified(dataset, problems)
    if failed:
        sys.exit(1)


def _refuse_a_split_without_windows(args: argparse.Namespace,
                                    parser: argparse.ArgumentParser,
                                    dataset: data_format.DatasetSpec, split: str) -> None:
    """Exit 2 when --stats or --preview asks for windows of a split that has none."""
    if (args.stats or args.preview) and not dataset.splits[split].windows:
        parser.exit(2, f"{parser.prog}: error: split {split!r} has no windows to "
                       f"{'preview' if args.preview else 'describe'}\n")


def _print_stats(args: argparse.Namespace, dataset: data_format.DatasetSpec,
                 split: str) -> None:
    """--stats: the job's statistics of the split, then those of --sample windows (or
    of all, with --all)."""
    print(stats_text.recorded(dataset, split))
    print(stats_text.stats(args.path, dataset, split, None if args.all else args.sample,
                           args.seed))


def _wrote_preview(args: argparse.Namespace, parser: argparse.ArgumentParser,
                   dataset: data_format.DatasetSpec, split: str) -> bool:
    """Whether --preview's picture was drawn and saved to --out, in the format its
    extension names."""
    image = preview(args.path, dataset, split, args.preview, args.seed, args.decoder)
    out = args.out or "preview.png"
    picture = io.BytesIO()
    image.save(picture, format=_picture_format(out))
    return _wrote(parser, "--out", out, picture.getvalue(), f"{image.width}x{image.height}")


def _wrote_report(args: argparse.Namespace, parser: argparse.ArgumentParser,
                  dataset: data_format.DatasetSpec, problems: Optional[list[str]]) -> bool:
    """Whether --report's page (with --verify's `problems`) was built and saved."""
    page = report.build(args.path, dataset, seed=args.seed, verified=problems,
                        samples=args.report_samples or report.SAMPLES).encode("utf-8")
    return _wrote(parser, "--report", args.report, page, f"{len(page) / 2**20:.1f} MB")


def _tell_verified(dataset: data_format.DatasetSpec, problems: list[str]) -> None:
    """--verify's verdict: the first MAX_PROBLEMS problems on stderr, or that every
    record is sound."""
    if problems:
        print(f"verify: {len(problems)} problem{'s' * (len(problems) > 1)}; the first:",
              file=sys.stderr)
        for problem in problems[:MAX_PROBLEMS]:
            print(f"  {problem}", file=sys.stderr)
    else:
        total = sum(s.windows for s in dataset.splits.values())
        shards = sum(len(s.shards) for s in dataset.splits.values())
        print(f"verify: all {total} records of {shards} shard{'s' * (shards != 1)} are sound")
