"""Every method of sluice.Store, Writer and Reader on every backend: the
embedded log store, and on a real redis-server a pressure queue and a
Streams topic."""

import asyncio
import glob
import os
import dataclasses
import threading
import time

import pytest

import sluice


def seq_ok(kind, seq):
    if kind == "log":
        return isinstance(seq, int)
    if kind == "stream":
        return isinstance(seq, str) and "-" in seq
    return seq is None


def test_create_ls_stat_close_delete(backend):
    s = backend.store
    name = backend.create(bound=7)
    assert name in s.ls()
    info = s.stat(name)
    assert isinstance(info, sluice.QueueInfo)
    assert (info.name, info.bound, info.closed, info.length) == (name, 7, False, 0)
    assert info.kind == backend.kind
    assert info.channels == ["default"]
    assert [c.name for c in info.channel_info] == ["default"]
    with pytest.raises(sluice.AlreadyExists, match=name):
        s.create(name)
    s.close(name)
    s.close(name)  # idempotent
    assert s.stat(name).closed
    with pytest.raises(sluice.QueueClosed):
        with s.writer(name) as w:
            w.put(b"late")
    s.delete(name)
    assert name not in s.ls()
    with pytest.raises(sluice.NotFound, match=f"'{name}'"):
        s.stat(name)
    with pytest.raises(sluice.NotFound):
        s.delete(name)


def test_stat_has_the_fields_of_sluice_stat_json(backend):
    name = backend.create(bound=5)
    with backend.store.writer(name) as w:
        w.put_many([b"a", b"bc"])
    ours = dataclasses.asdict(backend.store.stat(name))
    theirs = backend.cli_stat(name)
    assert sorted(ours) == sorted(theirs)
    assert ours == theirs


def test_every_byte_value_and_empty_messages(backend):
    s = backend.store
    name = backend.create()
    msgs = [bytes(range(256)), b"", b"\x00", b"\n", bytes([255]) * 3, b"", "h\u00e9llo \u2603"]
    msgs += [bytes([b]) for b in range(256)]
    with s.writer(name) as w:
        w.put(msgs[0])
        assert w.put_many(msgs[1:]) == len(msgs) - 1
        w.close()
    got = []
    with s.reader(name) as r:
        for m in r:
            assert isinstance(m.data, bytes)
            assert seq_ok(backend.kind, m.seq)
            assert m.channel == "default"
            got.append(m.data)
        r.ack()
    want = [m.encode() if isinstance(m, str) else m for m in msgs]
    assert got == want
    assert s.stat(name).length == 0


def test_a_message_is_a_read_only_record_that_outlives_its_reader(backend):
    s = backend.store
    name = backend.create()
    with s.writer(name) as w:
        w.put_many([b"first", b"second"])
        w.close()
    with s.reader(name) as r:
        got = r.get_many(2, timeout=5)
        r.ack()
    del r
    assert [type(m) for m in got] == [sluice.Message, sluice.Message]
    m = got[1]
    assert m.data == b"second" and bytes(m) == b"second"
    assert seq_ok(backend.kind, m.seq) and m.channel == "default"
    if backend.kind == "pressure":
        assert m.time is None
    else:  # the log's append time (as peek gives it), the Streams id's time
        assert isinstance(m.time, float) and abs(m.time - time.time()) < 3600
    if backend.kind == "stream":
        assert m.deliveries == 1
    assert repr(m).startswith("Message(seq=") and "b'second'" in repr(m)
    with pytest.raises(AttributeError):
        m.data = b"other"
    with pytest.raises(TypeError):
        sluice.Message()
    del got[0]  # each message owns its fields: the other stays whole
    assert got[0].data == b"second"


def test_channel_names_and_visibility_timeouts_every_backend_refuses(backend):
    name = backend.create()
    with pytest.raises(sluice.InvalidArgument, match="must not start with"):
        backend.store.reader(name, ".x")
    if backend.kind == "stream":
        # A live reader renews its claims every third of the timeout.
        with pytest.raises(sluice.InvalidArgument, match="at least 1 s"):
            backend.store.reader(name, visibility=0.5)
        with backend.store.reader(name, visibility=1.0):
            pass


def test_a_reader_counts_the_damaged_messages_it_skipped(log):
    name = log.create()
    msgs = [b"m%03d" % i for i in range(10)]  # 4 bytes each
    with log.store.writer(name) as w:
        w.put_many(msgs)
    with log.store.reader(name) as r:
        assert r.skipped_damaged == 0
    # One bit of message 3's payload, in place (segment header 32 bytes,
    # record header 24: docs/log_format.md).
    (seg,) = glob.glob(os.path.join(log.location, "queues", name, "topic", "*.seg"))
    with open(seg, "r+b") as f:
        f.seek(32 + 3 * (24 + 4) + 24 + 1)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x10]))
    with log.store.reader(name) as r:
        got = r.get_many(9, timeout=5)
        assert [m.data for m in got] == msgs[:3] + msgs[4:]
        assert r.skipped_damaged == 1
        r.ack()


def test_bytes_like_messages(log):
    name = log.create()
    with log.store.writer(name) as w:
        w.put(bytearray(b"ba"))
        w.put(memoryview(b"mv"))
        w.put_many(x for x in [b"g1", "g2"])  # any iterable
        with pytest.raises(TypeError, match="bytes or str"):
            w.put(12)
        with pytest.raises(TypeError, match="iterable of messages"):
            w.put_many(b"not a list")
    with log.store.reader(name) as r:
        assert [m.data for m in r.get_many(10)] == [b"ba", b"mv", b"g1", b"g2"]


def test_ack_is_of_what_was_handed_out(backend):
    """ack() acknowledges the messages handed to the program, not those the
    reader fetched ahead; leaving gives the rest back."""
    s = backend.store
    name = backend.create()
    with s.writer(name) as w:
        w.put_many([b"m%d" % i for i in range(10)])
    with s.reader(name, prefetch=10) as r:
        assert r.get().data == b"m0"
        assert r.get().data == b"m1"
        assert r.delivered == 2
        assert r.ack() == 2
        assert r.acked == 2
        assert r.get().data == b"m2"  # handed out, not acknowledged
    with s.reader(name) as r:
        assert [m.data for m in r.get_many(3)] == [b"m2", b"m3", b"m4"]
        r.release()  # gives them back at once
        assert r.delivered == r.acked == 0 or r.delivered == r.acked
        assert r.get().data == b"m2"
        r.ack()
    assert s.stat(name).length == 7


def test_get_many_and_timeouts(backend):
    s = backend.store
    name = backend.create()
    with s.reader(name) as r:
        t0 = time.monotonic()
        with pytest.raises(sluice.Timeout, match="timed out"):
            r.get(timeout=0.2)
        assert 0.15 < time.monotonic() - t0 < 5
        with pytest.raises(sluice.Timeout):
            r.get_many(5, timeout=0)
        with pytest.raises(ValueError):
            r.get_many(0)
        with s.writer(name) as w:
            w.put_many([b"1", b"2", b"3"])
            w.close()
        got = []
        while len(got) < 3:
            got += [m.data for m in r.get_many(2, timeout=5)]
        assert got == [b"1", b"2", b"3"]
        assert r.get_many(2) == []  # closed and drained
        assert r.get() is None
        assert r.ended
        r.ack()


def test_put_blocks_at_the_bound_and_times_out(backend):
    s = backend.store
    name = backend.create(bound=3)
    with s.writer(name) as w:
        w.put_many([b"a", b"b"])
        with pytest.raises(sluice.Timeout) as e:
            w.put_many([b"c", b"d", b"e"], timeout=0.2)
        # The log waits for room for the batch; Redis puts what fits.
        enqueued = e.value.enqueued
        assert enqueued in (0, 1)
        assert e.value.in_doubt == 0
        assert f"{enqueued} message(s) enqueued" in str(e.value)
    assert s.stat(name).produced == 2 + enqueued


def test_errors(backend):
    s = backend.store
    with pytest.raises(sluice.InvalidArgument, match="name"):
        s.create("bad name!")
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        s.create("")
    with pytest.raises(sluice.NotFound):
        s.writer("no-such-queue", timeout=1)
    with pytest.raises(sluice.NotFound):
        s.reader("no-such-queue", timeout=1)
    name = backend.create()
    with s.writer(name) as w:
        big = b"x" * (w.max_message_bytes + 1)
        with pytest.raises(sluice.MessageTooLarge) as e:
            w.put_many([b"ok", big])
        assert e.value.enqueued == 1
        assert isinstance(e.value, sluice.InvalidArgument)
    for cls in (sluice.QueueClosed, sluice.NotFound, sluice.RoleHeld, sluice.Timeout,
                sluice.StoreError, sluice.Unavailable, sluice.Cancelled):
        assert issubclass(cls, sluice.Error)


def test_role_held_names_the_holder(log):
    import os
    name = log.create()
    with log.store.reader(name):
        with pytest.raises(sluice.RoleHeld) as e:
            log.store.reader(name, timeout=0.2)
        assert e.value.holder == os.getpid()
        assert "being read" in str(e.value)
        with pytest.raises(sluice.RoleHeld, match="in use|writer|read"):
            log.store.delete(name)


def test_left_objects_refuse_calls(log):
    name = log.create()
    w = log.store.writer(name)
    w.leave()
    assert not w.open
    with pytest.raises(sluice.Error, match="left its role"):
        w.put(b"x")
    r = log.store.reader(name)
    r.leave()
    with pytest.raises(sluice.Error, match="left its role"):
        r.get()


def test_cancel_from_another_thread(backend):
    s = backend.store
    name = backend.create()
    cancel = sluice.Cancel()
    with s.reader(name) as r:
        threading.Timer(0.2, cancel.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(sluice.Cancelled):
            r.get(cancel=cancel)
        assert time.monotonic() - t0 < 5
        assert cancel.cancelled
        with s.writer(name) as w:
            w.put(b"after")
        assert r.get(timeout=5).data == b"after"


def test_peek_seek_purge(backend):
    s = backend.store
    name = backend.create()
    with s.writer(name) as w:
        w.put_many([b"p0", b"p1", b"p2"])
    peeked = s.peek(name)
    assert [m.data for m in peeked] == [b"p0", b"p1", b"p2"]
    assert all(seq_ok(backend.kind, m.seq) for m in peeked)
    assert [m.data for m in s.peek(name, max=2)] == [b"p0", b"p1"]
    if backend.kind == "log":
        assert [m.data for m in s.peek(name, seq=peeked[1].seq)] == [b"p1", b"p2"]
    if backend.kind == "stream":
        assert [m.data for m in s.peek(name, after_id=peeked[0].seq)] == [b"p1", b"p2"]
    if backend.kind == "pressure":
        with pytest.raises(sluice.InvalidArgument):
            s.seek(name, "default", "end")
    else:
        r = s.seek(name, "default", "end")
        assert isinstance(r, sluice.SeekResult)
        assert (r.unacknowledged_before, r.unacknowledged) == (3, 0)
        assert s.stat(name).length == 0
        r = s.seek(name, "default", "start")
        assert r.unacknowledged == 3
    assert s.purge(name) == 3
    assert s.peek(name) == []
    assert s.stat(name).channel_info[0].purged == 3


def test_channels_fan_out(log):
    name = log.create()
    with log.store.reader(name, "audit"):
        pass  # made at the first message still retained
    with log.store.writer(name) as w:
        w.put(b"both")
    for ch in ("default", "audit"):
        with log.store.reader(name, ch) as r:
            m = r.get(timeout=5)
            assert (m.data, m.channel) == (b"both", ch)
            r.ack()


def test_store_options(tmp_path):
    with pytest.raises(ValueError):
        sluice.Store(str(tmp_path / "x"), durability="fast")
    s = sluice.Store(str(tmp_path / "nosync"), durability="nosync")
    s.create("q")
    assert s.location == str(tmp_path / "nosync")
    s = sluice.Store("file:" + str(tmp_path / "viafile"))
    s.create("q")
    assert s.ls() == ["q"]
    missing = sluice.Store(str(tmp_path / "absent"), create_if_missing=False)
    assert missing.ls() == []
    assert not (tmp_path / "absent").exists()
    with pytest.raises(sluice.InvalidArgument):
        sluice.Store("rediss://localhost:1/0")


def test_unreachable_redis():
    s = sluice.Store("redis://127.0.0.1:1/0")  # connects at the first call
    with pytest.raises(sluice.Unavailable, match="127.0.0.1:1"):
        s.ls()


def test_asyncio_reader_and_writer(backend):
    s = backend.store
    name = backend.create(bound=10)

    async def main():
        with s.writer(name) as w, s.reader(name) as r:
            async def produce():
                for i in range(25):
                    await w.aput(b"a%d" % i)
                await w.aput_many([b"last"])
                w.close()

            task = asyncio.create_task(produce())
            got = []
            async for m in r:
                got.append(m.data)
                r.ack()
            await task
            assert await r.aget() is None
            return got

    assert asyncio.run(main()) == [b"a%d" % i for i in range(25)] + [b"last"]


def test_asyncio_cancel_loses_nothing(log):
    s = log.store
    name = log.create()

    async def main():
        with s.reader(name) as r:
            task = asyncio.create_task(r.aget())
            await asyncio.sleep(0.1)  # let it block in the thread (not synchronisation: either way works)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with s.writer(name) as w:
                w.put(b"kept")
            m = await asyncio.wait_for(r.aget(), 10)
            return m.data

    assert asyncio.run(main()) == b"kept"
