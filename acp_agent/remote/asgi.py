"""The ``/acp`` endpoint as an ASGI application: Streamable HTTP and WebSocket.

This module owns the HTTP surface of a remote connection (the ACP remote-transport
RFD; the README says where the official SDKs differ and how both are served):

- ``POST`` with no ``Acp-Connection-Id`` and an ``initialize`` request opens a
  connection and answers ``200`` with the ``initialize`` response as its body and the
  ``Acp-Connection-Id`` header; every other ``POST`` hands one JSON-RPC message to its
  connection and answers ``202`` (the answer comes on the stream);
- ``GET`` (``Accept: text/event-stream``) opens the connection's SSE stream, which
  carries every message of the agent, for every session, in order; a ``GET`` that also
  names an ``Acp-Session-Id`` (the official clients open one per session) is held open
  with keep-alive comments and carries nothing else;
- ``DELETE`` ends the connection as end of input would;
- a ``GET`` with ``Upgrade: websocket`` (an ASGI ``websocket`` scope) opens a
  connection that carries one JSON-RPC message per text frame, both ways;
- ``GET /healthz`` (no token needed) answers ``200`` when the session store answers,
  ``503`` when it does not (see :mod:`acp_agent.remote.health`).

A request body must arrive within ``Limits.body_timeout`` (else ``408``), and every
POST and per-session stream counts, while open, against its principal's bound
(``429`` beyond it), as connections do. While a request is open its socket counts as
carrying one (:class:`~acp_agent.remote.sockets.RequestSockets`); the others are
bounded per peer address.

Every request names its principal (``Authorization: Bearer``; see
:mod:`acp_agent.remote.auth`); a connection answers only to the principal that opened
it. Bad requests get an HTTP status and never reach a server.

It knows nothing of ACP beyond spotting an ``initialize`` request and a request's id;
connections and their servers belong to :mod:`acp_agent.remote.registry`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import orjson

from .auth import Principals
from .health import StoreHealth
from .registry import Connection, LimitReached, Registry
from .sockets import RequestSockets

__all__ = ["RemoteApp"]

log = logging.getLogger("acp_agent.remote")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

PATHS: Final = ("/acp", "/acp/")
HEALTH_PATH: Final = "/healthz"
CONNECTION_HEADER: Final = "acp-connection-id"
SESSION_HEADER: Final = "acp-session-id"
KEEPALIVE: Final = 15.0  # seconds between SSE comments on a quiet stream
INITIALIZE_TIMEOUT: Final = 30.0  # seconds an initialize POST waits for its answer
TOO_MANY_PENDING: Final = -32013  # JSON-RPC error code: the connection's request bound
LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def _error_body(code: int, message: str, request_id: Any = None) -> bytes:
    error = {"code": code, "message": message}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def _origin_allowed(headers: dict[str, str]) -> bool:
    """A browser page may only reach us from our own origin or a loopback one (no
    DNS rebinding); clients that send no ``Origin`` (every non-browser one) pass."""
    origin = headers.get("origin")
    if origin is None:
        return True
    origin_host = urlsplit(origin).hostname
    own_host = urlsplit(f"//{headers.get('host', '')}").hostname
    return origin_host is not None and (origin_host in LOOPBACK_HOSTS or origin_host == own_host)


def _request_id(message: bytes) -> tuple[bool, Any]:
    """``(is a request, its id)`` for one JSON-RPC message (False if unreadable)."""
    try:
        parsed = orjson.loads(message)
    except orjson.JSONDecodeError:
        return False, None
    if isinstance(parsed, dict) and "method" in parsed and "id" in parsed:
        return True, parsed["id"]
    return False, None


class RemoteApp:
    """ASGI 3 application serving ACP at ``/acp``."""

    def __init__(
        self,
        registry: Registry,
        principals: Principals,
        health: StoreHealth,
        requests: RequestSockets | None = None,
    ) -> None:
        self.registry = registry
        self.principals = principals
        self.health = health
        self.limits = registry.limits
        self.requests = requests if requests is not None else RequestSockets()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind not in ("http", "websocket"):
            return
        with self.requests.carrying(scope.get("client")):  # its socket is not idle
            await self._serve(kind, scope, receive, send)

    async def _serve(self, kind: str, scope: Scope, receive: Receive, send: Send) -> None:
        if kind == "http" and scope.get("path") == HEALTH_PATH:
            await self._healthz(scope, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(scope, headers)
        principal = None if refusal else self.principals.principal(headers.get("authorization"))
        if kind == "websocket":
            del headers  # not held for the life of the connection
            await self._websocket(scope, receive, send, refusal, principal)
        elif refusal is not None:
            await _respond(send, *refusal)
        elif principal is None:
            await _respond(send, 401, b"a valid bearer token is required", _CHALLENGE)
        elif scope["method"] == "POST":
            try:
                with self.registry.hold(principal) as release:
                    await self._post(receive, send, headers, principal, release)
            except LimitReached as exc:
                await _respond(send, 429, str(exc).encode())
        elif scope["method"] == "GET":
            await self._get(receive, send, headers, principal)
        elif scope["method"] == "DELETE":
            await self._delete(send, headers, principal)
        else:
            await _respond(
                send, 405, b"use POST, GET or DELETE", [(b"allow", b"GET, POST, DELETE")]
            )

    async def _healthz(self, scope: Scope, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 405, b"use GET", [(b"allow", b"GET, HEAD")])
            return
        if await self.health.check():
            await _respond(send, 200, b'{"status":"ok","store":"ok"}', _JSON)
        else:
            await _respond(send, 503, b'{"status":"unavailable","store":"not answering"}', _JSON)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, bytes] | None:
        if scope.get("path") not in PATHS:
            return 404, b"ACP is served at /acp"
        if not _origin_allowed(headers):
            return 403, b"cross-origin requests are refused"
        return None

    # -------------------------------------------------------------- Streamable HTTP

    async def _post(
        self,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        principal: str,
        release: Callable[[], None],
    ) -> None:
        if not headers.get("content-type", "").lower().startswith("application/json"):
            await _respond(send, 415, b"Content-Type must be application/json")
            return
        body: bytes | None = None
        with anyio.move_on_after(self.limits.body_timeout) as reading:
            try:
                body = await _read_body(receive, self.limits.max_message)
            except _ClientLeft:
                return  # no one to answer
        if reading.cancelled_caught:
            await _respond(send, 408, b"the request body did not arrive in time")
            return
        if body is None:
            await _respond(send, 413, b"the message exceeds the server's size limit")
            return
        if body.lstrip()[:1] == b"[":
            refused = _error_body(-32600, "JSON-RPC batches are not supported")
            await _respond(send, 501, refused, _JSON)
            return
        connection_id = headers.get(CONNECTION_HEADER)
        if connection_id is None:
            release()  # the connection it opens takes this request's place
            await self._initialize(send, body, principal)
            return
        conn = self.registry.get(connection_id, principal)
        if conn is None or conn.kind != "http":
            await _respond(send, 404, b"unknown Acp-Connection-Id")
            return
        if conn.pending() >= self.limits.pending:
            is_request, request_id = _request_id(body)
            if is_request:
                refused = _error_body(TOO_MANY_PENDING, _too_many(self.limits.pending), request_id)
                await _respond(send, 429, refused, _JSON)
                return
        try:
            await conn.link.deliver(body)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            await _respond(send, 404, b"the connection has ended")
            return
        await _respond(send, 202, b"")

    async def _initialize(self, send: Send, body: bytes, principal: str) -> None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = None
        if not (
            isinstance(message, dict) and message.get("method") == "initialize" and "id" in message
        ):
            await _respond(send, 400, b"missing Acp-Connection-Id (only initialize opens one)")
            return
        try:
            conn = self.registry.open(principal, "http")
        except LimitReached as exc:
            await _respond(send, 429, str(exc).encode())
            return
        await conn.link.deliver(body)
        answer = None
        with anyio.move_on_after(INITIALIZE_TIMEOUT):
            answer = await _take_answer(conn, message["id"])
        if answer is None:
            conn.close()
            await _respond(send, 504, b"the agent did not answer initialize")
            return
        extra = [(CONNECTION_HEADER.encode(), conn.id.encode())]
        await _respond(send, 200, answer, [*_JSON, *extra])

    async def _get(
        self, receive: Receive, send: Send, headers: dict[str, str], principal: str
    ) -> None:
        accept = headers.get("accept", "")
        if "text/event-stream" not in accept and "*/*" not in accept:
            await _respond(send, 406, b"Accept must include text/event-stream")
            return
        connection_id = headers.get(CONNECTION_HEADER)
        if connection_id is None:
            await _respond(send, 400, b"missing Acp-Connection-Id")
            return
        conn = self.registry.get(connection_id, principal)
        if conn is None or conn.kind != "http":
            await _respond(send, 404, b"unknown Acp-Connection-Id")
            return
        if SESSION_HEADER in headers:
            try:
                with self.registry.hold(principal):
                    await _sse(receive, send, conn, None)
            except LimitReached as exc:
                await _respond(send, 429, str(exc).encode())
            return
        if conn.streaming:
            await _respond(send, 409, b"this connection's stream is already open")
            return
        conn.streaming = True
        await _sse(receive, send, conn, conn)

    async def _delete(self, send: Send, headers: dict[str, str], principal: str) -> None:
        conn = self.registry.get(headers.get(CONNECTION_HEADER), principal)
        if conn is None:
            await _respond(send, 404, b"unknown Acp-Connection-Id")
            return
        conn.close()
        await _respond(send, 202, b"")

    # -------------------------------------------------------------- WebSocket

    async def _websocket(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        refusal: tuple[int, bytes] | None,
        principal: str | None,
    ) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        if refusal is None and principal is None:
            refusal = 401, b"a valid bearer token is required"
        conn: Connection | None = None
        client_left = False

        async def pull() -> bytes | None:
            """The client's next message (run by the server as it reads); None once
            the client has left."""
            nonlocal client_left
            assert conn is not None
            while True:
                event = await receive()
                if event["type"] != "websocket.receive":
                    client_left = True  # websocket.disconnect
                    return None
                text: str | None = event.get("text")
                if text is None:
                    continue  # binary frames carry nothing (the RFD)
                data = text.encode()
                if conn.pending() >= self.limits.pending:
                    is_request, request_id = _request_id(data)
                    if is_request:
                        refused = _error_body(
                            TOO_MANY_PENDING, _too_many(self.limits.pending), request_id
                        )
                        await conn.link.send(refused + b"\n")
                        continue
                return data

        if refusal is None and principal is not None:
            try:
                conn = self.registry.open(principal, "websocket", pull)
            except LimitReached as exc:
                refusal = 429, str(exc).encode()
        if conn is None:
            assert refusal is not None
            await _deny(scope, send, *refusal)
            return
        await send(
            {
                "type": "websocket.accept",
                "headers": [(CONNECTION_HEADER.encode(), conn.id.encode())],
            }
        )
        # The server reads the client through ``pull``; this task writes its messages.
        try:
            while (batch := await conn.link.next_batch()) is not None:
                # (if the client left, the server finishes writing into the void, as on stdio)
                if not client_left:
                    await _send_texts(send, batch)
                batch = None  # an idle connection keeps nothing it has sent
        finally:
            conn.link.drop_output()
            conn.close()  # (if this task is cancelled, its server stops reading too)
        if not client_left:
            # The server ended (idle, shutdown): we close; the client answers.
            await send({"type": "websocket.close", "code": 1001})


async def _send_texts(send: Send, batch: list[bytes]) -> None:
    for message in batch:
        await send({"type": "websocket.send", "text": message.decode()})


_JSON: Final = [(b"content-type", b"application/json")]
_CHALLENGE: Final = [(b"www-authenticate", b"Bearer")]
_SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _too_many(limit: int) -> str:
    return f"too many requests in flight on this connection (the limit is {limit})"


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = headers if headers is not None else [(b"content-type", b"text/plain; charset=utf-8")]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _deny(scope: Scope, send: Send, status: int, body: bytes) -> None:
    """Refuse a WebSocket handshake with an HTTP status where the server can say one."""
    if "websocket.http.response" in scope.get("extensions", {}):
        head = [(b"content-type", b"text/plain; charset=utf-8")]
        if status == 401:
            head += _CHALLENGE
        await send({"type": "websocket.http.response.start", "status": status, "headers": head})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


class _ClientLeft(Exception):
    """The client went away before its request body was complete."""


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None once it exceeds ``limit`` bytes; raises
    :class:`_ClientLeft` if the client leaves first."""
    parts: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] != "http.request":
            raise _ClientLeft  # http.disconnect: a part of a message is no message
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not event.get("more_body", False):
            return b"".join(parts)


async def _take_answer(conn: Connection, request_id: Any) -> bytes | None:
    """The response to ``request_id`` off the connection's output; what comes before and
    after it in the same batch waits for the SSE stream (``conn.early``)."""
    while (batch := await conn.link.next_batch()) is not None:
        for i, message in enumerate(batch):
            try:
                parsed = orjson.loads(message)
            except orjson.JSONDecodeError:
                parsed = None
            answers = isinstance(parsed, dict) and "method" not in parsed
            if answers and parsed.get("id") == request_id:
                conn.early.extend(batch[i + 1 :])
                return message
            conn.early.append(message)
    return None


async def _sse(receive: Receive, send: Send, conn: Connection, source: Connection | None) -> None:
    """An SSE response: the connection's messages when ``source`` is given, else only
    keep-alives; it ends with the connection, or ends the connection when the client
    leaves a ``source`` stream (as end of input would)."""
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    await send({"type": "http.response.body", "body": b": acp\n\n", "more_body": True})

    async def pump() -> None:
        if source is None:
            while True:
                with anyio.move_on_after(KEEPALIVE):
                    await conn.done.wait()
                    return
                await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
        early, conn.early = conn.early, []
        if early:
            await send({"type": "http.response.body", "body": _events(early), "more_body": True})
        while True:
            batch = None
            with anyio.move_on_after(KEEPALIVE):
                batch = await conn.link.next_batch()
                if batch is None:
                    return
            body = _events(batch) if batch is not None else b":\n\n"
            await send({"type": "http.response.body", "body": body, "more_body": True})

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if source is not None:
            source.close()
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await pump()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        tg.cancel_scope.cancel()
    if source is not None:
        await _discard(source)


async def _discard(conn: Connection) -> None:
    """The client is gone: let the server finish (its input has ended) writing into the
    void, as a stdio server whose client left does, then release its output."""
    while await conn.link.next_batch() is not None:
        pass
    conn.link.drop_output()


def _events(batch: list[bytes]) -> bytes:
    return b"".join(b"data: " + message + b"\n\n" for message in batch)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
