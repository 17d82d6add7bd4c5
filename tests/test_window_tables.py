"""The window tables a selection reads (readers.format.window_table): a dataset without
them reads whole and refuses a selection in one line; a damaged table, or one that is
not its shard's, is one line from both readers and --verify finds it; format 6's tables
still select; the format round-trips; on GCS a selection reads the tables and no shard.
Selections themselves: test_select.py."""
import concurrent.futures
import dataclasses
import functools
import json
import os
import re
import shutil
import struct

import fire_story as story
import gcs_emulator
import google_crc32c
import numpy as np
import pytest
from helpers import (
    assert_verified,
    every_window,
    run_job,
    videos_by_id,
    window_keys,
)

import readers
from readers.format import FORMAT_VERSION, Shard, index, window_table
from readers.format.names import without_run_id
from readers.numpy import Select, WindowSource


def _as_format_5(path, tmp_path, name: str = "old") -> str:
    """A copy of a dataset as format 5 wrote it: no window tables."""
    copy = shutil.copytree(path, tmp_path / name)
    meta = json.loads((copy / "dataset.json").read_text())
    meta["format_version"] = 5
    for generation in meta["generations"]:
        del generation["format_version"]
    for split in meta["splits"].values():
        for shard in split["shards"]:
            del shard["table_crc32c"]
            os.remove(copy / shard.pop("table"))
    meta["files"] = [f for f in meta["files"] if not f.endswith(".table")]
    (copy / "dataset.json").write_text(json.dumps(meta))
    return str(copy)


def test_a_dataset_without_tables_reads_whole_and_refuses_a_selection_in_one_line(
        kinds, tmp_path):
    old = _as_format_5(kinds["latent"], tmp_path)
    assert len(WindowSource(old, "train")) == len(WindowSource(kinds["latent"], "train"))
    assert next(iter(readers.make_dataset(old, "train", 2)))["window"].shape[0] == 2
    assert_verified(old)
    for read in (lambda: WindowSource(old, "train", select=Select(min_valid_frames=1)),
                 lambda: readers.make_dataset(old, "train", 2, select=Select(videos=[]))):
        with pytest.raises(ValueError) as refused:
            read()
        message = str(refused.value)
        assert message == (
            f"{old} is a dataset of format 5, which has no window tables, so select= cannot "
            "choose its windows by video, valid frames or metadata (it reads whole without "
            f"select=): rebuild it with --overwrite by this job (format {FORMAT_VERSION} writes "
            "them) to select")


@pytest.mark.slow
def test_an_append_onto_a_dataset_without_tables_refuses_selection_for_the_whole_split(
        tmp_path):
    from input_files import random_videos, write_videos

    rng = np.random.default_rng(8)
    flags = ["--window", "4", "--stride", "2", "--append"]
    write_videos(str(tmp_path / "R" / "day1"), random_videos(rng, 4, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), tmp_path / "built", *flags)
    old = _as_format_5(tmp_path / "built", tmp_path, "out")
    write_videos(str(tmp_path / "R" / "day2"), random_videos(rng, 3, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), old, *flags)   # verified: the new tables too
    spec = readers.load_spec(old)
    shards = spec.splits["train"].shards
    assert spec.format_version == FORMAT_VERSION and len(spec.generations) == 2
    assert [s.table is not None for s in shards] == [False, True]
    with pytest.raises(ValueError, match=rf"split 'train' of {old} has 1 of its 2 shards "
                                         r"without a window table .*run [0-9a-f]{12}\), so "
                                         "select= cannot choose"):
        WindowSource(old, "train", select=Select(min_valid_frames=2))
    assert len(WindowSource(old, "train")) == spec.splits["train"].windows


def _table_of(copy, shard, videos, valid) -> bytes:
    """A sound table of `shard` (its index's CRC as the job gives it) holding `videos`
    and `valid`."""
    return window_table.encode(videos, valid, shard.file, (copy / shard.index).read_bytes())


def _listing(copy, shard, table: bytes) -> None:
    """dataset.json of `copy` made to give `shard` the CRC of `table`."""
    meta = json.loads((copy / "dataset.json").read_text())
    entry = next(s for s in meta["splits"]["train"]["shards"] if s["file"] == shard.file)
    entry["table_crc32c"] = window_table.crc32c(table)
    (copy / "dataset.json").write_text(json.dumps(meta))


def test_a_damaged_table_is_one_line_naming_it_and_verify_finds_it(fire, tmp_path):
    copy = shutil.copytree(fire, tmp_path / "copy")
    shard = readers.load_spec(str(copy)).splits["train"].shards[1]
    data = bytearray((copy / shard.table).read_bytes())
    data[-1] ^= 1                                    # a valid count changed: the CRC fails
    (copy / shard.table).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"^{shard.table}: fails its CRC: it is damaged$"):
        WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    from readers.inspect.verify import verify
    assert verify(str(copy), readers.load_spec(str(copy))) == [
        f"{shard.table}: fails its CRC: it is damaged"]
    # a sound table, listed in dataset.json, whose entries are not its records': verify
    # compares them all
    with open(os.path.join(fire, shard.table), "rb") as f:
        table = window_table.decode(f.read(), shard, story.WINDOW)
    videos = table.videos.copy()
    videos[0] = window_table.video_hash("nobody")
    data = _table_of(copy, shard, videos, table.valid)
    (copy / shard.table).write_bytes(data)
    _listing(copy, shard, data)
    (problem,) = verify(str(copy), readers.load_spec(str(copy)))
    assert problem.startswith(f"{shard.table}: record 0 is of video ")
    assert "the table says another video with" in problem and "(1 records differ)" in problem
    # one made for other records (the index it names): told by verify alone
    other = readers.load_spec(str(copy)).splits["train"].shards[0]
    data = window_table.encode(table.videos, table.valid, shard.file,
                               (copy / other.index).read_bytes())
    (copy / shard.table).write_bytes(data)
    _listing(copy, shard, data)
    WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    (problem,) = verify(str(copy), readers.load_spec(str(copy)))
    assert re.fullmatch(rf"{shard.table}: gives its shard an index of CRC [0-9a-f]{{8}}, the "
                        rf"records of {shard.file} make one of CRC [0-9a-f]{{8}}: the shard or "
                        "its table was replaced", problem), problem


def _same_length_pair(path) -> tuple:
    shards = readers.load_spec(path).splits["train"].shards
    return next((a, b) for a in shards for b in shards
                if a is not b and a.examples == b.examples)


def _swapped(copy, shard, other) -> str:
    a, b = (copy / shard.table).read_bytes(), (copy / other.table).read_bytes()
    (copy / shard.table).write_bytes(b)
    (copy / other.table).write_bytes(a)
    return (rf"{shard.table}: the table of shard '{without_run_id(other.file)}', not of "
            rf"{shard.file}")


def _recounted(copy, shard, other) -> str:
    """Its valid counts changed and its CRC made anew: a sound table of its shard, but
    not the one dataset.json lists."""
    table = window_table.decode((copy / shard.table).read_bytes(), shard, story.WINDOW)
    (copy / shard.table).write_bytes(_table_of(copy, shard, table.videos,
                                               np.full_like(table.valid, story.WINDOW)))
    return (rf"{shard.table}: not the table dataset.json gives its shard \(its CRC is "
            r"[0-9a-f]{8}, dataset.json says [0-9a-f]{8}\)")


def _fifo(copy, shard, other) -> str:
    os.remove(copy / shard.table)
    os.mkfifo(copy / shard.table)
    return rf"{copy / shard.table}, which dataset.json lists, is a FIFO, not a regular file"


def _device(copy, shard, other) -> str:
    os.remove(copy / shard.table)
    os.symlink("/dev/zero", copy / shard.table)
    return (rf"{copy / shard.table}, which dataset.json lists, is a character device, not a "
            "regular file")


def _directory(copy, shard, other) -> str:
    os.remove(copy / shard.table)
    os.mkdir(copy / shard.table)
    return rf"{copy / shard.table}, which dataset.json lists, is a directory, not a regular"


def _sparse(copy, shard, other) -> str:
    with open(copy / shard.table, "r+b") as f:
        f.truncate(8 << 30)
    return (rf"{shard.table}: 8,589,934,592 bytes, where its entry in dataset.json allows "
            rf"{window_table.largest(shard):,} at most: the dataset is damaged")


@pytest.mark.parametrize("plant", [_swapped, _recounted, _fifo, _device, _directory, _sparse],
                         ids=lambda plant: plant.__name__.strip("_"))
def test_a_table_that_is_not_its_shards_is_refused_in_one_line_by_both_readers(
        fire, tmp_path, plant):
    """Tables of the same length swapped, or edited with their CRC made anew, chose
    another video's windows; a FIFO hung, /dev/zero or a sparse file was read without
    bound. Each is now one line naming the table, before a window is read, and
    --verify says the same."""
    copy = shutil.copytree(fire, tmp_path / "copy")
    shard, other = _same_length_pair(str(copy))
    needle = plant(copy, shard, other)
    opens = {"numpy": lambda: WindowSource(str(copy), "train", select=Select(videos=["exp1/run0"])),
             "tf.data": lambda: readers.make_dataset(str(copy), "train", 1,
                                                     select=Select(min_valid_frames=8))}
    for reader, open_ in opens.items():
        with concurrent.futures.ThreadPoolExecutor(1) as pool:   # a hang fails, not blocks
            running = pool.submit(open_)
            try:
                error = running.exception(60)
            except concurrent.futures.TimeoutError:
                with open(os.open(copy / shard.table, os.O_WRONLY | os.O_NONBLOCK), "wb"):
                    pass                                           # the reader's open returns
                pytest.fail(f"{reader} waits on {shard.table}")
        assert isinstance(error, ValueError) and re.search(needle, str(error)), (reader, error)
        assert "\n" not in str(error)
    from readers.inspect.verify import verify
    problems = verify(str(copy), readers.load_spec(str(copy)))
    assert any(re.search(needle, problem) for problem in problems), problems


def test_a_dataset_of_format_6_selects_by_its_tables_without_owners(fire, tmp_path):
    """Format 6 wrote tables that name no shard, and dataset.json gave no CRC of them:
    such a dataset still selects (and --verify passes it); a table of either format in
    the other's place is refused."""
    copy = _as_format_6(shutil.copytree(fire, tmp_path / "copy"))
    spec = readers.load_spec(str(copy))
    select = story.STORY
    assert window_keys(WindowSource(str(copy), "train", select=select).read_batch(slice(None))) == (
        window_keys(WindowSource(fire, "train", select=select).read_batch(slice(None))))
    assert_verified(str(copy))
    shard = spec.splits["train"].shards[0]
    old_table = (copy / shard.table).read_bytes()
    shutil.copy(os.path.join(fire, shard.table), copy / shard.table)
    with pytest.raises(ValueError, match=f"^{shard.table}: a table of format 7, where "
                                         "dataset.json gives no CRC for it$"):
        WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    newer = shutil.copytree(fire, tmp_path / "newer")
    (newer / shard.table).write_bytes(old_table)
    with pytest.raises(ValueError, match=f"^{shard.table}: a table of format 6, where "
                                         "dataset.json gives the CRC of one of format 7$"):
        WindowSource(str(newer), "train", select=select)


def _as_format_6(copy):
    """`copy`, a dataset of format 7, made as format 6 wrote it: tables without an owner,
    no CRC of them in dataset.json, generations without their format, rows of the videos
    file without metadata and fields."""
    name = readers.load_spec(str(copy)).sidecars["videos"]
    rows = [{key: value for key, value in json.loads(line).items()
             if key not in ("metadata", "fields")}
            for line in (copy / name).read_text().splitlines()]
    (copy / name).write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    meta = json.loads((copy / "dataset.json").read_text())
    meta["format_version"] = 6
    for generation in meta["generations"]:
        del generation["format_version"]
    spec = readers.load_spec(str(copy))
    for name, split in meta["splits"].items():
        for entry, shard in zip(split["shards"], spec.splits[name].shards, strict=True):
            table = window_table.decode((copy / shard.table).read_bytes(), shard,
                                        spec.window.length)
            del entry["table_crc32c"]
            (copy / shard.table).write_bytes(_format_6_table(table))
    (copy / "dataset.json").write_text(json.dumps(meta))
    return copy


@pytest.mark.slow
def test_an_append_onto_a_dataset_of_format_6_selects_across_both_kinds_of_table(tmp_path):
    from input_files import random_videos, write_videos

    rng = np.random.default_rng(9)
    flags = ["--window", "4", "--stride", "2", "--append", "--num_shards", "2"]
    write_videos(str(tmp_path / "R" / "day1"), random_videos(rng, 4, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), tmp_path / "out", *flags)
    _as_format_6(tmp_path / "out")
    write_videos(str(tmp_path / "R" / "day2"), random_videos(rng, 3, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), tmp_path / "out", *flags)   # verified
    spec = readers.load_spec(str(tmp_path / "out"))
    old, new = spec.generations
    assert (spec.format_version, old.format_version, new.format_version) == (
        FORMAT_VERSION, None, FORMAT_VERSION)
    assert [s.table_crc32c is None for s in spec.splits["train"].shards] == [
        True, True, False, False]
    whole = every_window(str(tmp_path / "out"))
    chosen = sorted(set(whole["video_id"].tolist()))[::2]     # of both generations
    kept = np.isin(whole["video_id"], chosen)
    selected = WindowSource(str(tmp_path / "out"), "train",
                            select=Select(videos=[v.decode() for v in chosen]))
    assert 0 < kept.sum() < len(kept)
    assert window_keys(selected.read_batch(slice(None))) == window_keys({k: v[kept] for k, v in
                                                             whole.items()})
    # the rows of format 6 have no metadata: a `where` that reads it names one in one line
    rows = videos_by_id(str(tmp_path / "out"))
    old = sorted(v for v, row in rows.items() if "metadata" not in row)
    assert len(old) == 4 and all(len(rows[v]["metadata"]) == 4 for v in rows if v not in old)
    first = next(v for v in old if rows[v]["split"] == "train")
    by_recipe = Select(where=lambda row: row["metadata"][0] > 0.5)
    for read in (WindowSource, functools.partial(readers.make_dataset, batch_size=1)):
        with pytest.raises(ValueError) as refused:
            read(str(tmp_path / "out"), "train", select=by_recipe)
        assert str(refused.value) == (
            f"{tmp_path / 'out' / spec.sidecars['videos']}: where test_window_tables."
            "test_an_append_onto_a_dataset_of_format_6_selects_across_both_kinds_of_table."
            "<locals>.<lambda> "
            f"failed on video {first!r} (KeyError: 'metadata'): its row has no metadata and "
            "no fields, as rows written before format 7 have none (--append keeps them as "
            "they were): rebuild the dataset with --overwrite to select by them")


def _format_6_table(table) -> bytes:
    """The bytes format 6 wrote for a table: its header and entries, no owner."""
    width = table.valid.dtype.itemsize
    body = table.videos.astype("<u8").tobytes() + table.valid.astype(f"<u{width}").tobytes()
    return struct.pack("<8sQIB3s", b"VWSTAB01", len(table.videos),
                       google_crc32c.value(body), width, b"\0" * 3) + body


def test_a_shard_without_the_table_its_run_wrote_is_damage_not_an_old_append(fire, tmp_path,
                                                                            capsys):
    """A table's entry removed from dataset.json read as a shard of a run before format
    6, and --verify passed it: it is now refused, naming the shard and its run."""
    copy = shutil.copytree(fire, tmp_path / "copy")
    meta = json.loads((copy / "dataset.json").read_text())
    entry = meta["splits"]["train"]["shards"][2]
    del entry["table"], entry["table_crc32c"]
    (copy / "dataset.json").write_text(json.dumps(meta))
    needle = (f"splits.train.shards[2]: shard {entry['file']} has no window table, which its "
              f"run {meta['run_id']} (format {FORMAT_VERSION}) wrote for each of its shards: "
              "dataset.json is damaged")
    with pytest.raises(readers.format.SpecError) as refused:
        WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    assert str(refused.value).endswith(needle)
    from readers.inspect import command as inspect
    with pytest.raises(SystemExit) as verified:
        inspect.main([str(copy), "--verify"])
    assert verified.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(needle)


def test_verify_holds_the_videos_file_to_the_shards_windows(fire, tmp_path):
    """A video id edited in the videos file passed --verify, and selection failed later."""
    copy = shutil.copytree(fire, tmp_path / "copy")
    name = readers.load_spec(str(copy)).sidecars["videos"]
    text = (copy / name).read_text()
    (copy / name).write_text(text.replace('"exp1/run3"', '"exp1/run9"'))
    from readers.inspect.verify import verify
    assert verify(str(copy), readers.load_spec(str(copy))) == [
        f"{name}: video 'exp1/run9' has {videos_by_id(fire)['exp1/run3']['windows']} windows in "
        "split 'train' by its row, the shards hold 0 in split 'train'",
        f"{name}: no row for video 'exp1/run3', whose windows the shards hold (1 such videos)"]
    # a row's metadata edited: a selection by it would choose other windows
    rows = [json.loads(line) for line in text.splitlines()]
    row = next(r for r in rows if r["video_id"] == "exp1/run3")
    assert row["metadata"] == [1.0, 1.0]        # as the manifest gave them: [v % 2, v % 3 + 1]
    row["metadata"] = [0.0, 1.0]
    (copy / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert verify(str(copy), readers.load_spec(str(copy))) == [
        f"{name}: video 'exp1/run3' has metadata [0.0, 1.0] by its row, not what its "
        "windows carry"]


def test_the_table_format_round_trips_and_refuses_what_it_is_not():
    videos = [window_table.video_hash(f"v{i}") for i in range(5)]
    text = index.encode([0, 10, 20, 30, 40, 50])
    shard = Shard("train-00000-of-00001.tfrecord", 5, table="t")
    for valid in ([0, 1, 16, 3, 16], [300, 0, 5, 65535, 1], [70000, 0, 0, 0, 1]):
        data = window_table.encode(videos, valid, shard.file, text)
        width = {16: 1, 65535: 2, 70000: 4}[max(valid)]
        assert len(data) == 24 + 8 + 32 + 5 * (8 + width) <= window_table.largest(shard)
        listed = dataclasses.replace(shard, table_crc32c=window_table.crc32c(data))
        got = window_table.decode(data, listed, max(valid))
        assert got.videos.tolist() == videos and got.valid.tolist() == valid
        assert got.index_crc32c == google_crc32c.value(text)
    data = window_table.encode(videos, [1, 2, 3, 4, 5], shard.file, text)
    shard = dataclasses.replace(shard, table_crc32c=window_table.crc32c(data))
    for bad, needle in ((data[:20], "20 bytes, too short"), (b"X" + data[1:], "not a window table"),
                        (data + b"\0", "has 109"), (data[:-1], "has 109")):
        with pytest.raises(window_table.TableError, match=needle):
            window_table.decode(bad, shard, 5)
    with pytest.raises(window_table.TableError, match="a table of 5 records, dataset.json "
                                                      "gives its shard 6"):
        window_table.decode(data, dataclasses.replace(shard, examples=6), 5)
    with pytest.raises(window_table.TableError, match="record 4 has 5 valid frames, more "
                                                      "than the window's 4"):
        window_table.decode(data, shard, 4)
    with pytest.raises(window_table.TableError, match="the table of shard 'train-00000-of-"
                                                      "00001.tfrecord', not of val-"):
        window_table.decode(data, dataclasses.replace(shard, file="val-00000-of-00001.tfrecord"),
                            5)
    empty = window_table.encode([], [], shard.file, b"")
    assert window_table.decode(empty, dataclasses.replace(
        shard, examples=0, table_crc32c=window_table.crc32c(empty)), 4).videos.size == 0


@pytest.mark.slow
def test_on_gcs_opening_a_selection_reads_the_tables_and_no_shard(kinds):
    local = kinds["latent"]
    with gcs_emulator.running("bkt"):
        gcs_emulator.upload(local, "bkt/out")
        WindowSource("gs://bkt/out", "train", select=Select(min_valid_frames=4))
        by_valid = gcs_emulator.counts()
        gcs_emulator.reset_counts()
        source = WindowSource("gs://bkt/out", "train", select=Select(
            exclude_videos=[window_keys(every_window(local))[0][0]]))
        by_video = gcs_emulator.counts()
        remote = source[[0, 5, len(source) - 1]]
        gcs_emulator.reset_counts()
        by_recipe = len(WindowSource("gs://bkt/out", "train", select=Select(
            where=lambda row: row["metadata"][0] > 0.5)))
        by_metadata = gcs_emulator.counts()
    shards = readers.load_spec(local).splits["train"].shards
    # dataset.json, then each shard's table (no shard, no index); the videos file too
    # when videos are chosen
    assert by_valid["read"] == 1 + len(shards) and by_valid["bytes_read"] < 20_000, by_valid
    assert by_video["read"] == by_metadata["read"] == 2 + len(shards), by_metadata
    whole = every_window(local)
    assert by_recipe == (whole["metadata"][:, 0] > 0.5).sum() > 0
    here = WindowSource(local, "train", select=Select(
        exclude_videos=[window_keys(every_window(local))[0][0]]))
    assert window_keys(remote) == window_keys(here[[0, 5, len(here) - 1]])
