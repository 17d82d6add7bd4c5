"""The files derived from the committed dataset.json (dataset_info.json, for TensorFlow
Datasets, which must lie at a name TFDS fixes): written whole right after each commit,
and rewritten by the next run where a kill came between the commit and that write. So
each is wholly the old dataset's or wholly the new one's, and `--verify` compares it with
what dataset.json gives."""
from __future__ import annotations

from beam_jobs.core import paths, storage
from readers import format as data_format
from readers.format import tfds_info


def write(out: str, dataset: data_format.DatasetSpec) -> None:
    """Write `dataset`'s derived files into `out`, each replaced whole."""
    for name, data in tfds_info.files(dataset).items():
        storage.write_bytes(paths.join(out, name), data)


def repair(out: str, dataset: data_format.DatasetSpec, attempts: int = 5) -> bool:
    """Rewrite the committed dataset's derived files in `out` that are not what its
    dataset.json gives (a commit killed before it wrote them); whether any was. After
    each write dataset.json is read again, and the files made again if it changed
    meanwhile: a run paused here (its lease lost) cannot leave them stale, since the
    commit that moved dataset.json writes its own after it. A dataset whose shards TFDS
    cannot open (a hand-made dataset.json) is left for `--verify` to report."""
    wrote = False
    for _ in range(attempts):
        try:
            expected = tfds_info.files(dataset)
        except ValueError:
            return wrote
        stale = {}
        for name, data in expected.items():
            path = paths.join(out, name)
            try:
                current = storage.read_bytes(path)
            except FileNotFoundError:
                current = None
            if current != data:
                stale[path] = data
        if not stale:
            return wrote
        for path, data in stale.items():
            storage.write_bytes(path, data)
        wrote = True
        now = data_format.DatasetSpec.from_json(storage.read_bytes(
            paths.join(out, data_format.DATASET_JSON)))
        if now == dataset:
            return wrote
        dataset = now
    return wrote
