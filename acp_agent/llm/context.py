"""The model's conversation, rebuilt from the session's turn-scoped history.

The session history (``session.history.turns``, each turn's ``events`` = the exact
``session/update`` payloads sent) is the one source of truth: every model request,
in a live turn or after ``session/load``/``session/resume``, is rebuilt from it by
:func:`build_messages`. What the history alone cannot say exactly is carried in the
updates the agent sends:

* every agent message chunk of one model response carries the same ``messageId``;
* every ``tool_call`` carries ``_meta["acp-agent/llm"] = {messageId, name,
  arguments, id}`` (the model response it belongs to, the function name, the raw
  JSON arguments and the call id the model produced: the id goes back to the model
  unchanged, as endpoints that check ids require);
* every finished tool call carries ``rawOutput: {"output": <text given to the model>}``;
* agent messages that are notices to the person (not model output) carry
  ``_meta["acp-agent/llm"] = {"notice": true}`` and are left out;
* the text of a model response that failed (a broken stream, an empty answer) is left
  out: the turn's saved state names its ``messageId`` (:data:`FAILED_RESPONSE`).

A completed context compaction (``compaction_update`` / ``compaction_summary_chunk``,
see :mod:`acp_agent.llm.compact`) stands for every turn before the turn it was made
in: the conversation then starts at that turn, with the summary in the system prompt
(:func:`compacted_from`).

Updates from elsewhere (no ``_meta``) still rebuild sensibly: a tool call's name comes
from its title, its arguments from ``rawInput``, its result from its text content.
Tool calls that never finished (those a load closed ``failed`` with nothing said too) get
a result saying so, so every call has its answer.

It does no I/O and knows nothing of HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from ..compaction import compaction_summaries
from ..history import TurnLog

META_KEY: Final = "acp-agent/llm"
SUMMARY_HEADING: Final = "Summary of the earlier conversation (its older turns were compacted):"
UNFINISHED_RESULT: Final = "The tool call did not finish (it was interrupted or cancelled)."
#: the key of a turn's saved state naming the ``messageId`` of its failed model response
FAILED_RESPONSE: Final = "failedResponse"

JSON = dict[str, Any]

_NAME_RE: Final = re.compile(r"[^A-Za-z0-9_-]+")


def llm_meta(update: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = update.get("_meta")
    if isinstance(meta, Mapping):
        ours = meta.get(META_KEY)
        if isinstance(ours, Mapping):
            return ours
    return {}


def block_text(block: Any) -> str:
    """A prompt content block as text for the model."""
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource_link":
        name = block.get("name") or block.get("uri", "")
        return f"[{name}]({block.get('uri', '')})"
    if kind == "resource":
        resource = block.get("resource")
        if isinstance(resource, Mapping):
            uri = resource.get("uri", "")
            if isinstance(resource.get("text"), str):
                return f'<resource uri="{uri}">\n{resource["text"]}\n</resource>'
            return f"[binary resource {uri}]"
    if kind in ("image", "audio"):
        return f"[{kind} attachment not shown]"
    return ""


def _text_of_content(content: Any) -> str:
    """The text of a tool call's ``content`` array (for histories without rawOutput)."""
    parts: list[str] = []
    if isinstance(content, list):
        for item in content:
            if not isinstance(item, Mapping):
                continue
            if item.get("type") == "content":
                parts.append(block_text(item.get("content")))
            elif item.get("type") == "diff":
                parts.append(f"(edited {item.get('path', '')})")
            elif item.get("type") == "terminal":
                parts.append("(ran in a terminal)")
    return "\n".join(p for p in parts if p)


class _Assistant:
    """One assistant message being rebuilt, with its tool calls and their results."""

    def __init__(self, message_id: Any) -> None:
        self.message_id = message_id
        self.text: list[str] = []
        self.calls: list[JSON] = []
        #: ACP toolCallId -> the result given to the model (None: not finished)
        self.results: dict[str, str | None] = {}
        self._acp_ids: list[str] = []

    def tool_call(self, event: Mapping[str, Any]) -> None:
        meta = llm_meta(event)
        call_id = str(event.get("toolCallId"))
        model_id = meta.get("id")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            name = _NAME_RE.sub("_", str(event.get("title", "tool")))[:64] or "tool"
        arguments = meta.get("arguments")
        if not isinstance(arguments, str):
            raw = event.get("rawInput")
            arguments = orjson.dumps(raw if raw is not None else {}).decode()
        self.calls.append(
            {
                "id": model_id if isinstance(model_id, str) and model_id else call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
        self._acp_ids.append(call_id)
        self.results[call_id] = None

    def tool_update(self, event: Mapping[str, Any]) -> None:
        call_id = str(event.get("toolCallId"))
        if call_id not in self.results or event.get("status") not in ("completed", "failed"):
            return
        raw = event.get("rawOutput")
        if isinstance(raw, Mapping) and isinstance(raw.get("output"), str):
            result = raw["output"]
        else:
            result = _text_of_content(event.get("content"))
            if not result and event.get("status") == "failed":
                return  # closed with nothing said (a load's repair): it did not finish
            result = result or "Done."
        self.results[call_id] = result

    def messages(self) -> list[JSON]:
        text = "".join(self.text)
        if not text and not self.calls:
            return []
        message: JSON = {"role": "assistant", "content": text or None}
        if self.calls:
            message["tool_calls"] = self.calls
        out = [message]
        for call, acp_id in zip(self.calls, self._acp_ids, strict=True):
            result = self.results.get(acp_id)
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": result if result is not None else UNFINISHED_RESULT,
                }
            )
        return out


def turn_events(turn: TurnLog) -> list[JSON]:
    """The turn's events (``turn.events``)."""
    return turn.events


def turn_messages(turn: TurnLog) -> list[JSON]:
    """One turn of history as chat messages: the user's message, then the assistant's."""
    out: list[JSON] = []
    user: list[str] = []
    assistant: _Assistant | None = None
    failed = turn.state.get(FAILED_RESPONSE) if isinstance(turn.state, Mapping) else None
    for event in turn_events(turn):
        kind = event.get("sessionUpdate")
        if kind == "user_message_chunk":
            if assistant is not None:
                out.extend(assistant.messages())
                assistant = None
            user.append(block_text(event.get("content")))
            continue
        if user:
            out.append({"role": "user", "content": "\n".join(p for p in user if p) or "(empty)"})
            user = []
        if kind == "agent_message_chunk":
            if llm_meta(event).get("notice") or (
                failed is not None and event.get("messageId") == failed
            ):
                continue
            message_id = event.get("messageId")
            if assistant is None or assistant.calls or assistant.message_id != message_id:
                if assistant is not None:
                    out.extend(assistant.messages())
                assistant = _Assistant(message_id)
            assistant.text.append(block_text(event.get("content")))
        elif kind == "tool_call":
            message_id = llm_meta(event).get("messageId")
            if assistant is None or (message_id is not None and assistant.message_id != message_id):
                if assistant is not None:
                    out.extend(assistant.messages())
                assistant = _Assistant(message_id)
            assistant.tool_call(event)
        elif kind == "tool_call_update" and assistant is not None:
            assistant.tool_update(event)
    if user:
        out.append({"role": "user", "content": "\n".join(p for p in user if p) or "(empty)"})
    if assistant is not None:
        out.extend(assistant.messages())
    return out


def compacted_from(turns: Sequence[TurnLog]) -> tuple[int, str]:
    """(the first turn given to the model verbatim, the summary of the turns before it):
    the latest completed compaction's turn and summary, or (0, "") when there is none."""
    for index in range(len(turns) - 1, -1, -1):
        done = [
            text
            for status, text in compaction_summaries(turns[index].events).values()
            if status == "completed" and text
        ]
        if done:
            return index, done[-1]
    return 0, ""


def build_messages(system_prompt: str, turns: Iterable[TurnLog]) -> list[JSON]:
    """The conversation for the next model request (from the latest compaction on)."""
    kept = list(turns)
    start, summary = compacted_from(kept)
    if summary:
        system_prompt = f"{system_prompt}\n\n{SUMMARY_HEADING}\n{summary}"
    messages: list[JSON] = [{"role": "system", "content": system_prompt}]
    for turn in kept[start:]:
        messages.extend(turn_messages(turn))
    return messages


DEFAULT_SYSTEM_PROMPT: Final = """\
You are a coding agent working inside the user's editor. You can read, search and \
edit files and run shell commands with the tools you are given; the user sees every \
tool call and approves edits and commands. Work in small verifiable steps, read a \
file before you edit it, prefer edit_file over rewriting whole files, and say briefly \
what you did when you are finished. Paths are relative to the working directory \
unless absolute."""


def system_prompt(
    base: str | None, cwd: str, roots: Sequence[str], notes: Sequence[str] = ()
) -> str:
    parts = [base or DEFAULT_SYSTEM_PROMPT, f"\nWorking directory: {cwd}"]
    extra = [r for r in roots if r != cwd]
    if extra:
        parts.append("Additional workspace roots: " + ", ".join(extra))
    parts.extend(notes)
    return "\n".join(parts)
