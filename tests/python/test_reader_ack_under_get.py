"""ack() and release() while another task's aget (or another thread's get)
waits for a message on the same reader: they do not wait for that get
(docs/python.md: the get steps aside for them, then goes on waiting), so an
event loop that calls them is not held up, and nothing is lost or handed out
twice.

Each scenario runs in a child python3 (a stall would otherwise be a hang);
a timer thread puts a message after STALL seconds, which ends a stall, so
a call that waited for the get shows as a slow one.
"""

import pytest

from conftest import redis_location
from test_asyncio_edges import HELPERS, run_child

STALL = 5

ACK_RELEASE_UNDER_AGET = r"""
import sluice, time, uuid
store = sluice.Store(sys.argv[1])
name = "py-" + uuid.uuid4().hex[:12]
store.create(name, stream=sys.argv[2] == "stream")
w = store.writer(name)
r = store.reader(name, prefetch=1)
STALL = float(sys.argv[3])
def timed(call):
    # a late message ends a wait for the get (it hands that one out)
    timer = threading.Timer(STALL, w.put, [b"late"])
    timer.start()
    t0 = time.monotonic()
    v = call()
    dt = time.monotonic() - t0
    timer.cancel()
    return v, dt < STALL / 2
async def main():
    w.put(b"1")
    print((await r.aget()).data, flush=True)
    a = asyncio.create_task(r.aget())
    await until_blocked(1)
    n, quick = timed(r.ack)
    print("ack", n, r.acked, quick, flush=True)
    w.put(b"2")
    print((await a).data, flush=True)
    b = asyncio.create_task(r.aget())
    await until_blocked(1)
    _, quick = timed(r.release)
    print("release", r.delivered, r.acked, quick, flush=True)
    print((await b).data, flush=True)  # given back: delivered again, first
    print(r.ack(), flush=True)
asyncio.run(main())
"""


@pytest.mark.parametrize("kind", ["log", "pressure", "stream"])
def test_ack_and_release_do_not_wait_for_another_tasks_aget(tmp_path, kind):
    location = str(tmp_path / "store") if kind == "log" else redis_location()
    rc, out, err = run_child(ACK_RELEASE_UNDER_AGET, location, kind, str(STALL))
    assert rc == 0, err
    assert out.splitlines() == [
        "b'1'", "ack 1 1 True", "b'2'", "release 1 1 True", "b'2'", "2"], err


ACK_UNDER_THREAD_GET = r"""
import sluice, time
store = sluice.Store(sys.argv[1]); store.create("q")
w = store.writer("q"); r = store.reader("q")
STALL = float(sys.argv[2])
w.put(b"1")
print(r.get(timeout=10).data, flush=True)
got = []
t = threading.Thread(target=lambda: got.append(r.get(timeout=20).data))
t.start()
deadline = time.monotonic() + 20
seen = 0
while seen < 5:  # the get is blocked in the store, holding the reader
    assert time.monotonic() < deadline, "the get never blocked"
    seen = seen + 1 if _state(t) == "S" else 0
    time.sleep(0.01)
timer = threading.Timer(STALL, w.put, [b"late"])
timer.start()
t0 = time.monotonic()
n = r.ack()
print("ack", n, time.monotonic() - t0 < STALL / 2, flush=True)
timer.cancel()
w.put(b"2")
t.join(20)
print(got, r.delivered, r.acked, flush=True)
"""


def test_ack_does_not_wait_for_another_threads_get(tmp_path):
    rc, out, err = run_child(ACK_UNDER_THREAD_GET, str(tmp_path / "store"), str(STALL))
    assert rc == 0, err
    assert out.splitlines() == ["b'1'", "ack 1 True", "[b'2'] 2 1"], err
