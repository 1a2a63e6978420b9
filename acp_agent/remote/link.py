"""One remote connection as a byte ``Transport``: whole messages in, whole messages out.

This module owns :class:`MessageLink`, the adapter between a remote connection (a
WebSocket, or the POSTs and SSE stream of Streamable HTTP) and the per-connection
server, which reads and writes newline-delimited JSON through the ordinary
:class:`~acp_agent.transport.Transport` interface (the in-memory transport works the
same way). The server side sees ``receive``/``send``/``aclose``; the
remote side hands in one message at a time (:meth:`deliver`), ends the input like a
pipe reaching EOF (:meth:`end_input`) and takes the server's messages one by one
(:meth:`next_batch`).

Both directions are bounded memory streams: a client that sends faster than the
server reads waits in :meth:`deliver`, and a server that writes faster than the client
reads waits in ``send`` (back-pressure, as on a pipe).

It knows nothing of HTTP, WebSockets, JSON-RPC or ACP: a message is opaque bytes
holding no raw newline (raw newlines, which JSON allows only as whitespace, are turned
into spaces on the way in).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

__all__ = ["MessageLink", "Pull"]

Pull = Callable[[], Awaitable[bytes | None]]
"""The next client message on demand; None once the client has no more."""

BUFFER = 64
"""Chunks each direction holds before the writer waits."""


class MessageLink:
    """A ``Transport`` for the server; the remote side's methods below."""

    __slots__ = (
        "_ended",
        "_in_receive",
        "_in_send",
        "_out_receive",
        "_out_send",
        "_partial",
        "_pull",
        "delivered",
    )

    def __init__(self, buffer: int = BUFFER, pull: Pull | None = None) -> None:
        self._pull = pull
        self._ended = False
        if pull is None:
            self._in_send, self._in_receive = anyio.create_memory_object_stream[bytes](buffer)
        self._out_send, self._out_receive = anyio.create_memory_object_stream[bytes](buffer)
        #: the start of a message the server has not finished writing (no newline yet)
        self._partial: list[bytes] = []
        #: messages handed in so far (the idle check reads it)
        self.delivered = 0

    # -- the server's side: a Transport

    async def receive(self) -> bytes:
        if self._pull is None:  # a burst is read in one go, not a loop pass per message
            chunks = [await self._in_receive.receive()]
            while True:
                try:
                    chunks.append(self._in_receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    return b"".join(chunks)
        # (with a pull, a wait in progress is ended by the server's stop, not here)
        message = None if self._ended else await self._pull()
        if message is None:
            self._ended = True
            raise anyio.EndOfStream
        self.delivered += 1
        return _one_line(message)

    async def send(self, data: bytes) -> None:
        if not data:
            await anyio.lowlevel.checkpoint()
            return
        await self._out_send.send(bytes(data))

    async def aclose(self) -> None:
        self._out_send.close()
        if self._pull is None:
            self._in_receive.close()

    # -- the remote side

    async def deliver(self, message: bytes) -> None:
        """Hand one client message to the server (waits while the server is behind).

        Raises ``anyio.BrokenResourceError`` once the server has stopped reading."""
        self.delivered += 1
        line = _one_line(message)
        try:  # no pass of the event loop per message while there is room
            self._in_send.send_nowait(line)
        except anyio.WouldBlock:
            await self._in_send.send(line)

    def end_input(self) -> None:
        """No more client messages: the server sees end of input, as on a closed pipe
        (with a pull, at its next ``receive``: the caller stops a wait in progress)."""
        self._ended = True
        if self._pull is None:
            self._in_send.close()

    def drop_output(self) -> None:
        """The client is gone: the server's further sends fail as on a broken pipe."""
        self._out_receive.close()

    async def next_batch(self) -> list[bytes] | None:
        """The server's next whole messages, in order, as written together (never
        empty); None once the server has closed its side and everything was taken.

        A message may reach the link in several writes (a large frame is written in
        pieces): it is joined here, so each message comes out whole."""
        while True:
            try:
                chunks = [await self._out_receive.receive()]
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return None
            while True:  # and whatever else is written already
                try:
                    chunks.append(self._out_receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
            batch = self._whole_lines(chunks)
            if batch:
                return batch

    def _whole_lines(self, chunks: list[bytes]) -> list[bytes]:
        """The complete lines of ``chunks``; what follows the last newline is kept."""
        batch: list[bytes] = []
        for chunk in chunks:
            end = chunk.rfind(b"\n")
            if end < 0:
                self._partial.append(chunk)
                continue
            if self._partial:
                self._partial.append(chunk[: end + 1])
                chunk, self._partial = b"".join(self._partial), [chunk[end + 1 :]]
                end = len(chunk) - 1
            else:
                self._partial = [chunk[end + 1 :]]
            batch.extend(line for line in chunk[:end].split(b"\n") if line)
            if not self._partial[0]:
                self._partial = []
        return batch


def _one_line(message: bytes) -> bytes:
    if b"\n" in message:
        message = message.replace(b"\n", b" ")
    return message + b"\n"
