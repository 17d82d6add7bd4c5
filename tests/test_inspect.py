"""readers.inspect: summary, preview pictures, stats; it never writes into a dataset, and
side files that are FIFOs or too large are one line (--verify against broken shards:
tests/readers_only/test_verify.py)."""
import html
import json
import os
import shutil
import socket
import stat
import zipfile

import gcs_emulator
import keras
import numpy as np
import pytest
from helpers import command, inspect_run, read_dataset_json, run_job, sidecar
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

from readers.files import DatasetFiles
from readers.format import videos_file
from readers.inspect import preview


@pytest.fixture(scope="module")
def latent_dataset(tmp_path_factory):
    directory = tmp_path_factory.mktemp("latents")
    rng = np.random.default_rng(11)
    videos = random_videos(rng, 12, lengths=(20, 40), dim=6)
    write_videos(str(directory / "in"), videos, files=3)
    with open(directory / "in" / "lat-0.tfrecord", "ab") as f:
        f.write(b"garbage that is no record")
    run_job(str(directory / "in" / "*"), directory / "out", "--window", "8", "--stride", "4",
            "--num_shards", "3", "--splits", "train=0.7,val=0.3",
            "--max_failure_fraction", "0.2")
    return str(directory / "out")


@pytest.fixture(scope="module")
def pixel_dataset(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pixels")
    for v in range(3):
        write_frame_folder(directory / f"v{v}", solid_frames(10, start=v))
    os.remove(directory / "v1" / "frame_4.png")
    write_manifest(directory / "m.jsonl", [
        {"video_id": f"v{v}", "frames": [f"v{v}/frame_{i}.png" for i in range(10)],
         "labels": [float(i * (v + 1)) for i in range(10)]} for v in range(3)])
    run_job(str(directory / "m.jsonl"), directory / "out", "--window", "5", "--stride", "5",
            "--frame_encoding", "png")
    return str(directory / "out")


def test_summary_shows_splits_features_and_failure_reasons(latent_dataset, capsys):
    code, out, err = inspect_run(capsys, latent_dataset)
    assert code == 0, err
    assert "windows: length 8, stride 4, tail align_end" in out
    assert "window     [8, 6]" in out and "float32" in out
    assert out.count("\ntrain ") == 1 and "\nval " in out
    assert "failures: 1, most common reasons (paths and numbers left out):" in out
    assert "cannot be read" in out


def test_pixel_preview_is_a_deterministic_contact_sheet(pixel_dataset, tmp_path, capsys):
    first, again, other = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    for path, seed in ((first, "0"), (again, "0"), (other, "7")):
        assert inspect_run(capsys, pixel_dataset, "--preview", "6", "--out", path, "--seed",
                           seed)[0] == 0
    image = np.asarray(Image.open(first))
    assert image.shape[0] > 6 * 72 and image.shape[1] > 5 * 40
    assert first.read_bytes() == again.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    red = (image[..., 0] > 200) & (image[..., 1] < 80) & (image[..., 2] < 80)
    blue = (image[..., 2] > 150) & (image[..., 0] < 80)
    assert red.any() and blue.any()   # the masked frame's cross, the label curves


@pytest.mark.slow
def test_preview_changes_when_the_data_changes(tmp_path, capsys):
    images = []
    for level in (0, 9):
        folder = tmp_path / f"v{level}"
        write_frame_folder(folder, solid_frames(6, start=level))
        write_manifest(tmp_path / f"m{level}.jsonl", [{"video_id": "v", "frames": f"v{level}"}])
        run_job(str(tmp_path / f"m{level}.jsonl"), tmp_path / f"out{level}", "--window", "3",
                "--frame_encoding", "png")
        assert inspect_run(capsys, tmp_path / f"out{level}", "--preview", "2", "--out",
                           tmp_path / f"{level}.png")[0] == 0
        images.append(np.asarray(Image.open(tmp_path / f"{level}.png")))
    assert images[0].shape == images[1].shape and not np.array_equal(images[0], images[1])


def test_latent_preview_heatmaps_and_decoder(latent_dataset, tmp_path, capsys):
    heat = tmp_path / "heat.png"
    assert inspect_run(capsys, latent_dataset, "--preview", "4", "--out", heat)[0] == 0
    assert Image.open(heat).size[1] >= 4 * 96
    decoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8 * 8 * 3,
                                activation="sigmoid"), keras.layers.Reshape((8, 8, 3))])
    decoder.save(tmp_path / "dec.keras")
    sheet = tmp_path / "sheet.png"
    code, _, err = inspect_run(capsys, latent_dataset, "--preview", "2", "--out", sheet,
                               "--decoder", tmp_path / "dec.keras")
    assert code == 0, err[-500:]
    assert Image.open(sheet).size[1] == 2 * (preview.THUMB_HEIGHT + preview.TEXT_HEIGHT
                                             + preview.MARGIN) + preview.MARGIN


def test_heatmaps_keep_every_dim_and_show_their_scale():
    rng = np.random.default_rng(0)
    masks = np.ones((1, 10))
    for dims, shown in ((300, 300), (600, preview.MAX_DIMS)):
        windows = rng.standard_normal((1, 10, dims)).astype(np.float32)
        image = np.asarray(preview.heatmaps(windows, masks, None, ["v @ 0"]))
        assert image.shape[0] >= shown          # at least a pixel per dim shown, no fewer
        # the colour scale: a bar from blue to red on the caption's line
        bar = image[preview.MARGIN + 6, -preview.SCALE_WIDTH - 60:-60]
        assert bar[0, 2] > 150 > bar[0, 0] and bar[-1, 0] > 150 > bar[-1, 2]


def test_inspect_flags_say_what_they_need(latent_dataset, tmp_path, capsys):
    code, _, err = inspect_run(capsys, latent_dataset, "--out", tmp_path / "x.png")
    assert code == 2 and "--out" in err and "--preview" in err
    code, _, err = inspect_run(capsys, latent_dataset, "--preview", "40", "--out",
                               tmp_path / "many.png")
    assert code == 0 and "drawing 32 windows" in err
    help_text = inspect_run(capsys, "--help")[1]
    assert "(default: 1000)" in help_text and "(default: 0)" in help_text
    assert "(default: preview.png)" in help_text and "which windows --preview draws" in help_text


def test_stats_all_counts_the_mask_the_masked_frames_and_the_labels(pixel_dataset, capsys):
    code, out, err = inspect_run(capsys, pixel_dataset, "--stats", "--all")
    assert code == 0, err[-500:]
    out = out.split("statistics of")[1]
    assert out.startswith(" 6 train windows")
    mask_mean = float(out.split("\n  mask")[1].split()[0])
    assert abs(mask_mean - 29 / 30) < 1e-4               # one missing frame of 30
    assert "masked frames: 3.33%" in out and "label histogram:" in out
    labels_max = float(out.split("\n  labels")[1].split()[3])
    assert labels_max == 27.0


def test_stats_show_the_job_s_statistics_first(pixel_dataset, capsys):
    """dataset.json's figures, exact, per channel by name (R, G, B; the labels' one),
    before the sample's."""
    code, out, err = inspect_run(capsys, pixel_dataset, "--stats")
    assert code == 0, err[-500:]
    assert "statistics: of window and labels, exact, per split and channel" in out
    recorded, sampled = out.split("statistics in dataset.json, split train")[1].split(
        "statistics of")
    stats = read_dataset_json(pixel_dataset)["stats"]["train"]
    rows = {line.split()[0]: line.split()[1:] for line in recorded.splitlines()
            if line.startswith("    ") and "mean" not in line}
    assert list(rows) == ["R", "G", "B", "0"] and sampled.startswith(" 6 train windows")
    for name, row in zip(rows, [*[("window", c) for c in range(3)], ("labels", 0)], strict=True):
        entry = stats[row[0]]
        assert rows[name] == [f"{entry[f][row[1]]:.6g}" for f in ("mean", "std", "min", "max")]
    assert f"window: {stats['window']['frames']} frames" in recorded   # 29: one is missing
    assert stats["window"]["frames"] == 29 and stats["labels"]["count"] == 29


def test_a_directory_without_dataset_json_is_refused(tmp_path, capsys):
    code, _, err = inspect_run(capsys, tmp_path)
    assert code == 2 and "not a finished dataset" in err


@pytest.mark.slow
def test_inspect_ends_in_one_line_on_what_it_cannot_do(tmp_path, capsys):
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(np.full((12, 2), 0, np.float32), [0, 0])])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4",
            "--splits", "train=0.999,empty=0.001")

    def inspect(*args):
        code, _, err = inspect_run(capsys, *args)
        assert code == 2 and "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    out = str(tmp_path / "out")
    assert "split 'empty' has no windows" in inspect(out, "--split", "empty", "--stats")
    assert "--sample: must be a whole number >= 1, got 0" in inspect(out, "--stats",
                                                                   "--sample", "0")
    assert "--preview: must be a whole number >= 1, got -1" in inspect(out, "--preview", "-1")
    assert "--preview: expected an integer, got '2.0'" in inspect(out, "--preview", "2.0")
    meta = read_dataset_json(out)
    del meta["splits"]
    (tmp_path / "out" / "dataset.json").write_text(json.dumps(meta))
    assert "dataset.json: splits: missing" in inspect(out)


def _bytes_of(directory) -> dict[str, bytes]:
    """Every file of a directory and its bytes: what inspect must leave as it was."""
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_inspect_never_writes_into_the_dataset(pixel_dataset, tmp_path, capsys):
    """--report, or --preview's --out, naming any of the dataset's files, another name in
    its directory, or a path that leads there through `..` or a symbolic link, is refused
    in one line (exit 2) before anything is read; every byte of the dataset stays."""
    copy = tmp_path / "ds"
    shutil.copytree(pixel_dataset, copy)
    before = _bytes_of(copy)
    (tmp_path / "link.html").symlink_to(copy / "dataset.json")
    (tmp_path / "linked_folder").symlink_to(copy)
    targets = [copy / name for name in before] + [
        copy / "report.html", copy / "missing" / ".." / "dataset.json",
        tmp_path / "link.html", tmp_path / "linked_folder" / "report.html"]
    for target in targets:
        for flags in (["--report", target], ["--preview", "2", "--out", target]):
            code, _, err = inspect_run(capsys, copy, *flags)
            assert code == 2 and "Traceback" not in err, (flags, err)
            assert f"error: {flags[-2]}: {target} is inside the dataset directory {copy}: " \
                   "inspect never writes into a dataset" in err, err
    assert _bytes_of(copy) == before


def test_a_store_s_dataset_is_never_written_over_either(pixel_dataset, tmp_path, capsys):
    """On a store (fsspec's memory:// here, as gs://) the URLs are compared normalised."""
    import fsspec

    store = fsspec.filesystem("memory")
    for name in os.listdir(pixel_dataset):
        store.pipe(f"/inspect-never-writes/ds/{name}",
                   open(os.path.join(pixel_dataset, name), "rb").read())
    try:
        url = "memory://inspect-never-writes/ds"
        cached = f"simplecache::{url}"   # a chained URL stores where its last link does
        for dataset, target in [(url, f"{url}/dataset.json"), (url, f"{url}/sub/../dataset.json"),
                                (url, f"{url}/r.html"), (cached, f"{url}/dataset.json"),
                                (url, f"simplecache::{url}/dataset.json")]:
            code, _, err = inspect_run(capsys, dataset, "--report", target)
            assert code == 2 and "is inside the dataset directory" in err, (dataset, target, err)
        assert store.cat("/inspect-never-writes/ds/dataset.json") == open(
            os.path.join(pixel_dataset, "dataset.json"), "rb").read()
        code, out, err = inspect_run(capsys, url, "--report", f"{url}-report.html")
        assert code == 0 and f"wrote {url}-report.html" in out, err
    finally:
        store.rm("/inspect-never-writes", recursive=True)


def _refused(capsys, dataset, *flags) -> str:
    """The one line of a refusal (exit 2, nothing read, so nothing printed)."""
    code, printed, err = inspect_run(capsys, dataset, *flags)
    assert code == 2 and not printed and "Traceback" not in err, (flags, printed, err)
    return err.strip().splitlines()[-1]


def test_a_hard_link_to_a_dataset_s_file_is_refused(pixel_dataset, tmp_path, capsys):
    """A hard link to a dataset's file is that file under another name, outside the
    directory, named plainly or through a cache (`simplecache::file://`, which is
    unwrapped): compared by device and inode with every file of the dataset, refused in
    one line (exit 2) before anything is read, for --report and --out alike."""
    copy = tmp_path / "ds"
    shutil.copytree(pixel_dataset, copy)
    before = _bytes_of(copy)
    shard = next(name for name in before if name.endswith(".tfrecord"))
    for name in (shard, "dataset.json"):
        link = tmp_path / f"{name}.html"
        os.link(copy / name, link)
        for out in (str(link), f"simplecache::file://{link}"):
            for flags in (["--report", out], ["--preview", "2", "--out", out]):
                assert _refused(capsys, copy, *flags).endswith(
                    f"error: {flags[-2]}: {out} is the dataset's {name} under another name "
                    "(a hard link): inspect never writes into a dataset; name a path "
                    "outside it")
    assert _bytes_of(copy) == before


def test_only_a_new_or_a_regular_file_is_written(pixel_dataset, tmp_path, capsys):
    """A FIFO, a socket, or a symbolic link to one, at --report's or --out's path is
    refused in one line before anything is read: inspect never puts a regular file in
    their place (as root, a link to /dev/null would have replaced the system's device)."""
    for kind, mode in (("a FIFO", stat.S_IFIFO), ("a socket", stat.S_IFSOCK)):
        node = tmp_path / kind.split()[-1]
        os.mknod(node, mode | 0o600)
        link = tmp_path / f"link-to-{node.name}"
        link.symlink_to(node)
        for out in (node, link):
            for flags in (["--report", out], ["--preview", "2", "--out", out]):
                assert _refused(capsys, pixel_dataset, *flags).endswith(
                    f"error: {flags[-2]}: {out} is {kind}, not a regular file: inspect "
                    "writes a new file or over a regular one")
        assert stat.S_IFMT(os.lstat(node).st_mode) == mode and os.path.islink(link)


def test_a_chain_that_is_not_a_cache_is_refused(pixel_dataset, tmp_path, capsys):
    """zip:: (read-only here) and any chain link but a cache are refused in one line
    before anything is read, the archive left as it was."""
    archive = tmp_path / "pages.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("old.html", "old")
    before = archive.read_bytes()
    out = f"zip://page.html::file://{archive}"
    assert _refused(capsys, pixel_dataset, "--report", out).endswith(
        f"error: --report: {out}: inspect writes through caches only (simplecache::URL), "
        "not zip://page.html::")
    assert archive.read_bytes() == before


def test_what_inspect_writes_over_and_through(pixel_dataset, tmp_path, capsys):
    """A regular file outside the dataset is replaced whole (beside it, then renamed
    over it: another name of it keeps its bytes); a symbolic link is followed to where
    it leads; a cache in front is unwrapped; a name of 250 characters fits (the
    temporary name is short and fixed); nothing else is left in the folder."""
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "old.html").write_text("old")
    os.link(pages / "old.html", tmp_path / "other-name")
    (pages / "link.html").symlink_to(pages / "target.html")
    long = "p" * 245 + ".html"
    for out in (pages / "old.html", pages / "link.html", f"simplecache::file://{pages}/c.html",
                pages / long):
        code, printed, err = inspect_run(capsys, pixel_dataset, "--report", out)
        assert code == 0 and f"wrote {out}" in printed, err
    assert (tmp_path / "other-name").read_text() == "old"
    assert os.path.islink(pages / "link.html")
    assert sorted(os.listdir(pages)) == sorted(["old.html", "link.html", "target.html",
                                                "c.html", long])
    for name in ("old.html", "target.html", "c.html", long):
        assert (pages / name).read_text().startswith("<!doctype html>"), name


@pytest.mark.slow
def test_a_store_that_does_not_answer_is_one_line(pixel_dataset, tmp_path):
    """gs:// with no store there (an emulator's address with nothing listening): gcsfs
    would retry for about a minute, logging tracebacks, after the page is built; the
    path is asked about first, with a deadline, and refused in one line before anything
    is read. The timeout here only guards against a hang."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]      # closed again: connections are refused
    env = {**os.environ, **gcs_emulator.ENV, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"}
    result = command("readers.inspect", pixel_dataset, "--report", "gs://bkt/page.html",
                     env=env, timeout=300)
    usage, said = result.stderr.split("python -m readers.inspect: error: ")
    assert result.returncode == 2 and not result.stdout, result.stderr
    assert usage.startswith("usage: ") and "\n" not in said.strip(), result.stderr
    assert said.startswith("--report: gs://bkt/page.html: no answer from the store in "), said


def test_a_page_is_written_to_a_store(pixel_dataset, capsys):
    """gs:// (the GCS emulator), plainly or through a cache, gets the page; a folder
    there is refused as a local one is."""
    import fsspec

    with gcs_emulator.running("bkt"):
        fs = fsspec.filesystem("gs", skip_instance_cache=True)
        fs.pipe("bkt/folder/file", b"kept")
        assert _refused(capsys, pixel_dataset, "--report", "gs://bkt/folder").endswith(
            "error: --report: gs://bkt/folder is a directory: name a file")
        for out in ("gs://bkt/page.html", "simplecache::gs://bkt/cached.html"):
            code, printed, err = inspect_run(capsys, pixel_dataset, "--report", out)
            assert code == 0 and f"wrote {out}" in printed, err
        for name in ("page.html", "cached.html"):
            assert fs.cat(f"bkt/{name}").startswith(b"<!doctype html>")


def test_output_paths_and_the_seed_are_refused_naming_their_flag(pixel_dataset, tmp_path,
                                                                 capsys):
    """--seed -1 is --seed's error, not --report's; an empty --report, a folder, or a
    folder that is not there (inspect makes none) are refused in one line, exit 2."""
    def refused(*flags) -> str:
        code, _, err = inspect_run(capsys, pixel_dataset, *flags)
        assert code == 2 and "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    page = tmp_path / "x.html"
    line = refused("--seed", "-1", "--report", page)
    assert line.endswith("argument --seed: must be from 0 to 2**63 - 1, got -1"), line
    assert "--seed: must be from" in refused("--seed", str(2**63), "--report", page)
    assert refused("--report", "").endswith("--report: an empty path: name a file")
    missing = tmp_path / "missing"
    for flags in (["--report", missing / "x.html"], ["--preview", "1", "--out", missing / "p.png"]):
        line = refused(*flags)
        assert line.endswith(f"{flags[-2]}: {missing} is not a folder (inspect makes none): "
                             "create it first"), line
    (tmp_path / "folder").mkdir()
    assert refused("--report", tmp_path / "folder").endswith(
        f"--report: {tmp_path / 'folder'} is a directory: name a file")
    assert sorted(os.listdir(tmp_path)) == ["folder"]


@pytest.mark.parametrize("kind", ["videos", "failures", "bad_frames", "dataset_info"])
def test_a_fifo_for_a_side_file_is_one_line_never_a_hang(pixel_dataset, tmp_path, kind):
    """A FIFO's open waits for a writer forever: side files are looked at as the shards
    are, before they are opened. The summary, --verify and --report each say so."""
    copy = tmp_path / "ds"
    shutil.copytree(pixel_dataset, copy)
    fifo = copy / "dataset_info.json" if kind == "dataset_info" else sidecar(copy, kind)
    fifo.unlink()
    os.mkfifo(fifo)
    page = tmp_path / "page.html"
    result = command("readers.inspect", copy, "--verify", "--report", page, timeout=120)
    assert "Traceback" not in result.stderr and f"wrote {page}" in result.stdout, result.stderr
    said = result.stdout + result.stderr + html.unescape(page.read_text())
    assert f"{fifo}, which dataset.json lists, is a FIFO, not a regular file" in said
    assert result.returncode == (1 if kind in ("videos", "dataset_info") else 0)


def test_side_files_are_read_within_their_bounds(pixel_dataset, tmp_path, capsys):
    """A side file's line is read up to videos_file.MAX_LINE bytes, however long it is;
    one read whole (dataset_info.json, by --verify) up to its bound."""
    copy = tmp_path / "ds"
    shutil.copytree(pixel_dataset, copy)
    failures = sidecar(copy, "failures")
    failures.write_bytes(b"x" * (2 * videos_file.MAX_LINE))    # no newline in 2 MiB
    code, out, _ = inspect_run(capsys, copy)
    assert code == 0 and (f"(its reasons cannot be read: {failures.name}: line 1 is longer "
                          f"than {videos_file.MAX_LINE:,} bytes)") in out
    with pytest.raises(ValueError, match="dataset_info.json is larger than 100 bytes"):
        DatasetFiles(str(copy)).read_whole("dataset_info.json", limit=100)
    assert len(DatasetFiles(str(copy)).read_whole("dataset_info.json")) == os.path.getsize(
        copy / "dataset_info.json")
