"""A turn that ended with nothing saved (:mod:`acp_agent.adapters.unfinished`) as what a
LangGraph turn saves (:mod:`acp_agent.adapters._langgraph_memory`): its messages appended
to the root namespace's ``messages`` channel, the thread's checkpoint left as it was, or
a first checkpoint holding them when the thread has none yet.

Owns :func:`unfinished_changes`. It imports LangGraph and LangChain (only
:mod:`acp_agent.adapters.langgraph` imports it, at ``session/load``); it does not run the
graph.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._langgraph_memory import APPEND, CHANGED, ENTRIES, VALUES, fold
from .openai_based import prompt_text
from .unfinished import UnfinishedTurn

JSON = dict[str, Any]

__all__ = ["unfinished_changes"]

#: the channel of the conversation, and the root namespace holding it
MESSAGES: Final = "messages"
ROOT: Final = ""


def unfinished_changes(
    turn: UnfinishedTurn, before: Sequence[Any], serde: SerializerProtocol
) -> JSON:
    """The saved change that adds ``turn``'s messages to the thread ``before`` (the
    memory of the turns before it) folds into, serialized with ``serde``."""
    entries = [_pack(serde.dumps_typed(m)) for m in messages(turn)]
    root: Mapping[str, Any] = (fold(before) or {}).get(ROOT) or {}
    if "checkpoint" not in root:
        first = empty_checkpoint()
        return {
            CHANGED: {
                ROOT: {
                    "id": first["id"],
                    "checkpoint": _pack(serde.dumps_typed(first)),
                    "metadata": _pack(serde.dumps_typed({"source": "input", "step": -1})),
                    "parent": None,
                    "writes": [],
                    VALUES: [[MESSAGES, {ENTRIES: entries}]],
                }
            }
        }
    kept = dict(root.get(VALUES) or ())
    has_list = isinstance(kept.get(MESSAGES), Mapping) and ENTRIES in kept[MESSAGES]
    value = {APPEND: entries} if has_list else {ENTRIES: entries}
    return {CHANGED: {ROOT: {VALUES: [[MESSAGES, value]]}}}


def messages(turn: UnfinishedTurn) -> list[BaseMessage]:
    """``turn`` as LangChain messages: the user's prompt, each response's text and tool
    calls, and the calls' results (ids made from the turn's, the same at every load)."""
    made: list[BaseMessage] = [
        HumanMessage(content=prompt_text(turn.prompt), id=f"{turn.turn_id}-prompt")
    ]
    for number, response in enumerate(turn.responses):
        if not response.text and not response.calls:
            continue
        calls = [
            {"id": c.call_id, "name": c.name, "args": c.arguments, "type": "tool_call"}
            for c in response.calls
        ]
        made.append(
            AIMessage(content=response.text, tool_calls=calls, id=f"{turn.turn_id}-{number}")
        )
        made.extend(
            ToolMessage(
                content=c.result,
                tool_call_id=c.call_id,
                name=c.name,
                status="error" if c.failed else "success",
                id=f"{turn.turn_id}-{number}-{c.call_id}",
            )
            for c in response.calls
        )
    return made


def _pack(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]
