"""The module between processes: backpressure seen from outside, Python and
the sluice command on one queue both ways, a consumer SIGKILLed mid-batch, a
real SIGINT, threads sharing a store, fork."""

import os
import signal
import subprocess
import threading
import time

import pytest

import sluice
from conftest import netstrings, python_child, to_netstrings, wait_for

PRODUCER = """
import sys, sluice
s = sluice.Store(sys.argv[1])
with s.writer(sys.argv[2]) as w:
    for i in range(int(sys.argv[3])):
        w.put(b"m%d" % i)
    w.close()
"""


def test_bound_blocks_a_python_producer_until_a_consumer_takes(backend):
    """Sampled from outside with `sluice stat --json`: the producer stops at
    the bound, and each message taken lets one more in."""
    name = backend.create(bound=3)
    child = python_child(PRODUCER, backend.location, name, "8")
    try:
        wait_for(lambda: backend.cli_stat(name)["produced"] == 3, what="the producer at the bound")
        for _ in range(10):  # blocked: samples stay at the bound while nobody takes
            st = backend.cli_stat(name)
            assert st["produced"] == 3 and st["length"] <= 3
            assert child.poll() is None
        with backend.store.reader(name, prefetch=1) as r:
            for k in range(8):
                assert r.get(timeout=20).data == b"m%d" % k
                r.ack()
                if k + 3 < 8:
                    wait_for(lambda: backend.cli_stat(name)["produced"] == k + 4,
                             what=f"put {k + 4} after {k + 1} taken")
                assert backend.cli_stat(name)["length"] <= 3
            assert r.get(timeout=20) is None
        assert child.wait(timeout=20) == 0
    finally:
        child.kill()


def messages(n):
    return [bytes([i % 256]) * (i % 7) + b"#%d" % i for i in range(n)]


def test_python_producer_and_sluice_get_consumer(backend):
    name = backend.create(bound=16)
    msgs = messages(300) + [b"", bytes(range(256))]
    get = subprocess.Popen([os.environ["SLUICE_CLI"], "--store", backend.location, "get", "--binary",
                            name], stdout=subprocess.PIPE) if os.environ.get("SLUICE_CLI") else None
    if get is None:
        pytest.skip("no SLUICE_CLI")
    out = []  # read as it comes: get acknowledges what the pipe's reader took
    reading = threading.Thread(target=lambda: out.append(get.stdout.read()))
    reading.start()
    with backend.store.writer(name) as w:
        for i in range(0, len(msgs), 10):
            w.put_many(msgs[i:i + 10], timeout=30)  # waits at the bound for `sluice get`
        w.close()
    reading.join(timeout=60)
    assert get.wait(timeout=60) == 0
    assert netstrings(out[0]) == msgs
    assert backend.store.stat(name).length == 0


def test_sluice_put_producer_and_python_consumer(backend):
    name = backend.create(bound=16)
    msgs = messages(300) + [b"", bytes(range(256))]
    if not os.environ.get("SLUICE_CLI"):
        pytest.skip("no SLUICE_CLI")
    put = subprocess.Popen([os.environ["SLUICE_CLI"], "--store", backend.location, "put", "--binary",
                            "--close", "--batch", "8", name], stdin=subprocess.PIPE)
    feeder = threading.Thread(target=lambda: (put.stdin.write(to_netstrings(msgs)),
                                              put.stdin.close()))
    feeder.start()
    got = []
    with backend.store.reader(name) as r:
        for m in r:
            got.append(m.data)
            r.ack()
    feeder.join()
    assert put.wait(timeout=60) == 0
    assert got == msgs


# Stops after the 40th message (its stdin, a pipe, never ends) to be killed
# there: free to go on, it could hand out everything before the signal lands.
CONSUMER = """
import sys, sluice
s = sluice.Store(sys.argv[1])
kw = {"visibility": 1.0} if sys.argv[3] == "stream" else {}
with s.reader(sys.argv[2], prefetch=16, **kw) as r:
    for i, m in enumerate(r):
        print(m.data.decode(), flush=True)
        if i % 7 == 6:
            r.ack()
            print("acked", flush=True)
        if i == 39:
            sys.stdin.read()
"""


def test_consumer_sigkilled_mid_batch_loses_nothing(backend):
    name = backend.create()
    msgs = [b"k%d" % i for i in range(100)]
    with backend.store.writer(name) as w:
        w.put_many(msgs)
    child = python_child(CONSUMER, backend.location, name, backend.kind, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    handed, acked = [], 0
    for line in child.stdout:
        line = line.strip()
        if line == b"acked":
            acked = len(handed)
        else:
            handed.append(line)
        if len(handed) == 40:  # mid-batch: 40 is not a multiple of the prefetch or the acks
            child.send_signal(signal.SIGKILL)
            break
    child.wait(timeout=20)
    for line in child.stdout:  # what it printed before the signal landed
        line = line.strip()
        if line == b"acked":
            acked = len(handed)
        else:
            handed.append(line)
    assert handed == msgs[:len(handed)] and acked >= 35
    # Must come again: all from the first not surely acknowledged on (the
    # child may have made one more ack, of 7, before the signal landed).
    must = set(msgs[min(acked + 7, len(handed)):])
    kw = {"visibility": 1.0} if backend.kind == "stream" else {}
    with backend.store.reader(name, **kw) as r:
        rest = []
        while not must <= set(rest):
            rest += [m.data for m in r.get_many(100, timeout=10)]
        r.ack()
    # What comes again starts at the acknowledged prefix: nothing lost, the
    # handed-out, unacknowledged ones delivered again. (A Streams topic hands
    # a dead reader's messages to another after the visibility timeout, so
    # after newer ones: the same messages, not in order.)
    start = min(msgs.index(m) for m in rest)
    assert acked <= start <= len(handed) and start % 7 == 0
    if backend.kind == "stream":
        rest.sort(key=msgs.index)
    assert rest == msgs[start:]
    assert backend.store.stat(name).length == 0


BLOCKED_GET = """
import sys, time, sluice
s = sluice.Store(sys.argv[1])
with s.reader(sys.argv[2]) as r:
    print("ready", flush=True)
    try:
        r.get()
    except KeyboardInterrupt:
        print("interrupted %.6f" % time.monotonic(), flush=True)
"""

BLOCKED_PUT = """
import sys, time, sluice
s = sluice.Store(sys.argv[1])
with s.writer(sys.argv[2]) as w:
    w.put_many([b"a", b"b"])
    print("ready", flush=True)
    try:
        w.put_many([b"x%d" % i for i in range(5)])
    except KeyboardInterrupt as e:
        print("interrupted %.6f %d" % (time.monotonic(), e.enqueued), flush=True)
"""


def sleeping(pid):
    """The process's main thread sleeps in the kernel (blocked in a wait)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def interrupt(child):
    assert child.stdout.readline().strip() == b"ready"
    wait_for(lambda: sleeping(child.pid), what="the child blocked")
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    words = child.stdout.readline().split()
    assert words[0] == b"interrupted", words
    assert child.wait(timeout=20) == 0
    return float(words[1]) - sent, words[2:]


def test_sigint_interrupts_a_blocked_get_and_loses_nothing(backend):
    name = backend.create()
    child = python_child(BLOCKED_GET, backend.location, name, stdout=subprocess.PIPE)
    took, _ = interrupt(child)
    print(f"get interrupted {took * 1000:.1f} ms after SIGINT")
    assert took < 0.5  # 50 ms slices; the target is 100 ms, on a loaded CI machine less sure
    with backend.store.writer(name) as w:
        w.put(b"after")
    with backend.store.reader(name) as r:
        assert r.get(timeout=10).data == b"after"


def test_sigint_interrupts_a_put_at_the_bound_and_says_what_went_in(backend):
    name = backend.create(bound=3)
    child = python_child(BLOCKED_PUT, backend.location, name, stdout=subprocess.PIPE)
    took, rest = interrupt(child)
    print(f"put interrupted {took * 1000:.1f} ms after SIGINT")
    assert took < 0.5
    enqueued = int(rest[0])
    assert backend.store.stat(name).produced == 2 + enqueued
    with backend.store.reader(name) as r:
        got = [m.data for m in r.get_many(10, timeout=10)]
        while len(got) < 2 + enqueued:
            got += [m.data for m in r.get_many(10, timeout=10)]
    assert got == [b"a", b"b"] + [b"x%d" % i for i in range(enqueued)]


def test_threads_share_a_store(backend):
    """Producers and consumers of four queues in threads of one process, one
    Store; and four threads sharing one Writer."""
    s = backend.store
    names = [backend.create(bound=8) for _ in range(4)]
    n = 300
    got = {name: [] for name in names}
    errors = []

    def produce(name):
        try:
            with s.writer(name) as w:
                for i in range(0, n, 3):
                    w.put_many([b"%d" % j for j in range(i, min(i + 3, n))], timeout=60)
                w.close()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def consume(name):
        try:
            with s.reader(name) as r:
                for m in r:
                    got[name].append(int(m.data))
                    r.ack()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=f, args=(q,)) for q in names for f in (produce, consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert all(got[q] == list(range(n)) for q in names)

    shared = backend.create()
    with s.writer(shared) as w:
        def put_some(k):
            for i in range(50):
                w.put(b"%d-%d" % (k, i))
        ts = [threading.Thread(target=put_some, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
    assert s.stat(shared).produced == 200


FORK_CHILD_EXIT = {"refused": 0, "used": 1}


def test_fork_after_opening_is_refused_in_the_child(backend):
    """A Store, Writer or Reader made before fork() raises sluice.Error in
    the child (which may open its own), and the parent's go on working."""
    s = backend.store
    name = backend.create()
    w = s.writer(name)
    r = s.reader(name)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            for call in (s.ls, lambda: w.put(b"child"), lambda: r.get(timeout=0)):
                try:
                    call()
                    code = 1
                except sluice.Error as e:
                    if "fork()" not in str(e) or "open a new sluice.Store" not in str(e):
                        code = 2
            del w, r, s  # their destructors must not touch the parent's roles
            import gc
            gc.collect()
            own = sluice.Store(backend.location)
            if name not in own.ls():
                code = 3
        except BaseException:  # noqa: BLE001
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.put(b"parent")
    assert r.get(timeout=10).data == b"parent"
    r.ack()
    w.leave()
    r.leave()


def test_threads_puts_are_combined_and_each_gets_its_own_result(backend):
    """Threads sharing a Writer: while one put waits at the bound, the others
    wait their turn; one that times out then is withdrawn with nothing
    enqueued, one cancelled likewise, and the rest go in, in order per
    thread, once a consumer takes."""
    s = backend.store
    name = backend.create(bound=2)
    results = {}
    with s.writer(name) as w:
        w.put_many([b"f0", b"f1"])  # at the bound

        def put(key, msgs, **kw):
            try:
                results[key] = ("ok", w.put_many(msgs, **kw))
            except sluice.Error as e:
                results[key] = (type(e).__name__, e.enqueued)

        cancel = sluice.Cancel()
        blocked = threading.Thread(target=put, args=("blocked", [b"a0", b"a1"]))
        blocked.start()  # whichever of the three leads, it waits at the bound
        short = threading.Thread(target=put, args=("short", [b"t0"]), kwargs={"timeout": 0.3})
        cancelled = threading.Thread(target=put, args=("cancelled", [b"c0"]),
                                     kwargs={"cancel": cancel})
        short.start()
        cancelled.start()
        short.join(timeout=20)
        cancel.cancel()
        cancelled.join(timeout=20)
        assert results["short"] == ("Timeout", 0)
        assert results["cancelled"] == ("Cancelled", 0)
        with s.reader(name) as r:
            got = []
            while len(got) < 4:
                got += [m.data for m in r.get_many(10, timeout=10)]
                r.ack()
        blocked.join(timeout=20)
        assert results["blocked"] == ("ok", 2)
        assert got == [b"f0", b"f1", b"a0", b"a1"]
    assert s.stat(name).produced == 4


def test_many_threads_one_writer_group_commit(log):
    """Many threads putting one message at a time through one Writer: all go
    in, each thread's in its order, and in fewer store puts than messages
    (seen as fewer syncs: not asserted, the timing decides)."""
    s = log.store
    name = log.create(bound=0)
    with s.writer(name) as w:
        def put_some(k):
            for i in range(100):
                w.put(b"%d:%d" % (k, i))
        ts = [threading.Thread(target=put_some, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
    with s.reader(name) as r:
        got = [m.data for m in r.get_many(1000, timeout=10)]
        while len(got) < 800:
            got += [m.data for m in r.get_many(1000, timeout=10)]
    for k in range(8):
        mine = [int(m.split(b":")[1]) for m in got if m.startswith(b"%d:" % k)]
        assert mine == list(range(100))
