"""A real HTTP server that plays an OpenAI-compatible chat-completions endpoint, scripted.

Run it by hand::

    python -m acp_agent.llm.fake_server --port 0
    acp-agent-kit --model fake --base-url http://127.0.0.1:PORT/v1

It listens on 127.0.0.1 (anyio TCP listener, a minimal HTTP/1.1 with keep-alive and
chunked transfer encoding, every SSE event flushed as it is written) and answers
``POST /v1/chat/completions`` with ``stream: true``. What it answers is chosen by the
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
import os
import shlex
import sys
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
import orjson

MAX_HEAD: Final = 64 * 1024
SUMMARY_MARK: Final = "Summarize the conversation"
MODELS: Final = ("fake", "fake-large")
HANG_LIMIT: Final = 60.0

JSON = dict[str, Any]

SCENARIOS: Final = {
    "cold": "one plain text answer",
    "chunked": "text in many small chunks, each SSE event split across TCP writes",
    "empty": "a response with no content at all",
    "tool-loop": "read a file -> edit it -> run a command -> summary (fake:tool-loop PATH)",
    "parallel": "two read_file calls in one response (a.txt, b.txt), then a summary",
    "unauthorized": "HTTP 401",
    "rate-limit": "HTTP 429 with Retry-After: 0 once, then an answer",
    "rate-limit-always": "HTTP 429 every time",
    "server-error": "HTTP 500 every time",
    "server-error-once": "HTTP 500 once, then an answer",
    "malformed": "a chunk that is not JSON",
    "truncated": "the connection closes in the middle of the body",
    "no-finish": "the body ends without finish_reason and without [DONE]",
    "slow": "one chunk, then nothing until the client goes away",
    "reasoning": "reasoning_content deltas, then the answer",
    "reasoning-alt": "reasoning deltas (the other field name), then the answer",
    "length": "finish_reason length",
    "refusal": "a refusal delta",
    "content-filter": "finish_reason content_filter",
    "loop-forever": "asks for list_files forever",
    "run": "runs the rest of the message as a command (fake:run sleep 30), then reports",
    "mcp": "calls the first tool named *__add with {a: 2, b: 3}, then reports the result",
    "json": "answers one JSON document instead of a stream",
    "echo": "answers with the roles of the conversation it received",
}


@dataclass
class Reply:
    """What the server sends for one request."""

    status: int = 200
    error: JSON | None = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[JSON | str] = field(default_factory=list)
    done: bool = True
    #: "clean", or "truncate" (close the connection without the last chunk)
    end: str = "clean"
    #: write each event in two pieces (split inside a multi-byte character if any)
    split: bool = False
    #: after this many events, wait until the client goes away
    hang_after: int | None = None
    #: answer a single JSON document, not a stream
    json_body: JSON | None = None


# ------------------------------------------------------------------ chunk builders


def _chunk(delta: JSON, finish: str | None = None) -> JSON:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_events(text: str, pieces: int = 1, finish: str = "stop") -> list[JSON | str]:
    events: list[JSON | str] = [_chunk({"role": "assistant", "content": ""})]
    if text:
        size = max(1, -(-len(text) // pieces))
        events.extend(_chunk({"content": text[i : i + size]}) for i in range(0, len(text), size))
    events.append(_chunk({}, finish))
    return events


def tool_events(
    calls: list[tuple[str, JSON]], text: str = "", interleave: bool = False
) -> list[JSON | str]:
    events: list[JSON | str] = [_chunk({"role": "assistant", "content": text or None})]
    halves: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(calls):
        events.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": f"call_fake_{i}",
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        raw = orjson.dumps(args).decode()
        cut = len(raw) // 2
        halves.append((i, raw[:cut]))
        halves.append((i, raw[cut:]))
    order = (
        [halves[j] for j in range(0, len(halves), 2)]
        + [halves[j] for j in range(1, len(halves), 2)]
        if interleave
        else halves
    )
    for i, part in order:
        events.append(_chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    events.append(_chunk({}, "tool_calls"))
    return events


# ------------------------------------------------------------------ the script


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class Conversation:
    messages: list[JSON]
    tools: list[str]

    @property
    def last_user(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""

    @property
    def results(self) -> list[str]:
        """Tool results since the last user message."""
        out: list[str] = []
        for message in reversed(self.messages):
            if message.get("role") == "user":
                break
            if message.get("role") == "tool":
                out.append(_text_of(message.get("content")))
        return list(reversed(out))

    def scenario(self, header: str | None) -> tuple[str, list[str]]:
        if header:
            return header.strip(), []
        words = self.last_user.split()
        for i, word in enumerate(words):
            if word.startswith("fake:"):
                return word[5:], words[i + 1 :]
        return "", words


def _stopped(result: str) -> str | None:
    if result.startswith("The user rejected"):
        return "OK, I won't do that. Tell me how you'd like to proceed."
    if result.startswith("Error:") or result.startswith("The tool call"):
        return f"That did not work: {result.splitlines()[0]}"
    return None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def _edit_step(path: str, content: str) -> Reply:
    line = _first_line(content)
    if not line:
        args: JSON = {"path": path, "content": "Edited by the fake model.\n"}
        return Reply(
            events=tool_events([("write_file", args)], "The file is empty; I'll write it.")
        )
    edit = {"path": path, "old_string": line, "new_string": line + " (edited by the fake model)"}
    return Reply(events=tool_events([("edit_file", edit)], "Now I'll edit its first line."))


def _file_loop(path: str, results: list[str], offset: int) -> Reply:
    """read -> edit -> run -> summary, counting steps from ``offset`` tool results."""
    step = len(results) - offset
    if step > 0:
        stop = _stopped(results[-1])
        if stop is not None:
            return Reply(events=text_events(stop))
    if step == 0:
        return Reply(events=tool_events([("read_file", {"path": path})], f"Let me read {path}."))
    if step == 1:
        return _edit_step(path, results[-1])
    if step == 2:
        command = f"wc -l {shlex.quote(path)}"
        return Reply(
            events=tool_events([("run_command", {"command": command})], "Let me check it.")
        )
    output = _first_line(results[-1].partition("\n")[2]) or results[-1][:80]
    return Reply(
        events=text_events(f"Done: I read {path}, edited it and ran wc -l ({output.strip()}).", 3)
    )


def _scripted_agent(conv: Conversation, words: list[str]) -> Reply:
    results = conv.results
    if not results:
        return Reply(
            events=tool_events([("list_files", {})], "I'll look around the project first.")
        )
    stop = _stopped(results[0])
    if stop is not None:
        return Reply(events=text_events(stop))
    entries = [
        e for e in results[0].splitlines() if e and not e.endswith("/") and not e.startswith("[")
    ]
    wanted = [w.strip("`'\".,") for w in words]
    chosen = next((w for w in wanted if w in entries), None) or (entries[0] if entries else None)
    if chosen is None:
        return Reply(events=text_events("The directory has no files I could edit."))
    return _file_loop(chosen, results, 1)


def _bad_request(message: str, code: str) -> Reply:
    return Reply(400, {"message": message, "type": "invalid_request_error", "code": code})


def issue_id(serial: int) -> str:
    """A tool call id of this endpoint: a serial number and its signature."""
    body = f"{serial:06d}{os.urandom(3).hex()}"
    return f"call_{body}{zlib.crc32(b'fake-endpoint:' + body.encode()) & 0xFFFF:04x}"


def is_issued(call_id: object) -> bool:
    if not isinstance(call_id, str) or not call_id.startswith("call_") or len(call_id) != 21:
        return False
    body, sig = call_id[5:17], call_id[17:]
    return f"{zlib.crc32(b'fake-endpoint:' + body.encode()) & 0xFFFF:04x}" == sig


def estimate_tokens(body: JSON) -> int:
    """The server's count of a request's prompt tokens (a quarter of its JSON)."""
    return (len(orjson.dumps(body.get("messages"))) + len(orjson.dumps(body.get("tools")))) // 4


SUMMARY_START: Final = "Summary of the earlier conversation: "


def _summary(messages: list[JSON]) -> Reply:
    """The first word of each ``user:`` line of the transcript it was given, after the
    words of any summary the transcript carries (so summaries build on each other)."""
    said: list[str] = []
    for message in messages:
        for line in _text_of(message.get("content")).splitlines():
            if line.startswith(SUMMARY_START):
                said.append(line[len(SUMMARY_START) :])
            elif line.startswith("user: ") and line[6:].split():
                said.append(line[6:].split()[0])
    return Reply(events=text_events(SUMMARY_START + " ".join(said), 3))


class Script:
    """Chooses a :class:`Reply` for each request; counts attempts for the ``*-once`` ones."""

    def __init__(self, context_window: int | None = None) -> None:
        self.attempts: dict[str, int] = {}
        self.context_window = context_window
        #: every tool call id handed out, in order
        self.issued: list[str] = []
        #: what was wrong with each request refused for its tool call ids
        self.id_errors: list[str] = []

    def check_ids(self, messages: list[JSON]) -> str | None:
        """Why the conversation's tool call ids are wrong, or None."""
        open_ids: set[str] = set()
        for m in messages:
            if m.get("role") == "assistant":
                open_ids = set()
                for call in m.get("tool_calls") or []:
                    call_id = call.get("id") if isinstance(call, dict) else None
                    if not is_issued(call_id):
                        return f"tool call id {call_id!r} was not issued by this endpoint"
                    open_ids.add(str(call_id))
            elif m.get("role") == "tool" and m.get("tool_call_id") not in open_ids:
                return f"tool result for unknown tool call id {m.get('tool_call_id')!r}"
        return None

    def _fresh_ids(self, reply: Reply) -> Reply:
        """Give every tool call in ``reply`` an id never handed out before."""
        for event in reply.events:
            if not isinstance(event, dict):
                continue
            for choice in event.get("choices") or []:
                for call in (choice.get("delta") or {}).get("tool_calls") or []:
                    if "id" in call:
                        call["id"] = issue_id(len(self.issued) + 1)
                        self.issued.append(call["id"])
        return reply

    def reply(self, body: JSON, header: str | None) -> Reply:
        messages = body.get("messages")
        if isinstance(messages, list):
            problem = self.check_ids([m for m in messages if isinstance(m, dict)])
            if problem is not None:
                self.id_errors.append(problem)
                return _bad_request(problem, "invalid_tool_call_id")
        if self.context_window is not None and estimate_tokens(body) > self.context_window:
            return _bad_request(
                f"This model's maximum context length is {self.context_window} tokens; "
                f"the request has {estimate_tokens(body)}",
                "context_length_exceeded",
            )
        return self._fresh_ids(self._reply(body, header))

    def _attempt(self, key: str) -> int:
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.attempts[key]

    def _reply(self, body: JSON, header: str | None) -> Reply:
        messages = body.get("messages")
        if not isinstance(messages, list) or not body.get("model"):
            return Reply(
                400, {"message": "model and messages are required", "type": "invalid_request_error"}
            )
        tools = [
            str(t.get("function", {}).get("name"))
            for t in body.get("tools") or []
            if isinstance(t, dict)
        ]
        conv = Conversation([m for m in messages if isinstance(m, dict)], tools)
        first = conv.messages[0] if conv.messages else {}
        if first.get("role") == "system" and _text_of(first.get("content")).startswith(
            SUMMARY_MARK
        ):
            return _summary(conv.messages[1:])
        name, words = conv.scenario(header)
        key = f"{name}:{conv.last_user}:{len(conv.messages)}"
        if name == "":
            return _scripted_agent(conv, words)
        if name == "cold":
            return Reply(events=text_events("Hello from the fake model."))
        if name == "chunked":
            text = "Streaming in many small pieces: naïve café ✓ done."
            return Reply(events=text_events(text, pieces=len(text) // 3), split=True)
        if name == "empty":
            return Reply(events=text_events(""))
        if name == "tool-loop":
            path = words[0] if words else "notes.txt"
            return _file_loop(path, conv.results, 0)
        if name == "parallel":
            if not conv.results:
                calls = [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})]
                return Reply(events=tool_events(calls, "Reading both files.", interleave=True))
            joined = " | ".join(r.strip() for r in conv.results)
            return Reply(events=text_events(f"Both files read: {joined}"))
        if name == "unauthorized":
            return Reply(401, {"message": "Incorrect API key provided", "code": "invalid_api_key"})
        if name in ("rate-limit", "rate-limit-always"):
            if name == "rate-limit-always" or self._attempt(key) == 1:
                error = {"message": "Rate limit reached", "type": "rate_limit"}
                return Reply(429, error, {"Retry-After": "0"})
            return Reply(events=text_events("Made it after a rate limit."))
        if name == "server-error":
            return Reply(500, {"message": "The server had an error", "type": "server_error"})
        if name == "server-error-once":
            if self._attempt(key) == 1:
                return Reply(500, {"message": "The server had an error", "type": "server_error"})
            return Reply(events=text_events("Recovered after a server error."))
        if name == "malformed":
            return Reply(events=[*text_events("Partial ")[:2], "{not json"], done=False)
        if name == "truncated":
            return Reply(events=text_events("This answer will be cut", 3)[:3], end="truncate")
        if name == "no-finish":
            return Reply(events=text_events("No finish here", 2)[:3], done=False)
        if name == "slow":
            return Reply(events=text_events("Working on it... and more", 2), hang_after=2)
        if name in ("reasoning", "reasoning-alt"):
            field_name = "reasoning_content" if name == "reasoning" else "reasoning"
            thoughts: list[JSON | str] = [
                _chunk({field_name: "Let me think. "}),
                _chunk({field_name: "Six times seven."}),
            ]
            events = text_events("The answer is 42.")
            return Reply(events=[events[0], *thoughts, *events[1:]])
        if name == "length":
            return Reply(events=text_events("This is cut off because", 2, finish="length"))
        if name == "refusal":
            return Reply(
                events=[
                    _chunk({"role": "assistant", "refusal": "I can't help with that."}),
                    _chunk({}, "stop"),
                ]
            )
        if name == "content-filter":
            return Reply(events=text_events("", finish="content_filter"))
        if name == "run":
            if conv.results:
                return Reply(events=text_events(f"The command said: {conv.results[-1].strip()}"))
            command = " ".join(words) or "true"
            return Reply(events=tool_events([("run_command", {"command": command})]))
        if name == "loop-forever":
            return Reply(events=tool_events([("list_files", {})]))
        if name == "mcp":
            if conv.results:
                return Reply(events=text_events(f"The MCP tool said: {conv.results[-1].strip()}"))
            tool = next((t for t in tools if t.endswith("__add")), None)
            if tool is None:
                return Reply(events=text_events("No MCP add tool is available."))
            return Reply(events=tool_events([(tool, {"a": 2, "b": 3})], "Calling the MCP tool."))
        if name == "json":
            message = {"role": "assistant", "content": "A plain JSON answer."}
            return Reply(
                json_body={
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
            )
        if name == "echo":
            roles = ",".join(str(m.get("role")) for m in conv.messages)
            return Reply(events=text_events(f"roles: {roles}"))
        return Reply(
            events=text_events(f"Unknown fake scenario {name!r}. Known: {', '.join(SCENARIOS)}")
        )


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
    ) -> None:
        body = orjson.dumps(payload)
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }.get(status, "Error")
        head = [
            f"HTTP/1.1 {status} {reason}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
        head.extend(f"{k}: {v}" for k, v in (headers or {}).items())
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode() + body)

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
        if reply.status != 200:
            await self._send_json(stream, reply.status, {"error": reply.error or {}}, reply.headers)
            return True
        if reply.json_body is not None:
            await self._send_json(stream, 200, reply.json_body)
            return True
        await self._stream(stream, body, reply)
        return reply.end == "clean"

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
            events.append({**_chunk({}), "choices": [], "usage": usage})
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
                    await self._chunk(stream, payload[:cut])
                    await self._chunk(stream, payload[cut:])
                else:
                    await self._chunk(stream, payload)
            if reply.end == "clean":
                await stream.send(b"0\r\n\r\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, _ClientGone):
            self.abandoned_streams += 1
            self._notify()
            raise _ClientGone from None

    @staticmethod
    async def _chunk(stream: anyio.abc.SocketStream, data: bytes) -> None:
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
