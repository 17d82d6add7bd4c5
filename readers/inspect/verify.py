"""`readers.inspect --verify`: every record of every shard read and checked against
dataset.json (framing, CRCs, the features' layout and shapes, the mask's values, each
window once and each video in one split), the offset indexes, the window tables (every
record's video and valid frames), the TFDS files and the videos file. Numpy and fsspec
only (the light install); `verify` is what tests and the report call.
"""
from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import os
from typing import Any, BinaryIO, NamedTuple, Optional, Sequence, Union

import google_crc32c
import numpy as np

from readers import format as data_format
from readers.file_checks import DatasetChanged, NotAFile, gone_error
from readers.files import MAX_WHOLE, DatasetFiles
from readers.format import tfrecord, wire
from readers.shards import read_at_most


class _Records(NamedTuple):
    """What --verify keeps of a shard's records (those read up to the first that is lost
    or does not parse) besides their problems."""
    keys: list[tuple[bytes, int]]        # (video_id, start) of each
    valid: list[int]                     # the count of its valid frames
    ends: list[int]                      # where each one's frame ends, from 0 (uncompressed)
    metadata: dict[bytes, np.ndarray]    # each video's metadata (where there is any)


def _verify_shard(path: str, shard: data_format.Shard, dataset: data_format.DatasetSpec
                  ) -> tuple[list[str], _Records]:
    """Problems of one shard, and what its records hold; DatasetChanged when it is gone
    because the dataset was rewritten. A shard too small for its records at
    dataset.json's shapes is not parsed by them. Each record is read in turn (its CRCs
    checked) and parsed to the spec as readers.numpy does, images decoded."""
    files = DatasetFiles(path)
    problem = _unreadable(path, files, shard, dataset)
    if problem:
        return [problem], _Records([], [], [0], {})
    problems, records = _read_records(files, shard, dataset)
    keys, valid, ends = records.keys, records.valid, records.ends
    if len(keys) != shard.examples and not problems:
        problems.append(f"{shard.file}: {len(keys)} records, dataset.json says "
                        f"{shard.examples}")
    if shard.index and not problems:
        problems += _verify_index(path, files, shard, dataset)
    if shard.table and not problems:
        problems += _verify_table(path, files, shard, dataset, [video for video, _ in keys],
                                  valid, ends)
    return problems, records


def _unreadable(path: str, files: DatasetFiles, shard: data_format.Shard,
                dataset: data_format.DatasetSpec) -> Optional[str]:
    """The problem that keeps a shard from being read, or None (or ""): missing
    (DatasetChanged when the dataset was rewritten), it or its index no regular file, or
    too small for its records at dataset.json's shapes."""
    if not files.exists(shard.file):
        return _missing(path, dataset, shard.file)
    problem = _not_a_file(files, shard.file) or (shard.index and _not_a_file(files, shard.index))
    if problem:
        return problem
    try:
        dataset.check_shard(shard, files.size(shard.file))
    except data_format.SpecError as e:
        return str(e)
    return None


def _read_records(files: DatasetFiles, shard: data_format.Shard,
                  dataset: data_format.DatasetSpec) -> tuple[list[str], _Records]:
    """The problems of a shard's records, read in turn up to the first that is lost or
    does not parse (a window whose metadata is not its video's other windows' among
    them), and what those read hold."""
    compression = None if dataset.compression == "none" else dataset.compression
    problems: list[str] = []
    records = _Records([], [], [0], {})
    keys, valid, ends, metadata = records
    with files.open(shard.file, compression=compression) as f:
        while True:
            count = len(keys)
            record = _next_record(f)
            if record is None:
                break
            if isinstance(record, tfrecord.Lost):
                problems.append(f"{shard.file}: corrupt after {count} records ({record.reason})")
                break
            try:
                values = _parsed(dataset.features, record)
            except (ValueError, OSError) as e:   # OSError: Pillow's, for a bad image
                problems.append(f"{shard.file}: record #{count} does not parse to the "
                                f"spec: {str(e).splitlines()[0][:200]}")
                break
            problems += _value_problems(shard.file, count, values)
            keys.append((values["video_id"], int(values["start"])))
            valid.append(int(np.count_nonzero(values["mask"])))
            ends.append(ends[-1] + len(record) + tfrecord.FRAME_OVERHEAD)
            if "metadata" in values:
                problems += _metadata_problems(shard.file, count, metadata,
                                               values["video_id"], values["metadata"])
    return problems, records


def _metadata_problems(file: str, number: int, metadata: dict[bytes, np.ndarray],
                       video_id: bytes, values: Any) -> list[str]:
    """The problem of record #`number`, of `video_id`, whose metadata `values` is not
    what `metadata` holds of its video (kept: the first of its windows')."""
    found = np.asarray(values, np.float32).ravel()
    first = metadata.setdefault(video_id, found)
    if np.array_equal(first, found, equal_nan=True):
        return []
    return [f"{file}: record #{number} of video {video_id.decode(errors='replace')!r} "
            "carries other metadata than its video's window before it"]


def _next_record(f: BinaryIO) -> Union[bytes, tfrecord.Lost, None]:
    """The next record of an open shard: None at its end, Lost where it is cut or
    damaged (a gzip stream's too)."""
    try:
        return tfrecord.read_frame(f)
    except (OSError, EOFError) as e:     # a gzip stream that is cut or damaged
        return tfrecord.Lost(str(e), 1, 0, True)


def _value_problems(file: str, number: int, values: dict) -> list[str]:
    """The problems of record #`number`'s values: masks other than 0 or 1, a negative
    start."""
    problems = []
    if not np.isin(values["mask"], (0, 1)).all():
        problems.append(f"{file}: masks other than 0 or 1 in record #{number}")
    if values["start"] < 0:
        problems.append(f"{file}: a negative start in record #{number}")
    return problems


def _parsed(features: Sequence[data_format.FeatureSpec], record: bytes) -> dict:
    """A record's values, each put in a row of its feature's column as readers.numpy
    puts it (so images are decoded and every shape checked)."""
    values = wire.example_values(list(features), record)
    for f in features:
        column = np.empty((1, *f.shape), f.codec.column_dtype)
        f.codec.store(column, 0, values[f.name])
    return values


def _not_a_file(files: DatasetFiles, name: str) -> Optional[str]:
    """The problem of a file that cannot be opened as one (check_regular's), or None."""
    try:
        files.check_regular(name)
    except NotAFile as e:
        return str(e)
    return None


def _missing(path: str, dataset: data_format.DatasetSpec, file: str) -> str:
    """The problem of a file dataset.json lists that is not there; DatasetChanged when
    dataset.json now names another run (or is gone): then nothing else is worth saying."""
    error = gone_error(path, dataset.run_id, file)
    if isinstance(error, DatasetChanged):
        raise error
    return f"{file}: missing"


def _side_file(path: str, files: DatasetFiles, dataset: data_format.DatasetSpec, name: str,
               largest: int) -> bytes:
    """The bytes of a shard's side file `name`, at most `largest` of them. ValueError:
    its problem (missing, larger, not a file); DatasetChanged: dataset.json now names
    another run."""
    if not files.exists(name):
        raise ValueError(_missing(path, dataset, name))
    (data,) = read_at_most([os.path.join(path, name)], [largest])
    return data


def _verify_index(path: str, files: DatasetFiles, shard: data_format.Shard,
                  dataset: data_format.DatasetSpec) -> list[str]:
    """The offset index beside a shard (readers.format.index), against the shard."""
    name = shard.index
    if name is None:   # a shard without one: nothing to check (the caller skips it)
        return []
    try:
        data = _side_file(path, files, dataset, name, data_format.index.largest(
            shard.examples, dataset.format_version))
        offsets = data_format.index.decode(data, name, shard.examples,
                                           dataset.format_version,
                                           files.size(shard.file), dataset.min_frame_bytes)
    except ValueError as e:
        return [str(e)]
    with files.open(shard.file) as f:
        try:
            data_format.index.verify(name, offsets, f)
        except ValueError as e:
            return [str(e)]
    return []


def _verify_table(path: str, files: DatasetFiles, shard: data_format.Shard,
                  dataset: data_format.DatasetSpec, video_ids: list[bytes], valid: list[int],
                  ends: list[int]) -> list[str]:
    """The window table beside a shard (readers.format.window_table) against the
    shard's records as parsed: the index its records' frames make (where each ends),
    each record's video (its id's hash) and valid frames."""
    name = shard.table
    if name is None:   # a shard without one: nothing to check (the caller skips it)
        return []
    try:
        data = _side_file(path, files, dataset, name, data_format.window_table.largest(shard))
        table = data_format.window_table.decode(data, shard, dataset.window.length)
    except ValueError as e:   # NotAFile too
        return [str(e)]
    made = google_crc32c.value(data_format.index.encode(ends))
    if table.index_crc32c not in (None, made):
        return [f"{name}: gives its shard an index of CRC {table.index_crc32c:08x}, the "
                f"records of {shard.file} make one of CRC {made:08x}: the shard or its "
                "table was replaced"]
    videos, counts = table.videos, table.valid
    expected = data_format.window_table.video_hashes(
        v.decode("utf-8", "surrogateescape") for v in video_ids)
    wrong = np.flatnonzero((videos != expected) | (counts != np.asarray(valid, np.int64)))
    if not wrong.size:
        return []
    i = int(wrong[0])
    return [f"{name}: record {i} is of video {video_ids[i].decode(errors='replace')!r} "
            f"with {valid[i]} valid frames; the table says "
            f"{'that video' if videos[i] == expected[i] else 'another video'} with "
            f"{int(counts[i])} ({wrong.size} records differ)"]


def _same_metadata(given: Any, carried: Optional[np.ndarray]) -> bool:
    """Whether a row's `metadata` (null: NaN) is, as float32, what the video's windows
    carry (None: they carry none)."""
    try:
        values = np.array([np.nan if v is None else v for v in given], np.float32)
    except (TypeError, ValueError):   # no list of numbers
        return False
    return np.array_equal(values, np.zeros(0, np.float32) if carried is None else carried,
                          equal_nan=True)


def _verify_tfds_files(path: str, dataset: data_format.DatasetSpec) -> list[str]:
    """The TFDS files dataset.json lists (dataset_info.json; features.json too before
    format 5; none before there were any): each must be the bytes
    readers.format.tfds_info makes from dataset.json, else TFDS reads other shard
    lengths or features than ours."""
    listed = [name for name in data_format.TFDS_FILES if name in dataset.files]
    try:
        expected = data_format.tfds_info.files(dataset) if listed else {}
    except ValueError as e:   # shards not named as TFDS opens them
        return [f"{listed[0]}: {e}"]
    problems, files = [], DatasetFiles(path)
    for name in listed:
        if name not in expected:
            problems.append(f"{name}: listed, but a {dataset.compression} dataset has none "
                            "(TFDS cannot read its shards)")
        elif not files.exists(name):
            problems.append(_missing(path, dataset, name))
        else:
            problems += _tfds_file_problem(files, name, expected[name])
    return problems


def _tfds_file_problem(files: DatasetFiles, name: str, expected: bytes) -> list[str]:
    """A TFDS file against the bytes dataset.json gives; read whole, so only as large as
    any can be (and a FIFO or a directory there is told, never opened)."""
    try:
        found = files.read_whole(name, max(MAX_WHOLE, len(expected)))
    except ValueError as e:   # NotAFile, or larger than the bound
        return [str(e)]
    if found != expected and not _a_whole_earlier_view(files, name, found):
        return [f"{name}: not what dataset.json gives, nor the view of an earlier commit "
                "whose shards are all there (regenerate it with "
                "readers.format.tfds_info.files)"]
    return []


def _a_whole_earlier_view(files: "DatasetFiles", name: str, found: bytes) -> bool:
    """Whether a dataset_info.json that is not dataset.json's is the one of the commit
    before, whole: every shard it names there with the records it says (its index's
    lines). A kill between a commit and this file's rewrite leaves it so: TFDS then
    reads that dataset, whole, until the next run in the directory rewrites the file."""
    if name != data_format.DATASET_INFO_JSON:
        return False
    try:
        shards = data_format.tfds_info.shards_of(json.loads(found))
    except ValueError:
        return False
    for shard, records in shards:
        index = data_format.index_name(shard)
        if not (files.exists(shard) and files.exists(index)):
            return False
        try:
            lines = data_format.videos_file.lines(functools.partial(files.open, index))
            if sum(1 for _ in lines) != records:
                return False
        except ValueError:   # not a regular file, or a line longer than any index's
            return False
    return True


def _verify_videos_file(path: str, dataset: data_format.DatasetSpec) -> list[str]:
    """The videos file dataset.json names, against it (readers/format/videos_file.py)."""
    name = dataset.sidecars.get("videos")
    files = DatasetFiles(path)
    if name is None:
        return []
    if not files.exists(name):
        return [_missing(path, dataset, name)]
    not_a_file = _not_a_file(files, name)
    if not_a_file:
        return [not_a_file]
    try:
        data_format.videos_file.check(lambda: files.open(name), dataset)
    except data_format.videos_file.VideosFileError as e:
        return [f"{name}: {e}"]
    return []


def verify(path: str, dataset: data_format.DatasetSpec, workers: Optional[int] = None) -> list[str]:
    """Read every record of every shard in parallel, and check the TFDS files; return
    the problems found. DatasetChanged when the dataset is rewritten or deleted
    meanwhile."""
    jobs = [(name, shard) for name, split in dataset.splits.items() for shard in split.shards]
    problems: list[str] = _verify_tfds_files(path, dataset) + _verify_videos_file(path, dataset)
    split_of: dict[bytes, str] = {}
    windows_of: collections.Counter[bytes] = collections.Counter()
    metadata_of: dict[bytes, np.ndarray] = {}
    seen: set[tuple[str, bytes, int]] = set()
    with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count()) as pool:
        results = pool.map(lambda job: _verify_shard(path, job[1], dataset), jobs)
        for (name, shard), (shard_problems, records) in zip(jobs, results, strict=True):
            problems += shard_problems
            for video_id, values in records.metadata.items():
                problems += _metadata_problems(shard.file, 0, metadata_of, video_id, values)
            for video_id, start in records.keys:
                if (name, video_id, start) in seen:
                    problems.append(f"{shard.file}: window ({video_id.decode()!r}, {start}) "
                                    "appears twice")   # repr: its bidi marks shown, not obeyed
                seen.add((name, video_id, start))
                windows_of[video_id] += 1
                if split_of.setdefault(video_id, name) != name:
                    problems.append(f"video {video_id.decode()!r} is in splits "
                                    f"{split_of[video_id]} and {name}")
    if not problems:
        problems += _videos_file_against_records(path, dataset, split_of, windows_of,
                                                 metadata_of)
    return problems


def _videos_file_against_records(path: str, dataset: data_format.DatasetSpec,
                                 split_of: dict[bytes, str],
                                 windows_of: collections.Counter[bytes],
                                 metadata_of: dict[bytes, np.ndarray]) -> list[str]:
    """The videos file's rows against the windows the shards hold: each video with
    windows in its split, with as many as its row says and (rows of format 7 on) the
    metadata they carry, and no video of the shards without a row (a selection by video
    or by metadata finds its windows through its row)."""
    name = dataset.sidecars.get("videos")
    if name is None:
        return []
    files = DatasetFiles(path)
    problems, listed = [], set()
    for row in data_format.videos_file.rows(lambda: files.open(name), dataset.splits):
        video_id = row["video_id"].encode("utf-8", "surrogateescape")
        listed.add(video_id)
        held = (split_of.get(video_id, row["split"]), windows_of[video_id])
        if held != (row["split"], row["windows"]):
            problems.append(f"{name}: video {row['video_id']!r} has {row['windows']} windows "
                            f"in split {row['split']!r} by its row, the shards hold "
                            f"{held[1]} in split {held[0]!r}")
        elif held[1] and "metadata" in row and not _same_metadata(row["metadata"],
                                                                  metadata_of.get(video_id)):
            problems.append(f"{name}: video {row['video_id']!r} has metadata "
                            f"{row['metadata']} by its row, not what its windows carry")
    if len(problems) > 1:
        problems[1:] = [f"{name}: {len(problems) - 1} more rows differ from the shards"]
    unlisted = [video for video in windows_of if video not in listed]
    if unlisted:
        problems.append(f"{name}: no row for video {unlisted[0].decode(errors='replace')!r}, "
                        f"whose windows the shards hold ({len(unlisted)} such videos)")
    return problems
