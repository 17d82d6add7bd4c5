"""Fixtures shared by the tests (the `slow` marker is declared in pytest.ini;
`pytest -m "not slow"` is the inner loop). Helpers are in helpers.py."""
import os

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# One small dataset of each kind the readers read, as `run_jobs` builds them (windows of 4
# every 2). name -> (input under the root, the job's flags).
KINDS = {
    # 10 videos; by the split hash, none goes to "empty" (1%)
    "latent": ("lat/*", ["--splits", "train=0.6,test=0.39,empty=0.01", "--num_shards", "2"]),
    "gzip": ("lat/*", ["--compression", "gzip"]),
    "float16": ("half/*", ["--num_shards", "2"]),
    "bfloat16": ("brain/*", []),
    # ids of one and two digits, starts of one and two varint bytes: records of one size
    # in more than one layout
    "long": ("longin/*", ["--num_shards", "2"]),
    # videos a (7 frames) and b (9), labels heat and smoke, metadata [1.5, i]
    "raw": ("m.jsonl", ["--frame_encoding", "raw", "--num_shards", "2"]),
    "png": ("m.jsonl", ["--frame_encoding", "png", "--num_shards", "2",
                        "--homepage", "https://example.org/cams?q=1&r=é"]),
    "jpeg": ("m.jsonl", ["--frame_encoding", "jpeg"]),
}


def _write_kinds_inputs(root) -> None:
    import tensorflow as tf

    from helpers import random_videos, write_frame_folder, write_manifest, write_videos

    rng = np.random.default_rng(5)
    write_videos(str(root / "lat"), random_videos(rng, 10, lengths=(12, 40)), files=2)
    write_videos(str(root / "half"), [(f.astype(np.float16), r) for f, r in
                                      random_videos(rng, 3, lengths=(12, 20))], files=1)
    write_videos(str(root / "brain"), [(tf.cast(f, tf.bfloat16).numpy(), r) for f, r in
                                       random_videos(rng, 2, lengths=(10, 16))], files=1)
    write_videos(str(root / "longin"), random_videos(rng, 12, lengths=(150, 300)), files=1)
    rows = []
    for i, (video, length) in enumerate((("a", 7), ("b", 9))):
        write_frame_folder(root / video, list(rng.integers(0, 255, (length, 24, 32, 3),
                                                           np.uint8)))
        (root / f"{video}.csv").write_text("heat,smoke\n" + "\n".join(
            f"{t},{2 * t + i}" for t in range(length)))
        rows.append({"video_id": video, "frames": video, "labels": f"{video}.csv",
                     "metadata": [1.5, i]})
    write_manifest(root / "m.jsonl", rows)


@pytest.fixture(scope="session")
def kinds(tmp_path_factory, request) -> dict[str, str]:
    """KINDS, built once a session (with pytest-xdist, once for all its workers): name ->
    the dataset's path. Tests read them; a test that changes one changes a copy."""
    from filelock import FileLock

    from helpers import run_jobs

    base = tmp_path_factory.getbasetemp()
    # an xdist worker's temp folder lies in the session's, which all workers share
    root = (base.parent if hasattr(request.config, "workerinput") else base) / "kinds"
    with FileLock(f"{root}.lock"):
        if not (root / "built").exists():
            root.mkdir(exist_ok=True)
            _write_kinds_inputs(root)
            run_jobs(root, [(name, source, flags) for name, (source, flags) in KINDS.items()])
            (root / "built").touch()
    return {name: os.path.join(root, name) for name in KINDS}


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
