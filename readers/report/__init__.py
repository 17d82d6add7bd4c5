"""`readers.inspect OUT --report report.html`: one self-contained HTML page about a
dataset, made in the light install (numpy, fsspec, Pillow; no TensorFlow, no Beam).

Its cost is bounded whatever the dataset's size: the statistics stream dataset.json,
the videos file and the side files once (collect.py); the windows it reads are a fixed
sample, `STATS_PER_SHEET * samples` for the distributions and `samples` for the contact
sheets, read by random access (windows.py, sampled.py); the shuffle check reads
`sampled.SHUFFLE_RECORDS` records of at most `sampled.SHUFFLE_SHARDS` shards a split;
each contact sheet's PNG is at most `pictures.SHEET_BYTES`. docs/report.md has the arithmetic.

- `collect.py`: what streams (the videos, failures and bad frames files; shard sizes).
- `windows.py`: which windows are read, and reading them (random access, or the heads
  of gzip shards).
- `sampled.py`: the distributions of the sampled windows, and the shuffle's quality.
- `pictures.py`: the contact sheets, as PNGs within a byte budget.
- `svg.py`: the plots, as inline SVG.
- `page.py`: the HTML page.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional, TypeVar

from readers import format as data_format
from readers.file_checks import DatasetChanged
from readers.report import collect, page, pictures, sampled, windows

SAMPLES = 12             # contact sheets, by default (--report_samples)
STATS_PER_SHEET = 64     # windows of the statistics sample per contact sheet
T = TypeVar("T")


def build(path: str, spec: data_format.DatasetSpec, *, samples: int = SAMPLES, seed: int = 0,
          verified: Optional[list[str]] = None) -> str:
    """The page's HTML. `verified`: the problems `readers.inspect.verify.verify` found (None:
    it was not run). A record that cannot be read where the sample falls (a corrupt
    shard), or a side file that is broken or missing, leaves that part of the page out,
    saying why, so that a broken dataset still gets its report."""
    ranges = windows.Ranges.of(spec)
    reader = windows.Windows(path, spec)
    errors: list[str] = []
    chosen = windows.spread(ranges, STATS_PER_SHEET * samples, seed)
    stats = _guarded(errors, "the statistics sample",
                     lambda: sampled.sample(reader, spec, chosen, seed), sampled.Sampled())
    pixels = windows.is_pixels(spec)
    features = [f.name for f in spec.features if f.name != "metadata"]
    sheets = []
    for split, run, number in windows.across_groups(ranges, samples, seed):
        def sheet(split: str = split, run: str = run, number: int = number) -> pictures.Sheet:
            return pictures.sheet(next(reader.read(split, [number], features)),
                                  (split, run, number), pixels, stats.scale)
        sheets.append(_guarded(errors, f"the contact sheet of {split} window {number}",
                               sheet, None))
    order: dict[str, list[sampled.ShardOrder]] = _guarded(
        errors, "the shuffle check", lambda: sampled.shuffle_order(path, spec), {})
    return page.render(page.Inputs(
        path=path, spec=spec, stats=stats,
        collected=collect.collect(path, spec, functools.partial(_guarded, errors)),
        sheets=[s for s in sheets if s is not None], order=order, verified=verified,
        samples=samples, seed=seed, pixels=pixels, errors=errors))


def _guarded(errors: list[str], what: str, make: Callable[[], T], instead: T) -> T:
    """make(), or `instead` with a line in `errors` when what it reads is broken or
    missing (the dataset being rewritten meanwhile is not that: DatasetChanged goes on
    up)."""
    try:
        return make()
    except DatasetChanged:
        raise
    except (OSError, ValueError) as e:
        said = str(e).splitlines()[0] if str(e) else type(e).__name__
        errors.append(f"{what}: {collect.bounded(said)}")   # it may quote a side file
        return instead
