"""readers.numpy's streaming order (readers.numpy.streaming): chunks of shards read with one
request each, mixed in bounded groups, a pure function of (seed, epoch), resumable."""
import gcs_emulator
import numpy as np
import pytest

from readers.numpy import EpochBatches, WindowSource, batches, streaming


def _keys(batch_list) -> list:
    return [(v, int(s)) for b in batch_list for v, s in zip(b["video_id"], b["start"], strict=True)]


def test_an_epoch_gives_every_window_once_in_an_order_of_seed_and_epoch(kinds):
    path = kinds["long"]
    everything = _keys([WindowSource(path, "train").read_batch(slice(None))])
    epoch = _keys(batches(path, "train", 4, order="stream", buffer_bytes=1,
                          drop_remainder=False))
    assert sorted(epoch) == sorted(everything)
    again = _keys(batches(path, "train", 4, order="stream", buffer_bytes=1,
                          drop_remainder=False))
    other = _keys(batches(path, "train", 4, order="stream", buffer_bytes=1, epoch=1,
                          drop_remainder=False))
    assert epoch == again and epoch != other


def test_a_group_holds_whole_chunks_and_a_batch_draws_from_one_group(kinds):
    source = WindowSource(kinds["long"], "train")
    chunks = streaming.chunks_of(source.shards, chunk_bytes=2000)
    assert len(chunks) > source.shards.count      # shards cut into several chunks
    covered = np.concatenate([np.arange(c.first, c.first + c.count) for c in chunks])
    np.testing.assert_array_equal(covered, np.arange(len(source)))
    assert all(c.end - c.start <= 2000 or c.count == 1 for c in chunks)
    order = streaming.stream_order(chunks, seed=3, epoch=0, buffer_bytes=4000)
    assert sorted(order) == list(range(len(source)))
    chunk_of = np.searchsorted([c.first for c in chunks], order, "right") - 1
    # cut the order where every chunk begun has given all its windows: the groups
    left, blocks, block = {}, [], []
    for c in chunk_of.tolist():
        left.setdefault(c, chunks[c].count)
        left[c] -= 1
        block.append(c)
        if not any(left.values()):
            blocks.append(block)
            left, block = {}, []
    assert not block and len(blocks) > 2
    for block in blocks[:-1]:
        assert sum(chunks[c].end - chunks[c].start for c in set(block)) >= 4000
    assert any(block != sorted(block) for block in blocks)      # chunks mixed in a group


def test_stream_batches_resume_at_a_step_and_from_a_saved_state(kinds):
    path = kinds["latent"]
    straight = list(batches(path, "train", 2, order="stream", seed=5, epoch=2,
                            buffer_bytes=1))
    resumed = list(batches(path, "train", 2, order="stream", seed=5, epoch=2,
                           buffer_bytes=1, start_step=2))
    assert _keys(resumed) == _keys(straight[2:])
    source = WindowSource(path, "train")
    plan = EpochBatches(source, 2, order="stream", seed=5, epoch=2, buffer_bytes=1)
    again = EpochBatches.resume(source, plan.state(2))
    assert [again.batch(k) for k in range(2, again.steps)] == [plan.batch(k) for k in
                                                                 range(2, plan.steps)]
    assert plan.state(2)["order"] == "stream"


def test_orders_the_reader_does_not_know_are_refused(kinds):
    with pytest.raises(ValueError, match="order must be one of random, stream"):
        next(batches(kinds["latent"], "train", 2, order="sideways"))
    with pytest.raises(ValueError, match=r"buffer_bytes is the streaming order's"):
        next(batches(kinds["latent"], "train", 2, buffer_bytes=1 << 20))


@pytest.mark.slow
def test_on_gcs_a_chunk_is_one_request_and_the_batches_are_the_local_ones(kinds):
    local = kinds["long"]
    with gcs_emulator.running("bkt"):
        gcs_emulator.upload(local, "bkt/out")
        remote = list(batches("gs://bkt/out", "train", 4, order="stream", seed=1,
                              buffer_bytes=1))
        reads = gcs_emulator.counts()["read"]
        resumed = list(batches("gs://bkt/out", "train", 4, order="stream", seed=1,
                               buffer_bytes=1, start_step=2))
    assert _keys(resumed) == _keys(remote[2:])
    ours = list(batches(local, "train", 4, order="stream", seed=1, buffer_bytes=1))
    assert len(remote) == len(ours) > 2
    for theirs, mine in zip(remote, ours, strict=True):
        for name in mine:
            np.testing.assert_array_equal(theirs[name], mine[name], err_msg=name)
    shards = WindowSource(local, "train").shards.count
    # dataset.json, each shard's index, then one read a chunk: here a chunk a shard
    assert reads == 1 + shards + shards
