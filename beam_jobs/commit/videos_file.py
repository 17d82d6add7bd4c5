"""The committed dataset's videos file, checked before an --append reads any video
(readers/format/videos_file.py): the ids it lists are the ones the append skips, and the
rows it keeps, so a file that is not what the job wrote would make the append add
videos twice or commit counts that do not hold."""
from __future__ import annotations

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_jobs.commit.append import AppendError
from beam_jobs.core import paths
from readers import format as data_format
from readers.format import videos_file


def check(out: str, spec: data_format.DatasetSpec) -> None:
    """AppendError when the videos file of `spec`'s dataset in `out` cannot be the one
    its dataset.json was committed with, in one line naming it."""
    name = spec.sidecars.get("videos")
    damaged = "the dataset is damaged: restore that file, or rebuild with --overwrite"
    if name is None:
        if any(s.videos or s.skipped_short for s in spec.splits.values()):
            raise AppendError(f"--append: {out}/dataset.json counts videos but names no "
                              f"videos file; {damaged}")
        return
    path = paths.join(out, name)
    try:
        videos_file.check(lambda: FileSystems.open(
            path, compression_type=CompressionTypes.UNCOMPRESSED), spec)
    except FileNotFoundError:
        raise AppendError(f"--append: {path}: it is missing; {damaged}") from None
    except videos_file.VideosFileError as e:
        raise AppendError(f"--append: {path}: {e}; {damaged}") from None
