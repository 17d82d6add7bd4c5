"""The report's plots as inline SVG text: histograms, bars, a band, a timeline and a colour
bar. No plotting library (the light install has none) and no script: each bar's figure
is its SVG `<title>`, which a browser shows on hover.
"""
from __future__ import annotations

import html
from typing import Optional, Sequence, Union

import numpy as np

WIDTH, HEIGHT = 390, 180
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 10, 40
BAR = "#4a78b5"
LINE = "#c0392b"

# What the plots take: a list of numbers, or an array of them.
Numbers = Union[Sequence[float], np.ndarray]


def number(value: float) -> str:
    """A figure as the page writes it: whole numbers with separators, others to 4
    significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11,
          extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
            f'{extra}>{html.escape(text)}</text>')


def _frame(body: list[str], x_label: str, y_label: str, low: str, high: str,
           top: str, width: int = WIDTH, bottom: str = "0") -> str:
    """Axes around a plot area, their labels, and the extreme values on each."""
    x1, y1 = width - RIGHT, HEIGHT - BOTTOM
    parts = [f'<svg width="{width}" height="{HEIGHT}" '
             f'viewBox="0 0 {width} {HEIGHT}" role="img" font-family="sans-serif">',
             *body,
             f'<line x1="{LEFT}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#333"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y1}" stroke="#333"/>',
             _text(LEFT, y1 + 14, low, "start"), _text(x1, y1 + 14, high, "end"),
             _text((LEFT + x1) / 2, HEIGHT - 6, x_label),
             _text(LEFT - 4, TOP + 9, top, "end"), _text(LEFT - 4, y1, bottom, "end"),
             _text(12, (TOP + y1) / 2, y_label, extra=f' transform="rotate(-90 12 '
                   f'{(TOP + y1) / 2:.1f})"'),
             "</svg>"]
    return "\n".join(parts)


def histogram(counts: Numbers, edges: Numbers, *, x_label: str,
              y_label: str, integer: bool = False) -> str:
    """Bars of `counts` over bins [edges[i], edges[i + 1]); whole-number bins of width
    one are labelled by their value."""
    heights = np.asarray(counts, np.float64)
    if not len(heights) or heights.max() <= 0:
        return '<p class="none">nothing to plot</p>'
    x1, y1 = WIDTH - RIGHT, HEIGHT - BOTTOM
    step = (x1 - LEFT) / len(heights)
    top = heights.max()
    body = []
    for i, count in enumerate(heights):
        height = (y1 - TOP) * count / top
        low, high = edges[i], edges[i + 1]
        where = (number(low) if integer and high - low == 1 else
                 f"[{number(low)}, {number(high)}{')' if i < len(heights) - 1 else ']'}")
        body.append(f'<rect x="{LEFT + i * step + 0.5:.1f}" y="{y1 - height:.1f}" '
                    f'width="{max(step - 1, 0.5):.1f}" height="{height:.1f}" fill="{BAR}">'
                    f'<title>{html.escape(where)}: {number(count)}</title></rect>')
    last = edges[-1] - (1 if integer else 0)
    return _frame(body, x_label, y_label, number(edges[0]), number(last), number(top))


def values_histogram(values: np.ndarray, *, x_label: str, y_label: str,
                     bins: int = 30) -> str:
    """A histogram of sampled values (finite ones)."""
    values = values[np.isfinite(values)]
    if not values.size:
        return '<p class="none">no values</p>'
    low, high = float(values.min()), float(values.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    counts, edges = np.histogram(values, bins=bins, range=(low, high))
    return histogram(counts, edges, x_label=x_label, y_label=y_label)


def bars(values: Numbers, names: Sequence[str], *, x_label: str, y_label: str,
         reference: Optional[float] = None, reference_name: str = "") -> str:
    """One bar per value in order (a shard each), and a dashed line at `reference`."""
    heights = np.asarray(values, np.float64)
    if not len(heights):
        return '<p class="none">nothing to plot</p>'
    x1, y1 = WIDTH - RIGHT, HEIGHT - BOTTOM
    top = max(heights.max(), reference or 0) or 1.0
    step = (x1 - LEFT) / len(heights)
    body = []
    for i, (value, name) in enumerate(zip(heights, names, strict=True)):
        height = (y1 - TOP) * value / top
        body.append(f'<rect x="{LEFT + i * step + 0.25:.2f}" y="{y1 - height:.1f}" '
                    f'width="{max(step - 0.5, 0.3):.2f}" height="{height:.1f}" fill="{BAR}">'
                    f'<title>{html.escape(name)}: {number(value)}</title></rect>')
    if reference is not None:
        y = y1 - (y1 - TOP) * reference / top
        body.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="{LINE}" '
                    f'stroke-dasharray="4 3"><title>{html.escape(reference_name)}: '
                    f'{number(reference)}</title></line>')
    return _frame(body, x_label, y_label, "1", number(len(heights)), number(top))


def band(mean: np.ndarray, std: np.ndarray, *, x_label: str, y_label: str) -> str:
    """A line of `mean` over its index with a band of +- `std` around it."""
    if not len(mean):
        return '<p class="none">nothing to plot</p>'
    x1, y1 = WIDTH - RIGHT, HEIGHT - BOTTOM
    low, high = float((mean - std).min()), float((mean + std).max())
    span = (high - low) or 1.0

    def y(v):
        return y1 - (y1 - TOP) * (v - low) / span

    xs = LEFT + (x1 - LEFT) * (np.arange(len(mean)) + 0.5) / len(mean)
    upper = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in zip(xs, mean + std, strict=True))
    lower = " ".join(f"{x:.1f},{y(v):.1f}"
                     for x, v in zip(xs[::-1], (mean - std)[::-1], strict=True))
    line = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in zip(xs, mean, strict=True))
    body = [f'<polygon points="{upper} {lower}" fill="{BAR}" fill-opacity="0.3"/>',
            f'<polyline points="{line}" fill="none" stroke="{BAR}" stroke-width="1.5"/>']
    return _frame(body, x_label, y_label, "0", number(len(mean) - 1), number(high),
                  bottom=number(low))


def timeline(rows: Sequence[tuple[str, int]], width: int = 880) -> str:
    """The generations in order as one bar, each a segment as long as its windows."""
    total = sum(windows for _, windows in rows) or 1
    height, x = 46, 0.0
    parts = [f'<svg width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" font-family="sans-serif">']
    shades = ("#4a78b5", "#7fa6d6", "#2f5a8f", "#a9c4e6")
    for i, (run, windows) in enumerate(rows):
        w = (width - 2) * windows / total
        parts.append(f'<rect x="{1 + x:.1f}" y="2" width="{max(w, 1):.1f}" height="22" '
                     f'fill="{shades[i % len(shades)]}" stroke="white"><title>generation '
                     f'{i + 1}, run {html.escape(run)}: {number(windows)} windows</title></rect>')
        if w > 70:
            parts.append(_text(1 + x + 4, 38, f"{i + 1}: {run}", "start", 10))
        x += w
    parts.append("</svg>")
    return "\n".join(parts)


def colour_bar(low: float, high: float, stops: Sequence[tuple[int, int, int]],
               width: int = 300) -> str:
    """The latent pictures' colour scale, low to high, its ends written."""
    gradient = "".join(f'<stop offset="{i / (len(stops) - 1):.3f}" '
                       f'stop-color="rgb{tuple(stop)}"/>' for i, stop in enumerate(stops))
    return (f'<svg width="{width + 120}" height="30" '
            f'role="img" font-family="sans-serif"><defs><linearGradient id="scale">'
            f'{gradient}</linearGradient></defs>'
            f'<rect x="60" y="4" width="{width}" height="14" fill="url(#scale)"/>'
            + _text(56, 16, number(low), "end") + _text(64 + width, 16, number(high), "start")
            + "</svg>")
