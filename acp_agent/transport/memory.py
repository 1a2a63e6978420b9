"""An in-memory transport pair, for tests and for embedding an agent in-process.

This module owns :func:`memory_pair`: two connected :class:`MemoryTransport`
objects, built on anyio memory object streams, where what one sends the other
receives (each ``send`` arrives as one chunk).

It deliberately knows nothing of frames, JSON-RPC or ACP.
"""

from __future__ import annotations

import math

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["MemoryTransport", "memory_pair"]


class MemoryTransport(anyio.abc.AsyncResource):
    """One end of an in-memory pair (see :func:`memory_pair`); a ``Transport``."""

    __slots__ = ("_receive_stream", "_send_stream")

    def __init__(
        self,
        send_stream: MemoryObjectSendStream[bytes],
        receive_stream: MemoryObjectReceiveStream[bytes],
    ) -> None:
        self._send_stream = send_stream
        self._receive_stream = receive_stream

    async def receive(self) -> bytes:
        """The next chunk the peer sent; ``anyio.EndOfStream`` once it closed its side."""
        return await self._receive_stream.receive()

    async def send(self, data: bytes) -> None:
        """Hand ``data`` to the peer; waits only when a bounded buffer is full."""
        if not data:
            await anyio.lowlevel.checkpoint()
            return
        await self._send_stream.send(bytes(data))

    async def send_eof(self) -> None:
        """End our direction only: the peer's ``receive`` raises ``EndOfStream``
        after the data already sent; we can still receive."""
        await self._send_stream.aclose()

    async def aclose(self) -> None:
        """Close both directions; the peer sees end of stream."""
        await self._send_stream.aclose()
        await self._receive_stream.aclose()


def memory_pair(max_buffer: float = math.inf) -> tuple[MemoryTransport, MemoryTransport]:
    """Two connected transports: what one sends, the other receives.

    ``max_buffer`` is the number of unreceived sends each direction holds
    before ``send`` waits (unbounded by default).
    """
    a_send, b_receive = anyio.create_memory_object_stream[bytes](max_buffer)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](max_buffer)
    return MemoryTransport(a_send, a_receive), MemoryTransport(b_send, b_receive)
