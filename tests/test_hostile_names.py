"""Any name or string is data: file names that are not UTF-8, lone surrogates in manifests,
ids with spaces around them and two Unicode spellings of one id, and globs of mixed input
kinds, each a failure row, an escaped id or a one-line refusal; never a crash, and every
file the job writes is valid UTF-8 JSON (docs/guarantees.md, "Names and ids")."""
import json
import os
import shutil
import unicodedata

import numpy as np
import pytest
from helpers import failures_by_video, job_line, read_dataset_json, read_examples, run_job, sidecar
from input_files import (
    latent_example,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_records,
    write_video,
)

from beam_jobs.core import ids
from readers.format import keys

NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _strict_json(path) -> list:
    """The JSON values of a .json or .jsonl file that must be UTF-8 and hold no lone
    surrogate (not even as a `\\udce9` escape)."""
    text = open(path, "rb").read().decode("utf-8")          # strict: raises if not UTF-8
    values = [json.loads(text)] if str(path).endswith(".json") else [
        json.loads(line) for line in text.splitlines()]
    assert all(ids.is_text(s) for s in _strings(values)), path
    return values


def _check_written(out) -> None:
    for name in ("dataset.json", "videos.jsonl", "failures.jsonl", "bad_frames.jsonl"):
        if os.path.exists(os.path.join(out, name)):
            _strict_json(os.path.join(out, name))


@pytest.mark.slow
def test_latent_files_named_in_any_bytes_get_escaped_nfc_ids(tmp_path):
    """In a folder whose own name is not UTF-8: `lat\\xe9.tfrecord` gives the ids
    `lat\\xe9.tfrecord:<index>` (a backslash, then `xe9`), and the NFC and NFD spellings of
    `café.tfrecord`, two files on Linux, give one id: both are duplicate failures."""
    folder = os.fsencode(str(tmp_path)) + b"/in\xff"
    os.makedirs(folder)
    files = {b"a.tfrecord": range(20), b"lat\xe9.tfrecord": (20, 21),
             os.fsencode(NFC + ".tfrecord"): (30,), os.fsencode(NFD + ".tfrecord"): (31,)}
    for name, values in files.items():   # TensorFlow writes to UTF-8 paths only
        os.rename(write_records(str(tmp_path / "tmp.tfrecord"), [
            latent_example(np.full((8, 2), i, np.float32), [i, 0]) for i in values]),
            folder + b"/" + name)
    out = tmp_path / "out"
    run_job(os.fsdecode(folder + b"/*"), out, "--window", "4", "--max_failure_fraction", "0.1")
    _check_written(out)
    by_id = {e["video_id"]: e for e in read_examples(out)}
    assert by_id["lat\\xe9.tfrecord:1"]["window"][0].tolist() == [21, 21]
    assert len(by_id) == 22 and not any(NFC in i or NFD in i for i in by_id)
    failures = _strict_json(sidecar(out, "failures"))
    assert [r["video_id"] for r in failures] == [f"{NFC}.tfrecord:0"] * 2
    assert all("appears 2 times" in r["reason"] for r in failures)
    assert read_dataset_json(out)["flags"]["input"] == [str(tmp_path) + "/in\\xff/*"]


@pytest.mark.slow
def test_id_feature_spellings_of_one_text_are_one_id(tmp_path):
    """`--id_feature` ids are NFC too: NFD and NFC `café` records are duplicates."""
    write_records(str(tmp_path / "in" / "a.tfrecord"), [   # each its own frames
        latent_example(np.full((8, 2), i, np.float32), video_id=name)
        for i, name in enumerate([f"v{i}" for i in range(8)] + [NFC, NFD])])
    out = tmp_path / "out"
    run_job(str(tmp_path / "in" / "*"), out, "--window", "4", "--id_feature", "vid",
            "--metadata_feature", "", "--max_failure_fraction", "0.2")
    assert [r["video_id"] for r in _strict_json(sidecar(out, "failures"))] == [NFC] * 2
    assert {e["video_id"] for e in read_examples(out)} == {f"v{i}" for i in range(8)}


@pytest.mark.slow
def test_video_files_named_in_any_bytes_get_escaped_ids_that_collide_loudly(tmp_path):
    """`caf\\xe9.mp4` (the byte 0xe9) and a file named with the four characters `\\xe9`
    have one id: both are duplicate failures, never one video taken for the other. (The
    latter is given by name: Beam's `*` never matches a backslash.)"""
    folder = os.fsencode(str(tmp_path / "clips"))
    os.makedirs(folder)
    for i, name in enumerate((b"a.mp4", b"d\xff\xfe.mp4", b"caf\xe9.mp4", b"caf\\xe9.mp4")):
        write_video(tmp_path / "tmp.mp4", solid_frames(8, start=i))   # each its own frames
        shutil.move(tmp_path / "tmp.mp4", folder + b"/" + name)
    out = tmp_path / "out"
    run_job(str(tmp_path / "clips" / "*.mp4"), out, "--input",
            str(tmp_path / "clips" / "caf\\xe9.mp4"), "--window", "4",
            "--max_failure_fraction", "0.5")
    _check_written(out)
    assert {e["video_id"] for e in read_examples(out)} == {"a", "d\\xff\\xfe"}
    videos = {r["video_id"]: r for r in _strict_json(sidecar(out, "videos"))}
    assert videos["d\\xff\\xfe"]["source"] == str(tmp_path / "clips" / "d\\xff\\xfe.mp4")
    failures = _strict_json(sidecar(out, "failures"))
    assert [r["source"] for r in failures] == [str(tmp_path / "clips" / "caf\\xe9.mp4")] * 2
    assert all(r["video_id"] == "caf\\xe9" and "appears 2 times" in r["reason"]
               for r in failures)


@pytest.mark.slow
def test_lone_surrogates_in_manifest_fields_are_failure_rows(tmp_path):
    """One bad row among 30 good ones: a lone surrogate in the id, a frame path or a
    labels path makes that row a failure naming the field; the rest is cut."""
    write_frame_folder(tmp_path / "v", solid_frames(6))
    rows = [{"video_id": f"ok{i}", "frames": "v", "metadata": [i]} for i in range(30)] + [
        {"video_id": "bad\ud800", "frames": "v", "metadata": [0]},
        {"video_id": "frames", "frames": "v\udce9", "metadata": [0]},
        {"video_id": "frame_list", "frames": ["v/frame_0.png", "v/frame_1\udfff.png"],
         "metadata": [0]},
        {"video_id": "labels", "frames": "v", "labels": "l\ud800.csv", "metadata": [0]}]
    write_manifest(tmp_path / "m.jsonl", rows)      # json.dumps writes "\ud800" escapes
    out = tmp_path / "out"
    run_job(str(tmp_path / "m.jsonl"), out, "--window", "3", "--max_failure_fraction", "0.2")
    _check_written(out)
    failures = {r["record_index"]: r for r in _strict_json(sidecar(out, "failures"))}
    assert sorted(failures) == [30, 31, 32, 33]
    assert failures[30]["video_id"] is None
    assert failures[30]["reason"] == ("video_id is not valid Unicode text (a lone "
                                      "surrogate): 'bad\\ud800'")
    assert failures[31]["video_id"] == "frames" and "frames is not valid" in failures[31][
        "reason"] and "'v\\xe9'" in failures[31]["reason"]
    assert "frames is not valid" in failures[32]["reason"]
    assert failures[33]["video_id"] == "labels" and "labels is not valid" in failures[33][
        "reason"]
    assert {e["video_id"] for e in read_examples(out)} == {f"ok{i}" for i in range(30)}


@pytest.mark.slow
def test_a_frame_named_in_any_bytes_is_a_masked_frame_with_an_escaped_path(tmp_path):
    write_frame_folder(tmp_path / "v", solid_frames(6))
    bad = os.fsencode(str(tmp_path / "v")) + b"/frame_3\xe9.png"
    open(bad, "wb").write(b"not an image")
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    out = tmp_path / "out"
    run_job(str(tmp_path / "m.jsonl"), out, "--window", "7")
    _check_written(out)
    (row,) = _strict_json(sidecar(out, "bad_frames"))
    assert row["where"] == str(tmp_path / "v" / "frame_3\\xe9.png") and row["frame"] == 4
    (e,) = read_examples(out)
    assert e["mask"].tolist() == [1, 1, 1, 1, 0, 1, 1]


@pytest.mark.slow
def test_manifest_ids_are_never_stripped_and_are_nfc(tmp_path):
    """An id with spaces around it is a failure row saying so (it used to be stripped
    without a word); NFD and NFC `café` are one id, so both rows are duplicates; an NFD
    id alone is stored, and hashed into its split, as NFC."""
    write_frame_folder(tmp_path / "v", solid_frames(6))
    naive = unicodedata.normalize("NFD", "naïve")
    rows = [{"video_id": video_id, "frames": "v", "metadata": [i]}   # each its own video
            for i, video_id in enumerate([" padded ", "plain", NFC, NFD, naive])]
    write_manifest(tmp_path / "m.jsonl", rows)
    out = tmp_path / "out"
    run_job(str(tmp_path / "m.jsonl"), out, "--window", "3", "--splits",
            "train=0.5,validation=0.5", "--max_failure_fraction", "0.7")
    _check_written(out)
    failures = failures_by_video(out)
    assert set(failures) == {" padded ", NFC}
    assert "has spaces around it" in failures[" padded "]["reason"]
    assert "appears 2 times" in failures[NFC]["reason"]
    assert len(_strict_json(sidecar(out, "failures"))) == 3
    videos = {r["video_id"]: r for r in _strict_json(sidecar(out, "videos"))}
    nfc_naive = unicodedata.normalize("NFC", naive)
    assert set(videos) == {"plain", nfc_naive}
    splits = {"train": 0.5, "validation": 0.5}
    assert videos[nfc_naive]["split"] == keys.assign_split(0, nfc_naive, splits)
    stored = {e["video_id"] for split in ("train", "validation")
              for e in read_examples(out, split)}
    assert stored == {"plain", nfc_naive}


def test_a_glob_that_mixes_input_kinds_is_refused_naming_the_odd_file(tmp_path, capsys):
    """One `.m4a` among videos was read, with them, as TFRecords of latents."""
    (tmp_path / "clips").mkdir()
    for name in ("one.mp4", "two.mkv", "sound.m4a"):
        (tmp_path / "clips" / name).write_bytes(b"never read")
    line = job_line(capsys, "--input", str(tmp_path / "clips" / "*"), "--output_dir",
                    str(tmp_path / "o1"), "--window", "3")
    assert f"'{tmp_path}/clips/sound.m4a' would be read as latent TFRecords" in line
    assert "mixes kinds of input" in line
    (tmp_path / "lat").mkdir()
    for name in ("a.tfrecord", "b.tfrecord", "stray.mp4", "m.jsonl"):
        (tmp_path / "lat" / name).write_bytes(b"never read")
    line = job_line(capsys, "--input", str(tmp_path / "lat" / "*"), "--output_dir",
                    str(tmp_path / "o2"), "--window", "3")
    assert f"'{tmp_path}/lat/m.jsonl' is a manifest" in line
    assert not any((tmp_path / o).exists() for o in ("o1", "o2"))


@pytest.mark.slow
def test_a_glob_that_matches_only_manifests_reads_them_as_manifests(tmp_path):
    """(They were read as TFRecords of latents.)"""
    write_frame_folder(tmp_path / "v", solid_frames(6))
    (tmp_path / "m").mkdir()
    for i, name in enumerate("ab"):   # one frame folder, two videos (their metadata)
        write_manifest(tmp_path / "m" / f"{name}.jsonl",
                       [{"video_id": name, "frames": "../v", "metadata": [i]}])
    run_job(str(tmp_path / "m" / "*"), tmp_path / "out", "--window", "3")
    assert {e["video_id"] for e in read_examples(tmp_path / "out")} == {"a", "b"}


def test_an_output_dir_named_in_bytes_that_are_not_utf8_is_refused(tmp_path, capsys):
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(np.zeros((8, 2), np.float32))])
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/out\xe9")
    line = job_line(capsys, "--input", str(tmp_path / "in" / "*"), "--output_dir", out,
                    "--window", "3")
    assert "out\\xe9' is not UTF-8 text" in line
    assert not os.path.exists(out)
