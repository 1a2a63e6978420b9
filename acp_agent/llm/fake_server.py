"""A real HTTP server that plays an OpenAI-compatible chat-completions endpoint, scripted.

Run it by hand::

    python -m acp_agent.llm.fake_server --port 0
    acp-agent-kit --model fake --base-url http://127.0.0.1:PORT/v1

It listens on 127.0.0.1 (anyio TCP listener, a minimal HTTP/1.1 with keep-alive and
chunked transfer encoding, every SSE event flushed as it is written) and answers
``POST /v1/chat/completions``: an SSE stream for ``stream: true``, else the same answer as
one ``chat.completion`` document (a truncated one cut mid-body). What it answers is chosen by the
``X-Fake-Scenario`` header or by a ``fake:<scenario>`` word in the last user message
(see :data:`SCENARIOS`); without one it is a *scripted agent*: it lists the working
directory, reads a file (one named in the message, else the first it finds), edits
its first line, runs ``wc -l`` on it and summarises, one model request per step.
Scenarios are stateless (the step is the number of tool results since the last user
message) except the ``*-once`` / ``rate-limit`` ones, which count attempts.

Like real endpoints it is strict where they are: every tool call id it hands out is
fresh and signed (any instance recognises them, so a conversation can move to a new
server process), and a conversation whose assistant tool calls carry ids it did not
issue, or whose tool results answer ids no preceding tool call has, is a 400. Started
with a ``context_window`` (tokens, counted as a quarter of the JSON characters of the
messages and tools), it lists it under ``GET /models`` and answers a longer request
with 400 ``context_length_exceeded``. A request whose system message starts with
:data:`SUMMARY_MARK` is answered with a summary of the conversation it carries.

For tests it keeps the request bodies it got (:attr:`FakeModelServer.requests`),
counts open connections and streams the client abandoned, and lets a test wait for
a condition without sleeping (:meth:`FakeModelServer.wait_until`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc
import orjson

from .fake_script import (
    HANG_LIMIT,
    JSON,
    MODELS,
    SCENARIOS,
    SUMMARY_MARK,
    Reply,
    Script,
    completion_of,
    is_issued,
    sse_chunk,
)

__all__ = ["SUMMARY_MARK", "FakeModelServer", "is_issued"]

MAX_HEAD: Final = 64 * 1024

# ------------------------------------------------------------------ HTTP


class _ClientGone(Exception):
    pass


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class FakeModelServer:
    """The server; start it with :meth:`running` (an async context manager)."""

    def __init__(self, context_window: int | None = None) -> None:
        self.script = Script(context_window)
        self.port = 0
        self.requests: list[JSON] = []
        self.request_headers: list[dict[str, str]] = []
        self.open_connections = 0
        self.total_connections = 0
        self.abandoned_streams = 0
        self.hanging = 0
        self._changed = anyio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[FakeModelServer], bool]) -> None:
        """Wait (no polling) until ``predicate(self)`` holds; bound it with a timeout."""
        while not predicate(self):
            await self._changed.wait()

    @classmethod
    @asynccontextmanager
    async def running(
        cls, host: str = "127.0.0.1", port: int = 0, *, context_window: int | None = None
    ) -> AsyncIterator[FakeModelServer]:
        server = cls(context_window)
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        server.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))

        async def serve() -> None:
            async with listener:
                await listener.serve(server._connection)

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            try:
                yield server
            finally:
                tg.cancel_scope.cancel()

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        self.open_connections += 1
        self.total_connections += 1
        self._notify()
        buffer = bytearray()
        try:
            while True:
                request = await self._read_request(stream, buffer)
                if request is None or not await self._respond(stream, request):
                    break
        except (
            _ClientGone,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            self.open_connections -= 1
            self._notify()

    async def _read_request(
        self, stream: anyio.abc.SocketStream, buffer: bytearray
    ) -> _Request | None:
        while b"\r\n\r\n" not in buffer:
            if len(buffer) > MAX_HEAD:
                return None
            try:
                buffer += await stream.receive()
            except anyio.EndOfStream:
                return None
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = ([*lines[0].split(" "), "", ""])[:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        body = bytearray(rest)
        while len(body) < length:
            body += await stream.receive()
        buffer[:] = body[length:]
        return _Request(method, path, headers, bytes(body[:length]))

    async def _send_json(
        self,
        stream: anyio.abc.SocketStream,
        status: int,
        payload: Any,
        headers: dict[str, str] | None = None,
        *,
        content_type: str = "application/json",
        cut: bool = False,
    ) -> None:
        """Send ``payload`` (bytes as they are); ``cut``: only the first half of the body,
        under the whole body's ``Content-Length`` (the caller then closes)."""
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        sent = body[: len(body) // 2] if cut else body
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
            502: "Bad Gateway",
        }.get(status, "Error")
        head = [
            f"HTTP/1.1 {status} {reason}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        head.extend(f"{k}: {v}" for k, v in (headers or {}).items())
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode() + sent)

    async def _respond(self, stream: anyio.abc.SocketStream, request: _Request) -> bool:
        if request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            models: list[JSON] = [{"id": name, "object": "model"} for name in MODELS]
            if self.script.context_window is not None:
                for model in models:
                    model["context_length"] = self.script.context_window
            await self._send_json(stream, 200, {"object": "list", "data": models})
            return True
        if request.method != "POST" or not request.path.rstrip("/").endswith("/chat/completions"):
            await self._send_json(stream, 404, {"error": {"message": f"no route {request.path}"}})
            return True
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            await self._send_json(
                stream, 400, {"error": {"message": "the body is not a JSON object"}}
            )
            return True
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        self._notify()
        reply = self.script.reply(body, request.headers.get("x-fake-scenario"))
        if reply.raw_body is not None:
            await self._send_json(
                stream, reply.status, reply.raw_body, reply.headers, content_type=reply.content_type
            )
            return True
        if reply.status != 200:
            await self._send_json(stream, reply.status, {"error": reply.error or {}}, reply.headers)
            return True
        if reply.json_body is not None:
            await self._send_json(stream, 200, reply.json_body)
            return True
        if body.get("stream") is not True:
            return await self._answer_whole(stream, reply)
        await self._stream(stream, body, reply)
        return reply.end == "clean"

    async def _answer_whole(self, stream: anyio.abc.SocketStream, reply: Reply) -> bool:
        """A non-streaming request: the reply's events as one ``chat.completion`` (cut in
        half for a truncated reply; the events' own text where one is not JSON)."""
        whole = completion_of(list(reply.events))
        if whole is None:
            payload = "".join(
                e if isinstance(e, str) else orjson.dumps(e).decode() for e in reply.events
            )
            await self._send_json(stream, 200, payload.encode())
            return True
        truncated = reply.end != "clean"
        await self._send_json(stream, 200, whole, cut=truncated)
        return not truncated

    async def _stream(self, stream: anyio.abc.SocketStream, body: JSON, reply: Reply) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        await stream.send(head.encode())
        events = list(reply.events)
        options = body.get("stream_options")
        if reply.done and isinstance(options, dict) and options.get("include_usage"):
            prompt = len(orjson.dumps(body.get("messages"))) // 4
            usage = {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7}
            events.append({**sse_chunk({}), "choices": [], "usage": usage})
        if reply.done:
            events.append("[DONE]")
        try:
            for n, event in enumerate(events):
                if reply.hang_after is not None and n == reply.hang_after:
                    await self._hang(stream)
                data = event if isinstance(event, str) else orjson.dumps(event).decode()
                payload = f"data: {data}\n\n".encode()
                if reply.split and len(payload) > 2:
                    cut = len(payload) // 2
                    await self.sse_chunk(stream, payload[:cut])
                    await self.sse_chunk(stream, payload[cut:])
                else:
                    await self.sse_chunk(stream, payload)
            if reply.end == "clean":
                await stream.send(b"0\r\n\r\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, _ClientGone):
            self.abandoned_streams += 1
            self._notify()
            raise _ClientGone from None

    @staticmethod
    async def sse_chunk(stream: anyio.abc.SocketStream, data: bytes) -> None:
        await stream.send(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    async def _hang(self, stream: anyio.abc.SocketStream) -> None:
        """Send nothing until the client closes the connection (or HANG_LIMIT passes)."""
        self.hanging += 1
        self._notify()
        try:
            with anyio.move_on_after(HANG_LIMIT):
                while True:
                    await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            raise _ClientGone from None
        finally:
            self.hanging -= 1
            self._notify()


# ------------------------------------------------------------------ by hand


async def _main(host: str, port: int, context_window: int | None) -> None:
    async with FakeModelServer.running(host, port, context_window=context_window) as server:
        url = f"http://{host}:{server.port}/v1"
        print(url, flush=True)
        print(
            f"fake model server listening on {url}\n"
            f"try: acp-agent-kit --model fake --base-url {url}\n"
            "scenarios (put fake:<name> in a prompt): " + ", ".join(SCENARIOS),
            file=sys.stderr,
            flush=True,
        )
        await anyio.sleep_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_agent.llm.fake_server",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--context-window", type=int, default=None, help="tokens a request may hold"
    )
    args = parser.parse_args(argv)
    with suppress(KeyboardInterrupt):
        anyio.run(_main, args.host, args.port, args.context_window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
