"""writeback.start_writeback: advice to the kernel, given by one thread a process; it never
changes a file, and never fails or slows a run."""
import os
import threading

import pytest

from beam_jobs.core import writeback


@pytest.fixture
def thread_errors(monkeypatch):
    """What an exception in a thread would report (threading.excepthook)."""
    errors: list = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    return errors


def test_complete_shards_are_handed_to_writeback_unchanged(tmp_path, thread_errors, caplog):
    shards = [tmp_path / f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    data = [os.urandom(1 << 20) for _ in shards]
    for path, content in zip(shards, data, strict=True):
        path.write_bytes(content)
        writeback.start_writeback(str(path))
    writeback.wait_for_writebacks()
    assert not thread_errors and not caplog.records
    assert [path.read_bytes() for path in shards] == data


def test_a_file_gone_before_its_writeback_is_no_error(tmp_path, thread_errors, caplog):
    path = tmp_path / "deleted"
    path.write_bytes(b"x")
    writeback.start_writeback(str(path))
    path.unlink()
    writeback.start_writeback(str(tmp_path / "never-there"))
    writeback.wait_for_writebacks()
    assert not thread_errors and not caplog.records


def test_thousands_of_shards_take_one_thread():
    """Small shards written fast, on a busy disk, must not make a thread each."""
    before = threading.active_count()
    for _ in range(2000):
        writeback.start_writeback(os.devnull)
    assert threading.active_count() <= before + 1
    writeback.wait_for_writebacks()
