"""dataset.json's parsed JSON checked, value by value, into DatasetSpec's fields
(`parse`): its structure, every file name in it a plain name of its kind, each feature's
dtype and shape one its encoding holds, and an example no larger than a protobuf can
be; `Bad` names the first value that is not as the job writes it."""
from __future__ import annotations

from typing import Any, Optional

from readers.format.channel_stats import parse_stats
from readers.format.features import MAX_EXAMPLE_BYTES, FeatureSpec, window_features
from readers.format.generations import (
    Generation,
    check_generation_counts,
    check_generations,
    check_tables_owed,
    generations_of,
    parse_generation,
)
from readers.format.json_checks import Bad, at, count, get, shown, typed
from readers.format.names import (
    COMPRESSIONS,
    RUN_ID,
    SIDECAR_KINDS,
    index_name,
    is_dataset_file,
    is_shard_name,
    run_id_of,
    shard_suffix,
    sidecar_name,
    table_name,
)
from readers.format.splits import Shard, SplitInfo
from readers.format.versions import READABLE_VERSIONS
from readers.format.windows import TAIL_POLICIES, Window

_PLAIN_SIDECARS = {kind: f"{kind}.jsonl" for kind in SIDECAR_KINDS}


def parse(d: Any) -> dict:
    """DatasetSpec's fields from dataset.json's parsed JSON; Bad when anything is not
    as the job writes it."""
    version = _format_version(d)
    window = _window(d)
    length = window.length
    features = tuple(_feature(f, at("features", i))
                     for i, f in enumerate(get(d, "features", list, "")))
    _check_features(features, length)
    compression = _compression(d)
    run_id = _run_id(d)
    raw_splits = get(d, "splits", dict, "")
    generations = _generations(d, version)
    run_ids = check_generations(generations, run_id)
    splits = {name: _split(split, at("splits", name), name, compression, run_ids)
              for name, split in raw_splits.items()}
    if generations is None:
        generations = generations_of(splits, run_id, count(d, "failures", "", 0),
                                     get(d, "job_version", str, "", None))
    else:
        check_generation_counts(generations, splits)
    check_tables_owed(generations, splits, run_id, version)
    _check_listed_once(splits)
    files = _files(d)
    sidecars = _sidecars(d, version, run_id, files)
    return dict(window=window, features=features, compression=compression, splits=splits,
                failures=count(d, "failures", "", 0), flags=get(d, "flags", dict, "", {}),
                encoder=get(d, "encoder", dict, "", None), format_version=version,
                run_id=run_id, files=files, job_version=get(d, "job_version", str, "", None),
                input_kind=get(d, "input_kind", str, "", None),
                frame=get(d, "frame", dict, "", {}), labels=get(d, "labels", dict, "", None),
                generations=generations, sidecars=sidecars,
                stats=parse_stats(d.get("stats"), splits, features))


def _format_version(d: Any) -> int:
    """The format version of a top level that must be an object; Bad for one this
    reader does not read."""
    version = typed(d, dict, "the top level").get("format_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise Bad(f"unknown format version {version!r}; this reader reads versions "
                   f"{list(READABLE_VERSIONS)}")
    return version


def _window(d: dict) -> Window:
    """The windows, their length, stride and tail checked."""
    window = get(d, "window", dict, "")
    tail = get(window, "tail", str, "window")
    if tail not in TAIL_POLICIES:
        raise Bad(f"window.tail: {shown(tail)} is none of {', '.join(TAIL_POLICIES)}")
    return Window(count(window, "length", "window", least=1),
                  count(window, "stride", "window", least=1), tail)


def _compression(d: dict) -> str:
    compression = get(d, "compression", str, "")
    if compression not in COMPRESSIONS:
        raise Bad(f"compression: {compression!r} is not one of {list(COMPRESSIONS)}")
    return compression


def _run_id(d: dict) -> Optional[str]:
    run_id = get(d, "run_id", str, "", None)
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise Bad(f"run_id: {run_id!r} is not a run id (12 hex digits)")
    return run_id


def _generations(d: dict, version: int) -> Optional[tuple[Generation, ...]]:
    """The generations dataset.json lists (since version 4), each checked; None
    before."""
    if version < 4:
        return None
    return tuple(parse_generation(g, at("generations", i))
                 for i, g in enumerate(get(d, "generations", list, "")))


def _check_listed_once(splits: dict[str, SplitInfo]) -> None:
    """Bad for a shard, index or window table that the splits list twice."""
    listed = [name for split in splits.values() for shard in split.shards
              for name in (shard.file, shard.index, shard.table) if name]
    if len(set(listed)) < len(listed):
        twice = next(name for name in listed if listed.count(name) > 1)
        raise Bad(f"splits: {twice!r} is listed twice")


def _files(d: dict) -> tuple[str, ...]:
    """The files dataset.json lists (none before they were listed); Bad for a name that
    is not the plain name of one of the dataset's files."""
    files = tuple(get(d, "files", list, "", []))
    for i, name in enumerate(files):
        if not is_dataset_file(name):
            raise Bad(f"{at('files', i)}: {shown(name)} is not the plain name of "
                       "a shard, an index or a side file")
    return files


def _sidecars(d: dict, version: int, run_id: Optional[str], files: tuple[str, ...]) -> dict:
    """{kind: name} of the sidecars dataset.json names: since version 5 each `KIND_file`
    is None or `KIND-RUNID.jsonl` of its run, listed among its files; before, the plain
    names it lists (all of them, for a dataset.json that lists no files)."""
    if version < 5:
        return {kind: name for kind, name in _PLAIN_SIDECARS.items()
                if name in files or not files}
    sidecars = {}
    for kind in SIDECAR_KINDS:
        name = get(d, f"{kind}_file", str, "", None)
        if name is None:
            continue
        expected = run_id and sidecar_name(kind, run_id)
        if name != expected or name not in files:
            raise Bad(f"{kind}_file: {shown(name)} is not {expected!r}, the {kind} sidecar "
                       "of dataset.json's run, listed in its files")
        sidecars[kind] = name
    return sidecars


def _feature(d: Any, where: str) -> FeatureSpec:
    typed(d, dict, where)
    shape = get(d, "shape", list, where)
    for i, dim in enumerate(shape):
        count({"dim": dim}, "dim", at(at(where, "shape"), i))
    try:
        return FeatureSpec(get(d, "name", str, where), tuple(shape),
                           get(d, "dtype", str, where), get(d, "encoding", str, where))
    except ValueError as e:
        raise Bad(f"{where}: {e}") from None


def _check_features(features: tuple[FeatureSpec, ...], length: int) -> None:
    """The features of a window example (`window_features`), their names once each, and
    an example no larger than a protobuf message can be."""
    by_name = {f.name: f for f in features}
    if len(by_name) < len(features):
        raise Bad(f"features: {[f.name for f in features]} name one feature twice")
    window = by_name.get("window")
    if window is None or window.shape[:1] != (length,):
        raise Bad(f"features: no 'window' feature of length {length} (window.length)")
    for expected in window_features(window):
        if by_name.get(expected.name) != expected:
            raise Bad(f"features: no {expected.name!r} of shape {list(expected.shape)}, "
                       f"{expected.dtype}, {expected.encoding}")
    least = sum(f.codec.min_bytes() for f in features)
    if least > MAX_EXAMPLE_BYTES:
        big = max(features, key=lambda f: f.codec.min_bytes())
        raise Bad(f"features: an example takes at least {least:,} bytes ({big.name!r}, "
                   f"{list(big.shape)} {big.dtype}, at least {big.codec.min_bytes():,}), more "
                   f"than a tf.train.Example can hold ({MAX_EXAMPLE_BYTES:,})")


def _split(d: Any, where: str, name: str, compression: str,
           run_ids: tuple[Optional[str], ...]) -> SplitInfo:
    typed(d, dict, where)
    shards = tuple(_shard(shard, at(at(where, "shards"), i), name, compression, run_ids)
                   for i, shard in enumerate(get(d, "shards", list, where)))
    windows = count(d, "windows", where)
    if sum(shard.examples for shard in shards) != windows:
        raise Bad(f"{where}: {windows} windows, its shards hold "
                   f"{sum(shard.examples for shard in shards)}")
    return SplitInfo(count(d, "videos", where), windows, count(d, "skipped_short", where),
                     shards, count(d, "bad_frames", where, 0), count(d, "frames", where, 0))


def _shard(d: Any, where: str, split: str, compression: str,
           run_ids: tuple[Optional[str], ...]) -> Shard:
    """A shard entry; its file and index plain names of their kind (so `../x` or an
    absolute path is refused), of this split, compression and one of the dataset's runs
    (`run_ids`: its generations')."""
    typed(d, dict, where)
    file = _shard_file(d, where, split, compression, run_ids)
    index = get(d, "index", str, where, None)
    if index is not None and compression != "none":
        raise Bad(f"{at(where, 'index')}: {shown(index)}, where a gzip shard has none")
    if index is not None and index != index_name(file):
        raise Bad(f"{at(where, 'index')}: {shown(index)} is not the plain name of its "
                   f"shard's index, {index_name(file)!r}")
    table = get(d, "table", str, where, None)
    if table is not None and table != table_name(file):
        raise Bad(f"{at(where, 'table')}: {shown(table)} is not the plain name of its "
                   f"shard's window table, {table_name(file)!r}")
    crc = count(d, "table_crc32c", where, None)
    if crc is not None and (table is None or crc >= 1 << 32):
        raise Bad(f"{at(where, 'table_crc32c')}: {crc}, " + (
            "where the shard has no window table" if table is None else "not a CRC32C"))
    return Shard(file, count(d, "examples", where), index, count(d, "bytes", where, None),
                 table, crc)


def _shard_file(d: dict, where: str, split: str, compression: str,
                run_ids: tuple[Optional[str], ...]) -> str:
    """A shard entry's file: Bad unless it is the plain name of a shard of this split
    and compression, of one of the dataset's runs."""
    file = get(d, "file", str, where)
    if not is_shard_name(file, split) or not file.endswith(shard_suffix(compression)):
        raise Bad(f"{at(where, 'file')}: {shown(file)} is not the plain name of "
                   f"a shard of split {split!r} ({split}-NNNNN-of-NNNNN-RUNID"
                   f"{shard_suffix(compression)})")
    if run_id_of(file) not in (None, *run_ids):
        runs = (f"run {run_ids[0]}, the run" if len(run_ids) == 1 else
                f"runs {', '.join(map(str, run_ids))}, the generations")
        raise Bad(f"{at(where, 'file')}: {file!r} is a shard of run {run_id_of(file)}, "
                   f"not of {runs} dataset.json names")
    return file
