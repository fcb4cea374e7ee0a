#!/usr/bin/env python3
"""The Python module (`import sluice`) against what a Python program would
use instead, side by side in one run: 100-byte messages from a producer
process to a consumer process (scripts/dev bench-python; --quick in CI).

Rows (messages per second, the median of --runs runs; ratio = sluice/peer):
  durable, batch B (1, 100, 1000): the embedded store with durability "sync"
      (put_many of B; get_many of up to B, then ack: both fdatasync'd)
      against SQLite in WAL mode with synchronous=FULL used as a queue: a
      transaction per batch on both sides (INSERT B rows; SELECT up to B
      and DELETE them). Target >= 1.5x.
  durable, 4 producer threads, one message per put: the threads of one
      process share one Writer (its puts are combined into one store put
      while another is in progress: a group commit) against 4 threads with
      their own SQLite connection, a transaction per message. Target >= 3x.
  no durability, per message / lists of 100: durability "nosync" (survives
      a crash of the process, not of the machine; acks every 1,000
      messages / every list) against multiprocessing.Queue (put/get per
      message, or of a list of 100). Target >= 2x.
  C++: the same workload through the C++ store (bench/store_peer, two
      processes) for three rows: the binding's overhead is C++/Python. And
      the C++ store against multiprocessing.Queue with lists of 100: what
      the log moves on this disk without the binding (no target: the
      binding can only add to its cost).

The disk is the store directory's (--dir, default a temporary directory in
the build directory: not /tmp, which may be tmpfs). Writes a Markdown table to
stdout, and with --out to a file.
"""

import argparse
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MSG = b"x" * 100
# Distinct objects, as real messages are (pickle would send one object
# repeated in a list once, and refer to it 99 times).
MSGS = [b"%099d." % i for i in range(1000)]


# --- sluice ------------------------------------------------------------------

def sluice_producer(loc, name, n, batch, durability, threads, out):
    import sluice
    s = sluice.Store(loc, durability=durability)
    with s.writer(name) as w:
        start = time.monotonic()
        if threads == 1:
            if batch == 1:
                for _ in range(n):
                    w.put(MSG)
            else:
                for i in range(0, n, batch):
                    w.put_many(MSGS[:min(batch, n - i)])
        else:
            def one(k):
                for _ in range(k):
                    w.put(MSG)
            ts = [threading.Thread(target=one, args=(n // threads,)) for _ in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        w.close()
    out.put(("producer", start, time.monotonic()))


def sluice_consumer(loc, name, n, batch, durability, ack_every, out):
    import sluice
    s = sluice.Store(loc, durability=durability)
    got = 0
    with s.reader(name, prefetch=max(batch, 100)) as r:
        start = time.monotonic()
        if batch == 1:
            for _ in r:
                got += 1
                if got % ack_every == 0:
                    r.ack()
        else:
            while True:
                msgs = r.get_many(batch)
                if not msgs:
                    break
                got += len(msgs)
                r.ack()
        r.ack()
    assert got == n, (got, n)
    out.put(("consumer", start, time.monotonic()))


def run_sluice(work, n, batch, durability="sync", threads=1, ack_every=1000, bound=10000):
    import sluice
    loc = os.path.join(work, "sluice")
    shutil.rmtree(loc, ignore_errors=True)
    sluice.Store(loc).create("q", bound=bound)
    return two_processes(
        (sluice_producer, (loc, "q", n, batch, durability, threads)),
        (sluice_consumer, (loc, "q", n, batch, durability, ack_every)), n)


# --- SQLite (WAL, synchronous=FULL) --------------------------------------------

def sqlite_connect(path):
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


def sqlite_producer(path, n, batch, threads, out):
    start = time.monotonic()
    if threads == 1:
        db = sqlite_connect(path)
        rows = [(m,) for m in MSGS[:batch]]
        for i in range(0, n, batch):
            db.execute("BEGIN")
            db.executemany("INSERT INTO q(body) VALUES (?)", rows[:min(batch, n - i)])
            db.execute("COMMIT")
    else:
        def one(k):
            db = sqlite_connect(path)
            for _ in range(k):
                db.execute("INSERT INTO q(body) VALUES (?)", (MSG,))  # a transaction each
        ts = [threading.Thread(target=one, args=(n // threads,)) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    out.put(("producer", start, time.monotonic()))


def sqlite_consumer(path, n, batch, out):
    db = sqlite_connect(path)
    start = time.monotonic()
    got = 0
    while got < n:
        db.execute("BEGIN IMMEDIATE")
        rows = db.execute("SELECT id, body FROM q ORDER BY id LIMIT ?", (batch,)).fetchall()
        if rows:
            db.execute("DELETE FROM q WHERE id <= ?", (rows[-1][0],))
        db.execute("COMMIT")
        got += len(rows)
        if not rows:
            time.sleep(0.0005)  # a poll: SQLite has no wait for rows
    out.put(("consumer", start, time.monotonic()))


def run_sqlite(work, n, batch, threads=1):
    path = os.path.join(work, "queue.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    db = sqlite_connect(path)
    db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB NOT NULL)")
    db.close()
    return two_processes((sqlite_producer, (path, n, batch, threads)),
                         (sqlite_consumer, (path, n, max(batch, 100) if threads > 1 else batch)), n)


# --- multiprocessing.Queue -------------------------------------------------------

def mpq_producer(q, n, batch, out):
    start = time.monotonic()
    if batch == 1:
        for _ in range(n):
            q.put(MSG)
    else:
        for _ in range(0, n, batch):
            q.put(MSGS[:batch])
    q.put(None)
    out.put(("producer", start, time.monotonic()))


def mpq_consumer(q, n, batch, out):
    start = time.monotonic()
    got = 0
    while True:
        m = q.get()
        if m is None:
            break
        got += 1 if batch == 1 else len(m)
    assert got == n
    out.put(("consumer", start, time.monotonic()))


def run_mpq(work, n, batch):
    q = CTX.Queue(maxsize=10000 if batch == 1 else 100)
    return two_processes((mpq_producer, (q, n, batch)), (mpq_consumer, (q, n, batch)), n)


# --- C++ (bench/store_peer) ---------------------------------------------------------

def run_cpp(work, n, batch, durability, ack_every=1000, bound=10000):
    import sluice
    loc = os.path.join(work, "cpp")
    shutil.rmtree(loc, ignore_errors=True)
    sluice.Store(loc).create("q", bound=bound)
    peer = os.path.join(BUILD, "bench", "store_peer")
    c = subprocess.Popen([peer, "consume", loc, "q", str(n), str(batch), str(ack_every), durability],
                         stdout=subprocess.PIPE)
    p = subprocess.Popen([peer, "produce", loc, "q", str(n), str(batch), durability],
                         stdout=subprocess.PIPE)
    pout, _ = p.communicate()
    cout, _ = c.communicate()
    if p.returncode or c.returncode:
        raise RuntimeError("store_peer failed")
    p0, _ = map(float, pout.split())
    c0, c1 = map(float, cout.split())
    return n / (c1 - min(p0, c0))


# --- harness ---------------------------------------------------------------------

CTX = mp.get_context("fork")  # the parent opens no Store before forking
BUILD = ""


def two_processes(producer, consumer, n):
    """Runs both sides; messages per second from the first side's start to
    the consumer's end."""
    out = CTX.Queue()
    pc = CTX.Process(target=consumer[0], args=(*consumer[1], out))
    pp = CTX.Process(target=producer[0], args=(*producer[1], out))
    pc.start()
    pp.start()
    times = {}
    for _ in range(2):
        role, a, b = out.get(timeout=600)
        times[role] = (a, b)
    pp.join()
    pc.join()
    if pp.exitcode or pc.exitcode:
        raise RuntimeError("a side failed")
    start = min(times["producer"][0], times["consumer"][0])
    return n / (times["consumer"][1] - start)


def median_rate(fn, runs):
    return statistics.median(fn() for _ in range(runs))


def main():
    global BUILD
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/default", help="the CMake build directory")
    ap.add_argument("--quick", action="store_true", help="small counts, one run (CI)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the stores go (a real disk)")
    ap.add_argument("--out", default=None, help="also write the table here")
    ap.add_argument("--only", default=None,
                    help="run only the rows whose label contains this (e.g. 'lists of 100')")
    args = ap.parse_args()
    BUILD = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(BUILD, "python"))
    runs = 1 if args.quick else args.runs
    scale = 0.05 if args.quick else 1.0

    def count(full):
        return max(100, int(full * scale) // 100 * 100)

    work = tempfile.mkdtemp(prefix="python_compare.", dir=args.dir or BUILD)
    rows = []

    def row(label, ours, peer, peer_name, target):
        if args.only and args.only not in label:
            return
        a = median_rate(ours, runs)
        b = median_rate(peer, runs)
        rows.append((label, a, peer_name, b, a / b, target))
        print(f"  {label}: sluice {a:,.0f}/s, {peer_name} {b:,.0f}/s, {a / b:.2f}x", file=sys.stderr,
              flush=True)

    try:
        for batch, full in ((1, 2000), (100, 100000), (1000, 400000)):
            n = count(full)
            row(f"durable, batch {batch} ({n:,} msgs)",
                lambda: run_sluice(work, n, batch),
                lambda: run_sqlite(work, n, batch), "SQLite WAL FULL", 1.5)
        n = count(4000)
        row(f"durable, 4 producer threads, 1 msg per put ({n:,} msgs)",
            lambda: run_sluice(work, n, 1, threads=4, ack_every=100),
            lambda: run_sqlite(work, n, 1, threads=4), "SQLite WAL FULL", 3.0)
        n = count(200000)
        row(f"no durability, per message ({n:,} msgs)",
            lambda: run_sluice(work, n, 1, durability="nosync"),
            lambda: run_mpq(work, n, 1), "multiprocessing.Queue", 2.0)
        n = count(1000000)
        row(f"no durability, lists of 100 ({n:,} msgs)",
            lambda: run_sluice(work, n, 100, durability="nosync"),
            lambda: run_mpq(work, n, 100), "multiprocessing.Queue", 2.0)
        if os.path.exists(os.path.join(BUILD, "bench", "store_peer")):
            # The store without the binding against the same peer: what the
            # log itself moves on this disk (the binding only adds to it).
            n = count(1000000)
            row(f"C++ store, no durability, lists of 100 ({n:,} msgs)",
                lambda: run_cpp(work, n, 100, "nosync"),
                lambda: run_mpq(work, n, 100), "multiprocessing.Queue", None)
            for label, n, batch, dur in (("durable, batch 100", count(100000), 100, "sync"),
                                         ("no durability, per message", count(200000), 1, "nosync"),
                                         ("no durability, lists of 100", count(1000000), 100,
                                          "nosync")):
                row(f"C++ vs Python, {label} ({n:,} msgs)",
                    lambda: run_cpp(work, n, batch, dur),
                    lambda: run_sluice(work, n, batch, durability=dur), "sluice (Python)", None)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lines = ["| workload | sluice msgs/s | peer | peer msgs/s | ratio | target |",
             "|---|---:|---|---:|---:|---|"]
    for label, a, peer, b, ratio, target in rows:
        if target is None:
            verdict = ("(binding overhead: C++/Python)" if peer == "sluice (Python)" else
                       "(the store without the binding)")
        else:
            verdict = f">= {target}x: {'met' if ratio >= target else 'MISSED'}"
        first = "C++ (store_peer)" if target is None else "sluice"
        lines.append(f"| {label} ({first}) | {a:,.0f} | {peer} | {b:,.0f} | {ratio:.2f}x | {verdict} |")
    table = "\n".join(lines) + f"\n\nMedians of {runs} run(s); 100-byte messages; two processes.\n"
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
