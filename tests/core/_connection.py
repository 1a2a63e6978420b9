"""The connection tests' doubles: a hand-built MethodTable, the scripted peer, the harness.

Shared by ``test_connection.py`` and ``test_connection_wire.py``; the ``dispatcher`` fixture
that runs each test against both dispatchers is in ``conftest.py``. No tests here.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from acp_agent.connection import AgentSession, MethodTable, NativeDispatcher, RequestContext
from acp_agent.transport import memory_pair
from tests.helpers.memclient import WireClient

with warnings.catch_warnings():
    # jsonrpcserver 5 calls the deprecated importlib.resources.read_text at import time;
    # import it once here so that filterwarnings=error does not turn that into a failure.
    warnings.simplefilter("ignore", DeprecationWarning)
    import jsonrpcserver  # noqa: F401

from acp_agent.jsonrpcserver_dispatch import JsonRpcServerDispatcher

DISPATCHERS = {"native": NativeDispatcher, "jsonrpcserver": JsonRpcServerDispatcher}

JSON = dict[str, Any]


class Methods:
    """A MethodTable built with decorators, plus a slot for the live connection."""

    def __init__(self) -> None:
        self.table = MethodTable()
        self.conn: AgentSession | None = None
        self.table.requests["ping"] = self._ping

    async def _ping(self, params: Any, ctx: RequestContext) -> Any:
        return "pong"

    def request(self, name: str) -> Callable[[Any], Any]:
        def register(fn: Callable[[Any, RequestContext], Awaitable[Any]]) -> Any:
            self.table.requests[name] = fn
            return fn

        return register

    def notification(self, name: str) -> Callable[[Any], Any]:
        def register(fn: Callable[[Any], Awaitable[None]]) -> Any:
            self.table.notifications[name] = fn
            return fn

        return register

    @property
    def connection(self) -> AgentSession:
        assert self.conn is not None
        return self.conn

    def gated(self, name: str, result: Any) -> anyio.Event:
        """A request ``name`` that waits until the peer sends the ``release`` notification,
        then answers ``result``; returns the event set when the handler has started."""
        entered, release = anyio.Event(), anyio.Event()

        async def handler(params: Any, ctx: RequestContext) -> Any:
            entered.set()
            await release.wait()
            return result

        async def do_release(params: Any) -> None:
            release.set()

        self.table.requests[name] = handler
        self.table.notifications["release"] = do_release
        return entered


class Peer(WireClient):
    """The scripted client side, with the frames it read after EOF."""

    tail: list[JSON]

    async def read_to_eof(self) -> list[JSON]:
        frames: list[JSON] = []
        try:
            while True:
                frames.append(await self.recv())
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
        return frames

    def responses(self, request_id: Any) -> list[JSON]:
        return [m for m in self.seen if "method" not in m and m.get("id") == request_id]


@asynccontextmanager
async def connected(
    methods: Methods,
    dispatcher: Any,
    *,
    max_buffer: float = math.inf,
    **options: Any,
) -> AsyncIterator[Peer]:
    """Serve ``methods`` on one end of a memory pair; yield the peer on the other.

    On exit the peer sends EOF, reads every remaining frame into ``peer.tail`` and
    checks that ``serve()`` returned by itself.
    """
    ours, theirs = memory_pair(max_buffer)
    conn = AgentSession(theirs, methods.table, dispatcher=dispatcher, **options)
    methods.conn = conn
    finished = anyio.Event()

    async def run() -> None:
        try:
            await conn.serve()
        finally:
            await theirs.aclose()
            finished.set()

    peer = Peer(ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            with anyio.fail_after(10):
                yield peer
                await ours.send_eof()
                peer.tail = await peer.read_to_eof()
                await finished.wait()
        finally:
            await ours.aclose()
    assert conn.closed


async def next_response(peer: Peer) -> JSON:
    """The next frame, which must be a response."""
    msg = await peer.recv()
    assert "method" not in msg, msg
    return msg
