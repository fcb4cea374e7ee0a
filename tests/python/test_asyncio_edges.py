"""Edges of the asyncio form (python/sluice/_aio.py): what a task left
pending, a second task on one reader and a cancelled task leave behind.

Each scenario that could hang runs in a child python3 with a deadline, so a
hang fails the test instead of stopping the run. "A thread is blocked in the
call" is observed, not slept for: an executor thread whose Python frame is
the call and whose kernel state is sleeping, seen on consecutive polls.
"""

import asyncio
import signal
import subprocess

import pytest

from conftest import python_child, run_python_child

# Shared by the children: `blocked_threads()` lists the threads that are
# inside a store call run by the event loop's executor and sleeping there.
HELPERS = r"""
import asyncio, sys, threading

def _state(t):
    with open(f"/proc/self/task/{t.native_id}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]

def blocked_threads():
    frames = sys._current_frames()
    out = []
    for t in threading.enumerate():
        f = frames.get(t.ident)
        if f is None or t is threading.current_thread():
            continue
        code = f.f_code
        if code.co_name != "run" or not code.co_filename.endswith("concurrent/futures/thread.py"):
            continue
        try:
            if _state(t) == "S":
                out.append(t)
        except OSError:
            pass
    return out

async def until_blocked(n, timeout=20.0):
    # n threads blocked in calls on 5 consecutive polls (a thread only
    # waiting for the GIL gets it while the loop sleeps between them).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = 0
    while seen < 5:
        if loop.time() > deadline:
            raise SystemExit(f"timed out waiting for {n} blocked thread(s)")
        seen = seen + 1 if len(blocked_threads()) >= n else 0
        await asyncio.sleep(0.01)
"""

DEADLINE = 30


def run_child(code, *args):
    return run_python_child(HELPERS + code, *args, deadline=DEADLINE)


# A loop closed (not asyncio.run: nothing cancels its tasks) while a task
# waits in aget: the interpreter's exit joins the executor's threads.
PENDING_AT_CLOSE = r"""
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q")
loop = asyncio.new_event_loop()
async def main():
    t = asyncio.ensure_future(r.aget())
    await until_blocked(1)
    return t
task = loop.run_until_complete(main())
loop.close()
print("closed", flush=True)
"""


def test_exit_with_a_task_left_in_aget(tmp_path):
    rc, out, err = run_child(PENDING_AT_CLOSE, str(tmp_path / "store"))
    assert out == "closed\n", err
    assert rc == 0, err


# Ctrl-C under loop.run_until_complete (no asyncio.run: KeyboardInterrupt
# leaves the loop, the task is not cancelled).
CTRL_C_IN_AGET = r"""
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q")
async def ready():
    await until_blocked(1)
    print("ready", flush=True)
async def main():
    asyncio.ensure_future(ready())
    return await r.aget()
asyncio.new_event_loop().run_until_complete(main())
"""


def test_ctrl_c_in_run_until_complete_during_aget_exits(tmp_path):
    child = python_child(HELPERS + CTRL_C_IN_AGET, str(tmp_path / "store"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"child still running {DEADLINE}s after SIGINT (hung at exit)")
    assert b"KeyboardInterrupt" in err
    assert child.returncode != 0


# Two tasks read one reader: the second must wait its turn in a thread, not
# in the event loop (where it stops the producer task that would end the
# wait: a deadlock).
TWO_TASKS = r"""
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q"); w = store.writer("q")
async def main():
    a = asyncio.create_task(r.aget())
    await until_blocked(1)
    b = asyncio.create_task(r.aget())
    await asyncio.sleep(0)  # b runs up to its first wait
    await w.aput_many([b"1", b"2"])
    got = sorted([(await a).data, (await b).data])
    print(got, flush=True)
asyncio.run(main())
"""


def test_two_tasks_on_one_reader_do_not_block_the_loop(tmp_path):
    rc, out, err = run_child(TWO_TASKS, str(tmp_path / "store"))
    assert rc == 0, err
    assert out == "[b'1', b'2']\n"


# A task cancelled while its call waits its turn on a reader another task's
# call holds: the cancel ends that wait too (docs/python.md: "a cancelled
# task leaves no thread waiting"), while the other call goes on.
CANCEL_WAITING_TURN = r"""
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q"); w = store.writer("q")
async def until_blocked_at_most(n, timeout=20.0):
    # on 5 consecutive polls, as until_blocked (a blocked get wakes between
    # its 50 ms slices)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = 0
    while seen < 5:
        if loop.time() > deadline:
            raise SystemExit(f"timed out: still {len(blocked_threads())} blocked thread(s)")
        seen = seen + 1 if len(blocked_threads()) <= n else 0
        await asyncio.sleep(0.01)
async def main():
    a = asyncio.create_task(r.aget())
    await until_blocked(1)
    b = asyncio.create_task(r.aget())
    await until_blocked(2)
    b.cancel()
    try:
        await b
    except asyncio.CancelledError:
        pass
    await until_blocked_at_most(1)
    await w.aput(b"1")
    print((await a).data, flush=True)
asyncio.run(main())
"""


def test_cancel_ends_a_wait_for_the_readers_turn(tmp_path):
    rc, out, err = run_child(CANCEL_WAITING_TURN, str(tmp_path / "store"))
    assert rc == 0, err
    assert out == "b'1'\n"


# The same in the synchronous API: a get in a thread waiting its turn on the
# reader ends by its cancel= and by its timeout= (docs/python.md: "A call
# blocked in another thread ... ends by its timeout=, or by a sluice.Cancel").
WAITING_TURN_SYNC = r"""
import sluice, time
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q")
deadline = time.monotonic() + 20

def in_thread(**kw):
    # r.get(**kw) in a daemon thread (one left blocked does not hold up the
    # exit); its outcome lands in the returned list
    out = []
    def run():
        try:
            out.append(r.get(**kw))
        except sluice.Error as e:
            out.append(type(e).__name__)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out

def until_sleeping(t):
    seen = 0
    while seen < 5:
        assert time.monotonic() < deadline, "the get never blocked"
        seen = seen + 1 if _state(t) == "S" else 0
        time.sleep(0.01)

stop_first = sluice.Cancel()
first, _ = in_thread(cancel=stop_first)
until_sleeping(first)  # it holds the reader, waiting for a message
t, out = in_thread(timeout=0.2)
t.join(10)
print(out[0] if out else "still waiting", flush=True)
second = sluice.Cancel()
t, out = in_thread(cancel=second)
until_sleeping(t)
second.cancel()
t.join(10)
print(out[0] if out else "still waiting", flush=True)
stop_first.cancel()
first.join(10)
"""


def test_timeout_and_cancel_end_a_get_waiting_for_the_readers_turn(tmp_path):
    rc, out, err = run_child(WAITING_TURN_SYNC, str(tmp_path / "store"))
    assert out == "Timeout\nCancelled\n", err
    assert rc == 0, err


# More tasks waiting in aget than the event loop's default executor has
# threads (min(32, cpu_count + 4)): the calls that would end the waits (aput)
# must still get a thread, not queue behind the waits for ever.
MANY_WAITING = r"""
import os, sluice
store = sluice.Store(sys.argv[1])
n = min(32, (os.cpu_count() or 1) + 4) + 2
names = [f"q{i}" for i in range(n)]
for name in names:
    store.create(name)
readers = [store.reader(name) for name in names]
writers = [store.writer(name) for name in names]
async def main():
    gets = [asyncio.create_task(r.aget()) for r in readers]
    await until_blocked(n - 2)
    for i, w in enumerate(writers):
        await w.aput(b"m%d" % i)
    got = [(await g).data for g in gets]
    print(got == [b"m%d" % i for i in range(n)], flush=True)
asyncio.run(main())
"""


def test_more_waiting_tasks_than_default_executor_threads(tmp_path):
    rc, out, err = run_child(MANY_WAITING, str(tmp_path / "store"))
    assert rc == 0, err
    assert out == "True\n"


# sluice's executor is the process's: a child made by fork() after the
# parent used it makes its own (the parent's idle threads are not in it, and
# a call handed to one would never run).
ASYNCIO_AFTER_FORK = r"""
import os, sluice
d = sys.argv[1]
s = sluice.Store(d); s.create("q")
with s.writer("q") as w:
    w.put_many([b"a", b"b"])
async def one(r):
    return (await r.aget()).data
with s.reader("q") as r:
    print("parent", asyncio.run(one(r)), flush=True)
pid = os.fork()
if pid == 0:
    with sluice.Store(d).reader("q") as r:
        print("child", asyncio.run(asyncio.wait_for(one(r), 20)), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("status", status, flush=True)
"""


def test_asyncio_in_a_child_made_by_fork(tmp_path):
    rc, out, err = run_child(ASYNCIO_AFTER_FORK, str(tmp_path / "store"))
    assert rc == 0, err
    # the parent did not acknowledge 'a': the child is handed it again
    assert out == "parent b'a'\nchild b'a'\nstatus 0\n", err


def test_aput_many_of_an_iterable_that_raises_is_put_many(backend):
    # docs/python.md: a put_many whose iterable raises puts the messages
    # before it and raises that error with .enqueued; aput_many is put_many
    # without blocking the loop.
    s = backend.store
    name = backend.create()

    def gen():
        yield b"a"
        yield b"b"
        raise KeyError("boom")

    with s.writer(name) as w:
        with pytest.raises(KeyError) as sync:
            w.put_many(gen())
        with pytest.raises(KeyError) as aio:
            asyncio.run(w.aput_many(gen()))
    assert (sync.value.enqueued, sync.value.in_doubt) == (2, 0)
    assert (getattr(aio.value, "enqueued", None), getattr(aio.value, "in_doubt", None)) == (2, 0)
    with s.reader(name) as r:
        assert [r.get(timeout=10).data for _ in range(4)] == [b"a", b"b", b"a", b"b"]


# Ctrl-C ends a get in the main thread that waits its turn on the reader
# (docs/python.md: Ctrl-C raises KeyboardInterrupt in a get blocked in the
# main thread within a slice).
CTRL_C_WAITING_TURN = r"""
import sluice, time
store = sluice.Store(sys.argv[1]); store.create("q")
r = store.reader("q")
deadline = time.monotonic() + 20
stop_first = sluice.Cancel()
def first_get():
    try:
        r.get(cancel=stop_first)
    except sluice.Cancelled:
        pass
def until_sleeping(t):
    seen = 0
    while seen < 5:
        assert time.monotonic() < deadline, "the get never blocked"
        seen = seen + 1 if _state(t) == "S" else 0
        time.sleep(0.01)
first = threading.Thread(target=first_get, daemon=True)
first.start()
until_sleeping(first)
def announce():
    until_sleeping(threading.main_thread())
    print("ready", flush=True)
threading.Thread(target=announce, daemon=True).start()
try:
    r.get()
except KeyboardInterrupt:
    print("interrupted", flush=True)
stop_first.cancel()
first.join(10)
"""


def test_ctrl_c_ends_a_get_waiting_for_the_readers_turn(tmp_path):
    child = python_child(HELPERS + CTRL_C_WAITING_TURN, str(tmp_path / "store"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"child still running {DEADLINE}s after SIGINT")
    assert out == b"interrupted\n", err
    assert child.returncode == 0, err


def test_aput_many_refuses_one_message_as_put_many_does(log):
    # put_many("abc") is a TypeError (one message is put's); aput_many("abc")
    # must not put 'a', 'b' and 'c'.
    s = log.store
    name = log.create()
    with s.writer(name) as w:
        for one in ("abc", b"abc"):
            with pytest.raises(TypeError, match="for one message, use put"):
                w.put_many(one)
            with pytest.raises(TypeError, match="for one message, use put"):
                asyncio.run(w.aput_many(one))
    assert s.stat(name).produced == 0


# Leaving a reader's with block while a task waits in its aget: the leave
# ends that get within a slice (the task gets sluice.Error), instead of
# waiting, with the event loop stopped, for a message that may never come.
LEAVE_UNDER_AGET = r"""
import sluice
store = sluice.Store(sys.argv[1]); store.create("q")
async def main():
    with store.reader("q") as r:
        t = asyncio.create_task(r.aget())
        await until_blocked(1)
    try:
        await t
        print("got a message", flush=True)
    except sluice.Error as e:
        print(type(e).__name__, "left its role" in str(e), flush=True)
    store.writer("q").put(b"1")
    with store.reader("q") as r2:  # the channel is free again, nothing lost
        print(r2.get(timeout=5).data, flush=True)
asyncio.run(main())
"""


def test_leaving_a_reader_ends_a_task_waiting_in_its_aget(tmp_path):
    rc, out, err = run_child(LEAVE_UNDER_AGET, str(tmp_path / "store"))
    assert rc == 0, err
    assert out == "Error True\nb'1'\n"
