"""The asyncio form: ``async for msg in reader``, ``await writer.aput(...)``.

A blocking store call runs in the event loop's default executor (a thread),
with a sluice.Cancel that the awaiting task's cancellation triggers, so a
cancelled task does not leave a thread waiting. The reader fetches in the
thread and hands messages out in the task: a task cancelled while the
thread fetched loses nothing (what was fetched is handed out next, or given
back when the reader leaves).
"""

from __future__ import annotations

import asyncio
import functools

from ._sluice import Cancel, Reader, Writer


async def _in_thread(fn, *args, **kwargs):
    cancel = Cancel()
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(None, functools.partial(fn, *args, cancel=cancel, **kwargs))
    try:
        return await fut
    except asyncio.CancelledError:
        cancel.cancel()
        raise


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
    sluice.Cancelled's ``.enqueued`` then says whether it went in)."""
    return await _in_thread(self.put, message, timeout=timeout)


async def _aput_many(self, messages, *, timeout=None):
    """put_many() without blocking the event loop; returns how many were enqueued."""
    return await _in_thread(self.put_many, list(messages), timeout=timeout)


Reader.__aiter__ = _aiter
Reader.__anext__ = _anext
Reader.aget = _aget
Writer.aput = _aput
Writer.aput_many = _aput_many
