"""The report as one self-contained HTML page: styles inline, pictures as data: URIs, plots
as inline SVG, no script, and a Content-Security-Policy that lets the browser load
nothing else, so that the page opens offline and a test can prove it asks for nothing.

Each figure that dataset.json holds sits in an element whose `data-key` names where
(`splits.train.windows`, `generations.0.run_id`, `flags.window`): a test reads them
from the rendered page and compares them with dataset.json.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
from typing import Any, Optional, Sequence

import numpy as np

from readers import format as data_format
from readers.inspect import preview
from readers.inspect import stats as stats_text
from readers.report import collect, pictures, sampled, svg

MAX_PLOTTED_SHARDS = 400     # more shards: a histogram of their sizes instead of a bar each
MAX_DIMENSIONS = 16          # label or metadata dimensions plotted, the first ones
MAX_PROBLEMS = 20            # of --verify, listed

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 0 24px 48px; color: #1d1d1d; }
h1 { font-size: 22px; margin: 20px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 15px; margin: 16px 0 6px; }
nav a { margin-right: 12px; } .muted, .none { color: #666; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: flex; flex-wrap: wrap; gap: 12px 24px; }
.plots figure, .sheets figure { margin: 0; }
figcaption { font-size: 12px; color: #444; max-width: 900px; }
.sheets { display: flex; flex-wrap: wrap; gap: 14px 20px; align-items: flex-start; }
.facts td { text-align: left; }
.flags { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr));
         gap: 2px 16px; margin: 6px 0 12px; }
.flags div { display: flex; gap: 8px; border-bottom: 1px solid #eee; }
.flags dt { font-weight: 600; } .flags dd { margin: 0; word-break: break-all; }
.sheets img { display: block; border: 1px solid #ccc; image-rendering: pixelated; }
.ok { color: #1e7b34; font-weight: 600; } .bad { color: #b3261e; font-weight: 600; }
code { font-size: 12px; } td.reason { max-width: 600px; word-break: break-word; }
"""


@dataclasses.dataclass
class Inputs:
    """What the page is made of."""
    path: str
    spec: data_format.DatasetSpec
    collected: collect.Collected
    stats: sampled.Sampled
    sheets: list[pictures.Sheet]
    order: dict[str, list[sampled.ShardOrder]]
    verified: Optional[list[str]]      # --verify's problems; None: not run
    samples: int
    seed: int
    pixels: bool
    errors: list[str] = dataclasses.field(default_factory=list)  # parts left out, why


def _e(value: Any) -> str:
    return html.escape(str(value))


def _isolated(value: Any) -> str:
    """Text from the dataset (a video id, a split, a run, a path) inside a line of the
    page, isolated for the bidirectional algorithm: a right-to-left override it leaves
    open ends with it, and never mirrors the rest of the line ("@ 16" read "61 @")."""
    return f"<bdi>{_e(value)}</bdi>"


def _isolated_attribute(value: Any) -> str:
    """The same in an attribute's text (an `alt`), which holds no element: between the
    Unicode isolate marks FSI and PDI, what `<bdi>` does."""
    return _e(f"\u2068{value}\u2069")


def _cell(value: Any, key: Optional[str] = None) -> str:
    """A table cell; numbers to the right, and `data-key` when dataset.json holds it."""
    attribute = f' data-key="{_e(key)}"' if key else ""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f'<td class="n"{attribute}>{int(value):,}</td>'
    return f"<td{attribute}>{_e(value)}</td>"


def _table(header: Sequence[str], rows: Sequence[str], numeric_from: int = 1) -> str:
    head = "".join(f'<th class="{"n" if i >= numeric_from else ""}">{_e(h)}</th>'
                   for i, h in enumerate(header))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _figure(plot: str, caption: str) -> str:
    return f"<figure>{plot}<figcaption>{_e(caption)}</figcaption></figure>"


def _summary(page: Inputs) -> str:
    spec = page.spec
    w = spec.window
    facts = [("dataset", page.path, None), ("format version", spec.format_version,
                                            "format_version"),
             ("job version", spec.job_version, "job_version"), ("run", spec.run_id, "run_id"),
             ("input kind", spec.input_kind, "input_kind"),
             ("compression", spec.compression, "compression"),
             ("window length", w.length, "window.length"),
             ("window stride", w.stride, "window.stride"),
             ("window tail", w.tail, "window.tail"),
             ("failed videos", spec.failures, "failures"),
             ("frame", json.dumps(dict(spec.frame)), None),
             ("labels", json.dumps(dict(spec.labels)) if spec.labels else "none", None),
             ("encoder", json.dumps(dict(spec.encoder)) if spec.encoder else "none", None)]
    rows = [f"<tr><th>{_e(name)}</th>{_cell(value, key)}</tr>" for name, value, key in facts]
    features = [
        f"<tr>{_cell(f.name, f'features.{i}.name')}{_cell(json.dumps(list(f.shape)))}"
        f"{_cell(f.dtype, f'features.{i}.dtype')}{_cell(f.encoding, f'features.{i}.encoding')}"
        f"{_cell(_stored(f))}</tr>" for i, f in enumerate(spec.features)]
    flags = [f"<div><dt>--{_e(name)}</dt><dd data-key='flags.{_e(name)}'>"
             f"{_e(collect.flag_value(value))}</dd></div>" for name, value in spec.flags.items()]
    return ("<section id='summary'><h2>Summary</h2>"
            f"<table class='facts'>{''.join(rows)}</table>"
            "<h3>Features</h3>"
            + _table(("feature", "shape", "dtype", "encoding", "stored as"), features, 9)
            + _generations(spec)
            + "<h3>Flags the job ran with</h3>"
            + (f"<dl class='flags'>{''.join(flags)}</dl>" if flags else
               "<p class='none'>dataset.json records no flags</p>")
            + "</section>")


def _stored(feature: data_format.FeatureSpec) -> str:
    stored = feature.codec.stored_as()
    return f"{stored.get('list', '')}, {stored.get('values', '')} values"


def _generations(spec: data_format.DatasetSpec) -> str:
    fields = ("run_id", "videos", "windows", "skipped_short", "failures", "skipped_existing",
              "job_version")
    rows = [f"<tr><td>{i + 1}</td>"
            + "".join(_cell(getattr(g, name), f"generations.{i}.{name}") for name in fields)
            + "</tr>" for i, g in enumerate(spec.generations)]
    timeline = svg.timeline([(g.run_id or "?", g.windows) for g in spec.generations])
    return (f"<h3>Generations ({len(spec.generations)}: the runs that added windows, "
            "oldest first)</h3>"
            + _figure(timeline, "each generation's windows, in the order the runs added them")
            + _table(("#", "run", "videos", "windows", "skipped short", "failures",
                      "skipped as already there", "job version"), rows, 2))


def _splits(page: Inputs) -> str:
    spec, got = page.spec, page.collected
    rows, plots = [], []
    for name, split in spec.splits.items():
        size = got.split_bytes(spec, name)
        key = f"splits.{name}"
        rows.append(f"<tr>{_cell(name)}{_cell(split.videos, key + '.videos')}"
                    f"{_cell(split.skipped_short, key + '.skipped_short')}"
                    f"{_cell(split.frames, key + '.frames')}"
                    f"{_cell(split.bad_frames, key + '.bad_frames')}"
                    f"{_cell(split.windows, key + '.windows')}"
                    f'<td class="n" data-shards="{_e(name)}">{len(split.shards):,}</td>'
                    f'<td class="n" data-bytes="{size}">{size / 2**20:,.1f}</td></tr>')
        plots.append(_shard_sizes(name, split, got.shard_bytes))
    return ("<section id='splits'><h2>Splits</h2>"
            + _table(("split", "videos", "skipped short", "frames", "bad frames", "windows",
                      "shards", "MiB"), rows)
            + "<h3>Shard sizes</h3><div class='plots'>" + "".join(plots) + "</div></section>")


def _statistics(page: Inputs) -> str:
    """The job's statistics (dataset.json's `stats`): a table a split and feature, the
    first MAX_DIMENSIONS channels; each figure's exact value in its `data-value`."""
    spec = page.spec
    parts = ["<section id='statistics'><h2>Statistics</h2>"]
    if not spec.stats:
        return (parts[0] + f"<p class='none' data-stats='none'>{_e(stats_text.NONE_RECORDED)}"
                "</p></section>")
    parts.append("<p>Exact, from the job: per split and channel (the last axis of a frame), "
                 "over each stored frame once whose mask is 1; std is the population's "
                 f"(ddof 0). The first {MAX_DIMENSIONS} channels of each; dataset.json has "
                 "them all.</p>")
    jpeg = spec.feature("window").encoding == "jpeg"
    for split, features in spec.stats.items():
        for name, stats in features.items():
            parts.append(_feature_statistics(spec, split, name, stats, jpeg=jpeg))
    return "".join(parts) + "</section>"


def _feature_statistics(spec: data_format.DatasetSpec, split: str, name: str,
                        stats: data_format.ChannelStats, *, jpeg: bool) -> str:
    """One split's and feature's statistics: a caption (what they are over, and why
    there is a NaN) and a table a channel, or that no frame has mask 1."""
    caption = (f"{_isolated(split)}: {_e(name)}, {stats.frames:,} frames, "
               f"{stats.count:,} values a channel"
               + (" (the pixels before JPEG compression)" if jpeg and name == "window"
                  else "")
               + ("" if stats.finite or not stats.count else
                  "; NaN: the frames hold NaN or Inf (--allow_nonfinite)"))
    if not stats.count:
        return f"<h3>{caption}</h3><p class='none'>no frame with mask 1</p>"
    names = stats_text.channel_names(spec, name, stats.channels)
    rows = ["<tr>" + _cell(names[c]) + "".join(
        _stat_cell(getattr(stats, field)[c], f"stats.{split}.{name}.{field}.{c}")
        for field in ("mean", "std", "min", "max")) + "</tr>"
        for c in range(min(stats.channels, MAX_DIMENSIONS))]
    more = stats.channels - MAX_DIMENSIONS
    return (f"<h3>{caption}</h3>"
            + _table(("channel", "mean", "std", "min", "max"), rows)
            + (f"<p class='muted'>and {more:,} more channels</p>" if more > 0 else ""))


def _stat_cell(value: float, key: str) -> str:
    """A statistic, to 6 significant digits, its float64 exact in `data-value`."""
    return (f'<td class="n" data-stat="{_e(key)}" data-value="{float(value)!r}">'
            f"{float(value):.6g}</td>")


def _shard_sizes(name: str, split: data_format.SplitInfo, sizes: dict[str, int]) -> str:
    mib = np.array([sizes.get(s.file, 0) / 2**20 for s in split.shards])
    if not len(mib):
        return _figure("<p class='none'>no shards</p>", f"{name}: no shards")
    spread = (mib.max() - mib.min()) / mib.mean() if mib.mean() else 0.0
    caption = (f"{name}: {len(mib):,} shards, {mib.min():.2f} to {mib.max():.2f} MiB "
               f"(max - min = {spread:.1%} of the mean)")
    if len(mib) <= MAX_PLOTTED_SHARDS:
        plot = svg.bars(mib, [s.file for s in split.shards], x_label="shard",
                        y_label="MiB", reference=float(mib.mean()), reference_name="mean")
    else:
        counts, edges = np.histogram(mib, bins=30)
        plot = svg.histogram(counts, edges, x_label="MiB", y_label="shards")
    return _figure(plot, caption)


def _distributions(page: Inputs) -> str:
    parts = ["<section id='distributions'><h2>Distributions</h2>",
             "<h3>Videos (all of them: the videos file, streamed)</h3>"]
    for name, videos in page.collected.videos.items():
        parts.append(f"<div class='plots' data-split-videos='{_e(name)}'>"
                     + "".join(_video_plots(name, videos)) + "</div>")
    stats = page.stats
    parts.append(f"<h3>Windows (a sample of {stats.windows:,}, drawn with seed {page.seed} "
                 "across splits)</h3><div class='plots'>")
    if stats.masked is not None and stats.windows:
        seen = int(np.flatnonzero(stats.masked).max()) + 1     # up to the most masked
        edges = np.arange(seen + 1)
        parts.append(_figure(svg.histogram(stats.masked[:seen], edges, x_label="masked frames "
                                           "(padding or bad) per window", y_label="windows",
                                           integer=True), "mask = 0 frames per window"))
    for name, values in list(zip(stats.label_names, stats.labels, strict=True))[:MAX_DIMENSIONS]:
        parts.append(_figure(svg.values_histogram(values, x_label=f"labels: {name}",
                                                  y_label="frames"),
                             f"per-frame label {name} over the sample's real frames "
                             f"({len(values):,} values)"))
    if stats.metadata:
        rows = np.stack(list(stats.metadata.values()))
        for d in range(min(rows.shape[1], MAX_DIMENSIONS)):
            parts.append(_figure(svg.values_histogram(rows[:, d], x_label=f"metadata[{d}]",
                                                      y_label="videos"),
                                 f"metadata[{d}] of the sample's {len(rows):,} videos"))
    if stats.channel_mean is not None and stats.channel_std is not None:   # set together
        parts.append(_figure(svg.band(stats.channel_mean, stats.channel_std,
                                      x_label="channel", y_label="value"),
                             f"per-channel mean (line) and std (band) over the sample's real "
                             f"frames; {len(stats.channel_mean)} of {stats.channels} "
                             "channels"))
    if stats.nonfinite:
        parts.append(f"<p>{stats.nonfinite:,} NaN or Inf label values left out</p>")
    return "".join(parts) + "</div></section>"


def _video_plots(name: str, videos: collect.SplitVideos) -> list[str]:
    """A split's histograms of all its videos' frames, windows and bad frames."""
    plots = []
    for title, hist in (("frames per video", videos.frames),
                        ("windows per video", videos.windows),
                        ("bad frames per video", videos.bad_frames)):
        counts, edges = hist.bins()
        plots.append(_figure(svg.histogram(counts, edges, x_label=title,
                                           y_label="videos", integer=True),
                             f"{name}: {title} ({videos.videos:,} videos)"))
    return plots


def _side_file(title: str, side: collect.SideFile, columns: Sequence[str], anchor: str) -> str:
    if not side.name:
        return f"<h3>{_e(title)}</h3><p class='none'>none (dataset.json names no file)</p>"
    reasons = [f"<tr><td class='reason'>{_e(kind)}</td>{_cell(count)}</tr>"
               for kind, count in side.by_reason.most_common()]
    rows = ["<tr>" + "".join(_cell(row.get(c, "")) if c != "reason" else
                             f"<td class='reason'>{_e(row.get(c, ''))}</td>" for c in columns)
            + "</tr>" for row in side.first]
    rest = side.rows - len(side.first)
    return (f"<h3>{_e(title)}: <span data-rows='{anchor}'>{side.rows:,}</span> "
            f"row{'s' * (side.rows != 1)} "
            f"<span class='muted'>({_isolated(side.name)})</span></h3>"
            + (_table(("reason (paths and numbers left out)", "rows"), reasons) if reasons
               else "")
            + (_table(columns, rows, 99) if rows else "")
            + (f"<p class='muted' data-more='{anchor}'>and {rest:,} more rows</p>"
               if rest > 0 else ""))


def _failures(page: Inputs) -> str:
    got = page.collected
    return ("<section id='failures'><h2>Failures and bad frames</h2>"
            + _side_file("Failures", got.failures,
                         ("video_id", "source", "record_index", "records", "reason"),
                         "failures")
            + _side_file("Bad frames (masked)", got.bad_frames,
                         ("video_id", "frame", "where", "reason"), "bad_frames")
            + "</section>")


def _sheets(page: Inputs) -> str:
    parts = ["<section id='sheets'><h2>Contact sheets</h2>", _sheets_said(page),
             "<div class='sheets'>"]
    runs = [g.run_id for g in page.spec.generations]
    parts += [_sheet(sheet, runs, pixels=page.pixels) for sheet in page.sheets]
    if not page.sheets:
        parts.append("<p class='none'>no windows</p>")
    return "".join(parts) + "</div></section>"


def _sheets_said(page: Inputs) -> str:
    """What the contact sheets show: a pixel window's strip of frames, or a latent
    window's frames by values on one colour scale (with its bar)."""
    if page.pixels:
        length = page.spec.window.length
        every = ("every frame" if length <= preview.MAX_COLUMNS else
                 f"{preview.MAX_COLUMNS} of its {length} frames, evenly spread")
        return (f"<p>Each window as a strip of {every}; masked "
                "frames dimmed and crossed in red; the first label under the frames "
                "as a curve, scaled to the window's own range.</p>")
    low, high = page.stats.scale
    return ("<p>Each window as frames (across) by values (down), every window on "
            f"one fixed colour scale: <span data-scale-low>{svg.number(low)}"
            f"</span> to <span data-scale-high>{svg.number(high)}</span> (the "
            "sample's mean &#177; 3 std; values outside are clipped, NaN black); a "
            "red mark under a masked frame.</p>"
            + svg.colour_bar(low, high, preview.COLOURS))


def _sheet(sheet: pictures.Sheet, runs: list[Optional[str]], *, pixels: bool) -> str:
    """One contact sheet's figure: the picture inline, its window, split and generation
    (its place in `runs`), frames shown, masked frames and labels in the caption."""
    generation = runs.index(sheet.run) + 1 if sheet.run in runs else "?"
    data = base64.b64encode(sheet.png).decode("ascii")
    labels = ("" if sheet.labels is None else
              "; labels " + ", ".join(svg.number(v) for v in sheet.labels))
    masked = ", ".join(map(str, sheet.masked)) or "none"
    scaled = f"; scaled to {sheet.scaled:.0%} to fit" if sheet.scaled < 1 else ""
    shown = (f"frames {', '.join(map(str, sheet.frames))}" if pixels else
             f"frames 0 to {len(sheet.frames) - 1}")
    return (
        f"<figure class='sheet' data-video-id='{_e(sheet.video_id)}' "
        f"data-start='{sheet.start}' data-split='{_e(sheet.split)}' "
        f"data-width='{sheet.width}' data-height='{sheet.height}' "
        f"style='width: {sheet.width + 2}px'>"
        f"<img src='data:image/png;base64,{data}' width='{sheet.width}' "
        f"height='{sheet.height}' alt='{_isolated_attribute(sheet.video_id)} @ "
        f"{sheet.start}'><figcaption><b>{_isolated(sheet.video_id)}</b> @ {sheet.start} "
        f"&#183; split {_isolated(sheet.split)} &#183; generation {generation} (run "
        f"{_isolated(sheet.run)}) &#183; "
        f"{shown}; masked {masked}{_e(labels)}"
        f"{scaled}</figcaption></figure>")

def _shuffle(page: Inputs) -> str:
    parts = ["<section id='shuffle'><h2>Shuffle quality</h2>"
             f"<p>Of the first {sampled.SHUFFLE_RECORDS} records of up to "
             f"{sampled.SHUFFLE_SHARDS} shards a split, read in order: the share of "
             "neighbouring records that are windows of one video, against what a perfect "
             "shuffle gives (from the videos file: the sum over videos of w(w-1) / "
             "(W(W-1))).</p><div class='plots'>"]
    for name, orders in page.order.items():
        pairs, same = sum(o.pairs for o in orders), sum(o.same for o in orders)
        expected = page.collected.videos[name].neighbour_share(page.spec.splits[name].windows)
        share = same / pairs if pairs else 0.0
        plot = svg.bars([o.share for o in orders], [o.file for o in orders],
                        x_label="shard (read in order)", y_label="same-video share",
                        reference=expected, reference_name="a perfect shuffle")
        parts.append(_figure(plot, f"{name}: {same:,} of {pairs:,} neighbouring pairs from "
                                   f"one video ({share:.1%}); a perfect shuffle gives "
                                   f"{expected:.1%}"))
    return "".join(parts) + "</div></section>"


def _verify(page: Inputs) -> str:
    spec = page.spec
    if page.verified is None:
        body = ("<p class='muted' data-verify='not run'>not run: add --verify (it reads every "
                "record of every shard)</p>")
    elif not page.verified:
        total = sum(s.windows for s in spec.splits.values())
        shards = sum(len(s.shards) for s in spec.splits.values())
        body = (f"<p class='ok' data-verify='sound'>all {total:,} records of {shards:,} "
                "shards are sound</p>")
    else:
        problems = "".join(f"<li>{_e(p)}</li>" for p in page.verified[:MAX_PROBLEMS])
        body = (f"<p class='bad' data-verify='problems'>{len(page.verified):,} problems; the "
                f"first:</p><ul>{problems}</ul>")
    return f"<section id='verify'><h2>Verify</h2>{body}</section>"


def render(page: Inputs) -> str:
    """The whole page."""
    unread = "".join(f"<li>{_e(error)}</li>" for error in page.errors)
    sections = [(f"<section id='unread'><h2>Left out</h2><p class='bad'>parts of the dataset "
                 f"that could not be read:</p><ul>{unread}</ul></section>" if unread else ""),
                _summary(page), _splits(page), _statistics(page), _distributions(page),
                _failures(page),
                _sheets(page), _shuffle(page), _verify(page)]
    nav = " ".join(f"<a href='#{anchor}'>{name}</a>" for anchor, name in (
        ("summary", "summary"), ("splits", "splits"), ("statistics", "statistics"),
        ("distributions", "distributions"),
        ("failures", "failures"), ("sheets", "contact sheets"), ("shuffle", "shuffle"),
        ("verify", "verify")))
    return ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            f"<title>{_e(page.path)}: dataset report</title><style>{STYLE}</style></head>"
            f"<body><h1>Dataset report: {_isolated(page.path)}</h1>"
            f"<p class='muted'>python -m readers.inspect {_isolated(page.path)} --report ... "
            f"--report_samples {page.samples} --seed {page.seed}</p><nav>{nav}</nav>"
            + "".join(sections) + "</body></html>\n")
