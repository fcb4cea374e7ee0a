# Hand-written type stubs of the sluice package (docs/python.md).
from __future__ import annotations

import dataclasses
import datetime
from types import TracebackType
from typing import AsyncIterator, Iterable, Iterator, List, Literal, Optional, Union

Payload = Union[bytes, str, bytearray, memoryview]

class Error(Exception):
    code: str
    enqueued: Optional[int]
    in_doubt: Optional[int]

class QueueClosed(Error): ...
class NotFound(Error): ...
class AlreadyExists(Error): ...

class RoleHeld(Error):
    @property
    def holder(self) -> Optional[int]: ...

class Timeout(Error): ...
class Cancelled(Error): ...
class InvalidArgument(Error, ValueError): ...
class MessageTooLarge(InvalidArgument): ...
class StoreError(Error): ...
class Unavailable(StoreError): ...
class Corruption(StoreError): ...

@dataclasses.dataclass
class ChannelInfo:
    name: str
    lag: int
    pending: int
    dead_lettered: int
    purged: int

@dataclasses.dataclass
class QueueInfo:
    name: str
    bound: int
    closed: bool
    length: int
    waiting: Optional[int]
    in_flight: Optional[int]
    produced: int
    consumed: int
    produced_bytes: Optional[int]
    consumed_bytes: Optional[int]
    channels: List[str]
    kind: str
    max_age: Union[int, float]
    replicas: int
    channel_info: List[ChannelInfo]

@dataclasses.dataclass
class SeekResult:
    position: str
    clamped: bool
    unacknowledged_before: int
    unacknowledged: int

class Cancel:
    """A cancel handle: cancel() ends every call given it as cancel= (sluice.Cancelled)."""
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

class Message:
    """A message a reader got."""
    @property
    def data(self) -> bytes: ...
    @property
    def seq(self) -> Union[int, str, None]:
        """int on the embedded log; the entry id on a Redis Streams topic; None on a pressure queue."""
    @property
    def channel(self) -> str: ...
    @property
    def time(self) -> Optional[float]: ...
    @property
    def deliveries(self) -> Optional[int]: ...
    def __bytes__(self) -> bytes: ...

class Writer:
    """The producer role of one queue (Store.writer); a context manager."""
    def put(self, message: Payload, *, timeout: Optional[float] = ...,
            cancel: Optional[Cancel] = ...) -> None:
        """Enqueues one message, waiting while the queue is at its bound."""
    def put_many(self, messages: Iterable[Payload], *, timeout: Optional[float] = ...,
                 cancel: Optional[Cancel] = ...) -> int:
        """Enqueues the messages in order; returns how many. On an error the
        exception's .enqueued says how many went in (and .in_doubt how many
        after them may have: a broken connection, a failed sync)."""
    def close(self) -> None:
        """Closes the queue (end of stream): later puts raise QueueClosed."""
    def leave(self) -> None:
        """Gives up the role (what leaving the with block does)."""
    async def aput(self, message: Payload, *, timeout: Optional[float] = ...) -> None: ...
    async def aput_many(self, messages: Iterable[Payload], *,
                        timeout: Optional[float] = ...) -> int: ...
    @property
    def max_message_bytes(self) -> int: ...
    @property
    def blocked_seconds(self) -> float: ...
    @property
    def open(self) -> bool: ...
    @property
    def name(self) -> str: ...
    def __enter__(self) -> Writer: ...
    def __exit__(self, t: Optional[type], v: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None: ...

class Reader:
    """A consumer of one channel (Store.reader); a context manager and an
    iterator (sync and async) that ends once the queue is closed and drained."""
    def get(self, *, timeout: Optional[float] = ...,
            cancel: Optional[Cancel] = ...) -> Optional[Message]:
        """The next message; None once the queue is closed and drained."""
    def get_many(self, n: int, *, timeout: Optional[float] = ...,
                 cancel: Optional[Cancel] = ...) -> List[Message]:
        """1..n messages; [] once the queue is closed and drained."""
    def ack(self) -> int:
        """Acknowledges every message handed out so far; returns how many are acknowledged.

        Does not wait for another thread's get (or task's aget) waiting for a
        message on this reader: that get steps aside, then goes on waiting."""
    def release(self) -> None:
        """Gives back every message handed out and not acknowledged.

        Does not wait for another thread's get (or task's aget) waiting for a
        message on this reader: that get steps aside, then goes on waiting
        (and is handed what this gives back first)."""
    def leave(self) -> None:
        """Gives up the channel, giving back what is held (what leaving the with block does).

        Another thread's get (or task's aget) waiting for a message on this
        reader ends with sluice.Error."""
    async def aget(self) -> Optional[Message]: ...
    @property
    def delivered(self) -> int: ...
    @property
    def acked(self) -> int: ...
    @property
    def skipped_damaged(self) -> int:
        """Messages passed over since the reader opened because they were damaged on disk:
        lost, never delivered (`sluice log verify` says where). 0 on Redis."""
    @property
    def open(self) -> bool: ...
    @property
    def ended(self) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def channel(self) -> str: ...
    def __iter__(self) -> Iterator[Message]: ...
    def __next__(self) -> Message: ...
    def __aiter__(self) -> AsyncIterator[Message]: ...
    async def __anext__(self) -> Message: ...
    def __enter__(self) -> Reader: ...
    def __exit__(self, t: Optional[type], v: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None: ...

class Store:
    """A set of named queues: a directory, file:PATH, or redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]."""
    def __init__(self, location: str, *, durability: Literal["sync", "nosync"] = ...,
                 redis_prefix: str = ..., redis_stream_prefix: str = ...,
                 create_if_missing: bool = ...) -> None: ...
    def create(self, name: str, *, bound: int = ..., stream: bool = ..., max_age: float = ...,
               replicas: int = ...) -> None: ...
    def delete(self, name: str) -> None: ...
    def close(self, name: str, *, timeout: Optional[float] = ...,
              cancel: Optional[Cancel] = ...) -> None: ...
    def ls(self) -> List[str]: ...
    def stat(self, name: str) -> QueueInfo: ...
    def writer(self, name: str, *, timeout: Optional[float] = ...,
               cancel: Optional[Cancel] = ...) -> Writer: ...
    def reader(self, name: str, channel: str = ..., *, timeout: Optional[float] = ...,
               cancel: Optional[Cancel] = ..., visibility: float = ...,
               prefetch: int = ...) -> Reader: ...
    def peek(self, name: str, channel: str = ..., *, max: int = ..., seq: Optional[int] = ...,
             after_id: str = ...) -> List[Message]: ...
    def seek(self, name: str, channel: str,
             to: Union[Literal["start", "end"], int, str, datetime.datetime], *,
             timeout: Optional[float] = ..., cancel: Optional[Cancel] = ...) -> SeekResult: ...
    def purge(self, name: str, channel: str = ..., *, timeout: Optional[float] = ...,
              cancel: Optional[Cancel] = ...) -> int: ...
    @property
    def location(self) -> str: ...
