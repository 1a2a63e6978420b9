"""The open remote connections: each one's server task, its principal, its limits.

This module owns :class:`Registry`: it opens a connection for a principal, runs that
connection's own server object over a :class:`~acp_agent.remote.link.MessageLink` in a
task of the registry's task group, finds a connection by its ``Acp-Connection-Id``
(only for the principal that opened it: to anyone else it does not exist), counts what
each principal holds open (connections, and the HTTP requests held open beside them: a
POST whose body is being read or handed over, a per-session stream) within
``Limits.connections``, closes connections that stay idle past ``Limits.idle_timeout``,
and on shutdown ends every connection's input as a closed pipe would, so that open
turns answer ``cancelled`` before the streams close.

It knows nothing of HTTP or WebSockets (see :mod:`acp_agent.remote.asgi`) and nothing
of ACP beyond asking a server how many requests it has not answered yet.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc

from ..transport import Transport
from .link import MessageLink, Pull

__all__ = ["Connection", "LimitReached", "Limits", "Registry", "Server"]

log = logging.getLogger("acp_agent.remote")

SHUTDOWN_GRACE = 3.0
"""Seconds every connection gets to answer its open turns ``cancelled`` and flush."""


@dataclass(frozen=True)
class Limits:
    """What one client may hold at once; every bound has a flag in ``acp-agent-kit serve``."""

    max_message: int = 16 * 1024 * 1024
    """Bytes in one JSON-RPC message, either way (a POST body, a WebSocket frame)."""
    connections: int = 32
    """Open connections per principal, with the HTTP requests it holds open beside them
    (a POST being read or handed over, a per-session stream)."""
    pending: int = 256
    """Requests per connection the server has received and not answered yet."""
    idle_timeout: float = 600.0
    """Seconds a connection may stay without a message and without an open request."""
    body_timeout: float = 30.0
    """Seconds a request body may take to arrive."""
    head_timeout: float = 10.0
    """Seconds a socket may take to send a complete request head: from accept (for the
    TLS handshake, then the head), and between two requests on a kept-alive socket."""
    idle_sockets: int = 64
    """Sockets per peer address carrying no request (a handshake or a request head
    under way, a kept-alive socket between requests); they carry no principal yet."""


class LimitReached(Exception):
    """The principal already holds ``Limits.connections`` connections and requests."""


class _Inflight(Protocol):
    @property
    def inflight_count(self) -> int: ...


class Server(Protocol):
    """What serves one connection (an ``AcpServer``): runs until the input ends;
    ``connection`` (while serving) counts the requests not answered yet."""

    async def serve(self, transport: Transport) -> None: ...

    def stop(self) -> None:
        """End the input as EOF would, even while a read is waiting."""

    @property
    def connection(self) -> _Inflight: ...


class Connection:
    """One client connection: its id, its principal and its server's link."""

    __slots__ = ("done", "early", "id", "kind", "link", "principal", "server", "streaming")

    def __init__(self, principal: str, kind: str, server: Server, pull: Pull | None) -> None:
        self.id = secrets.token_hex(16)
        self.principal = principal
        self.kind = kind  # "http" or "websocket"
        self.server = server
        self.link = MessageLink(pull=pull)
        self.done = anyio.Event()
        #: messages taken off the link before the SSE stream opened (after initialize's)
        self.early: list[bytes] = []
        #: an SSE stream carries this connection's messages (Streamable HTTP only)
        self.streaming = False

    def pending(self) -> int:
        """Requests received and not answered yet (0 before the server runs)."""
        try:
            return self.server.connection.inflight_count
        except RuntimeError:  # not serving yet
            return 0

    def close(self) -> None:
        """End the input: the server cancels open turns, answers them and stops."""
        self.link.end_input()
        if self.kind == "websocket":  # its server may be waiting in a pull
            self.server.stop()


class Registry:
    """The open connections of one listening server."""

    def __init__(self, limits: Limits, make_server: Callable[[str], Server]) -> None:
        self.limits = limits
        self._make_server = make_server
        self._connections: dict[str, Connection] = {}
        self._per_principal: dict[str, int] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False

    def __len__(self) -> int:
        return len(self._connections)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold the connections' tasks and close idle connections, until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await self._sweep_idle()
            finally:
                self._tg = None

    def open(self, principal: str, kind: str, pull: Pull | None = None) -> Connection:
        """A new connection for ``principal``, its server already starting (reading
        through ``pull`` when given, else from what is delivered to its link)."""
        if self._tg is None or self._closing:
            raise LimitReached("the server is shutting down")
        self._take(principal)
        conn = Connection(principal, kind, self._make_server(principal), pull)
        self._connections[conn.id] = conn
        self._tg.start_soon(self._serve, conn, name=f"acp-remote-{conn.id[:8]}")
        return conn

    @contextlib.contextmanager
    def hold(self, principal: str) -> Iterator[Callable[[], None]]:
        """Count a request ``principal`` holds open until the block ends, or until it
        calls what the block is given (a request that opens a connection hands its
        place over); raises :class:`LimitReached` at the principal's bound."""
        self._take(principal)
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self._give_back(principal)

        try:
            yield release
        finally:
            release()

    def _take(self, principal: str) -> None:
        count = self._per_principal.get(principal, 0)
        if count >= self.limits.connections:
            raise LimitReached(
                f"principal {principal!r} already holds {count} open connections and "
                f"requests (the limit is {self.limits.connections})"
            )
        self._per_principal[principal] = count + 1

    def _give_back(self, principal: str) -> None:
        left = self._per_principal.get(principal, 1) - 1
        if left:
            self._per_principal[principal] = left
        else:
            self._per_principal.pop(principal, None)

    def get(self, connection_id: str | None, principal: str) -> Connection | None:
        """The connection with this id if ``principal`` opened it; else None."""
        conn = self._connections.get(connection_id) if connection_id else None
        return conn if conn is not None and conn.principal == principal else None

    async def _serve(self, conn: Connection) -> None:
        try:
            await conn.server.serve(conn.link)
        except Exception:
            log.exception("connection %s failed", conn.id[:8])
        finally:
            self._connections.pop(conn.id, None)
            self._give_back(conn.principal)
            await conn.link.aclose()
            if conn.kind == "http" and not conn.streaming:
                conn.link.drop_output()  # no stream will ever read what is left
            conn.done.set()

    async def _sweep_idle(self) -> None:
        timeout = self.limits.idle_timeout
        seen: dict[str, tuple[int, float]] = {}
        while True:
            await anyio.sleep(min(timeout / 4, 15.0))
            now = anyio.current_time()
            for conn in list(self._connections.values()):
                count = conn.link.delivered
                last = seen.get(conn.id)
                if last is None or last[0] != count or conn.pending():
                    seen[conn.id] = (count, now)
                elif now - last[1] >= timeout:
                    log.info("closing connection %s: idle for %.0f s", conn.id[:8], timeout)
                    conn.close()
            for gone in seen.keys() - self._connections.keys():
                del seen[gone]

    async def shutdown(self, grace: float = SHUTDOWN_GRACE) -> None:
        """End every connection's input and wait (within ``grace``) for their servers."""
        self._closing = True
        conns = list(self._connections.values())
        for conn in conns:
            conn.close()
        with anyio.move_on_after(grace):
            for conn in conns:
                await conn.done.wait()
