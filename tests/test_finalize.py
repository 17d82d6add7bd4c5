"""The job's end: the decision to commit (pure), no per-video lists (windows stream out of
the cut, a video that fails half-way leaves none of them), and the sidecar files sorted
from parts."""
import json
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.pipeline import PipelineVisitor
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import KINDS
from helpers import assert_verified, read_dataset_json, read_examples, sidecar
from input_files import (
    latent_example,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_records,
)

from beam_jobs import make_shards
from beam_jobs.commit import sidecars
from beam_jobs.commit.decide import (
    COMMIT,
    IDS_TWICE,
    NO_WINDOW,
    NOTHING_NEW,
    TOO_MANY_FAILURES,
    Counts,
    decide,
)
from beam_jobs.core.run_dir import RunDir
from beam_jobs.job.flags import parse_args
from beam_jobs.job.launch import Launch
from beam_jobs.sources import build_source


def _jsonl(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _counter(result, name: str) -> int:
    return sum(c.committed or 0 for c in
               result.metrics().query(MetricsFilter().with_name(name))["counters"])


@pytest.mark.slow
def test_a_video_that_fails_half_way_leaves_none_of_its_streamed_windows(tmp_path):
    write_frame_folder(tmp_path / "v", solid_frames(6))
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "ok", "frames": "v", "labels": list(range(6))},
        # 4 labels: windows [0, 2) and [2, 4) are cut and emitted, then frame 5 fails it
        {"video_id": "short_labels", "frames": "v", "labels": list(range(4))},
        # 8 labels: all three windows are emitted before the count is found wrong
        {"video_id": "long_labels", "frames": "v", "labels": list(range(8))},
        # the same frames with other labels: another video (one content is one video)
        {"video_id": "ok2", "frames": "v", "labels": list(range(1, 7))}])
    out = tmp_path / "out"
    result = make_shards.run(["--input", str(tmp_path / "m.jsonl"), "--output_dir", str(out),
                              "--window", "2", "--stride", "2", "--max_failure_fraction", "0.5"])
    assert_verified(out)
    assert _counter(result, "windows_abandoned") == 2 + 3
    assert sorted(e["video_id"] for e in read_examples(out)) == ["ok"] * 3 + ["ok2"] * 3
    failures = {r["video_id"]: r["reason"] for r in _jsonl(sidecar(out, "failures"))}
    assert failures == {"long_labels": "8 labels for 6 frames",
                        "short_labels": "4 labels, but the video has more frames"}
    assert [r["video_id"] for r in _jsonl(sidecar(out, "videos"))] == ["ok", "ok2"]
    meta = read_dataset_json(out)
    assert meta["failures"] == 2 and meta["splits"]["train"]["windows"] == 6


@pytest.mark.slow
def test_a_half_way_failure_with_the_id_of_a_good_video_fails_both(tmp_path):
    write_frame_folder(tmp_path / "v", solid_frames(6))
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "a", "frames": "v", "labels": list(range(6))},
        {"video_id": "a", "frames": "v", "labels": list(range(4))},
        *({"video_id": f"b{i}", "frames": "v", "labels": list(range(i, i + 6))}
          for i in range(3))])
    out = tmp_path / "out"
    make_shards.run(["--input", str(tmp_path / "m.jsonl"), "--output_dir", str(out),
                     "--window", "2", "--stride", "2", "--max_failure_fraction", "0.5"])
    assert_verified(out)
    assert {e["video_id"] for e in read_examples(out)} == {"b0", "b1", "b2"}
    rows = _jsonl(sidecar(out, "failures"))
    assert [(r["video_id"], r["record_index"]) for r in rows] == [("a", 0), ("a", 1)]
    assert "appears 2 times" in rows[0]["reason"]
    assert rows[1]["reason"] == "4 labels, but the video has more frames"


@pytest.mark.slow
def test_sidecar_rows_come_out_sorted_across_many_videos_and_splits(tmp_path, rng):
    records = []
    for i in range(600):
        if i % 50 == 7:
            records.append(b"not an example %d" % i)
        else:
            records.append(latent_example(rng.standard_normal((int(rng.integers(3, 12)), 2))
                                          .astype(np.float32)))
    for f in range(3):
        write_records(str(tmp_path / "in" / f"part-{f}.tfrecord"), records[f::3])
    out = tmp_path / "out"
    make_shards.run(["--input", str(tmp_path / "in" / "*"), "--output_dir", str(out),
                     "--window", "4", "--stride", "2", "--splits", "train=0.7,test=0.3",
                     "--max_failure_fraction", "0.1"])
    assert_verified(out)
    videos = _jsonl(sidecar(out, "videos"))
    assert len(videos) == 600 - 12
    assert videos == sorted(videos, key=lambda r: (r["split"], r["video_id"]))
    meta = read_dataset_json(out)
    for split, info in meta["splits"].items():
        mine = [v for v in videos if v["split"] == split]
        assert info["windows"] == sum(v["windows"] for v in mine)
        assert info["videos"] + info["skipped_short"] == len(mine)
    failures = _jsonl(sidecar(out, "failures"))
    assert [(r["source"], r["record_index"]) for r in failures] == sorted(
        (str(tmp_path / "in" / f"part-{i % 3}.tfrecord"), i // 3)
        for i in range(600) if i % 50 == 7)
    assert meta["failures"] == 12


@pytest.mark.slow
def test_sorted_jsonl_is_cut_into_parts_and_joined_in_order(tmp_path, rng):
    """Several files in one pass, each sorted by its own key, a bucket at a boundary
    between two files writing a part of each."""
    rows = [{"video_id": f"v{int(rng.integers(0, 700)):04d}", "source": f"s{i % 3}",
             "frame": int(rng.integers(0, 5))} for i in range(3000)]
    more = [{"n": int(n)} for n in rng.integers(0, 100, 500)]
    run = RunDir(str(tmp_path / "out"), "r", str(tmp_path / "temp"))
    os.makedirs(run.output_dir)
    key = lambda row: (row["video_id"], row["source"], row["frame"])  # noqa: E731
    files = (sidecars.JsonlFile("rows.jsonl", key),
             sidecars.JsonlFile("empty.jsonl", key, when_empty=False),
             sidecars.JsonlFile("more.jsonl", lambda row: -row["n"]),
             sidecars.JsonlFile("kept.jsonl", key))
    with BeamTestPipeline(runner="FnApiRunner") as p:
        names = ((p | beam.Create(rows), p | "Empty" >> beam.Create([]),
                  p | "More" >> beam.Create(more), p | "Kept" >> beam.Create([]))
                 | sidecars.WriteSortedJsonl(run, files))
        assert_that(names, equal_to([["rows.jsonl", "more.jsonl", "kept.jsonl"]]))
    written = [json.loads(line) for line in open(run.in_run_folder("rows.jsonl"))]
    assert written == sorted(rows, key=lambda row: (key(row), json.dumps(row, sort_keys=True)))
    written = [json.loads(line) for line in open(run.in_run_folder("more.jsonl"))]
    assert written == sorted(more, key=lambda row: -row["n"])
    assert len(os.listdir(tmp_path / "temp" / "sidecars" / "rows.jsonl")) > 50
    assert os.listdir(tmp_path / "temp" / "sidecars" / "more.jsonl")
    assert not os.path.exists(run.in_run_folder("empty.jsonl"))
    assert open(run.in_run_folder("kept.jsonl")).read() == ""


def _gathering_steps(pipeline: beam.Pipeline) -> set[str]:
    """The labels of the steps that take a whole PCollection as one list: a ToList
    combine, or a side input read as a list or an iterable (but a combine's default
    value, one element)."""
    steps = set()

    class Visitor(PipelineVisitor):
        def visit_transform(self, node):
            if node.full_label.endswith("/InjectDefault"):
                return
            if isinstance(node.transform, beam.combiners.ToList) or any(
                    isinstance(s, (beam.pvalue.AsList, beam.pvalue.AsIter))
                    for s in node.side_inputs):
                steps.add(node.full_label.rsplit("/", 1)[0])

    pipeline.visit(Visitor())
    return steps


@pytest.mark.slow
def test_no_list_of_per_video_rows_is_gathered(tmp_path):
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(np.zeros((6, 2), np.float32))])
    for shuffle in ("spill", "group"):
        config, _ = parse_args(["--input", str(tmp_path / "in" / "*"), "--output_dir",
                                str(tmp_path / "out"), "--window", "4", "--shuffle", shuffle])
        pipeline = beam.Pipeline()
        launch = Launch.settle(config, [], "FnApiRunner", build_source(config))
        make_shards.build_pipeline(pipeline, launch, RunDir(str(tmp_path / "out"), "r", ""))
        # one row per sorted file, per sidecar part, the commit's one result (the
        # cleanup and the release, stages of their own): none per video (the shards'
        # rows go with the counts, in finalize's one combine)
        assert _gathering_steps(pipeline) == {
            "WriteShards/PlanShards", "Finalize/Sidecars/Concatenate", "Finalize/CleanUp",
            "Finalize/ReleaseLease"}


def _side_input_steps(pipeline: beam.Pipeline) -> set[str]:
    steps = set()

    class Visitor(PipelineVisitor):
        def visit_transform(self, node):
            if node.side_inputs:
                steps.add(node.full_label)

    pipeline.visit(Visitor())
    return steps


@pytest.mark.parametrize("kind", ["latent", "png"])
def test_an_appends_known_ids_meet_the_input_in_a_join_not_a_side_input(kinds, kind):
    """At 2 TB the dataset knows 3M ids: no worker may hold them all."""
    from readers import format as data_format

    out = kinds[kind]
    with open(os.path.join(out, "dataset.json")) as f:
        base = data_format.DatasetSpec.from_json(f.read())
    inputs, flags = KINDS[kind]
    config, _ = parse_args(["--input", os.path.join(os.path.dirname(out), inputs),
                            "--output_dir", out, "--window", "4", "--stride", "2", *flags,
                            "--append", "--shuffle", "group"])
    pipeline = beam.Pipeline()
    launch = Launch.settle(config, [], "FnApiRunner", build_source(config))
    make_shards.build_pipeline(pipeline, launch, RunDir(out, "r", ""), 1, base)
    labels = set()

    class Labels(PipelineVisitor):
        def visit_transform(self, node):
            labels.add(node.full_label)

        enter_composite_transform = visit_transform

    pipeline.visit(Labels())
    assert any(label.endswith("SkipKnown/JoinIds") for label in labels)
    assert not any(label.startswith("ReadVideos/") for label in _side_input_steps(pipeline))
    assert _gathering_steps(pipeline) == {
        "WriteShards/PlanShards", "Finalize/Sidecars/Concatenate", "Finalize/CleanUp",
        "Finalize/ReleaseLease"}


@pytest.mark.parametrize("counts, threshold, appending, outcome, reason", [
    (Counts(good=10, failed=0, windows=40, longest=9), 0.05, False, COMMIT, ""),
    (Counts(good=19, failed=1, windows=40, longest=9), 0.05, False, COMMIT, ""),
    (Counts(good=18, failed=2, windows=40, longest=9), 0.05, False, TOO_MANY_FAILURES,
     "2 of 20 videos failed (10.0%), more than --max_failure_fraction 0.05"),
    (Counts(good=0, failed=0, windows=0, longest=0), 0.05, True, NOTHING_NEW,
     "every input video is in the dataset already"),
    (Counts(good=2, failed=0, windows=0, longest=3), 0.05, True, COMMIT, ""),
    (Counts(good=2, failed=0, windows=0, longest=3), 0.05, False, NO_WINDOW,
     "no window to commit: every video is shorter than --window 8 (the longest has 3 "
     "frames)"),
    (Counts(good=0, failed=3, windows=0, longest=0), 1.0, False, NO_WINDOW,
     "no window to commit: no video was read (3 failed)"),
    (Counts(good=0, failed=3, windows=0, longest=0), 0.5, True, TOO_MANY_FAILURES,
     "3 of 3 videos failed (100.0%), more than --max_failure_fraction 0.5"),
    (Counts(good=5, failed=0, windows=9, longest=9, twice=1), 0.05, True, IDS_TWICE,
     "1 video id would be listed twice in the videos file, which a dataset never does"),
])
def test_the_decision_to_commit(counts, threshold, appending, outcome, reason):
    """Pure: from the counts, the threshold, the window and whether the run appends, the
    outcome and the one line that says why there is no commit. An append commits new
    videos too short for a window (their ids are then known)."""
    decision = decide(counts, threshold, 8, appending)
    assert (decision.outcome, decision.reason) == (outcome, reason)
    assert decision.commits == (outcome == COMMIT)
