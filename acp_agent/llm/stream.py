"""Assembling a streamed chat-completions response, sans-IO.

:class:`ChunkAssembler` takes the decoded JSON of each SSE ``data:`` event and
returns what the caller should show at once (:class:`TextDelta`,
:class:`ReasoningDelta`), while it accumulates the rest: tool calls assembled from
their deltas by ``index``, the finish reason, a refusal, token usage. At the end,
:meth:`ChunkAssembler.result` gives the :class:`ModelResponse`.

It raises :class:`StreamError` for what is not a chat-completions stream (a chunk
that is not JSON or not an object, an ``error`` object inside the stream) and for a
stream that stopped before it was complete.

It does no I/O and knows nothing of ACP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


class StreamError(Exception):
    """The endpoint's stream is not a valid chat-completions stream."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


Delta = TextDelta | ReasoningDelta


@dataclass(slots=True)
class ToolCallRequest:
    """One function call the model asked for; ``arguments`` is the raw JSON text."""

    index: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(slots=True)
class ModelResponse:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str | None = None
    refusal: str | None = None
    usage: Usage | None = None

    @property
    def empty(self) -> bool:
        return not self.text.strip() and not self.tool_calls and not self.refusal


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class ChunkAssembler:
    """Feed :meth:`feed_data` every ``data:`` payload; read :meth:`result` at the end."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Usage | None = None
        self.done = False  # saw "[DONE]"
        self.chunks = 0

    def feed_data(self, data: str) -> list[Delta]:
        if data.strip() == "[DONE]":
            self.done = True
            return []
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(
                "The model endpoint sent a malformed stream chunk (not JSON)", "malformed_chunk"
            ) from None
        return self.feed(chunk)

    def feed(self, chunk: Any) -> list[Delta]:
        if not isinstance(chunk, dict):
            raise StreamError(
                "The model endpoint sent a malformed stream chunk (not an object)",
                "malformed_chunk",
            )
        self.chunks += 1
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            raise StreamError(
                f"The model endpoint reported an error mid-stream: {str(message)[:300]}",
                "stream_error",
            )
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt = _int(usage.get("prompt_tokens"))
            completion = _int(usage.get("completion_tokens"))
            total = _int(usage.get("total_tokens")) or prompt + completion
            self._usage = Usage(prompt, completion, total)
        out: list[Delta] = []
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return out
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # we ask for one choice; ignore any other
            delta = choice.get("delta")
            if isinstance(delta, dict):
                out.extend(self._delta(delta))
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self._finish = finish
        return out

    def _delta(self, delta: dict[str, Any]) -> list[Delta]:
        out: list[Delta] = []
        for key in ("reasoning_content", "reasoning"):
            value = delta.get(key)
            if isinstance(value, str) and value:
                self._reasoning.append(value)
                out.append(ReasoningDelta(value))
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._text.append(content)
            out.append(TextDelta(content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if isinstance(call, dict):
                    self._tool_delta(call, position)
        return out

    def _tool_delta(self, call: dict[str, Any], position: int) -> None:
        index = call.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        entry = self._calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        if isinstance(call.get("id"), str) and call["id"]:
            entry["id"] = call["id"]
        function = call.get("function")
        if isinstance(function, dict):
            name = function.get("name")
            if isinstance(name, str) and name:
                # Names arrive whole in practice; a few servers split them.
                entry["name"] = (
                    name if not entry["name"] or entry["name"] == name else entry["name"] + name
                )
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                entry["arguments"].append(arguments)

    @property
    def finish_reason(self) -> str | None:
        return self._finish

    @property
    def complete(self) -> bool:
        return self.done or self._finish is not None

    def result(self) -> ModelResponse:
        """The whole response; :class:`StreamError` if the stream never completed."""
        if not self.complete:
            raise StreamError(
                "The model stream ended before it was complete (no finish_reason and no [DONE])",
                "truncated_stream",
            )
        calls = [
            ToolCallRequest(
                index=index,
                call_id=entry["id"] or f"call_{index}",
                name=entry["name"],
                arguments="".join(entry["arguments"]),
            )
            for index, entry in sorted(self._calls.items())
        ]
        return ModelResponse(
            text="".join(self._text),
            reasoning="".join(self._reasoning),
            tool_calls=calls,
            finish_reason=self._finish,
            refusal="".join(self._refusal) or None,
            usage=self._usage,
        )
