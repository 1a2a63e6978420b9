"""Clients that misbehave on purpose, over real sockets: a WebSocket client that can
stop reading (wsproto on a plain TCP stream) and HTTP requests written by hand."""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import socket
import ssl
import struct
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import anyio.abc
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

__all__ = ["RawWebSocket", "open_socket", "raw_websocket", "reset", "wait_stalled"]


@asynccontextmanager
async def open_socket(
    url: str, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[anyio.abc.ByteStream]:
    """A TCP stream to ``url``'s host and port, over TLS when given a context."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    stream = await anyio.connect_tcp(parts.hostname, parts.port, ssl_context=ssl_context)
    try:
        yield stream
    finally:
        with contextlib.suppress(anyio.BrokenResourceError, OSError):  # reset already
            await stream.aclose()


async def wait_stalled(stream: anyio.abc.ByteStream, timeout: float = 30.0) -> int:
    """Wait until the server's writes to this unread stream have stopped: the bytes
    waiting in its socket stay the same over several looks (the server is then blocked
    on us). Returns how many bytes wait."""
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    seen: list[int] = []
    with anyio.fail_after(timeout):
        while len(seen) < 5 or len(set(seen[-5:])) > 1 or not seen[-1]:
            waiting = array.array("i", [0])
            fcntl.ioctl(raw.fileno(), termios.FIONREAD, waiting)
            seen.append(waiting[0])
            await anyio.sleep(0.1)  # a look at the socket, not a synchronisation
    return seen[-1]


def reset(stream: anyio.abc.ByteStream) -> None:
    """Reset the connection under ``stream``, as a client that crashed would."""
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    with socket.socket(fileno=os.dup(raw.fileno())) as sock:  # asyncio's has no shutdown()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)


class RawWebSocket:
    """One WebSocket, read only when asked (a transport for ``RemoteClient``)."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._texts: list[str] = []
        self._partial = ""

    async def handshake(self, host: str, token: str | None) -> None:
        extra = [(b"authorization", f"Bearer {token}".encode())] if token else []
        await self.stream.send(self.ws.send(Request(host=host, target="/acp", extra_headers=extra)))
        while True:
            self.ws.receive_data(await self.stream.receive())
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    return
                raise AssertionError(f"handshake refused: {event!r}")

    async def send(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if line.strip():
                await self.stream.send(self.ws.send(TextMessage(data=line.decode())))

    async def receive(self) -> bytes:
        while not self._texts:
            try:
                data = await self.stream.receive()
            except anyio.EndOfStream:
                data = None
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    self._partial += event.data
                    if event.message_finished:
                        self._texts.append(self._partial)
                        self._partial = ""
                elif isinstance(event, CloseConnection):
                    raise anyio.EndOfStream
            if data is None and not self._texts:
                raise anyio.EndOfStream
        return self._texts.pop(0).encode() + b"\n"


@asynccontextmanager
async def raw_websocket(
    url: str, token: str | None = None, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[RawWebSocket]:
    """A WebSocket to ``url`` that reads only when asked (over TLS given a context)."""
    async with open_socket(url, ssl_context) as stream:
        ws = RawWebSocket(stream)
        await ws.handshake(urlsplit(url).netloc, token)
        yield ws
