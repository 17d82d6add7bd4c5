"""storage.start_writeback: advice to the kernel, given in a thread of its own; it never
changes a file, and never fails or slows a run."""
import os
import threading

import pytest

from beam_jobs.core import storage


def _join_writebacks() -> None:
    for thread in threading.enumerate():
        if thread.name == "start_writeback":
            thread.join(timeout=30)


@pytest.fixture
def thread_errors(monkeypatch):
    """What an exception in a thread would report (threading.excepthook)."""
    errors: list = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    return errors


def test_a_complete_shard_is_handed_to_writeback_unchanged(tmp_path, thread_errors):
    path = tmp_path / "train-00000-of-00001.tfrecord"
    data = os.urandom(4 << 20)
    path.write_bytes(data)
    storage.start_writeback(str(path))
    _join_writebacks()
    assert not thread_errors
    assert path.read_bytes() == data


def test_a_file_gone_before_its_writeback_is_no_error(tmp_path, thread_errors):
    path = tmp_path / "deleted"
    path.write_bytes(b"x")
    storage.start_writeback(str(path))
    path.unlink()
    storage.start_writeback(str(tmp_path / "never-there"))
    _join_writebacks()
    assert not thread_errors


@pytest.mark.parametrize("path", ["gs://bucket/out/train-00000-of-00001.tfrecord",
                                  "s3://bucket/out/shard"])
def test_a_remote_file_gets_no_thread(path):
    before = threading.active_count()
    storage.start_writeback(path)
    assert threading.active_count() == before
