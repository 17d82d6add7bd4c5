"""--shuffle place reads the input twice (shuffle/place.py): an input that changes between
the reads stops the run, and nothing is committed. The change is made where it would
happen, in the second read's videos (the job's source, wrapped)."""
import dataclasses
import os

import apache_beam as beam
import pytest
from helpers import (
    assert_verified,
    job_line,
    read_dataset_json,
    read_examples,
    run_job,
    same_dataset_files,
)
from input_files import latent_example, random_videos, write_records, write_videos

FLAGS = ["--window", "10", "--stride", "3", "--num_shards", "3", "--seed", "7",
         "--shuffle", "place"]


class _ChangedRead(beam.PTransform):
    """The source's read, with `change` (a video -> the videos it becomes) after it."""

    def __init__(self, read, change):
        super().__init__()
        self._read, self._change = read, change

    def expand(self, pipeline):
        videos, failures, skipped = pipeline | "Read" >> self._read
        return videos | "Change" >> beam.FlatMap(self._change), failures, skipped


def _changed_second_read(monkeypatch, change):
    from beam_jobs import make_shards

    build = make_shards.build_source

    def build_changing(config):
        source, reads = build(config), []

        def read(known_ids):
            reads.append(known_ids)
            first = len(reads) == 1
            return source.read(known_ids) if first else _ChangedRead(source.read(known_ids),
                                                                     change)
        return dataclasses.replace(source, read=read)
    monkeypatch.setattr(make_shards, "build_source", build_changing)


def _is_one(video) -> bool:
    """One of the input's videos: the second record of its first file."""
    return video.source.endswith("lat-0.tfrecord") and video.record_index == 1


def _of_one(changed):
    return lambda video: [changed(video)] if _is_one(video) else [video]


CHANGES = {
    "values": _of_one(lambda v: v._replace(sequence=v.sequence + 1)),
    "fewer frames": _of_one(lambda v: v._replace(sequence=v.sequence[:-4])),
    "more frames": _of_one(lambda v: v._replace(sequence=v.sequence.repeat(2, axis=0))),
    "gone": lambda video: [] if _is_one(video) else [video],
    "metadata": _of_one(lambda v: v._replace(metadata=v.metadata + 1)),
}


@pytest.mark.parametrize("change", CHANGES)
def test_an_input_changed_between_the_reads_stops_the_run(tmp_path, rng, monkeypatch, capsys,
                                                          change):
    write_videos(str(tmp_path / "in"), random_videos(rng, 6, lengths=(20, 40)), files=2)
    _changed_second_read(monkeypatch, CHANGES[change])
    out = tmp_path / "out"
    line = job_line(capsys, "--input", str(tmp_path / "in" / "*.tfrecord"), "--output_dir",
                    str(out), *FLAGS, status=1)
    assert "the input changed while this run read it twice (--shuffle place)" in line, line
    assert "nothing was committed" in line, line
    left = [os.path.relpath(os.path.join(r, n), out) for r, _, ns in os.walk(out) for n in ns]
    assert all(path.startswith("_make_shards/runs/") for path in left), left   # no shard
    monkeypatch.undo()     # the same input read the same twice: the next run commits
    run_job(str(tmp_path / "in" / "*.tfrecord"), out, *FLAGS)
    assert_verified(out)


def test_an_input_read_the_same_twice_is_placed(tmp_path, rng, monkeypatch):
    write_videos(str(tmp_path / "in"), random_videos(rng, 6, lengths=(20, 40)), files=2)
    _changed_second_read(monkeypatch, lambda video: [video])
    run_job(str(tmp_path / "in" / "*.tfrecord"), tmp_path / "out", *FLAGS)
    assert read_dataset_json(tmp_path / "out")["flags"]["shuffle"] == "place"
    assert_verified(tmp_path / "out")


def test_shards_past_the_open_files_kept_are_placed_as_spill_writes_them(tmp_path, rng,
                                                                          monkeypatch):
    from beam_jobs.shuffle import place

    monkeypatch.setattr(place, "OPEN_SHARDS", 2)   # each of 7 shards closed and reopened
    write_videos(str(tmp_path / "in"), random_videos(rng, 8, lengths=(20, 40)), files=2)
    flags = [*FLAGS[:-2], "--splits", "train=0.6,test=0.4"]
    flags[flags.index("--num_shards") + 1] = "7"
    run_job(str(tmp_path / "in" / "*.tfrecord"), tmp_path / "place", *flags, "--shuffle", "place")
    run_job(str(tmp_path / "in" / "*.tfrecord"), tmp_path / "spill", *flags, "--shuffle", "spill")
    same_dataset_files(tmp_path / "place", tmp_path / "spill")


def test_copies_of_one_id_and_of_one_content_are_left_out_as_spill_leaves_them(tmp_path, rng):
    """Copies of one id share their windows' keys: the plan counts them until they are
    dropped, so a split's shards end short of its plan's ranks, as spill's do."""
    videos = random_videos(rng, 9, lengths=(20, 40))
    records = [latent_example(frames, recipe, video_id=f"v{i}")
               for i, (frames, recipe) in enumerate(videos)]
    records += [latent_example(videos[0][0] + 1, videos[0][1], video_id="v0"),   # id twice
                latent_example(*videos[1], video_id="again")]                   # frames twice
    write_records(str(tmp_path / "in" / "a.tfrecord"), records)
    flags = [*FLAGS[:-2], "--id_feature", "vid", "--max_failure_fraction", "0.5"]
    for mode in ("place", "spill"):
        run_job(str(tmp_path / "in" / "*"), tmp_path / mode, *flags, "--shuffle", mode)
    same_dataset_files(tmp_path / "place", tmp_path / "spill")
    kept = {e["video_id"] for e in read_examples(tmp_path / "place")}
    assert kept - {"v1", "again"} == {f"v{i}" for i in range(2, 9)}   # v0: its id twice
    assert len(kept & {"v1", "again"}) == 1                          # one of one content
