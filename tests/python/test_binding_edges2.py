"""More edges of the binding (python/src/module.cpp): a refused leave(),
and the exit of a child made by fork().

Scenarios that could hang run in a child python3 with a deadline. States
are observed, not slept for.
"""

import platform

import pytest

from conftest import run_python_child

DEADLINE = 20


def run_child(code, *args):
    return run_python_child(code, *args, deadline=DEADLINE)


# A signal handler that calls leave() on the reader whose get (in the same
# thread) it interrupted is refused ("in a call of this thread already");
# the reader must stay as it was: the get goes on, later gets work.
REFUSED_LEAVE = r"""
import os, signal, sys, threading, time
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q")
refused = threading.Event()
def handler(signum, frame):
    if refused.is_set():
        return
    try:
        r.ack()  # raises only while inside this thread's get (acks nothing)
    except sluice.Error:
        pass
    else:
        return
    try:
        r.leave()
    except sluice.Error as e:
        assert "in a call of this thread already" in str(e), e
        refused.set()
signal.signal(signal.SIGUSR1, handler)
def kicker():
    deadline = time.monotonic() + 20
    while not refused.is_set() and time.monotonic() < deadline:
        os.kill(os.getpid(), signal.SIGUSR1)
        refused.wait(0.01)
threading.Thread(target=kicker, daemon=True).start()
deadline = time.monotonic() + 20
while not refused.is_set():
    assert time.monotonic() < deadline, "the handler never ran inside a get"
    try:
        r.get(timeout=0.2)
    except sluice.Timeout:
        pass
# The interrupted get (if it was still waiting) ended by its timeout; the
# reader has not left.
assert r.open
with store.writer("q") as w:
    w.put(b"m")
m = r.get(timeout=5)
assert m is not None and m.data == b"m", m
r.leave()
print("ok")
"""


def test_a_refused_leave_from_a_signal_handler_leaves_the_reader_usable(tmp_path):
    rc, out, err = run_child(REFUSED_LEAVE, str(tmp_path / "store"))
    assert rc == 0 and out.strip() == "ok", (rc, out, err)


# fork() while another thread is on its way back from a store call to the
# GIL (in the binding's NoGil, counted for the exit): the child has no such
# thread, and its exit must not wait for it. The parent holds the GIL (a
# huge switch interval; /proc read through ctypes.PyDLL, which keeps the
# GIL) until the thread is seen sleeping in futex(), which it only does
# waiting for the GIL.
FORK_WHILE_RESTORING = r"""
import ctypes, os, platform, sys, threading, time
import sluice
FUTEX = {"x86_64": b"202", "aarch64": b"98"}[platform.machine()]
store = sluice.Store(sys.argv[1]); store.create("q")
calls = 0
stop = False
def loop():
    global calls
    while not stop:
        store.stat("q")
        calls += 1
t = threading.Thread(target=loop, daemon=True)
t.start()
deadline = time.monotonic() + 20
while calls < 10:
    assert time.monotonic() < deadline, "the thread made no calls"
    time.sleep(0.001)
libc = ctypes.PyDLL(None)
libc.pread.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]
fd = os.open(f"/proc/self/task/{t.native_id}/syscall", os.O_RDONLY)
buf = ctypes.create_string_buffer(256)
sys.setswitchinterval(1000.0)
# From here on this thread keeps the GIL (it never asks the other to drop
# it): the other one, once out of its store call, waits for it.
seen = 0
deadline = time.monotonic() + 20
while seen < 3:
    assert time.monotonic() < deadline, "the thread never waited for the GIL"
    n = libc.pread(fd, buf, 255, 0)
    seen = seen + 1 if n > 0 and buf.raw[:n].split()[0] == FUTEX else 0
pid = os.fork()
if pid == 0:
    sys.setswitchinterval(0.005)
    sys.exit(0)  # the exit hooks run
sys.setswitchinterval(0.005)
stop = True
deadline = time.monotonic() + 10
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise SystemExit("the child made by fork() hung at exit")
    time.sleep(0.01)
assert os.waitstatus_to_exitcode(status) == 0, status
print("ok")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="futex's number in /proc/PID/syscall")
def test_the_exit_of_a_child_forked_while_a_thread_returned_to_the_gil(tmp_path):
    rc, out, err = run_child(FORK_WHILE_RESTORING, str(tmp_path / "store"))
    assert rc == 0 and out.strip() == "ok", (rc, out, err)


# A task reads the reader's counters while another task's aget waits for a
# message in a thread (holding the reader): the read must not wait for that
# message in the event loop, where the aput that would bring it waits too.
COUNTERS_UNDER_AGET = r"""
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
with store.writer("q") as w:
    w.put(b"a")
r = store.reader("q")
w = store.writer("q")
async def main():
    first = await r.aget()
    assert first.data == b"a", first
    consumer = asyncio.ensure_future(r.aget())
    await until_blocked(1)
    assert (r.delivered, r.acked, r.skipped_damaged) == (1, 0, 0), (r.delivered, r.acked)
    await w.aput(b"b")
    second = await consumer
    assert second.data == b"b", second
    assert r.delivered == 2 and r.ack() == 2 and r.acked == 2, (r.delivered, r.acked)
asyncio.run(main())
r.leave()
try:
    r.delivered
except sluice.Error as e:
    assert "has left its role" in str(e), e
else:
    raise AssertionError("delivered after leave()")
print("ok")
"""


def test_a_readers_counters_do_not_wait_for_another_tasks_aget(tmp_path):
    from test_asyncio_edges import HELPERS
    rc, out, err = run_child(HELPERS + COUNTERS_UNDER_AGET, str(tmp_path / "store"))
    assert rc == 0 and out.strip() == "ok", (rc, out, err)
