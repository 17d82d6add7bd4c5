"""Bad records go to failures.jsonl; too many of them, or bad flags, stop the job cleanly."""
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import job_line, plain_names, read_dataset_json, read_examples, run_job, sidecar
from input_files import latent_example, random_videos, write_records, write_videos

from beam_jobs import make_shards
from beam_jobs.job.errors import Failed


def _failures(out):
    with open(sidecar(out, "failures")) as f:
        return [json.loads(line) for line in f]


def _bad_records(rng):
    good = [latent_example(f, r) for f, r in random_videos(rng, 20, lengths=(12, 30))]
    bad = [
        b"\x00not a protobuf at all\xff",                                          # parse
        latent_example(rng.random((20, 3)).astype(np.float32), [1, 2, 3]),        # metadata
        latent_example(np.arange(60, dtype=np.int32).reshape(20, 3), [1, 2, 3, 4]),  # int
        latent_example(rng.random((20, 5)).astype(np.float32), [1, 2, 3, 4]),     # frame shape
    ]
    return good, bad


@pytest.mark.slow
def test_bad_records_are_reported_and_counted(tmp_path, rng):
    good, bad = _bad_records(rng)
    write_records(str(tmp_path / "in" / "a.tfrecord"), good[:10] + bad[:2] + good[10:])
    write_records(str(tmp_path / "in" / "b.tfrecord"), bad[2:])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "10",
            "--max_failure_fraction", "0.2")
    rows = _failures(tmp_path / "out")
    assert [(os.path.basename(r["source"]), r["record_index"]) for r in rows] == [
        ("a.tfrecord", 10), ("a.tfrecord", 11), ("b.tfrecord", 0), ("b.tfrecord", 1)]
    assert all(set(r) == {"source", "record_index", "video_id", "reason", "records"}
               and r["records"] == 1 for r in rows)
    reasons = [r["reason"] for r in rows]
    assert "not a tf.train.Example" in reasons[0]
    assert "3 values, expected 4" in reasons[1]
    assert "int32, not a float" in reasons[2]
    assert "float32 [T, 5]" in reasons[3] and "[T, 3]" in reasons[3]
    assert rows[1]["video_id"] == "a.tfrecord:11"
    meta = read_dataset_json(tmp_path / "out")
    assert meta["failures"] == 4
    assert sum(s["videos"] + s["skipped_short"] for s in meta["splits"].values()) == 20
    ids = {e["video_id"] for e in read_examples(tmp_path / "out")}
    assert "a.tfrecord:10" not in ids and "a.tfrecord:12" in ids


@pytest.mark.slow
def test_a_truncated_file_reports_where_it_broke(tmp_path, rng):
    good, _ = _bad_records(rng)
    path = write_records(str(tmp_path / "in" / "a.tfrecord"), good[:6])
    write_records(str(tmp_path / "in" / "b.tfrecord"), good[6:])
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "10",
            "--max_failure_fraction", "0.1")
    (row,) = _failures(tmp_path / "out")
    assert row["record_index"] == 5 and "the file ends inside a record" in row["reason"]
    assert row["records"] == 1 and "cannot be read" in row["reason"]
    assert read_dataset_json(tmp_path / "out")["failures"] == 1


def test_a_damaged_gzip_file_counts_what_it_read_and_what_it_lost(tmp_path, rng):
    """Cut in half, a gzip file cannot say how many records it held: the row says how
    many were read and that the rest cannot be counted. With a broken length frame in a
    sound stream, the bytes after it are counted, and the records with them."""
    good, _ = _bad_records(rng)
    plain = write_records(str(tmp_path / "plain" / "a.tfrecord"), good[:4])
    with open(plain, "rb") as f:
        data = f.read()
    os.makedirs(tmp_path / "in")
    whole = gzip.compress(data)
    (tmp_path / "in" / "cut.tfrecord.gz").write_bytes(whole[:len(whole) // 2])
    second = int.from_bytes(data[:8], "little") + 16   # where the second record starts
    framed = bytearray(data)
    framed[second + 2] ^= 0xFF   # its length frame
    (tmp_path / "in" / "frame.tfrecord.gz").write_bytes(gzip.compress(bytes(framed)))
    write_records(str(tmp_path / "in" / "ok.tfrecord"), good[4:])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "10",
            "--max_failure_fraction", "0.9")
    rows = {os.path.basename(r["source"]): r for r in _failures(tmp_path / "out")}
    cut = rows["cut.tfrecord.gz"]
    read = cut["record_index"]
    assert 0 < read < 4 and "the gzip stream breaks" in cut["reason"]
    assert f"after {read} records" in cut["reason"] and "cannot be told" in cut["reason"]
    frame = rows["frame.tfrecord.gz"]
    assert frame["record_index"] == 1 and frame["records"] == 3, frame
    assert "after 1 records" in frame["reason"] and "(about 3 records)" in frame["reason"]


@pytest.mark.slow
def test_too_many_failures_stop_the_job_without_a_dataset(tmp_path, rng, capsys):
    good, bad = _bad_records(rng)
    write_records(str(tmp_path / "in" / "a.tfrecord"), good[:8] + bad)
    with pytest.raises(Failed) as failed:
        run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "10")
    message = str(failed.value)
    assert "4 of 12 videos failed (33.3%)" in message and "--max_failure_fraction" in message
    # the sidecars go to the run folder, which stays: nothing else is left
    assert sorted(os.listdir(tmp_path / "out")) == ["_make_shards"]
    (run,) = os.listdir(tmp_path / "out" / "_make_shards" / "runs")
    folder = tmp_path / "out" / "_make_shards" / "runs" / run
    assert f"see {folder / f'failures-{run}.jsonl'}" in message
    assert len(_failures(tmp_path / "out")) == 4
    assert sorted(os.listdir(folder)) == [f"failures-{run}.jsonl", "run.json", "shards.json",
                                          f"videos-{run}.jsonl"]


@pytest.fixture(scope="module")
def small_input(tmp_path_factory):
    directory = tmp_path_factory.mktemp("in")
    write_videos(str(directory), random_videos(np.random.default_rng(0), 4), files=1)
    return str(directory / "*.tfrecord")


@pytest.mark.parametrize("flags, needle", [
    (["--window", "0"], "--window"),
    (["--window", "10", "--stride", "-2"], "--stride"),
    (["--window", "10", "--splits", "train=0.5,val=0.2"], "--splits"),
    (["--window", "10", "--splits", "train"], "--splits"),
    (["--window", "10", "--tail", "wrap"], "--tail"),
    (["--window", "10", "--max_failure_fraction", "2"], "--max_failure_fraction"),
    (["--window", "10", "--num_shards", "0"], "--num_shards"),
])
def test_bad_flags_are_refused_with_one_line(tmp_path, small_input, capsys, flags, needle):
    last = job_line(capsys, "--input", small_input, "--output_dir", tmp_path / "out", *flags)
    assert last.startswith("python -m beam_jobs.make_shards: error:") and needle in last
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_input_and_output_problems_are_refused_before_any_work(tmp_path, small_input,
                                                              capsys):
    assert "--input: no file matches" in job_line(
        capsys, "--input", tmp_path / "nothing-*.tfrecord", "--output_dir", tmp_path / "out",
        "--window", "5")

    run_job(small_input, tmp_path / "used", "--window", "5")
    last = job_line(capsys, "--input", small_input, "--output_dir", tmp_path / "used",
                    "--window", "5")
    assert "--output_dir" in last and "--overwrite" in last

    (tmp_path / "used" / "notes.txt").write_text("mine")
    last = job_line(capsys, "--input", small_input, "--output_dir", tmp_path / "used",
                    "--window", "5", "--overwrite")
    assert "did not write (notes.txt)" in last
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine"


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        make_shards.main(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--input", "--output_dir", "--sequence_feature", "--sequence_shape",
                 "--metadata_feature", "--id_feature", "--window", "--stride", "--tail",
                 "--splits", "--num_shards", "--shard_size_mb", "--seed", "--compression",
                 "--overwrite", "--max_failure_fraction"):
        assert flag in help_text


@pytest.mark.slow
def test_overwrite_replaces_the_dataset_and_leaves_no_stale_shard(tmp_path, small_input):
    run_job(small_input, tmp_path / "out", "--window", "5", "--num_shards", "4")
    assert len(read_dataset_json(tmp_path / "out")["splits"]["train"]["shards"]) == 4
    run_job(small_input, tmp_path / "out", "--window", "5", "--num_shards", "2", "--overwrite")
    shards = read_dataset_json(tmp_path / "out")["splits"]["train"]["shards"]
    assert plain_names(os.listdir(tmp_path / "out")) == plain_names(
        ["dataset.json", "dataset_info.json", "failures.jsonl", "videos.jsonl"]
        + [name for s in shards for name in (s["file"], s["index"], s["table"])])
    assert len(shards) == 2


@pytest.mark.slow
def test_flags_are_checked_before_tensorflow_is_imported(tmp_path, small_input):
    """A refusal ends before TensorFlow, whose import logs lines of its own, is imported:
    in a process of its own, where nothing imported it before."""
    code = ("import sys\nfrom beam_jobs import make_shards\n"
            f"status = make_shards.main(['--input', {small_input!r}, '--output_dir', "
            f"{str(tmp_path)!r}, '--window', '0'])\n"
            "print(status, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["2", "False"], result.stderr
