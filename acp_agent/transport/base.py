"""The transport interface: three methods that move bytes.

This module owns the contract every transport keeps (the in-memory pair and
stdio ship in this package; the contract suite in ``tests/transport`` checks
each against it).

It deliberately knows nothing of frames, JSON-RPC or ACP: a transport moves
opaque bytes. Cutting them into lines is the framing layer's job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["DirectSend", "PushReceive", "Transport"]


@runtime_checkable
class Transport(Protocol):
    """A bidirectional byte stream.

    - :meth:`receive` returns the next chunk of bytes (never empty); chunk
      boundaries carry no meaning. At end of stream it raises
      ``anyio.EndOfStream``; after our own :meth:`aclose` it raises
      ``anyio.ClosedResourceError``. Only one task may receive at a time.
    - :meth:`send` writes all of ``data`` (which may hold several complete
      frames) before returning. Concurrent sends are serialised: the bytes of
      two sends never interleave. Once the peer is gone it raises
      ``anyio.BrokenResourceError``; after our own :meth:`aclose`,
      ``anyio.ClosedResourceError``.
    - :meth:`aclose` releases the transport; the peer then sees end of stream.
      Calling it again does nothing.
    """

    async def receive(self) -> bytes: ...

    async def send(self, data: bytes) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class DirectSend(Protocol):
    """An optional fourth method a transport may offer: write without waiting.

    ``try_send(data)`` writes what can be written at once and returns how many bytes
    that was (0 when nothing could be, or while a ``send`` is still in progress). The
    connection uses it to put a response on the wire in the same step that produced
    it; whatever remains goes through ``send``, before anything else.
    """

    def try_send(self, data: bytes) -> int: ...


@runtime_checkable
class PushReceive(Protocol):
    """An optional method a transport may offer: hand chunks over as they arrive.

    ``receive_each(consumer)`` calls ``consumer(chunk)`` for each chunk, in order,
    until end of stream, and then returns. It raises what :meth:`Transport.receive`
    would (``anyio.ClosedResourceError`` after our own ``aclose``,
    ``anyio.BrokenResourceError`` when reading fails), and whatever ``consumer``
    raises, after which nothing more is delivered. ``consumer`` must be synchronous:
    it may run straight from the event loop's readiness callback, outside any task,
    which saves a task switch per chunk. Cancelling the caller stops delivery.
    """

    async def receive_each(self, consumer: Callable[[bytes], None]) -> None: ...
