"""TensorFlow Datasets reads the job's kinds as they are: `tfds.builder_from_directory`
on the dataset_info.json the job writes (the features inside it), with the values of our
readers, for every encoding; --verify checks it, --overwrite replaces it, and a run
rewrites one a kill left behind."""
import dataclasses
import json
import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
from helpers import docs_code, read_dataset_json, run_job

import readers
from readers.format import CODECS, tfds_info
from readers.inspect import command as inspect
from readers.numpy import WindowSource

tfds = pytest.importorskip("tensorflow_datasets")

TFDS_FILES = ["dataset_info.json"]


def _tfds_windows(path, split, decoders=None) -> dict:
    builder = tfds.builder_from_directory(path)
    return {(bytes(ex["video_id"]), int(ex["start"])): ex for ex in tfds.as_numpy(
        builder.as_dataset(split=split, shuffle_files=False, decoders=decoders))}


def _our_windows(path, split) -> dict:
    source = WindowSource(path, split, keep_float16=True)
    return {(bytes(w["video_id"]), int(w["start"])): w
            for w in source.__getitems__(range(len(source)))}


def _assert_same_windows(path, split, decoders=None) -> None:
    theirs, ours = _tfds_windows(path, split, decoders), _our_windows(path, split)
    assert sorted(theirs) == sorted(ours) and ours
    for key, window in ours.items():
        assert sorted(theirs[key]) == sorted(window)
        for name, value in window.items():
            got = theirs[key][name]
            if isinstance(value, bytes):
                assert got == value
                continue
            assert got.dtype == value.dtype, (name, got.dtype)
            np.testing.assert_array_equal(got, value, err_msg=f"{key} {name}")


@pytest.mark.parametrize("kind", ["latent", "float16", "bfloat16", "raw", "png"])
def test_tfds_gives_our_windows(kinds, kind):
    path = kinds[kind]
    meta = read_dataset_json(path)
    assert set(TFDS_FILES) <= set(meta["files"])
    for split, info in meta["splits"].items():
        if info["windows"]:
            _assert_same_windows(path, split)


def test_tfds_gives_our_jpeg_windows_with_the_accurate_decoder(kinds):
    """The decoder docs/readers.md shows (its second block under "TensorFlow Datasets",
    run as it is on a builder of the jpeg kind): libjpeg's accurate integer DCT, as
    readers.numpy (Pillow) and make_dataset decode, where TFDS's Image uses the fast one."""
    shown = {"tfds": tfds, "builder": tfds.builder_from_directory(kinds["jpeg"])}
    exec(docs_code("readers.md", "TensorFlow Datasets", 1), shown)
    assert isinstance(shown["ds"], tf.data.Dataset)
    _assert_same_windows(kinds["jpeg"], "train", {"window": shown["accurate_jpeg"]()})


def test_an_empty_split_is_listed_without_shards_and_refused_as_ours_is(kinds):
    builder = tfds.builder_from_directory(kinds["latent"])
    assert sorted(builder.info.splits) == ["empty", "test", "train"]
    empty = builder.info.splits["empty"]
    assert (empty.num_shards, empty.num_examples) == (0, 0)
    with pytest.raises(ValueError, match="corresponds to no data"):
        builder.as_dataset(split="empty")
    train = builder.info.splits["train"].num_examples
    assert sum(1 for _ in builder.as_dataset(split="train+empty")) == train
    with pytest.raises(ValueError, match="has no shards"):
        readers.make_dataset(kinds["latent"], "empty")


def test_builder_info_describes_this_dataset_and_cites_its_run(kinds):
    spec = readers.load_spec(kinds["latent"])
    info = tfds.builder_from_directory(kinds["latent"]).info
    train = spec.splits["train"]
    assert f"train {train.windows:,} windows of {train.videos:,} videos" in info.description
    assert f"Windows of {spec.window.length} frames every {spec.window.stride}" in (
        info.description)
    assert info.citation.startswith(f"@misc{{video_window_shards_{spec.run_id},")
    on_disk = sum(os.path.getsize(os.path.join(kinds["latent"], shard.file))
                  for split in spec.splits.values() for shard in split.shards)
    assert int(info.dataset_size) == on_disk > 0


def test_builder_info_homepage_is_the_flag_or_where_the_dataset_was_written(kinds):
    """Not TFDS's catalog page for the name, which does not exist."""
    info = tfds.builder_from_directory(kinds["latent"]).info
    assert info.homepage == pathlib.Path(kinds["latent"]).resolve().as_uri()
    given = tfds.builder_from_directory(kinds["png"]).info
    assert given.homepage == "https://example.org/cams?q=1&r=é"


def test_every_encoding_has_a_tfds_feature():
    assert sorted(tfds_info.FEATURE_OF) == sorted(CODECS)


def test_shards_not_named_as_tfds_opens_them_are_a_one_line_error(kinds):
    spec = readers.load_spec(kinds["latent"])
    train = spec.splits["train"]
    swapped = dataclasses.replace(spec, splits={
        **spec.splits, "train": dataclasses.replace(train, shards=train.shards[::-1])})
    with pytest.raises(ValueError, match=r"split 'train': its shards are not named "
                                         r"train-NNNNN-of-00002-[0-9a-f]{12}\.tfrecord in order"):
        tfds_info.files(swapped)


def test_verify_names_an_edited_tfds_file(kinds, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(kinds["latent"], copy)
    info = json.loads((copy / "dataset_info.json").read_text())
    info["splits"][0]["shardLengths"][0] = str(int(info["splits"][0]["shardLengths"][0]) + 1)
    (copy / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(SystemExit) as exit:
        inspect.main([str(copy), "--verify"])
    problems = capsys.readouterr().err.splitlines()
    assert exit.value.code == 1 and problems[0] == "verify: 1 problem; the first:"
    assert problems[1:] == [
        "  dataset_info.json: not what dataset.json gives, nor the view of an earlier commit "
        "whose shards are all there (regenerate it with readers.format.tfds_info.files)"]
    (copy / "dataset_info.json").unlink()
    with pytest.raises(SystemExit):
        inspect.main([str(copy), "--verify"])
    assert "dataset_info.json: missing" in capsys.readouterr().err


@pytest.mark.slow
def test_overwrite_replaces_the_tfds_files_and_a_gzip_dataset_has_none(kinds, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(kinds["latent"], out)
    lat = os.path.join(os.path.dirname(kinds["latent"]), "lat", "*")
    run_job(lat, out, "--window", "3", "--overwrite")
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["window"].shape == (3, 3)
    assert sorted(builder.info.splits) == ["train"]
    _assert_same_windows(str(out), "train")
    # TFDS opens TFRecords without a compression type: gzip shards get no TFDS files,
    # and those of the dataset replaced go with it
    run_job(lat, out, "--window", "3", "--compression", "gzip", "--overwrite")
    assert not set(TFDS_FILES) & (set(os.listdir(out)) | set(read_dataset_json(out)["files"]))
    with pytest.raises(Exception, match="dataset_info.json"):
        tfds.builder_from_directory(str(out))
