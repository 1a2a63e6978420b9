"""The client end of a remote ACP connection, as a byte ``Transport``.

This module owns :func:`open_remote`: given ``ws://HOST:PORT/acp`` (or ``wss://``) it
opens a WebSocket (httpx-ws) and carries one message per text frame; given
``http://`` (or ``https://``) it speaks Streamable HTTP (httpx): it reaches the server
first (an ``OPTIONS`` request, whose answer does not matter), so that a server it cannot
reach or whose certificate fails fails the opening, as a WebSocket does; the first message,
``initialize``, is POSTed and answered in the POST's body with an ``Acp-Connection-Id``;
then one SSE stream carries every message from the agent, each further message is a
POST (with ``Acp-Session-Id`` when its params name a session), and closing sends
``DELETE``. A POST the server refuses (a status other than 2xx) comes back as a
JSON-RPC error answer to that request. Either way the caller reads and writes
newline-delimited JSON as over a pipe.

Over ``https://`` and ``wss://`` the server's certificate is checked against the
system's trusted authorities, or against ``ca_file`` when one is given.

It knows nothing of ACP beyond the ``initialize`` request opening an HTTP connection and
a ``sessionId`` naming the session header. It needs httpx-ws for WebSockets (the
``remote`` extra).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import httpx
import orjson

from ..errors import ConnectionClosed

__all__ = ["open_remote", "read_token", "tls_context"]

CONNECTION_HEADER = "Acp-Connection-Id"
SESSION_HEADER = "Acp-Session-Id"
STREAM_GRACE = 3.0  # seconds the SSE stream gets to end after DELETE


@contextlib.asynccontextmanager
async def open_remote(
    url: str,
    *,
    token: str | None = None,
    max_message: int = 64 * 1024 * 1024,
    ca_file: str | None = None,
) -> AsyncIterator[Any]:
    """A connected transport for ``url``; closed (and the connection ended) on exit.

    ``ca_file`` (PEM) holds the authorities that may sign the server's certificate
    instead of the system's; a file that cannot be read raises ``ValueError``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx.Timeout(30.0, read=None)
    verify = tls_context(ca_file) if ca_file is not None else True
    async with httpx.AsyncClient(headers=headers, timeout=timeout, verify=verify) as client:
        scheme = url.split(":", 1)[0].lower()
        if scheme in ("ws", "wss"):
            from httpx_ws import aconnect_ws

            connecting: Any = aconnect_ws(
                url,
                client,
                max_message_size_bytes=max_message,
                keepalive_ping_interval_seconds=None,
            )
            async with contextlib.AsyncExitStack() as stack:
                try:
                    session = await stack.enter_async_context(connecting)
                except Exception as exc:
                    raise ConnectionClosed(f"cannot connect to {url}: {_why(exc)}") from None
                yield _WebSocketTransport(session)
        elif scheme in ("http", "https"):
            try:  # reach the server now, so that an unreachable one fails here, as a WebSocket
                await client.request("OPTIONS", url)
            except httpx.HTTPError as exc:
                raise ConnectionClosed(f"cannot connect to {url}: {_why(exc)}") from None
            async with anyio.create_task_group() as tg:
                transport = _HttpTransport(client, url, tg)
                try:
                    yield transport
                finally:
                    with anyio.CancelScope(shield=True):
                        await transport.aclose()
                        # The stream ends with the connection: read to its end rather
                        # than cut httpx's readers off mid-body.
                        with anyio.move_on_after(STREAM_GRACE):
                            await transport.stream_done.wait()
                    tg.cancel_scope.cancel()
        else:
            raise ValueError(f"not a ws://, wss://, http:// or https:// URL: {url!r}")


def tls_context(ca_file: str) -> ssl.SSLContext:
    """A client TLS context trusting the authorities in ``ca_file`` (PEM) only; raises
    ``ValueError`` naming the file when it cannot be used."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise ValueError(f"cannot use CA file {ca_file}: {why}") from None


def _lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if line.strip()]


class _WebSocketTransport:
    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._lock = anyio.Lock()

    async def receive(self) -> bytes:
        from httpx_ws import HTTPXWSException

        try:
            text: str = await self._ws.receive_text()
        except (HTTPXWSException, anyio.ClosedResourceError):
            await self.aclose()  # answer the server's close at once
            raise anyio.EndOfStream from None
        return text.encode() + b"\n"

    async def send(self, data: bytes) -> None:
        from httpx_ws import HTTPXWSException

        async with self._lock:
            try:
                for line in _lines(data):
                    await self._ws.send_text(line.decode())
            except (HTTPXWSException, anyio.ClosedResourceError) as exc:
                raise anyio.BrokenResourceError("the WebSocket is closed") from exc

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()


class _HttpTransport:
    def __init__(self, client: httpx.AsyncClient, url: str, tg: anyio.abc.TaskGroup) -> None:
        self._client = client
        self._url = url
        self._tg = tg
        self._lock = anyio.Lock()
        self._connection_id: str | None = None
        self._inbox_send, self._inbox = anyio.create_memory_object_stream[bytes](256)
        self._closed = False
        self.stream_done = anyio.Event()

    async def receive(self) -> bytes:
        try:
            return await self._inbox.receive()
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None

    async def send(self, data: bytes) -> None:
        async with self._lock:
            for line in _lines(data):
                await self._post(line)

    async def _post(self, line: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        headers = {"Content-Type": "application/json"}
        message = _object(line)
        if self._connection_id is not None:
            headers[CONNECTION_HEADER] = self._connection_id
            params = message.get("params")
            if isinstance(params, dict) and isinstance(params.get("sessionId"), str):
                headers[SESSION_HEADER] = params["sessionId"]
        try:
            response = await self._client.post(self._url, content=line, headers=headers)
        except httpx.HTTPError as exc:
            raise anyio.BrokenResourceError(f"POST {self._url} failed: {_why(exc)}") from exc
        if response.status_code == 404 and self._connection_id is not None:
            self._inbox_send.close()  # the connection is gone
            raise anyio.BrokenResourceError("the server no longer knows this connection")
        if response.is_success and self._connection_id is None:
            self._connection_id = response.headers.get(CONNECTION_HEADER)
            if self._connection_id is None:
                raise anyio.BrokenResourceError(f"the answer has no {CONNECTION_HEADER} header")
            await self._inbox_send.send(response.content + b"\n")
            self._tg.start_soon(self._read_stream)
        elif not response.is_success and "method" in message and "id" in message:
            await self._inbox_send.send(_refusal(message["id"], response) + b"\n")

    async def _read_stream(self) -> None:
        headers = {"Accept": "text/event-stream", CONNECTION_HEADER: str(self._connection_id)}
        data: list[str] = []
        try:
            async with self._client.stream("GET", self._url, headers=headers) as response:
                if response.is_success:
                    async for line in response.aiter_lines():
                        if line.startswith("data:"):
                            data.append(line[5:].removeprefix(" "))
                        elif not line and data:
                            event = "\n".join(data).encode() + b"\n"
                            data = []
                            with contextlib.suppress(anyio.ClosedResourceError):
                                await self._inbox_send.send(event)  # closed: read on
        except httpx.HTTPError:
            pass
        finally:
            self._inbox_send.close()
            self.stream_done.set()

    async def send_eof(self) -> None:
        """End the connection (``DELETE``) but go on reading: the server's last
        messages still arrive on the stream, which then ends."""
        if self._connection_id is not None and not self._closed:
            with contextlib.suppress(httpx.HTTPError):
                await self._client.delete(
                    self._url, headers={CONNECTION_HEADER: self._connection_id}
                )

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._connection_id is None:
            self.stream_done.set()  # no stream was ever opened
        else:
            with contextlib.suppress(httpx.HTTPError):
                await self._client.delete(
                    self._url, headers={CONNECTION_HEADER: self._connection_id}
                )
        self._inbox_send.close()
        self._inbox.close()


def _object(line: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _refusal(request_id: Any, response: httpx.Response) -> bytes:
    """A JSON-RPC error answer for a request whose POST was refused."""
    body = _object(response.content)
    error = body.get("error")
    if not (isinstance(error, dict) and isinstance(error.get("code"), int)):
        text = response.text.strip()[:500] or response.reason_phrase
        error = {"code": -32603, "message": f"HTTP {response.status_code}: {text}"}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def read_token(path: str, principal: str | None = None) -> str:
    """The token a client sends, from a server's token file (``<principal> <token>``
    lines; the line of ``principal`` if given, else the first) or a file holding just
    the token. Raises ``ValueError`` naming the file when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            rows = [line.split() for line in f if line.strip() and not line.startswith("#")]
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    for row in rows:
        if principal is None or (len(row) == 2 and row[0] == principal):
            return row[-1]
    wanted = f" for principal {principal!r}" if principal else ""
    raise ValueError(f"{path} holds no token{wanted}")


def _why(exc: BaseException) -> str:
    """What went wrong opening a WebSocket (httpx-ws may wrap it in a group)."""
    while getattr(exc, "exceptions", None):  # an exception group
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    response = getattr(exc, "response", None)
    if isinstance(response, httpx.Response):
        return f"the server answered HTTP {response.status_code}"
    cause: BaseException | None = exc
    while cause is not None and not str(cause):  # (on trio httpx's own message is empty)
        cause = cause.__cause__ or cause.__context__
    return str(cause) if cause is not None else type(exc).__name__
