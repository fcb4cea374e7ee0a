"""The asyncio form: ``async for msg in reader``, ``await writer.aput(...)``.

A blocking store call runs in a thread of sluice's own executor, which has a
thread for every call at once (the event loop's default executor has
min(32, cpu_count + 4): more tasks waiting in aget than that would keep the
aput that ends their wait from ever running), with a sluice.Cancel that the
awaiting task's cancellation triggers, so a cancelled task does not leave a
thread waiting. The reader fetches in the
thread and hands messages out in the task: a task cancelled while the
thread fetched loses nothing (what was fetched is handed out next, or given
back when the reader leaves). Handing out never waits for the reader in
the event loop: while another task's call holds it, the task waits its turn
in a thread too.

A call whose task is never cancelled (a loop closed with the task pending,
or KeyboardInterrupt out of loop.run_until_complete) would keep its thread
waiting, and the interpreter's exit joins the executor's threads: it would
wait for ever. So at exit, before that join, every call still in a thread is
cancelled (sluice.Cancelled in the thread, seen by nobody).
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401 (its exit hook first: ours runs before it)
import functools
import os
import threading

from ._sluice import Cancel, Reader, Writer

# The Cancels of the calls that may be running in a thread.
_pending = set()

# A thread per call at once: a waiting call holds its thread for as long as
# it waits. Made at the first call; a child made by fork() makes its own
# (the parent's threads are not in it).
_MAX_THREADS = 1 << 16
_executor = None
_executor_lock = threading.Lock()


def _get_executor():
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=_MAX_THREADS, thread_name_prefix="sluice-asyncio")
        return _executor


def _after_fork_in_child():
    global _executor, _executor_lock
    _executor = None
    _executor_lock = threading.Lock()
    _pending.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _cancel_pending():
    for cancel in list(_pending):
        cancel.cancel()


# threading's exit hooks run in reverse order of registration, before the
# non-daemon threads are joined; concurrent.futures' (joining the executor's
# threads) is registered at its import, above.
threading._register_atexit(_cancel_pending)


async def _in_thread(fn, *args, **kwargs):
    cancel = Cancel()
    loop = asyncio.get_running_loop()
    _pending.add(cancel)
    try:
        call = functools.partial(fn, *args, cancel=cancel, **kwargs)
        return await loop.run_in_executor(_get_executor(), call)
    except BaseException:  # CancelledError; GeneratorExit when the pending task is collected
        cancel.cancel()
        raise
    finally:
        _pending.discard(cancel)


def _aiter(self):
    return self


async def _anext(self):
    while True:
        msg = self._take()
        if msg is not None:
            return msg
        if not await _in_thread(self._wait):
            raise StopAsyncIteration


async def _aget(self):
    """The next message, or None once the queue is closed and drained."""
    try:
        return await _anext(self)
    except StopAsyncIteration:
        return None


async def _aput(self, message, *, timeout=None):
    """put() without blocking the event loop (cancelling the task cancels the put:
    the task gets CancelledError, and whether the message went in is then in
    the store, ``stat``)."""
    return await _in_thread(self.put, message, timeout=timeout)


async def _aput_many(self, messages, *, timeout=None):
    """put_many() without blocking the event loop; returns how many were enqueued."""
    # The iterable is read here, in the task (not the program's code run in
    # a thread). One that raises: the messages before it go in, then its
    # error with .enqueued, as put_many does.
    if isinstance(messages, (bytes, str)):  # put_many's check (list() would split it)
        raise TypeError("put_many takes an iterable of messages; for one message, use put")
    batch = []
    try:
        for m in messages:
            batch.append(m)
    except Exception as e:
        n = await _in_thread(self.put_many, batch, timeout=timeout) if batch else 0
        try:
            e.enqueued = n
            e.in_doubt = 0
        except AttributeError:
            pass
        raise
    return await _in_thread(self.put_many, batch, timeout=timeout)


Reader.__aiter__ = _aiter
Reader.__anext__ = _anext
Reader.aget = _aget
Writer.aput = _aput
Writer.aput_many = _aput_many
