"""What may sit in an output directory, and clearing a previous run's dataset from it."""
from __future__ import annotations

from typing import Optional

from apache_beam.io.filesystems import FileSystems

from readers.spec import BAD_FRAMES_JSONL, DATASET_JSON, FAILURES_JSONL, is_shard_name

TEMP_DIR = "_make_shards_tmp"


def is_job_output(name: str) -> bool:
    return (name in (DATASET_JSON, FAILURES_JSONL, BAD_FRAMES_JSONL, TEMP_DIR)
            or is_shard_name(name))


def delete_tree(path: str) -> None:
    """Delete a directory and all under it, on any filesystem (GCS has no directories)."""
    files = [m.path for m in FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list]
    if files:
        FileSystems.delete(files)
    if FileSystems.exists(path):
        FileSystems.delete([path])


def _entries(output_dir: str) -> dict[str, str]:
    """name -> path of what lies directly in `output_dir` (empty if it does not exist)."""
    pattern = FileSystems.join(output_dir, "**")
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception:  # a missing directory is an empty one
        return {}
    prefix = output_dir.rstrip("/") + "/"
    return {m.path[len(prefix):].split("/")[0]: prefix + m.path[len(prefix):].split("/")[0]
            for m in matched if m.path.startswith(prefix)}


def prepare_output_dir(output_dir: str, overwrite: bool) -> Optional[str]:
    """Make `output_dir` ready for a new dataset; return why it cannot be, or None.

    An empty or missing directory is ready. The leftovers of a run that did not finish
    (this job's files, no dataset.json) are cleared, so that the same command simply runs
    again. A finished dataset is replaced only with `overwrite` (dataset.json first, so
    that a crash half-way leaves a visibly unfinished directory). A directory holding
    anything else is never touched.
    """
    entries = _entries(output_dir)
    if not entries:
        return None
    foreign = sorted(name for name in entries if not is_job_output(name))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        return (f"--output_dir: {output_dir} holds files this job did not write ({shown}); "
                "choose an empty or new directory")
    if DATASET_JSON in entries and not overwrite:
        return (f"--output_dir: {output_dir} already holds a dataset; pass --overwrite to "
                "replace it")
    if DATASET_JSON in entries:
        FileSystems.delete([entries.pop(DATASET_JSON)])
    for path in sorted(entries.values()):
        delete_tree(path) if path.endswith(TEMP_DIR) else FileSystems.delete([path])
    return None
