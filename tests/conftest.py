"""Fixtures shared by the tests (the `slow` marker is declared in pytest.ini;
`pytest -m "not slow"` is the inner loop). Helpers are in helpers.py."""
import os
import pathlib

import numpy as np
import pytest
from format_datasets import KIND_FLAGS, kind_videos
from format_datasets import kinds as format_kinds


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# One small dataset of each kind the readers read, as `run_jobs` builds them (windows of 4
# every 2): name -> (input under the root, the job's flags). Their videos are
# format_datasets.kind_videos; format_datasets writes the same datasets without the job
# (tests/readers_only/ reads those), bfloat16 aside.
_INPUTS = {"latent": "lat/*", "gzip": "lat/*", "float16": "half/*", "bfloat16": "brain/*",
           "long": "longin/*", "raw": "m.jsonl", "png": "m.jsonl", "jpeg": "m.jsonl"}
KINDS = {name: (source, KIND_FLAGS.get(name, [])) for name, source in _INPUTS.items()}


def _write_kinds_inputs(root) -> None:
    """The job's inputs of KINDS under `root`: latent TFRecord files, frame folders with
    a labels file each, and their manifest."""
    import tensorflow as tf
    from input_files import write_frame_folder, write_manifest, write_videos

    videos = kind_videos(str(root))
    for name, files in (("lat", 2), ("half", 1), ("brain", 1), ("longin", 1)):
        pairs = [(v.frames, v.metadata) for v in videos[name]]
        if name == "brain":
            pairs = [(tf.cast(frames, tf.bfloat16).numpy(), recipe) for frames, recipe in pairs]
        write_videos(str(root / name), pairs, files=files)
    rows = []
    for video in videos["pixels"]:
        write_frame_folder(root / video.video_id, list(video.frames))
        (root / f"{video.video_id}.csv").write_text("heat,smoke\n" + "\n".join(
            ",".join(f"{label:g}" for label in labels) for labels in video.labels))
        rows.append({"video_id": video.video_id, "frames": video.video_id,
                     "labels": f"{video.video_id}.csv", "metadata": video.metadata.tolist(),
                     **video.fields})
    write_manifest(root / "m.jsonl", rows)


def _built_once(tmp_path_factory, request, name: str, build) -> pathlib.Path:
    """The folder `name` where `build(folder)` ran once a session (with pytest-xdist,
    once for all its workers: the first to ask builds, the others wait for it)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    # an xdist worker's temp folder lies in the session's, which all workers share
    root = (base.parent if hasattr(request.config, "workerinput") else base) / name
    with FileLock(f"{root}.lock"):
        if not (root / "built").exists():
            root.mkdir(exist_ok=True)
            build(root)
            (root / "built").touch()
    return root


@pytest.fixture(scope="session")
def kinds(tmp_path_factory, request) -> dict[str, str]:
    """KINDS, built once a session (with pytest-xdist, once for all its workers): name ->
    the dataset's path. Tests read them; a test that changes one changes a copy."""
    from helpers import run_jobs

    def build(root) -> None:
        _write_kinds_inputs(root)
        run_jobs(root, [(name, source, flags) for name, (source, flags) in KINDS.items()])

    root = _built_once(tmp_path_factory, request, "kinds", build)
    return {name: os.path.join(root, name) for name in KINDS}


@pytest.fixture(scope="session")
def fire_sample(tmp_path_factory, request) -> str:
    """The fire sample the examples make without --data (examples/example_data.py), of
    16 videos, built once a session: what the fire examples and the docs' fire blocks
    (tests/test_docs_code.py) read. Tests read it as it is."""
    from helpers import example_module

    made = example_module("example_data")
    root = _built_once(tmp_path_factory, request, "fire_sample",
                       lambda root: made.fire_dataset(str(root), videos=16))
    return os.path.join(root, made.DATASET)


@pytest.fixture(scope="session")
def fire(tmp_path_factory, request) -> str:
    """The fire story in small (fire_story.py), built once a session: what the selection
    tests read (test_select.py, test_window_tables.py). Tests read it as it is."""
    import fire_story

    root = _built_once(tmp_path_factory, request, "fire", fire_story.write)
    return str(root / "out")


@pytest.fixture(scope="session", params=["format", pytest.param("job", marks=pytest.mark.slow)])
def datasets(request, tmp_path_factory) -> dict[str, str]:
    """The datasets of tests/readers_only/, the readers' inner loop that needs neither Beam
    nor TensorFlow (docs/contributing.md): name -> path of a small dataset of each kind
    of format_datasets.KIND_FLAGS, written by readers/format alone (`format`), once a
    session (a worker's, with pytest-xdist); and, marked slow, the same kinds built by the
    job (`job`: `kinds`, skipped without Beam), so that each test runs over both
    (tests/test_format_datasets.py checks that they hold the same bytes). Tests read
    them; a test that changes one changes a copy."""
    if request.param == "job":
        pytest.importorskip("apache_beam", reason="the job-built datasets need Beam")
        return request.getfixturevalue("kinds")
    return format_kinds(tmp_path_factory.mktemp("format_kinds"))


@pytest.fixture(scope="session")
def report_datasets(tmp_path_factory):
    """The report tests' latent and pixel datasets with their pages (tests/report_pages.py),
    built once a worker: (name -> (dataset, page), the latent run's log lines)."""
    import report_pages

    root = tmp_path_factory.mktemp("report")
    log = report_pages.build_latent(root)
    report_pages.build_pixel(root)
    return {name: report_pages.report_of(root / name) for name in ("latent", "pixel")}, log


@pytest.fixture(scope="session")
def appended_report(tmp_path_factory):
    """The appended dataset (two runs more) and its page, built on first need."""
    import report_pages

    root = tmp_path_factory.mktemp("report_appended")
    report_pages.build_appended(root)
    return report_pages.report_of(root / "appended")


@pytest.fixture
def reports(report_datasets, request):
    """name -> (dataset, page) of the report datasets; the appended one only for a test
    parametrized with name="appended" (report_pages.PAGES marks it slow)."""
    made = dict(report_datasets[0])
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("name") == "appended":
        made["appended"] = request.getfixturevalue("appended_report")
    return made
