"""Shared pieces of the remote tests: a real server on loopback, clients over its URL.

``running_server`` serves the reference agent with ``serve_http`` in the test's own
event loop (Hypercorn on a free port of 127.0.0.1) and yields its ``http://`` URL;
``connect`` opens a connection over WebSocket or Streamable HTTP with the project's
client transport and yields a :class:`RemoteClient`, the scripted client of the stdio
tests (``tests.helpers.wire_client``) reading and writing through that transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson

from acp_agent.reference import ReferenceAgent
from acp_agent.remote import Limits, Principals, serve_http
from acp_agent.store import MemorySessionStore, SessionStore
from acp_agent.transport.remote import open_remote
from tests.helpers.wire_client import TIMEOUT, Message, ProcessClient

KINDS = ("websocket", "http")
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-9876543210ab"}


def principals() -> Principals:
    return Principals.from_lines(f"{name} {token}" for name, token in TOKENS.items())


@asynccontextmanager
async def running_server(
    *, store: SessionStore | None = None, **options: Any
) -> AsyncIterator[str]:
    """Serve the reference agent on 127.0.0.1 (a free port) until the block ends."""
    ready = anyio.Event()
    stop = anyio.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    the_store = store if store is not None else MemorySessionStore()
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve_http(
                ReferenceAgent,
                listen="127.0.0.1:0",
                store=the_store,
                ready=on_ready,
                stop=stop,
                **options,
            )
        )
        with anyio.fail_after(TIMEOUT):
            await ready.wait()
        try:
            yield urls[0]
        finally:
            stop.set()


def url_for(base: str, kind: str) -> str:
    """``base`` (``http://`` or ``https://``) for a ``kind`` of client."""
    return base.replace("http", "ws", 1) if kind in ("websocket", "wss") else base


class RemoteClient(ProcessClient):
    """The stdio tests' scripted client, over a remote transport."""

    def __init__(self, transport: Any) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.transport = transport

    async def send(self, message: Message) -> None:
        await self.transport.send(orjson.dumps(message) + b"\n")

    async def send_raw(self, data: bytes) -> None:
        await self.transport.send(data)

    async def receive(self, timeout: float = TIMEOUT) -> Message:
        with anyio.fail_after(timeout):
            while b"\n" not in self._buffer:
                self._buffer += await self.transport.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = orjson.loads(line)
        assert isinstance(message, dict), message
        return message

    async def closed(self, timeout: float = TIMEOUT) -> bool:
        """True once the server has ended the connection (nothing more arrives)."""
        with anyio.fail_after(timeout):
            try:
                while True:
                    self._buffer += await self.transport.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return True


@asynccontextmanager
async def connect(
    base: str, kind: str, *, token: str | None = None, max_message: int = 1 << 26
) -> AsyncIterator[RemoteClient]:
    async with open_remote(url_for(base, kind), token=token, max_message=max_message) as t:
        yield RemoteClient(t)


def sole_error(exc: BaseException) -> BaseException:
    """The one exception inside exception groups of one (a task group wraps what its
    body raises)."""
    while len(getattr(exc, "exceptions", ())) == 1:
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def workdir(tmp_path: Path) -> str:
    (tmp_path / "work").mkdir(exist_ok=True)
    return str(tmp_path / "work")


__all__ = [
    "KINDS",
    "TOKENS",
    "Limits",
    "RemoteClient",
    "connect",
    "principals",
    "running_server",
    "sole_error",
    "url_for",
    "workdir",
]
