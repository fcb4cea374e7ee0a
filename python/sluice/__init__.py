"""sluice: named, bounded, durable queues shared by processes (docs/python.md).

One queue can have a Python producer, a C++ consumer and a shell
``sluice get`` on the same name: this is a binding of the C++ store
(``include/sluice/store.h``), with every backend it has: a directory (or
``file:PATH``), the embedded log store; ``redis://HOST:PORT/DB``, Redis.

    import sluice
    store = sluice.Store("/tmp/q")
    store.create("jobs", bound=1000)
    with store.writer("jobs") as w:
        w.put(b"hello")
    with store.reader("jobs") as r:
        for msg in r:          # ends once the queue is closed and drained
            handle(msg.data)
            r.ack()            # what was handed out so far

Blocking calls release the GIL. In the main thread Ctrl-C interrupts them
within about 50 ms (KeyboardInterrupt; nothing is lost: an interrupted put
says how many it enqueued in ``.enqueued``); in other threads a call ends by
its ``timeout=`` or a ``sluice.Cancel`` given as ``cancel=``.

Errors are exceptions under ``sluice.Error``, one class per status a program
can act on. A Store, Writer or Reader belongs to the process that opened it:
after ``os.fork()`` the child gets ``sluice.Error`` from them and must open
its own Store.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Union

from . import _sluice
from ._sluice import Cancel, Message, Reader, Store, Writer

__all__ = [
    "Store", "Writer", "Reader", "Message", "Cancel", "QueueInfo", "ChannelInfo", "SeekResult",
    "Error", "QueueClosed", "NotFound", "AlreadyExists", "RoleHeld", "Timeout", "Cancelled",
    "InvalidArgument", "MessageTooLarge", "StoreError", "Unavailable", "Corruption",
]


class Error(Exception):
    """Every sluice error. ``code`` is the status's name (e.g. "not_found")."""

    code: str = "error"
    #: A failed put (or put_many): how many of its messages were enqueued
    #: (the rest were not, but for ``in_doubt`` of them after a broken Redis
    #: connection). None for other calls.
    enqueued: Optional[int] = None
    in_doubt: Optional[int] = None


class QueueClosed(Error):
    """A put to a closed queue (the queue takes no more messages)."""


class NotFound(Error):
    """No such queue (or channel)."""


class AlreadyExists(Error):
    """create: the name is taken."""


class RoleHeld(Error):
    """The writer role, or the channel's reader, is held by another: the wait
    for it ran out (timeout=), or delete refused a queue in use.

    ``holder`` is the holder's process id where the store names it, else None.
    """

    @property
    def holder(self) -> Optional[int]:
        import re
        m = re.search(r"PID (\d+)", str(self))
        return int(m.group(1)) if m else None


class Timeout(Error):
    """The call's timeout= passed first. A put's ``.enqueued`` says how many
    of its messages were enqueued before it."""


class Cancelled(Error):
    """The call's sluice.Cancel was triggered."""


class InvalidArgument(Error, ValueError):
    """A bad queue or channel name, location, option or message."""


class MessageTooLarge(InvalidArgument):
    """put: a message over the store's limit (Writer.max_message_bytes)."""


class StoreError(Error):
    """The store failed: an I/O error (disk full, permissions), with errno's text."""


class Unavailable(StoreError):
    """Redis: the server cannot be reached (the message names host:port)."""


class Corruption(StoreError):
    """Damaged data (see `sluice log verify`)."""


@dataclasses.dataclass
class ChannelInfo:
    """One channel of a queue, as stat() sees it (`sluice stat --json`'s channel_info)."""

    name: str
    lag: int  # put and not yet delivered to this channel
    pending: int  # delivered and not acknowledged (Streams topics)
    dead_lettered: int  # moved to the dead letters (Streams topics)
    purged: int  # dropped unacknowledged by purge, ever


@dataclasses.dataclass
class QueueInfo:
    """A queue's state: the fields of `sluice stat --json`, same names and meaning."""

    name: str
    bound: int
    closed: bool
    length: int  # produced - consumed
    waiting: Optional[int]  # pressure queues: waiting to be taken (else None)
    in_flight: Optional[int]  # pressure queues: taken, not acknowledged (else None)
    produced: int
    consumed: int
    produced_bytes: Optional[int]  # None where the backend cannot know
    consumed_bytes: Optional[int]
    channels: List[str]
    kind: str  # "log", "pressure" or "stream"
    max_age: Union[int, float]  # seconds; 0: none
    replicas: int
    channel_info: List[ChannelInfo]


@dataclasses.dataclass
class SeekResult:
    """What Store.seek did."""

    position: str  # "seq N" or "after ID"
    clamped: bool  # asked for a place before the oldest retained message
    unacknowledged_before: int
    unacknowledged: int


_sluice._setup({
    "": Error,
    "closed": QueueClosed,
    "not_found": NotFound,
    "already_exists": AlreadyExists,
    "in_use": RoleHeld,
    "deadline_exceeded": Timeout,
    "cancelled": Cancelled,
    "invalid_argument": InvalidArgument,
    "too_large": MessageTooLarge,
    "io_error": StoreError,
    "unavailable": Unavailable,
    "corruption": Corruption,
    "QueueInfo": QueueInfo,
    "ChannelInfo": ChannelInfo,
    "SeekResult": SeekResult,
})

from . import _aio  # noqa: E402  (adds async for / aput to Reader and Writer)

del _aio
