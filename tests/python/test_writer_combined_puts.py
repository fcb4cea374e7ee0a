"""Threads sharing one Writer: their puts are combined into one store put
(docs/python.md). Each caller gets its own result, its error included."""

import threading
import time

import sluice


def test_a_timed_out_put_in_a_combined_put_is_timeout_not_cancelled(log):
    # At the bound, every put times out. A leader's put is stopped when a
    # caller in its group gives up (its timeout): if the leader's own
    # timeout passes meanwhile, it is its timeout, not another's stop, that
    # ended its put: Timeout (it has no Cancel). It said Cancelled for about
    # one in four such puts.
    name = log.create(bound=1)
    kinds = {}
    lock = threading.Lock()
    with log.store.writer(name) as w:
        w.put(b"full")
        stop_at = time.monotonic() + 1.5

        def run():
            while time.monotonic() < stop_at:
                try:
                    w.put(b"x", timeout=0.01)
                    kind = "put"
                except sluice.Error as e:
                    kind = type(e).__name__
                    assert e.enqueued == 0 and e.in_doubt == 0
                with lock:
                    kinds[kind] = kinds.get(kind, 0) + 1

        threads = [threading.Thread(target=run) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert set(kinds) == {"Timeout"}, kinds
    assert log.store.stat(name).produced == 1
