"""readers.inspect --report: what the page says. Its figures are dataset.json's, its
contact sheets real windows of the sizes they say, its distributions, failures and shuffle
check what the files hold; the job names the command, --verify's result is on it, gs:// gives
the local page, gzip and damaged datasets get theirs, names that are HTML stay text. On a
latent, a pixel (PNG, labels, bad frames, a failure) and an appended dataset, each by real
job runs (tests/report_pages.py); how a browser renders the page:
tests/test_report_browser.py."""
import contextlib
import html
import io
import json
import os
import re
import shlex
import shutil
import signal

import gcs_emulator
import numpy as np
import pytest
from helpers import assert_verified, inspect_run, read_dataset_json, run_job, sidecar
from input_files import latent_example, random_videos, write_records, write_videos
from PIL import Image
from report_pages import PAGES, check_figures, read_page, report_of, sheets_of

from readers import format as data_format
from readers import report
from readers.inspect import preview
from readers.numpy import WindowSource
from readers.report import collect, pictures, sampled
from readers.report import page as page_module


@pytest.mark.parametrize("name", PAGES)
def test_the_figures_on_the_page_are_dataset_json_s(reports, name):
    path, page = reports[name]
    meta = read_dataset_json(path)
    found = read_page(page)
    check_figures(found.keys, meta)
    for split in meta["splits"]:
        for field in ("videos", "windows", "frames", "bad_frames", "skipped_short"):
            assert f"splits.{split}.{field}" in found.keys
    for i, _ in enumerate(meta["generations"]):
        assert f"generations.{i}.windows" in found.keys
    assert {f"flags.{flag}" for flag in meta["flags"]} <= set(found.keys)
    assert "format_version" in found.keys and "features.0.encoding" in found.keys
    sizes = [int(a["data-bytes"]) for a in found.data if "data-bytes" in a]
    assert [size > 0 for size in sizes] == [bool(s["windows"]) for s in meta["splits"].values()]


@pytest.mark.parametrize("name", PAGES)
def test_the_statistics_on_the_page_are_dataset_json_s(reports, name):
    """Each figure of the job's statistics, exact in its data-value; every split and
    feature's table, the first MAX_DIMENSIONS channels."""
    path, page = reports[name]
    stats = read_dataset_json(path)["stats"]
    cells = {a["data-stat"]: a["data-value"] for a in read_page(page).data if "data-stat" in a}
    for key, value in cells.items():
        _, split, feature, field, channel = key.split(".")
        expected = stats[split][feature][field][int(channel)]
        assert value == "nan" if expected is None else float(value) == expected, key
    for split, features in stats.items():
        for feature, entry in features.items():
            shown = min(len(entry["mean"]), page_module.MAX_DIMENSIONS) if entry["count"] else 0
            assert sum(k.startswith(f"stats.{split}.{feature}.std.") for k in cells) == shown


def test_a_dataset_without_statistics_says_so_on_its_page(reports, tmp_path):
    path, _ = reports["latent"]
    shutil.copytree(path, tmp_path / "old")
    meta = read_dataset_json(tmp_path / "old")
    del meta["stats"]
    (tmp_path / "old" / "dataset.json").write_text(json.dumps(meta))
    found = read_page(report_of(tmp_path / "old")[1])
    assert not [a for a in found.data if "data-stat" in a]
    assert [a for a in found.data if a.get("data-stats") == "none"]
    assert any(text.startswith("statistics: none in dataset.json") for _, text in found.texts)


def _windows_of(path: str) -> dict[tuple[str, bytes, int], np.ndarray]:
    """(split, video id, start) -> mask, of every window."""
    out = {}
    for split, info in data_format.load_spec(path).splits.items():
        if info.windows:
            batch = WindowSource(path, split, ["mask", "video_id", "start"])[:]
            out.update({(split, v, int(s)): m for v, s, m in
                        zip(batch["video_id"], batch["start"], batch["mask"], strict=True)})
    return out


@pytest.mark.parametrize("name", PAGES)
def test_contact_sheets_are_real_windows_of_the_size_they_say(reports, name):
    path, page = reports[name]
    spec = data_format.load_spec(path)
    windows = _windows_of(path)
    sheets = sheets_of(page)
    assert len(sheets) == min(report.SAMPLES, len(windows))
    length = spec.window.length
    for attrs, image in sheets:
        assert image.size == (int(attrs["data-width"]), int(attrs["data-height"]))
        key = (attrs["data-split"], attrs["data-video-id"].encode(), int(attrs["data-start"]))
        assert key in windows, key
        image = np.asarray(image.convert("RGB"))
        if name == "pixel":   # a strip of frames and the label curve under them
            assert image.shape[0] == (preview.THUMB_HEIGHT + preview.TEXT_HEIGHT
                                      + preview.LABEL_STRIP + 2 * preview.MARGIN)
            assert image.shape[1] > length * 40
        else:                 # frames by values, then the mask strip: red where masked
            dims = spec.feature("window").shape[-1]
            assert image.shape[1::-1] == pictures.latent_size(length, dims)
            strip = image[-2, ::image.shape[1] // length][:length]
            red = (strip[:, 0] > 200) & (strip[:, 1] < 80)
            assert np.array_equal(red, windows[key] == 0), key
    splits = {attrs["data-split"] for attrs, _ in sheets}
    assert splits == {s for s, info in spec.splits.items() if info.windows}


@pytest.mark.slow
def test_sheets_come_from_every_generation(appended_report):
    path, page = appended_report
    text = open(page, encoding="utf-8").read()
    runs = [g["run_id"] for g in read_dataset_json(path)["generations"]]
    assert len(runs) == 2
    for i, run in enumerate(runs):
        assert f"generation {i + 1} (run <bdi>{run}</bdi>)" in text


def test_pixel_sheets_mark_masked_frames_and_show_labels(reports):
    path, page = reports["pixel"]
    windows = _windows_of(path)
    text = open(page, encoding="utf-8").read()
    captions = re.findall(r"<b><bdi>(v\d)</bdi></b> @ (\d+) .*?; masked ([\d, ]+|none); "
                          r"labels ([^<]+)<", text)
    assert captions
    for video, start, masked, labels in captions:
        mask = windows[("train", video.encode(), int(start))]
        assert masked == (", ".join(str(i) for i in np.flatnonzero(mask == 0)) or "none")
        heat = [float(v) for v in labels.split(", ")]
        real = mask > 0
        v = int(video[1])   # heat is t * (v + 1) at frame t of the video
        assert np.allclose(np.array(heat)[real], (int(start) + np.flatnonzero(real)) * (v + 1))
    assert ("v1", "3", "1") in [c[:3] for c in captions]    # v1's missing frame 4


def test_failures_and_bad_frames_are_counted_by_reason(reports):
    path, page = reports["pixel"]
    found = read_page(page)
    rows = {a["data-rows"] for a in found.data if "data-rows" in a}
    assert rows == {"failures", "bad_frames"}
    text = open(page, encoding="utf-8").read()
    assert re.search(r"data-rows='failures'>1</span> row ", text)
    assert re.search(r"data-rows='bad_frames'>2</span> rows", text)
    # the reason without its path, counted; the row with it
    assert "cannot read …: No such file or directory" in text
    assert "not an image file Pillow can decode" in text
    assert "frame_4.png" in text and "broken" in text


def test_side_file_tables_are_capped_and_reasons_grouped():
    side = collect.SideFile("failures-x.jsonl")
    for i in range(130):
        side.add({"reason": f"cannot read /data/v{i}/frame_{i}.png: No such file",
                  "video_id": f"v{i}"})
    for i in range(collect.MAX_REASONS + 5):
        side.add({"reason": f"reason {chr(65 + i % 26) * (1 + i // 26)}"})
    assert side.rows == 130 + collect.MAX_REASONS + 5
    assert len(side.first) == collect.MAX_ROWS
    assert side.by_reason["cannot read …: No such file"] == 130
    assert len(side.by_reason) == collect.MAX_REASONS + 1
    assert side.by_reason["(other reasons)"] == 6


def test_a_streamed_histogram_keeps_its_bins_and_exact_counts():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 10**6, 5000)
    hist = collect.Histogram()
    for v in values:
        hist.add(int(v))
    counts, edges = hist.bins()
    assert len(hist.counts) == collect.Histogram.BINS and counts.sum() == len(values)
    assert np.array_equal(counts, np.histogram(values, bins=edges)[0])


def test_distributions_stream_the_videos_file(reports):
    path, page = reports["pixel"]
    spec = data_format.load_spec(path)
    got = collect.collect(path, spec)
    rows = [json.loads(line) for line in open(sidecar(path, "videos"))]
    counts, edges = got.videos["train"].frames.bins()
    assert np.array_equal(counts, np.histogram([r["frames"] for r in rows], bins=edges)[0])
    assert got.videos["train"].bad_frames.bins()[0].sum() == len(rows) == 4
    text = open(page, encoding="utf-8").read()
    for title in ("labels: heat", "labels: smoke", "metadata[0]", "metadata[1]",
                  "masked frames (padding or bad) per window", "frames per video",
                  "windows per video", "bad frames per video"):
        assert title in text, title
    latent = open(reports["latent"][1], encoding="utf-8").read()
    assert "per-channel mean (line) and std (band)" in latent and "6 of 6 channels" in latent


def test_shuffle_quality_is_what_the_shards_hold(reports):
    path, page = reports["latent"]
    spec = data_format.load_spec(path)
    order = sampled.shuffle_order(path, spec)
    for split, info in spec.splits.items():
        assert len(order[split]) == len([s for s in info.shards if s.examples])
        for shard_order, shard in zip(order[split], [s for s in info.shards if s.examples],
                                      strict=True):
            ids = WindowSource(path, split, ["video_id"])
            first = sum(s.examples for s in info.shards[:info.shards.index(shard)])
            read = min(shard.examples, sampled.SHUFFLE_RECORDS)
            got = ids.read_batch(list(range(first, first + read)))["video_id"]
            assert shard_order.pairs == read - 1
            assert shard_order.same == int((got[1:] == got[:-1]).sum())
    rows = [json.loads(line) for line in open(sidecar(path, "videos"))]
    text = open(page, encoding="utf-8").read()
    for split, info in spec.splits.items():
        w = np.array([r["windows"] for r in rows if r["split"] == split])
        expected = (w * (w - 1)).sum() / (info.windows * (info.windows - 1))
        assert f"a perfect shuffle gives {expected:.1%}" in text


def test_the_job_prints_the_command_that_makes_the_report(report_datasets, tmp_path, capsys,
                                                          monkeypatch):
    reports, log = report_datasets
    line = next(line for line in log if "--report" in line).splitlines()[-1]
    command = line.split("python -m readers.inspect ", 1)[1]
    assert shlex.split(command) == [reports["latent"][0], "--report", "report.html"]
    monkeypatch.chdir(tmp_path)
    code, out, err = inspect_run(capsys, *shlex.split(command))
    assert code == 0, err
    assert "wrote report.html" in out and (tmp_path / "report.html").stat().st_size > 10_000


def test_verify_s_result_is_on_the_page(reports, tmp_path, capsys):
    path, page = reports["latent"]
    assert "data-verify='sound'" in open(page, encoding="utf-8").read()
    plain = tmp_path / "plain.html"
    assert inspect_run(capsys, path, "--report", plain)[0] == 0
    assert "data-verify='not run'" in plain.read_text()
    copy = tmp_path / "broken"
    shutil.copytree(path, copy)
    meta = read_dataset_json(copy)
    shard = copy / meta["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    broken = tmp_path / "broken.html"
    code, out, err = inspect_run(capsys, copy, "--report", broken, "--verify")
    assert code == 1 and "corrupt" in err
    text = broken.read_text()
    assert "data-verify='problems'" in text and shard.name in text


def test_broken_side_files_are_left_out_and_verify_still_speaks(reports, tmp_path, capsys):
    """A videos row without its counts, a failures line that is no JSON, a negative bad
    frames count: the summary and the page say so in a line each (the page leaves those
    parts out), and --verify's problems are printed beside the page."""
    copy = tmp_path / "broken"
    shutil.copytree(reports["pixel"][0], copy)
    with open(sidecar(copy, "videos"), "a") as f:
        f.write(json.dumps({"video_id": "x", "split": "train"}) + "\n")
    with open(sidecar(copy, "failures"), "a") as f:
        f.write("not json\n")
    code, out, _ = inspect_run(capsys, copy)
    assert code == 0 and re.search(r"failures: 1 \(its reasons cannot be read: failures-\w+"
                                   r"\.jsonl: line 2 is not a JSON object\)", out)
    page = tmp_path / "broken.html"
    code, out, err = inspect_run(capsys, copy, "--report", page, "--verify")
    assert code == 1 and f"wrote {page}" in out
    assert "verify: 1 problem" in err and "line 5 has no 'windows'" in err
    text = html.unescape(page.read_text())
    assert "the videos file: line 5 has no 'windows' (a count)" in text
    assert re.search(r"the failures file: failures-\w+\.jsonl: line 2 is not a JSON object",
                     text)
    rows = [json.loads(line) for line in open(sidecar(copy, "videos"))][:4]
    rows[0]["bad_frames"] = -1
    with open(sidecar(copy, "videos"), "w") as f:
        f.write("".join(json.dumps(row) + "\n" for row in rows))
    text = html.unescape(open(report_of(copy)[1], encoding="utf-8").read())
    assert f"video {rows[0]['video_id']!r}: bad_frames -1 is not a count" in text


def test_report_samples_needs_report_and_sets_the_sheets_and_sample(reports, tmp_path,
                                                                      capsys):
    path, _ = reports["latent"]
    code, _, err = inspect_run(capsys, path, "--report_samples", "3")
    assert code == 2 and "--report_samples" in err and "give --report too" in err
    page = tmp_path / "three.html"
    code, out, _ = inspect_run(capsys, path, "--report", page, "--report_samples", "3",
                               "--seed", "5")
    assert code == 0 and f"wrote {page}" in out
    assert len(sheets_of(str(page))) == 3
    windows = sum(s.windows for s in data_format.load_spec(path).splits.values())
    sample = min(3 * report.STATS_PER_SHEET, windows)
    assert f"Windows (a sample of {sample}, drawn with seed 5" in page.read_text()
    help_text = inspect_run(capsys, "--help")[1]
    assert "--report PATH" in help_text and f"(default: {report.SAMPLES})" in help_text


def test_a_sheet_is_scaled_down_to_its_byte_budget():
    noise = np.random.default_rng(0).integers(0, 255, (600, 900, 3), np.uint8)
    png, picture, scaled = pictures.png_within(Image.fromarray(noise), 200_000)
    assert len(png) <= 200_000 and scaled < 1 and picture.width < 900
    assert Image.open(io.BytesIO(png)).size == picture.size


@pytest.mark.slow
def test_a_report_of_a_dataset_on_gcs_is_the_local_one_s(appended_report):
    """gs:// through fsspec (gcsfs), against the GCS emulator: the same page as of the
    local copy, but for the path it names."""
    path, _ = appended_report
    spec = data_format.load_spec(path)
    local = report.build(path, spec)
    # served a thread a connection: one at a time, the reads of a sheet's windows wait
    # for each other's connections to idle out (80 to 190 s instead of seconds)
    with gcs_emulator.running("bkt", concurrent=True):
        import fsspec

        fs = fsspec.filesystem("gs", skip_instance_cache=True)
        for name in os.listdir(path):
            if os.path.isfile(os.path.join(path, name)):
                fs.put_file(os.path.join(path, name), f"bkt/appended/{name}")
        gcs_emulator.reset_counts()
        remote = report.build("gs://bkt/appended", data_format.load_spec("gs://bkt/appended"))
        reads = gcs_emulator.counts()["read"]
    assert remote.replace("gs://bkt/appended", path) == local
    # a request per sampled window and per sheet (random access, as readers.numpy), a few
    # per shard (its index; its first records, read ahead in one), the side files: none
    # per small read
    windows = sum(s.windows for s in spec.splits.values())
    shards = sum(len(s.shards) for s in spec.splits.values())
    sampled_windows = min(windows, report.STATS_PER_SHEET * report.SAMPLES)
    assert reads <= sampled_windows + report.SAMPLES + 3 * shards + 10, reads


@pytest.mark.slow
def test_names_that_are_html_are_shown_as_text(tmp_path):
    """A video id (here a file's name) full of markup is text on the page, never markup."""
    write_videos(str(tmp_path / "in"), random_videos(np.random.default_rng(4), 3), files=1)
    hostile = tmp_path / "in" / "<i onclick=x>&amp.tfrecord"
    os.rename(next((tmp_path / "in").iterdir()), hostile)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4", "--stride", "2")
    assert_verified(tmp_path / "out")
    _, page = report_of(tmp_path / "out")
    text = open(page, encoding="utf-8").read()
    assert "&lt;i onclick=x&gt;&amp;amp.tfrecord" in text
    assert "<i onclick" not in text and "&amp.tfrecord" not in text.replace("&amp;amp", "")


def test_a_gzip_dataset_gets_its_page_and_a_damaged_shard_is_left_out(kinds, tmp_path):
    """Gzip shards have no index: the sample comes from their first records; a shard cut
    short leaves the parts it breaks out, saying so, instead of stopping the page."""
    whole = tmp_path / "whole"
    shutil.copytree(kinds["gzip"], whole)
    text = open(report_of(whole)[1], encoding="utf-8").read()
    assert "id='unread'" not in text and "data:image/png;base64," in text
    cut = tmp_path / "cut"
    shutil.copytree(kinds["gzip"], cut)
    shard = read_dataset_json(cut)["splits"]["train"]["shards"][0]["file"]
    data = (cut / shard).read_bytes()
    (cut / shard).write_bytes(data[:len(data) // 3])
    text = open(report_of(cut)[1], encoding="utf-8").read()
    assert "id='unread'" in text and f"{shard}: " in text and "records readable" in text


class _Hung(Exception):
    """Raised by `_no_hang`: no OSError (TimeoutError is one), which the report would
    take for a part it cannot read and leave out."""


@contextlib.contextmanager
def _no_hang(seconds: int):
    """A safety net, not a measure of speed: what runs inside is stopped with an error
    after `seconds` (SIGALRM) instead of hanging the suite."""
    def stop(*_):
        raise _Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_reasons_of_any_length_are_grouped_and_shown_cut(reports, tmp_path, capsys):
    """A side file from elsewhere may hold reasons of a megabyte: each is grouped by its
    first collect.MAX_TEXT characters (in time linear in them) and shown cut to them, and
    the page is written. The reasons are the old pattern's worst case: one long word."""
    copy = tmp_path / "ds"
    shutil.copytree(reports["pixel"][0], copy)
    long_reasons = ["x" * 10**6, "y" * 10**6, "x" * 10**6]
    with open(sidecar(copy, "failures"), "w") as f:
        f.write("".join(json.dumps({"video_id": f"v{i}", "reason": reason}) + "\n"
                        for i, reason in enumerate(long_reasons)))
    page = tmp_path / "page.html"
    with _no_hang(60):
        code, out, err = inspect_run(capsys, copy, "--report", page)
    assert code == 0 and f"wrote {page}" in out, err
    text = page.read_text()
    failures = text.split("<h3>Failures")[1].split("<h3>Bad frames")[0]
    cells = [html.unescape(c) for c in re.findall(r"<td class='reason'>(.*?)</td>", failures)]
    assert sorted(cells) == sorted(["x" * 200, "y" * 200] + [
        reason[:collect.MAX_TEXT] + "…" for reason in long_reasons])
    assert re.search(r"<td class='reason'>x{200}</td><td class=\"n\">2</td>", failures)
    assert len(text) < 2 * 10**6     # three megabytes of reasons, a few KB of them shown
    with _no_hang(60):
        for reason in ("/" * 10**6, "a/" * 10**6, "'" + "a" * 10**6, "1." * 10**6):
            assert len(collect.reason_kind(reason)) <= 200


def test_an_id_that_overrides_the_direction_is_isolated_on_the_page(tmp_path):
    """A video id with an unterminated right-to-left override (U+202E): on the page it
    is isolated (<bdi>; U+2068 and U+2069 in an attribute's text), so it cannot mirror
    the rest of its caption (its start, split and run)."""
    rtl = "\u202eevil"
    videos = random_videos(np.random.default_rng(3), 2, lengths=(10, 12), dim=2)
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(frames, recipe, video_id=video_id)
                   for video_id, (frames, recipe) in zip((rtl, "plain"), videos, strict=True)])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "8", "--stride", "4",
            "--id_feature", "vid")
    _, page = report_of(tmp_path / "out")
    found = read_page(page)
    shown = [(inside, text) for inside, text in found.texts if "\u202e" in text]
    assert shown and all(inside[-1] == "bdi" and text == rtl for inside, text in shown), shown
    captions = [(inside, text) for inside, text in found.texts if inside[-1:] == ("figcaption",)]
    assert any(text.startswith(" @ ") for _, text in captions)    # the start: not isolated
    alts = [img["alt"] for img in found.images if "\u202e" in img["alt"]]
    assert alts and all(alt.startswith(f"\u2068{rtl}\u2069 @ ") for alt in alts), alts


def test_a_count_past_any_video_s_is_left_out_not_a_traceback(reports, tmp_path, capsys):
    """A videos row claiming 10**30 frames: the distributions say why they are left out,
    the page is written; no count past collect.MAX_COUNT reaches a histogram."""
    copy = tmp_path / "ds"
    shutil.copytree(reports["pixel"][0], copy)
    videos = sidecar(copy, "videos")
    rows = [json.loads(line) for line in open(videos)]
    rows[1]["frames"] = 10**30
    videos.write_text("".join(json.dumps(row) + "\n" for row in rows))
    page = tmp_path / "page.html"
    code, out, err = inspect_run(capsys, copy, "--report", page)
    assert code == 0 and f"wrote {page}" in out and "Traceback" not in err, err
    assert (f"the videos file: {videos.name}: video {rows[1]['video_id']!r}: frames {10**30} "
            "is not a count (0 to 2**53)") in html.unescape(page.read_text())
    hist = collect.Histogram()
    hist.add(collect.MAX_COUNT)
    assert hist.bins()[1][-1] > collect.MAX_COUNT
    with pytest.raises(ValueError, match="is not a count"):
        hist.add(collect.MAX_COUNT + 1)
