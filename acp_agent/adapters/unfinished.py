"""What the model is told, after ``session/load``, of a turn that ended with nothing saved.

A turn whose process was killed (or that failed before it saved its memory) is replayed
with its prompt, what it streamed and its open calls closed ``failed``, but no memory of
it was saved. Owns, framework-neutral:

* :func:`unfinished_turn`: from such a turn's loaded record, what the model must be told
  (:class:`UnfinishedTurn`): the prompt, each model response's text as streamed, and each
  tool call the model made (by the framework's own call id, which :func:`call_meta` puts
  on the announced call), with its result, or :data:`INTERRUPTED` where it never finished;
* :func:`remember_unfinished`, run by an adapter's ``load_session``: the adapter's hook
  (:data:`UnfinishedMemory`, one method ``unfinished_memory(turn, before)``) makes each
  such turn one memory entry in the adapter's own saved format, and it is kept for the
  session, where :func:`~acp_agent.adapters.turns.saved` reads it in that turn's place.

It repairs only data loaded from disk, recomputed at every load, and never changes the
history or what is stored: the next turns save their own memory as they always do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..history import USER_KIND, TurnLog
from ..session import Session

JSON = dict[str, Any]

__all__ = [
    "INTERRUPTED",
    "ToldCall",
    "ToldResponse",
    "UnfinishedMemory",
    "UnfinishedTurn",
    "call_meta",
    "remember_unfinished",
    "told_memory",
    "unfinished_turn",
]

#: the result the model is given for a call its turn never finished
INTERRUPTED: Final = "The tool call was interrupted: the agent stopped before it finished."
#: the ``_meta`` key of an adapter's ``tool_call`` update, naming the framework's call id
CALL_META: Final = "acp-agent/adapter"
#: the session state key of the memory entries told at load, by turn id
TOLD_KEY: Final = "acp_agent.adapters.unfinished"


def call_meta(call_id: str) -> JSON:
    """The ``_meta`` of a tool call the model made, with the framework's ``call_id``."""
    return {CALL_META: {"callId": call_id}}


@dataclass(frozen=True, slots=True)
class ToldCall:
    """A tool call of an unfinished turn: the framework's id, the tool, its arguments,
    the result the model is given and whether the call failed."""

    call_id: str
    name: str
    arguments: JSON
    result: str
    failed: bool


@dataclass(frozen=True, slots=True)
class ToldResponse:
    """One model response of an unfinished turn: its text, then its calls."""

    text: str
    calls: tuple[ToldCall, ...] = ()


@dataclass(frozen=True, slots=True)
class UnfinishedTurn:
    """What the model must be told of a turn that ended with nothing saved."""

    turn_id: str
    #: the prompt's ACP content blocks
    prompt: tuple[Mapping[str, Any], ...]
    responses: tuple[ToldResponse, ...]


#: an adapter's hook: the memory entry (its saved format for one turn) telling the model
#: ``turn``, given the memory of the turns before it, oldest first
UnfinishedMemory = Callable[[UnfinishedTurn, Sequence[Any]], Any]


@dataclass
class _Call:
    call_id: str
    name: str
    arguments: JSON = field(default_factory=dict)
    status: str = "pending"
    result: str = ""

    def update(self, event: Mapping[str, Any]) -> None:
        raw = event.get("rawInput")
        if isinstance(raw, Mapping):
            self.arguments = dict(raw)
        status = event.get("status")
        if status in ("completed", "failed"):
            self.status = str(status)
            self.result = _result(event)

    def told(self) -> ToldCall:
        finished = self.status == "completed" or (self.status == "failed" and self.result)
        result = self.result if finished else INTERRUPTED
        return ToldCall(self.call_id, self.name, self.arguments, result, self.status != "completed")


@dataclass
class _Response:
    message_id: Any
    text: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)


def unfinished_turn(turn: TurnLog) -> UnfinishedTurn | None:
    """What the model must be told of ``turn`` (as loaded, after
    :func:`~acp_agent.history.sanitize`), or None if it ended or saved its memory."""
    if not turn.interrupted or turn.state is not None:
        return None
    prompt: list[Mapping[str, Any]] = []
    responses: list[_Response] = []
    calls: dict[str, _Call] = {}
    answering = False
    for event in turn.events:
        kind = event.get("sessionUpdate")
        if kind == USER_KIND:
            content = event.get("content")
            if not answering and isinstance(content, Mapping):
                prompt.append(content)
            continue
        answering = True
        if kind == "agent_message_chunk":
            content = event.get("content")
            text = content.get("text") if isinstance(content, Mapping) else None
            if not isinstance(text, str) or not text:
                continue
            message_id = event.get("messageId")
            last = responses[-1] if responses else None
            if last is None or last.calls or _other(last.message_id, message_id):
                last = _Response(message_id)
                responses.append(last)
            last.text.append(text)
        elif kind == "tool_call":
            call_id = _model_call_id(event)
            if call_id is None:  # not a call the model made
                continue
            name = event.get("name") or event.get("title") or "tool"
            call = _Call(call_id, str(name))
            call.update(event)
            calls[str(event.get("toolCallId"))] = call
            if not responses:
                responses.append(_Response(None))
            responses[-1].calls.append(call)
        elif kind == "tool_call_update":
            known = calls.get(str(event.get("toolCallId")))
            if known is not None:
                known.update(event)
    return UnfinishedTurn(
        turn.turn_id,
        tuple(prompt),
        tuple(ToldResponse("".join(r.text), tuple(c.told() for c in r.calls)) for r in responses),
    )


def remember_unfinished(session: Session, memory: UnfinishedMemory) -> None:
    """At load: each turn of ``session`` that ended with nothing saved made one memory
    entry by ``memory`` (given the memory of the turns before it), kept for the session."""
    before: list[Any] = []
    entries: dict[str, Any] = {}
    for turn in session.history.turns:
        state = turn.state
        if isinstance(state, Mapping) and "memory" in state:
            before.append(state["memory"])
            continue
        unfinished = unfinished_turn(turn)
        if unfinished is None:
            continue
        entry = memory(unfinished, tuple(before))
        entries[turn.turn_id] = entry
        before.append(entry)
    if entries:
        session.state[TOLD_KEY] = entries


def told_memory(session: Session) -> Mapping[str, Any]:
    """The memory entries :func:`remember_unfinished` kept for ``session``, by turn id."""
    entries = session.state.get(TOLD_KEY)
    return entries if isinstance(entries, Mapping) else {}


def _other(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a != b


def _model_call_id(event: Mapping[str, Any]) -> str | None:
    meta = event.get("_meta")
    ours = meta.get(CALL_META) if isinstance(meta, Mapping) else None
    call_id = ours.get("callId") if isinstance(ours, Mapping) else None
    return call_id if isinstance(call_id, str) and call_id else None


def _result(event: Mapping[str, Any]) -> str:
    """The text a finished call's update gave the model (its ``rawOutput``, else its
    text content)."""
    raw = event.get("rawOutput")
    if isinstance(raw, Mapping) and isinstance(raw.get("output"), str):
        return str(raw["output"])
    parts: list[str] = []
    for item in event.get("content") or ():
        inner = item.get("content") if isinstance(item, Mapping) else None
        if isinstance(inner, Mapping) and isinstance(inner.get("text"), str):
            parts.append(inner["text"])
    return "".join(parts)
