"""More edges of the binding (python/src/module.cpp): a refused leave(),
and the exit of a child made by fork().

Scenarios that could hang run in a child python3 with a deadline. States
are observed, not slept for.
"""

import subprocess

import pytest

from conftest import python_child

DEADLINE = 30


def run_child(code, *args):
    child = python_child(code, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = child.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"child still running after {DEADLINE}s (hung)\n"
                    f"stdout: {out!r}\nstderr: {err!r}")
    return child.returncode, out.decode(), err.decode()


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
        r.delivered  # raises only while inside this thread's get
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
