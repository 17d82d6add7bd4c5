"""The datasets the report's tests read, built by real job runs, and how a test reads a
report page: its `data-key` figures against dataset.json, its contact sheets as images.
tests/test_report.py checks what the page says, tests/test_report_browser.py how headless
Chromium renders it; their datasets are conftest's `report_datasets`, built once a worker.
"""
import base64
import html.parser
import io
import json
import logging
import os

import numpy as np
import pytest
from helpers import run_job
from input_files import (
    latent_example,
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_records,
    write_videos,
)
from PIL import Image

from readers import format as data_format
from readers import report
from readers.inspect.output import save

# The datasets a page test runs on; the appended one (two runs more) only in the full suite.
PAGES = ["latent", "pixel", pytest.param("appended", marks=pytest.mark.slow)]


class _Lines(logging.Handler):
    """The job's log lines, kept (a session fixture has no caplog)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def build_latent(root) -> list[str]:
    """12 latent videos in 3 files, one of them with garbage at its end (a failure row),
    cut into two splits; the job's log lines."""
    videos = random_videos(np.random.default_rng(11), 12, lengths=(20, 40), dim=6)
    write_videos(str(root / "lat_in"), videos, files=3)
    with open(root / "lat_in" / "lat-0.tfrecord", "ab") as f:
        f.write(b"garbage that is no record")      # a failure row
    logger, lines = logging.getLogger("beam_jobs.make_shards"), _Lines()
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        run_job(str(root / "lat_in" / "*"), root / "latent", "--window", "8", "--stride", "4",
                "--num_shards", "3", "--splits", "train=0.6,val=0.4",
                "--max_failure_fraction", "0.2")
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    return lines.lines


def build_pixel(root) -> None:
    """4 PNG frame folders with labels (heat t * (v + 1) at frame t of video v) and
    metadata, a missing and an undecodable frame, and a video that fails."""
    rows = []
    for v in range(4):
        write_frame_folder(root / f"v{v}", solid_frames(10, start=4 * v))
        (root / f"v{v}.csv").write_text("heat,smoke\n" + "\n".join(
            f"{t * (v + 1)},{v}" for t in range(10)))
        rows.append({"video_id": f"v{v}", "frames": [f"v{v}/frame_{i}.png" for i in range(10)],
                     "labels": f"v{v}.csv",
                     "metadata": [v, 0.5]})
    os.remove(root / "v1" / "frame_4.png")                   # a missing frame
    (root / "v2" / "frame_6.png").write_bytes(b"not a png")  # an undecodable one
    rows.append({"video_id": "broken", "frames": ["v0/frame_0.png"], "labels": [1.0]})
    write_manifest(root / "m.jsonl", rows)
    run_job(str(root / "m.jsonl"), root / "pixel", "--window", "5", "--stride", "3",
            "--frame_encoding", "png", "--max_failure_fraction", "0.5")


def build_appended(root) -> None:
    """A latent dataset of two generations (8 videos, then 4 more by --append)."""
    rng = np.random.default_rng(7)
    flags = ["--window", "8", "--stride", "4", "--splits", "train=0.5,val=0.5",
             "--id_feature", "vid", "--num_shards", "2", "--append"]
    for name, count, prefix in (("a", 8, "a"), ("b", 4, "b")):
        write_records(str(root / "app_in" / f"{name}.tfrecord"),
                      [latent_example(frames, recipe, video_id=f"{prefix}{i}")
                       for i, (frames, recipe) in enumerate(random_videos(rng, count, dim=4))])
        run_job(str(root / "app_in" / "*"), root / "appended", *flags)


def report_of(path) -> tuple[str, str]:
    """(the dataset, its report made as with --verify on a sound dataset)."""
    page = f"{path}.html"
    save(page, report.build(str(path), data_format.load_spec(str(path)),
                            verified=[]).encode("utf-8"))   # as readers.inspect --report
    return str(path), page


# Elements that have no end tag: never open around text.
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


class Page(html.parser.HTMLParser):
    """What a test reads of the page's HTML: the `data-key` figures, the sheets, the
    elements with other data- attributes, and each piece of text with the elements it
    is in (`texts`: (their tags, outermost first), text)."""

    def __init__(self, text: str):
        super().__init__()
        self.keys, self.sheets, self.images, self.data = {}, [], [], []
        self.texts: list[tuple[tuple[str, ...], str]] = []
        self._open = None
        self._inside: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-key" in attrs:
            self._open = attrs["data-key"]
            self.keys[self._open] = ""
        if tag == "figure" and "data-video-id" in attrs:
            self.sheets.append(attrs)
        if tag == "img":
            self.images.append(attrs)
        if tag not in _VOID:
            self._inside.append(tag)
        self.data.append(attrs)

    def handle_data(self, data):
        if self._open is not None:
            self.keys[self._open] += data
        self.texts.append((tuple(self._inside), data))

    def handle_endtag(self, tag):
        self._open = None
        while self._inside and self._inside.pop() != tag:
            pass


def read_page(page: str) -> Page:
    with open(page, encoding="utf-8") as f:
        return Page(f.read())


def _value(meta: dict, key: str):
    value = meta
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def check_figures(keys: dict[str, str], meta: dict) -> None:
    """Each figure the page marks with data-key is dataset.json's, as it writes it."""
    for key, text in keys.items():
        expected = _value(meta, key)
        if key.startswith("flags.") and not isinstance(expected, str):
            assert json.loads(text) == expected, key
        elif isinstance(expected, int):
            assert int(text.replace(",", "")) == expected, key
        else:
            assert text == str(expected), key


def sheets_of(page: str) -> list[tuple[dict, Image.Image]]:
    """The page's contact sheets: (the figure's attributes, its PNG decoded)."""
    found = read_page(page)
    images = [Image.open(io.BytesIO(base64.b64decode(
        img["src"].split(",", 1)[1]))) for img in found.images]
    assert all(img["src"].startswith("data:image/png;base64,") for img in found.images)
    return list(zip(found.sheets, images, strict=False))
