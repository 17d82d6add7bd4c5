"""The command line: unknown flags refused with a suggestion, several inputs, clean
errors, quiet output with progress from every worker, and a dataset.json from which a
stranger's code parses every kind of dataset."""
import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import job_line, read_dataset_json, read_examples, run_job, sidecar
from input_files import random_videos, write_videos

import readers
from beam_jobs import make_shards
from beam_jobs.core.configs import JobConfig
from beam_jobs.job import flags

NOISE = ("oneDNN", "absl::InitializeLog", "cpu_feature_guard", "I0000", "W0000",
         "semi_persistent_directory", "Traceback")


@pytest.fixture(scope="module")
def latents(tmp_path_factory):
    directory = tmp_path_factory.mktemp("in")
    write_videos(str(directory), random_videos(np.random.default_rng(0), 9), files=3)
    return sorted(str(directory / n) for n in os.listdir(directory))


@pytest.mark.parametrize("extra, message", [
    (["--stirde", "50"], "--stirde: unknown flag (did you mean --stride?)"),
    (["--runer", "DirectRunner"], "--runer: unknown flag (did you mean --runner?)"),
    (["--direct_num_worker=2"], "--direct_num_worker: unknown flag (did you mean "
                                "--direct_num_workers?)"),
    (["--win", "5"], "--win: unknown flag"),   # no abbreviations
    (["stray"], "unexpected argument 'stray'"),
    (["--runner", "Bogus"], "--runner: 'Bogus' is not a Beam runner"),
    # a flag given twice: argparse would keep the last value without a word
    (["--window", "4"], "--window: given twice; give it once"),
    (["--stride=2", "--stride", "3"], "--stride: given twice; give it once"),
    (["--num_workers", "2", "--num_workers=3"], "--num_workers: given twice; give it once"),
    (["--job_port", "1", "--job_port", "2"], "--job_port: given twice; give it once"),
    (["--dry_run=True"], "--dry_run: only DataflowRunner builds a job without running it; "
                         "FnApiRunner would run it"),
    (["--homepage", " "], "--homepage: a URL: printable text, not empty"),
    (["--homepage", "https://a\nb"], "--homepage: a URL: printable text, not empty"),
    # a catalog that shows the homepage as a link would run these
    (["--homepage", "javascript:alert(1)"], "--homepage: 'javascript:alert(1)' is not an "
                                            "absolute URL of http, https, gs, file"),
    (["--homepage", "data:text/html,x"], "is not an absolute URL"),
    (["--homepage", "example.org"], "is not an absolute URL"),
])
def test_mistakes_are_refused_in_one_line(tmp_path, latents, capsys, extra, message):
    line = job_line(capsys, "--input", latents[0], "--output_dir", tmp_path / "out",
                    "--window", "5", *extra)
    assert message in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_beam_pipeline_options_pass_through_to_a_run(tmp_path, latents):
    run_job(latents[0], tmp_path / "out", "--window", "5", "--runner", "DirectRunner",
            "--direct_num_workers", "1", "--project", "my-project", "--region",
            "us-central1", "--temp_location", str(tmp_path), "--experiments", "a",
            "--experiments=b")
    assert read_dataset_json(tmp_path / "out")["splits"]["train"]["windows"] > 0


@pytest.mark.slow
def test_a_shell_expanded_glob_and_repeated_inputs_read_every_file(tmp_path, latents):
    for name, argv in (("expanded", ["--input", *latents]),
                       ("repeated", ["--input", latents[0], "--input", *latents[1:]])):
        make_shards.run([*argv, "--output_dir", str(tmp_path / name), "--window", "5"])
        ids = {e["video_id"] for e in read_examples(tmp_path / name)}
        assert {i.split(":")[0] for i in ids} == {os.path.basename(p) for p in latents}
        assert read_dataset_json(tmp_path / name)["splits"]["train"]["videos"] == 9


def test_without_beam_the_job_says_what_to_install(tmp_path):
    code = ("import runpy, sys\nsys.modules['apache_beam'] = None\n"
            "sys.argv = ['make_shards', '--help']\n"
            "runpy.run_module('beam_jobs.make_shards', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "install with pip install -e '.[beam]'" in result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_latent_run_imports_neither_tensorflow_nor_pyav(tmp_path, latents):
    """The latent source reads Examples and serialized tensors by hand (readers.format),
    so the job skips TensorFlow's seconds of start-up, here and on each worker; and it
    runs where PyAV cannot be imported (a worker with the light install's packages)."""
    code = ("import sys\nsys.modules['av'] = None\nfrom beam_jobs import make_shards\n"
            f"make_shards.run(['--input', *{latents!r}, '--output_dir', 'out', "
            "'--window', '5', '--stride', '3'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[]"
    assert read_dataset_json(tmp_path / "out")["splits"]["train"]["videos"] == 9


def _quiet_run(*argv, cwd=None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                            cwd=cwd, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    noise = [line for line in (result.stdout + result.stderr).splitlines()
             if any(n in line for n in NOISE)]
    assert not noise, noise
    return result


@pytest.mark.slow
def test_the_first_readme_command_is_quiet(tmp_path):
    """The sample, the job and inspect: progress, the summary table, no start-up noise."""
    sample = _quiet_run("beam_jobs.sample", str(tmp_path / "sample"), "--videos", "6")
    assert len(sample.stdout.splitlines()) == 3
    job = _quiet_run("beam_jobs.make_shards", "--input",
                     str(tmp_path / "sample" / "latents-*.tfrecord"), "--output_dir",
                     str(tmp_path / "out"), "--window", "100", "--stride", "50")
    lines = job.stderr.strip().splitlines()
    assert lines[0].startswith("INFO beam_jobs.progress: worker")
    assert "frames/s on this worker" in lines[0]
    assert lines[-4].split() == ["split", "videos", "skipped", "frames", "bad", "frames",
                                 "windows", "shards", "MB"]
    assert "from the command's start" in lines[-2] and "overall" in lines[-2]
    assert lines[-1].endswith(f"python -m readers.inspect {tmp_path / 'out'} --report "
                              "report.html")
    assert len(lines) <= 9
    inspect = _quiet_run("readers.inspect", str(tmp_path / "out"), "--verify")
    assert "records of 1 shard are sound" in inspect.stdout


def test_all_cores_on_a_small_input_runs_one_process(tmp_path, latents, capsys, caplog):
    """(Worker processes' own progress lines, on a larger input: test_runs.py.)"""
    caplog.set_level("INFO")
    run_job(latents[0], tmp_path / "out", "--window", "5", "--all_cores",
            "--progress_interval", "0.001")
    assert "MiB of input runs in one process, faster than worker processes below 512 MiB" \
        in caplog.text
    workers = {line.split("worker ")[1].split(":")[0] for line in
               capsys.readouterr().err.splitlines() if "beam_jobs.progress: worker" in line}
    assert workers == {str(os.getpid())}


# --- dataset.json alone is enough to parse every kind of dataset ------------------------

def parse_spec(meta: dict) -> dict:
    """A tf.io.parse_example spec from dataset.json alone, as code that knows nothing of
    this project would build it."""
    kinds = {"float_list": tf.float32, "int64_list": tf.int64, "bytes_list": tf.string}
    spec = {}
    for f in meta["features"]:
        stored = f["stored_as"]
        shape = [stored["values"]] if stored["values"] != 1 or f["shape"] else []
        spec[f["name"]] = tf.io.FixedLenFeature(shape, kinds[stored["list"]])
    return spec


def _decode_image(data, channels: int, jpeg: bool):
    if jpeg:
        return tf.io.decode_jpeg(data, channels, dct_method="INTEGER_ACCURATE")
    return tf.io.decode_png(data, channels)


def decode(meta: dict, parsed: dict) -> dict:
    out = {}
    for f in meta["features"]:
        stored, value = f["stored_as"], parsed[f["name"]]
        if "image_format" in stored:
            channels, jpeg = stored["decoded_shape"][-1], "jpeg_dct" in stored
            frames = [[_decode_image(image, channels, jpeg).numpy() for image in window]
                      for window in value.numpy()]
            out[f["name"]] = np.array(frames)
        elif stored["list"] == "bytes_list" and "value_dtype" in stored:
            dtype = tf.dtypes.as_dtype(stored["value_dtype"])
            raw = tf.io.decode_raw(value, dtype, little_endian=stored["byte_order"] == "little")
            out[f["name"]] = tf.reshape(raw, [-1, *f["shape"]]).numpy()
        else:
            out[f["name"]] = tf.reshape(value, [-1, *f["shape"]]).numpy()
    return out


@pytest.mark.parametrize("kind", ["latent", "gzip", "float16", "raw", "png", "jpeg"])
def test_dataset_json_alone_parses_every_kind(kinds, kind):
    path = kinds[kind]
    meta = read_dataset_json(path)
    files = [os.path.join(path, s["file"]) for s in meta["splits"]["train"]["shards"]]
    records = tf.data.TFRecordDataset(files, compression_type=meta["tf_compression_type"])
    ours = {}
    for batch in records.batch(64):
        parsed = decode(meta, tf.io.parse_example(batch, parse_spec(meta)))
        for i, (vid, start) in enumerate(zip(parsed["video_id"], parsed["start"], strict=True)):
            ours[(vid, int(start))] = {k: v[i] for k, v in parsed.items()}
    theirs = {}
    for batch in readers.make_dataset(path, batch_size=4, shuffle=False, drop_remainder=False,
                                      keep_float16=True):
        for i, (vid, start) in enumerate(zip(batch["video_id"].numpy(), batch["start"].numpy(),
                                             strict=True)):
            theirs[(vid, int(start))] = {k: v[i].numpy() for k, v in batch.items()}
    assert ours.keys() == theirs.keys() and ours
    for key, values in ours.items():
        for name, value in values.items():
            np.testing.assert_array_equal(value, theirs[key][name], err_msg=f"{kind} {name}")


def test_dataset_json_says_what_the_data_is(kinds):
    latent, pixels = read_dataset_json(kinds["latent"]), read_dataset_json(kinds["png"])
    assert latent["format_version"] == readers.format.FORMAT_VERSION and latent["job_version"]
    assert latent["frame"] == {"kind": "latents", "shape": [3], "dtype": "float32"}
    assert pixels["frame"]["channel_order"] == "RGB" and pixels["frame"]["value_range"] == [0, 255]
    assert pixels["labels"] == {"shape": [2], "names": ["heat", "smoke"], "masked_value": 0.0}
    assert "zeros" in latent["mask"]["0"]
    assert read_dataset_json(kinds["gzip"])["tf_compression_type"] == "GZIP"
    assert "frame_encoding" not in latent["flags"] and "sequence_feature" in latent["flags"]
    assert "sequence_feature" not in pixels["flags"] and "encoder" not in pixels["flags"]
    with open(sidecar(kinds["png"], "videos")) as f:
        row = json.loads(f.readline())
    assert row == {"video_id": "a", "split": "train", "source": row["source"],
                   "record_index": 0, "frames": 7, "windows": 3, "bad_frames": 0,
                   "source_fps": None, "digest": row["digest"], "metadata": [1.5, 0.0],
                   "fields": {"camera": "cam0", "site": "Köln"}}
    assert re.fullmatch("[0-9a-f]{64}", row["digest"])


def test_each_help_group_builds_its_config_and_the_flag_table_names_real_flags():
    """A --help group's flags are its config's fields, in order: dataset.json records a
    run's flags by walking the configs."""
    groups = {g.title: [a.dest for a in g._group_actions]
              for g in flags.build_parser()._action_groups if g.title in flags.GROUP_CONFIGS}
    assert list(groups) == list(flags.GROUP_CONFIGS)
    for title, config in flags.GROUP_CONFIGS.items():
        assert flags.flag_names(config) == groups[title], title
    assert set(flags.FLAG_KINDS) <= {d for dests in groups.values() for d in dests}
    assert [f.name for f in dataclasses.fields(JobConfig)][:-1] == list(JobConfig.GROUPS)


def test_the_reader_refuses_a_split_smaller_than_a_batch(kinds):
    for options in ({}, {"repeat": True}, {"repeat": True, "drop_remainder": False}):
        with pytest.raises(ValueError, match=r"has 7 windows, fewer than batch_size 8"):
            readers.make_dataset(kinds["png"], batch_size=8, **options)
    with pytest.raises(ValueError, match=r"fewer than batch_size 1000000000"):
        readers.make_dataset(kinds["png"], batch_size=10**9, repeat=True)
    (partial,) = readers.make_dataset(kinds["png"], batch_size=8, drop_remainder=False)
    assert len(partial["window"]) == 7


@pytest.mark.parametrize("flag, value", [
    ("--fps", "inf"), ("--fps", "nan"), ("--fps", "-1"), ("--shard_size_mb", "nan"),
    ("--shard_size_mb", "0.0000001"), ("--shuffle_bucket_mb", "inf"), ("--window", "abc"),
    ("--max_frame_bytes", "0"), ("--encoder_input_scale", "nan"), ("--seed", "-3"),
    ("--max_timestamp_gap", "0"), ("--max_timestamp_gap", "inf"),
])
def test_numbers_out_of_range_are_refused_in_one_line(tmp_path, capsys, flag, value):
    """(That refusals come before TensorFlow is imported: test_failures.py.)"""
    line = job_line(capsys, "--input", tmp_path / "x.jsonl", "--output_dir", tmp_path / "o",
                    "--window", "4", flag, value)
    assert flag in line
    assert "_positive" not in line and "invalid" not in line
