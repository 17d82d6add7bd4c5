"""A selection of a split's windows, resolved when a reader opens, without reading a shard.

    import readers
    held_out = readers.Select(min_valid_frames=12,
                              where=lambda row: not row["video_id"].startswith("exp3/"))
    source = WindowSource("out/", "train", select=held_out)   # len: the windows selected

`Select` says what to keep: videos by id (`videos`, `exclude_videos`), windows with at
least `min_valid_frames` real frames (their mask's 1s: neither padding nor a bad frame),
videos whose row of the videos file a predicate accepts (`where`: a row holds the
video's metadata and its manifest row's own fields, readers.format.video_rows).
`resolve` makes `SelectedWindows` of it for one split: the window numbers kept, from the
split's window tables (readers.format.window_table: each record's video hash and valid
frames) and, only when videos are chosen, the videos file; no shard and no offset index
is read. A dataset of a format before 6 has no tables and cannot select (one line says
so); it reads whole.

Both readers use it: readers.numpy numbers the selected windows 0..n-1 (and reads only
them), make_dataset skips the others record by record and never opens a shard that has
none. `SelectedWindows` name themselves (`described`: what was asked, by a predicate's
qualified name, and a digest of the windows kept), so a resume state saved on one
selection is refused on another. Numpy only.
"""
from __future__ import annotations

import array
import collections
import dataclasses
import hashlib
import os
import threading
from typing import Any, Callable, Collection, Optional, Sequence

import numpy as np

from readers.arguments import callable_name, optional_callable, whole_number
from readers.files import DatasetFiles
from readers.format import (
    FORMAT_VERSION,
    Shard,
    run_id_of,
    video_rows,
    videos_file,
    window_table,
)
from readers.request import SplitRequest
from readers.shards import read_at_most

TABLES_SINCE = 6     # the first format version whose shards have window tables
FIELDS_SINCE = 7     # the first whose videos file rows have metadata and fields
_LISTED = 8          # ids a description lists; more are counted and digested


def _ids(name: str, ids: Any) -> Optional[tuple[str, ...]]:
    """A collection of video ids as a sorted tuple (None stays None); TypeError in one
    line for a single string (a common slip: `videos="exp3/a"`) or an id that is not
    one."""
    if ids is None:
        return None
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be a collection of video ids, not the single "
                        f"{type(ids).__name__} {ids!r}: pass [{ids!r}]")
    try:
        ids = list(ids)
    except TypeError:
        raise TypeError(f"{name} must be a collection of video ids, not "
                        f"{type(ids).__name__} {ids!r}") from None
    for given in ids:
        if not isinstance(given, str):
            raise TypeError(f"{name} must hold video ids (strings), not "
                            f"{type(given).__name__} {given!r}")
    return tuple(sorted(set(ids)))


@dataclasses.dataclass(frozen=True)
class Select:
    """Which windows of a split a reader reads. Each given condition must hold:

    Args:
      videos: video ids whose windows to keep (None: every video).
      exclude_videos: video ids whose windows to leave out (they win over `videos`).
        Every id given to either must be a video of the dataset (in any split): an id it
        does not have is a ValueError naming it (a typo would select silently otherwise).
      min_valid_frames: keep windows with at least this many real frames (mask 1):
        counted over the whole window, whatever clip a reader cuts of it.
      where: `where(row) -> bool`, a predicate on the video's row of the videos file (a
        dict: `video_id`, `split`, `source`, `frames`, `windows`, `bad_frames`, ...; its
        `metadata`, a list of floats, and its manifest row's own `fields`, a dict),
        called once per video of the split when a reader first opens this Select on a
        run of the dataset (a process keeps the result for its next opens, as `batches`
        opens its source each epoch): a pure function of the row. It must return True or
        False. It need not pickle: only the selection's result goes to worker processes.
    """
    videos: Optional[Collection[str]] = None
    exclude_videos: Optional[Collection[str]] = None
    min_valid_frames: int = 0
    where: Optional[Callable[[dict[str, Any]], bool]] = None

    def __post_init__(self):
        object.__setattr__(self, "videos", _ids("videos", self.videos))
        object.__setattr__(self, "exclude_videos", _ids("exclude_videos", self.exclude_videos))
        object.__setattr__(self, "min_valid_frames",
                           whole_number("min_valid_frames", self.min_valid_frames, 0))
        optional_callable("where", self.where)

    @property
    def chooses_videos(self) -> bool:
        return (self.videos, self.exclude_videos, self.where) != (None, None, None)

    @property
    def everything(self) -> bool:
        """Whether it keeps every window (a reader then reads the split whole)."""
        return not self.chooses_videos and self.min_valid_frames == 0


def checked(select: Any) -> Optional[Select]:
    """`select` as a reader takes it: a Select, or None (also for a Select that keeps
    every window); TypeError in one line for anything else."""
    if select is None:
        return None
    if not isinstance(select, Select):
        raise TypeError(f"select must be a readers.Select or None, not "
                        f"{type(select).__name__} {select!r}")
    return None if select.everything else select


@dataclasses.dataclass(frozen=True)
class SelectedWindows:
    """A `Select` resolved on one split: `windows`, the numbers of the windows it keeps
    in the split (sorted int64), and `described`, what was asked and what came of it
    (JSON-ready: a resume state and a repr name it)."""
    windows: np.ndarray
    described: dict[str, Any]

    def __len__(self) -> int:
        return len(self.windows)

    def in_shards(self, shards: Sequence[Shard]) -> list[np.ndarray]:
        """The record numbers kept in each of `shards`, the split's shards in order."""
        ends = np.cumsum([shard.examples for shard in shards], dtype=np.int64)
        cuts = np.searchsorted(self.windows, ends)
        return [self.windows[lo:hi] - (end - shard.examples) for lo, hi, end, shard in
                zip(np.concatenate([[0], cuts[:-1]]), cuts, ends, shards, strict=True)]

    def said(self) -> str:
        """One line: `Select(...)` as asked, the windows kept and their digest."""
        d = self.described
        asked = ", ".join(f"{key}={d[key]}" for key in ("videos", "exclude_videos",
                                                        "min_valid_frames", "where")
                          if d[key] not in (None, 0))
        return f"Select({asked}): {d['windows']:,} windows, sha256 {d['sha256']}"


def _ids_said(ids: Optional[Collection[str]]) -> Optional[str]:
    """Ids as a description names them: listed when few, else counted and digested."""
    if ids is None:
        return None
    if len(ids) <= _LISTED:
        return repr(list(ids))
    digest = hashlib.sha256("\n".join(ids).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{len(ids):,} ids, sha256 {digest[:16]}"


def check_tables(request: SplitRequest) -> None:
    """ValueError in one line when `request`'s split cannot be selected from (shards
    without a window table)."""
    spec, path = request.spec, request.path
    lacking = [shard for shard in request.shards if shard.table is None]
    if not lacking:
        return
    cannot = ("so select= cannot choose its windows by video, valid frames or metadata "
              "(it reads whole without select=)")
    if spec.format_version < TABLES_SINCE:
        raise ValueError(f"{path} is a dataset of format {spec.format_version}, which has no "
                         f"window tables, {cannot}: rebuild it with --overwrite by this job "
                         f"(format {FORMAT_VERSION} writes them) to select")
    runs = sorted({run_id_of(shard.file) or "without an id" for shard in lacking})
    raise ValueError(f"split {request.split!r} of {path} has {len(lacking)} of its "
                     f"{len(request.shards)} shards without a window table (written before "
                     f"format {TABLES_SINCE}, then grown by --append: run {', '.join(runs)}), "
                     f"{cannot}: rebuild it with --overwrite to select")


def _table_name(shard: Shard) -> str:
    """A shard's window table (check_tables refuses a split with a shard without one)."""
    if shard.table is None:
        raise ValueError(f"shard {shard.file} has no window table")
    return shard.table


def _tables(request: SplitRequest) -> tuple[np.ndarray, np.ndarray]:
    """(video hashes, valid counts) of every window of the split, from its tables,
    read all at once (concurrent requests on a store) and each checked."""
    path, spec = request.path, request.spec
    names = [_table_name(shard) for shard in request.shards]
    try:
        data = read_at_most([os.path.join(path.removeprefix("file://"), n) for n in names],
                            [window_table.largest(shard) for shard in request.shards])
    except FileNotFoundError as e:
        said = f"{e.filename} {e}"
        raise request.gone_error(next((n for n in names if n in said), names[0])) from None
    window = spec.window.length
    decoded = [window_table.decode(table, shard, window)
               for table, shard in zip(data, request.shards, strict=True)]
    if not decoded:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    return (np.concatenate([table.videos for table in decoded]),
            np.concatenate([table.valid for table in decoded]))


def _kept_videos(select: Select, request: SplitRequest) -> tuple[np.ndarray, np.ndarray]:
    """(the hashes of the split's videos, sorted; whether `select` keeps each), from one
    pass over the videos file that holds one row at a time (a hash of every id of the
    dataset kept: 8 bytes a video). ValueError in one line when an id given is no video
    of the dataset, or two of the dataset's ids share a 64-bit hash (or one is listed
    twice: then the tables could not tell their windows apart); TypeError when `where`
    answers anything but True or False."""
    spec, path = request.spec, request.path
    name = spec.sidecars.get("videos")
    if name is None:
        raise ValueError(f"{path} has no videos file, so select= cannot choose videos")
    files = DatasetFiles(path)
    every, mine, keep, found = _read_videos_file(select, request, files, name)
    _check_ids_known(select, found, path)
    _refuse_shared_hashes(every, request, files, name)
    mine_hashes = np.frombuffer(mine, np.uint64)
    order = np.argsort(mine_hashes)
    return mine_hashes[order], np.frombuffer(keep, np.bool_)[order]


def _read_videos_file(select: Select, request: SplitRequest, files: DatasetFiles, name: str
                      ) -> tuple[array.array, array.array, bytearray, set[str]]:
    """One pass over the videos file `name`, a row at a time: the hash of every video's
    id, the hashes of the split's videos and whether `select` keeps each, and which of
    the ids `select` gives are there. DatasetChanged when the file is gone, ValueError
    naming it when a row is bad."""
    wanted = None if select.videos is None else set(select.videos)
    unwanted = set(select.exclude_videos or ())
    asked, found = (wanted or set()) | unwanted, set()
    every, mine, keep = array.array("Q"), array.array("Q"), bytearray()
    try:
        for row in videos_file.rows(lambda: files.reader(name), request.spec.splits):
            video_id = row["video_id"]
            every.append(window_table.video_hash(video_id))
            if video_id in asked:
                found.add(video_id)
            if row["split"] == request.split:
                mine.append(every[-1])
                keep.append(_keeps(select, row, wanted, unwanted))
    except FileNotFoundError:
        raise request.gone_error(name) from None
    except ValueError as e:
        raise ValueError(f"{os.path.join(request.path, name)}: {e}") from None
    return every, mine, keep, found


def _check_ids_known(select: Select, found: set[str], path: str) -> None:
    """ValueError when an id `select` gives (to keep or to leave out) is no video of the
    dataset."""
    for given in ("videos", "exclude_videos"):
        unknown = sorted(set(getattr(select, given) or ()) - found)
        if unknown:
            raise ValueError(f"Select({given}=...): {len(unknown)} of its ids are no video of "
                             f"{path}, e.g. {unknown[0]!r} (its ids are the videos file's "
                             "video_id)")


def _refuse_shared_hashes(every: array.array, request: SplitRequest, files: DatasetFiles,
                          name: str) -> None:
    """ValueError when two of the dataset's videos share a 64-bit hash (the window
    tables could not tell their windows apart), or one is listed twice (a damaged
    dataset); the ids are found by a second pass over the videos file."""
    path = request.path
    hashes = np.sort(np.frombuffer(every, np.uint64))
    same = hashes[1:][hashes[1:] == hashes[:-1]]
    if same.size:
        twice = [row["video_id"] for row in videos_file.rows(lambda: files.reader(name),
                                                              request.spec.splits)
                 if window_table.video_hash(row["video_id"]) == int(same[0])]
        a, b = twice[:2]
        raise ValueError(
            f"{os.path.join(path, name)} lists video {a!r} twice: the dataset is damaged "
            f"(python -m readers.inspect {path} --verify)" if a == b else
            f"videos {a!r} and {b!r} of {path} share one 64-bit hash in its window tables, "
            "so select= cannot tell their windows apart: select by min_valid_frames alone, "
            "or rename one of them and rebuild")


def _keeps(select: Select, row: dict, wanted: Optional[set], unwanted: set) -> bool:
    """Whether `select` keeps the video of videos file row `row`. ValueError in one line
    naming the video when `where` fails on a row without metadata and fields (a row of
    an earlier format, which an --append kept)."""
    video_id = row["video_id"]
    if (wanted is not None and video_id not in wanted) or video_id in unwanted:
        return False
    if select.where is None:
        return True
    try:
        answer = select.where(row)
    except (KeyError, TypeError) as e:
        if all(key in row for key in video_rows.KEYS):
            raise
        raise ValueError(
            f"where {callable_name(select.where)} failed on video {video_id!r} "
            f"({type(e).__name__}: {e}): its row has no metadata and no fields, as rows "
            f"written before format {FIELDS_SINCE} have none (--append keeps them as they "
            "were): rebuild the dataset with --overwrite to select by them") from None
    if not isinstance(answer, (bool, np.bool_)):
        raise TypeError(f"where {callable_name(select.where)} returned {answer!r} for video "
                        f"{video_id!r}, not True or False")
    return bool(answer)


def resolve(select: Optional[Select], request: SplitRequest) -> Optional[SelectedWindows]:
    """`select` (checked: `checked`) on `request`'s split, or None for no selection.
    ValueError in one line when the split has shards without window tables (a dataset
    before format 6, or grown from one by --append), when `min_valid_frames` is more than
    a window's frames, when a table is damaged (readers.format.window_table) or does not
    match the videos file, or when it keeps no window (both readers refuse an empty
    selection: more likely a mistake than a wish, and no batch comes of it)."""
    select = checked(select)
    if select is None:
        return None
    check_tables(request)
    # A selection of a run is a pure function of its files (a run's never change) and of
    # the Select (its `where` one of the row): kept, so that `batches`, which opens its
    # source each epoch, resolves it once a process.
    key = (request.path, request.spec.run_id, request.split, select)
    try:
        hash(key)
    except TypeError:      # a `where` that cannot be hashed: resolved each time
        return _resolve(select, request)
    with _LOCK:
        kept = _RESOLVED.get(key)
        if kept is not None:
            _RESOLVED.move_to_end(key)
            return kept
    kept = _resolve(select, request)
    with _LOCK:
        _RESOLVED[key] = kept
        while len(_RESOLVED) > _KEPT:
            _RESOLVED.popitem(last=False)
    return kept


_RESOLVED: collections.OrderedDict = collections.OrderedDict()
_KEPT = 8     # selections kept (at a million windows and 10% each, 0.8 MB)
_LOCK = threading.Lock()


def _resolve(select: Select, request: SplitRequest) -> SelectedWindows:
    window = request.spec.window.length
    if select.min_valid_frames > window:
        raise ValueError(f"Select(min_valid_frames={select.min_valid_frames}): the windows of "
                         f"{request.path} have {window} frames; none has more")
    videos, valid = _tables(request)
    keep = valid >= select.min_valid_frames
    del valid
    if select.chooses_videos:
        mine, kept = _kept_videos(select, request)
        at = np.minimum(np.searchsorted(mine, videos), max(len(mine) - 1, 0))
        strays = np.flatnonzero(mine[at] != videos) if len(mine) else np.arange(len(videos))
        if strays.size:
            raise ValueError(f"{request.path}: window {int(strays[0])} of split "
                             f"{request.split!r} is, by its window table, of no video of "
                             f"that split in the videos file: the dataset is damaged "
                             f"(python -m readers.inspect {request.path} --verify)")
        del videos
        keep &= kept[at]
    windows = np.flatnonzero(keep).astype(np.int64)
    selected = SelectedWindows(windows, {
        "videos": _ids_said(select.videos), "exclude_videos": _ids_said(select.exclude_videos),
        "min_valid_frames": select.min_valid_frames,
        "where": None if select.where is None else callable_name(select.where),
        "windows": len(windows),
        "sha256": hashlib.sha256(windows.astype("<i8").tobytes()).hexdigest()[:16]})
    if not len(selected):
        raise ValueError(f"{selected.said()} keeps no window of split {request.split!r} of "
                         f"{request.path}")
    return selected
