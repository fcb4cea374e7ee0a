"""Edges of the binding found by review: odd buffers, a put_many that meets a
bad item, threads blocked at interpreter exit, fork while a thread is in a
call, calls from another thread or a signal handler while a put or get
waits, and `in_doubt` when puts are combined."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import sluice

from conftest import python_child, redis_location, wait_for


def returns(fn, timeout=30.0):
    """fn() from another thread; fails the test if it does not return (the
    bugs these tests guard against were hangs)."""
    box = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"{fn} did not return within {timeout} s")
    return box[0]


def finished_child(code, *args, timeout=60):
    """Runs `code` in a child python3; its stdout and stderr once it exits
    0, else fails (also if it hangs: the bugs here were hangs and aborts)."""
    p = python_child(code, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("the child hung")
    assert p.returncode == 0, err.decode()
    return out, err


def test_a_strided_or_reversed_buffer_is_put_as_its_bytes(log):
    """Any buffer is copied in C order, as bytes(obj) is: a strided or
    reversed memoryview was copied from its first byte as if contiguous
    (the wrong bytes; reversed, bytes from past its end)."""
    name = log.create()
    src = bytearray(b"abcdefgh")
    msgs = [memoryview(src)[::2], memoryview(src)[::-1], memoryview(b"0123456789")[1::3],
            memoryview(bytearray(range(24))).cast("B", (4, 6))[::2]]
    with log.store.writer(name) as w:
        for m in msgs:
            w.put(m)
        w.put_many(msgs)
    with log.store.reader(name) as r:
        got = [m.data for m in r.get_many(2 * len(msgs), timeout=10)]
    assert got == [bytes(m) for m in msgs] * 2


def test_put_many_with_a_bad_item_puts_those_before_and_says_how_many(log):
    """Items before a bad one go in (as before a message too large), and the
    error says how many, also past the first internal batch of 1,024."""
    name = log.create(bound=0)
    with log.store.writer(name) as w:
        with pytest.raises(TypeError) as e:
            w.put_many([b"m"] * 1500 + [123, b"after"])
        assert e.value.enqueued == 1500 and e.value.in_doubt == 0

        def items():
            yield b"x"
            yield b"y"
            raise ValueError("the source failed")

        with pytest.raises(ValueError) as e:
            w.put_many(items())
        assert e.value.enqueued == 2
    assert log.store.stat(name).produced == 1502


DAEMON_AT_EXIT = textwrap.dedent("""
    import sys, threading, time
    import sluice
    store = sluice.Store(sys.argv[1])
    store.create("q", bound=1)
    if sys.argv[2] == "put":
        w = store.writer("q")
        w.put(b"fill")
        threading.Thread(target=lambda: w.put(b"x"), daemon=True).start()
    else:
        r = store.reader("q")
        threading.Thread(target=lambda: r.get(), daemon=True).start()
    # The call waits in 50 ms slices, taking the GIL back between them; ending
    # 200 ms on, the interpreter finalizes as a slice ends (so the bug showed
    # every time here). With the fix the exit is clean whatever the timing.
    time.sleep(0.2)
    print("main: done", flush=True)
""")


@pytest.mark.parametrize("call", ["put", "get"])
def test_a_daemon_thread_blocked_in_a_call_at_exit_does_not_abort_the_process(log, call,
                                                                               tmp_path):
    """CPython ends a daemon thread that takes the GIL back during exit with
    pthread_exit; its forced unwind through the binding's GIL guard called
    std::terminate (SIGABRT, a core dump). Such a thread now waits for the
    process to end."""
    out, err = finished_child(DAEMON_AT_EXIT, str(tmp_path / "s"), call)
    assert out == b"main: done\n"
    assert b"terminate" not in err


def test_fork_while_a_thread_is_in_a_call_raises_in_the_child(log):
    """The child inherits the objects' locks as the parent's threads held
    them: every call checks the process before it takes one (it waited for
    ever, Ctrl-C included)."""
    name = log.create(bound=1)
    w = log.store.writer(name)
    w.put(b"fill")
    r = log.store.reader(name)
    assert r.get(timeout=10).data == b"fill"  # the next get waits

    def blocked_put():
        with pytest.raises(sluice.Error):  # closed by the parent at the end
            w.put(b"x")

    def blocked_get():
        with pytest.raises(sluice.Cancelled):
            r.get(cancel=cancel)

    cancel = sluice.Cancel()
    threads = [threading.Thread(target=blocked_put), threading.Thread(target=blocked_get)]
    for t in threads:
        t.start()
    wait_for(lambda: returns(lambda: w.blocked_seconds) > 0, what="the put to wait at the bound")
    frames = sys._current_frames
    wait_for(lambda: (f := frames().get(threads[1].ident)) is not None
             and f.f_code.co_name == "blocked_get" and f.f_lineno > 0
             and f.f_code.co_firstlineno + 2 == f.f_lineno, what="the get to be in its call")
    pid = os.fork()
    if pid == 0:  # never returns into pytest
        code = 0
        for call in (w.close, w.leave, lambda: w.blocked_seconds, lambda: r.get(timeout=0),
                     r.ack, r.leave, lambda: r.delivered):
            try:
                call()
                code = 1
            except sluice.Error:
                pass
            except BaseException:  # noqa: BLE001
                code = 2
        os._exit(code)
    deadline = time.monotonic() + 30
    status = None
    while status is None and time.monotonic() < deadline:
        p, st = os.waitpid(pid, os.WNOHANG)
        status = st if p else None
        time.sleep(0.01)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    cancel.cancel()
    returns(w.close)
    for t in threads:
        t.join(10)
    r.leave()
    w.leave()
    assert status is not None, "the child hung on a lock a parent thread held at the fork"
    assert os.waitstatus_to_exitcode(status) == 0


def test_close_and_blocked_seconds_while_a_put_waits_at_the_bound(log):
    """A put waiting at the bound holds the store only within each slice:
    another thread's blocked_seconds and close() get in (they waited for a
    consumer that may never come), and close() ends the put."""
    name = log.create(bound=1)
    w = log.store.writer(name)
    w.put(b"fill")
    err = []

    def put():
        try:
            w.put(b"x")
        except sluice.Error as e:
            err.append(e)

    t = threading.Thread(target=put)
    t.start()
    wait_for(lambda: returns(lambda: w.blocked_seconds) > 0, what="the put to wait at the bound")
    closer = threading.Thread(target=w.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() waited for the put"
    t.join(30)
    assert not t.is_alive()
    assert len(err) == 1 and isinstance(err[0], sluice.QueueClosed)
    assert err[0].enqueued == 0 and err[0].in_doubt == 0
    assert log.store.stat(name).produced == 1
    w.leave()


SIGNAL_HANDLER = textwrap.dedent("""
    import signal, sys
    import sluice
    store = sluice.Store(sys.argv[1])
    store.create("q", bound=1)
    w = store.writer("q")
    w.put(b"fill")
    if sys.argv[2] == "writer":
        signal.signal(signal.SIGALRM, lambda *a: w.close())
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            w.put(b"x", timeout=60)
            print("put returned")
        except sluice.QueueClosed as e:
            print("put ended: closed, enqueued", e.enqueued)
    else:
        r = store.reader("q")
        r.get(timeout=10)  # takes "fill": the next get waits
        def handler(*a):
            r.ack()
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            r.get(timeout=60)
            print("get returned")
        except sluice.Error as e:
            print("get ended:", type(e).__name__, "signal handler" in str(e))
""")


@pytest.mark.parametrize("role", ["writer", "reader"])
def test_a_signal_handler_calling_the_object_in_a_call_does_not_deadlock(log, role, tmp_path):
    """Python runs signal handlers between a call's slices, inside it. A
    handler that closes the writer ("close on SIGTERM") now gets in and ends
    the put; one that calls the reader gets a clear error. Both deadlocked
    (a mutex the thread held itself), beyond the calls' own timeouts."""
    out, _ = finished_child(SIGNAL_HANDLER, str(tmp_path / "s"), role)
    if role == "writer":
        assert out == b"put ended: closed, enqueued 0\n"
    else:
        assert out == b"get ended: Error True\n"


def test_in_doubt_is_each_callers_share_when_puts_are_combined(tmp_path):
    """Puts from threads combined into one store put: when it fails with
    messages in doubt, each caller is told its own share (the first was told
    them all, and the others "none in doubt": a retry would duplicate).
    On a standalone Redis, a Streams topic wanting 1 replica fails every
    append after WAIT with its messages in doubt (they are on the primary)."""
    store = sluice.Store(redis_location())
    name = "py-" + uuid.uuid4().hex[:12]
    store.create(name, bound=0, stream=True, replicas=1)
    results = {}
    with store.writer(name) as w:
        def put(tag, msgs):
            try:
                results[tag] = ("ok", w.put_many(msgs), 0)
            except sluice.Error as e:
                results[tag] = (type(e).__name__, e.enqueued, e.in_doubt)

        first = threading.Thread(target=put, args=("L", [b"l1"]))
        first.start()
        # L's message is appended; its put now waits for the replica: A and B
        # arrive meanwhile and are combined into the next group put.
        wait_for(lambda: store.stat(name).produced == 1, what="the first append")
        rest = [threading.Thread(target=put, args=("A", [b"a1"])),
                threading.Thread(target=put, args=("B", [b"b1", b"b2", b"b3"]))]
        for t in rest:
            t.start()
        for t in [first, *rest]:
            t.join(60)
    assert results["L"] == ("Unavailable", 0, 1)
    assert results["A"] == ("Unavailable", 0, 1)
    assert results["B"] == ("Unavailable", 0, 3)
    store.delete(name)
