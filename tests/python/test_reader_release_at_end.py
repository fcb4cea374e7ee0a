"""release() after a reader reached the end of a closed queue: what it gives
back is delivered again (docs/python.md), to this reader too, before the
end is said again."""


def test_release_after_the_end_delivers_again(backend):
    s = backend.store
    name = backend.create()
    with s.writer(name) as w:
        w.put_many([b"a", b"b"])
        w.close()
    with s.reader(name) as r:
        assert [m.data for m in r] == [b"a", b"b"]
        assert r.get(timeout=10) is None  # closed and drained
        r.release()
        assert [m.data for m in r] == [b"a", b"b"]
        assert r.get(timeout=10) is None
        r.ack()
        assert (r.delivered, r.acked) == (2, 2)
    assert s.stat(name).length == 0
