"""The scripted model behind the fake chat-completions server: what it answers.

Owns the scenarios (:data:`SCENARIOS`), the replies they give as SSE events, the scripted
agent used when no scenario is named, the signed tool-call ids and the context-window
check. It knows nothing of HTTP: :mod:`acp_agent.llm.fake_server` serves it.
"""

from __future__ import annotations

import os
import shlex
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

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
    "not-json": "HTTP 200 whose body is not JSON (an HTML page), streaming or not",
    "no-choices": "a response with no choices at all (an empty list), then [DONE]",
    "html-error": "HTTP 502 with an HTML page as its body",
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
    "call": "calls tools with key=value or JSON arguments (fake:call add a=2 b=3 ; add a=1 b=1)",
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
    #: answer these bytes as they are (``content_type``), neither JSON nor a stream
    raw_body: bytes | None = None
    content_type: str = "application/json"


# ------------------------------------------------------------------ chunk builders


def sse_chunk(delta: JSON, finish: str | None = None) -> JSON:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_events(text: str, pieces: int = 1, finish: str = "stop") -> list[JSON | str]:
    events: list[JSON | str] = [sse_chunk({"role": "assistant", "content": ""})]
    if text:
        size = max(1, -(-len(text) // pieces))
        events.extend(sse_chunk({"content": text[i : i + size]}) for i in range(0, len(text), size))
    events.append(sse_chunk({}, finish))
    return events


def tool_events(
    calls: list[tuple[str, JSON]], text: str = "", interleave: bool = False
) -> list[JSON | str]:
    events: list[JSON | str] = [sse_chunk({"role": "assistant", "content": text or None})]
    halves: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(calls):
        events.append(
            sse_chunk(
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
        events.append(sse_chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    events.append(sse_chunk({}, "tool_calls"))
    return events


def completion_of(events: list[JSON | str]) -> JSON | None:
    """The SSE ``events`` as the one ``chat.completion`` a non-streaming request gets
    (None if one of them is not JSON: the body then is not either)."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, JSON] = {}
    finish: str | None = None
    refusal: str | None = None
    choices = 0
    for event in events:
        if isinstance(event, str):
            if event == "[DONE]":
                continue
            return None
        for choice in event.get("choices") or []:
            choices += 1
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            refusal = delta.get("refusal") or refusal
            finish = choice.get("finish_reason") or finish
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(
                    call["index"], {"type": "function", "function": {"arguments": ""}}
                )
                if "id" in call:
                    entry["id"] = call["id"]
                function = call.get("function") or {}
                if "name" in function:
                    entry["function"]["name"] = function["name"]
                entry["function"]["arguments"] += function.get("arguments") or ""
    message: JSON = {"role": "assistant", "content": "".join(text) or None}
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    if refusal:
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}] if choices else [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
    }


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
    if not results and "list_files" not in conv.tools:
        # a model calls only the tools it is offered
        return Reply(events=text_events("Hello from the fake model."))
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


def _call_tool(words: list[str], results: list[str]) -> Reply:
    """``fake:call TOOL k=v ... [; TOOL k=v ...]``: the calls (integer values as numbers)
    in one response, then the last result."""
    if results:
        return Reply(events=text_events(f"The tool said: {results[-1].strip()}", 2))
    calls: list[tuple[str, JSON]] = []
    for spec in " ".join(words).split(";"):
        name, *pairs = spec.split() or [""]
        if not name:
            continue
        args: JSON = {}
        if pairs and pairs[0].startswith("{"):  # fake:call TOOL {"json": ...}
            calls.append((name, orjson.loads(" ".join(pairs))))
            continue
        for pair in pairs:
            key, _, value = pair.partition("=")
            args[key] = int(value) if value.lstrip("-").isdigit() else value
        calls.append((name, args))
    if not calls:
        return Reply(events=text_events("Which tool? Say fake:call TOOL key=value ..."))
    return Reply(events=tool_events(calls, f"Calling {', '.join(n for n, _ in calls)}."))


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
        if not name:
            from .fake_commands import command_reply

            answer = command_reply(conv.last_user, conv.results)
            if answer is not None:
                return answer
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
        if name == "not-json":
            return Reply(raw_body=b"<html><body>Welcome to nginx!</body></html>")
        if name == "no-choices":
            return Reply(events=[{**sse_chunk({}), "choices": []}])
        if name == "html-error":
            page = b"<html><head><title>502 Bad Gateway</title></head></html>"
            return Reply(502, raw_body=page, content_type="text/html")
        if name == "truncated":
            return Reply(events=text_events("This answer will be cut", 3)[:3], end="truncate")
        if name == "no-finish":
            return Reply(events=text_events("No finish here", 2)[:3], done=False)
        if name == "slow":
            return Reply(events=text_events("Working on it... and more", 2), hang_after=2)
        if name in ("reasoning", "reasoning-alt"):
            field_name = "reasoning_content" if name == "reasoning" else "reasoning"
            thoughts: list[JSON | str] = [
                sse_chunk({field_name: "Let me think. "}),
                sse_chunk({field_name: "Six times seven."}),
            ]
            events = text_events("The answer is 42.")
            return Reply(events=[events[0], *thoughts, *events[1:]])
        if name == "length":
            return Reply(events=text_events("This is cut off because", 2, finish="length"))
        if name == "refusal":
            return Reply(
                events=[
                    sse_chunk({"role": "assistant", "refusal": "I can't help with that."}),
                    sse_chunk({}, "stop"),
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
        if name == "call":
            return _call_tool(words, conv.results)
        if name == "echo":
            roles = ",".join(str(m.get("role")) for m in conv.messages)
            return Reply(events=text_events(f"roles: {roles}"))
        return Reply(
            events=text_events(f"Unknown fake scenario {name!r}. Known: {', '.join(SCENARIOS)}")
        )
