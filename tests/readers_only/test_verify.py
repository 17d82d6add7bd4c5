"""`readers.inspect --verify` over every kind of dataset, and the broken shards it finds
(the rest of readers.inspect: tests/test_inspect.py)."""
import json
import shutil

import pytest
from format_datasets import KIND_FLAGS
from helpers import inspect_run

import readers
from readers.inspect.verify import verify


@pytest.mark.parametrize("kind", sorted(KIND_FLAGS))
def test_verify_passes_a_sound_dataset(datasets, kind, capsys):
    code, out, _ = inspect_run(capsys, datasets[kind], "--verify")
    assert code == 0 and "verify: all" in out and "are sound" in out


def _broken_copy(source, tmp_path, how):
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    meta = json.loads((copy / "dataset.json").read_text())
    shard = copy / meta["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    if how == "flipped byte":
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif how == "truncated":
        shard.write_bytes(bytes(data[:len(data) - 50]))
    elif how == "missing shard":
        shard.unlink()
    elif how == "extra record":
        other = copy / meta["splits"]["train"]["shards"][1]["file"]
        first_record = other.read_bytes()[:16 + int.from_bytes(other.read_bytes()[:8], "little")]
        shard.write_bytes(bytes(data) + first_record)
    return str(copy), shard.name


@pytest.mark.parametrize("how, needle", [("flipped byte", "corrupt"),
                                         ("truncated", "where dataset.json says"),
                                         ("missing shard", "missing"),
                                         ("extra record", "dataset.json says")])
def test_verify_finds_broken_shards(datasets, tmp_path, capsys, how, needle):
    copy, shard = _broken_copy(datasets["latent"], tmp_path, how)
    problems = verify(copy, readers.load_spec(copy))
    assert problems and any(shard in p and needle in p for p in problems), problems
    code, _, err = inspect_run(capsys, copy, "--verify")
    assert code == 1 and needle in err


@pytest.mark.parametrize("side", ["index", "table"])
def test_verify_names_a_missing_side_file(datasets, tmp_path, capsys, side):
    copy = tmp_path / "copy"
    shutil.copytree(datasets["latent"], copy)
    name = json.loads((copy / "dataset.json").read_text())["splits"]["train"]["shards"][0][side]
    (copy / name).unlink()
    problems = verify(str(copy), readers.load_spec(str(copy)))
    assert f"{name}: missing" in problems, problems
    code, _, err = inspect_run(capsys, str(copy), "--verify")
    assert code == 1 and f"{name}: missing" in err
