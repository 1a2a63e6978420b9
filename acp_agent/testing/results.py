"""What one prompt turn produced, as a test reads it.

:class:`TurnResult` holds a turn's stop reason, its ``session/update`` payloads and the
requests the agent made during it, with the views a test asserts on: the message
text, the thoughts, each tool call as it finally stood, the last plan.

It does no I/O: :mod:`acp_agent.testing.client` fills it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class AgentRequest:
    """A request the agent sent to the client (``fs/read_text_file``, ...).

    Attributes:
        method: the JSON-RPC method.
        params: its params, as sent.
    """

    method: str
    params: JSON


def _text(updates: list[JSON], kind: str) -> str:
    parts = []
    for update in updates:
        if update.get("sessionUpdate") == kind:
            content = update.get("content")
            if isinstance(content, Mapping) and content.get("type") == "text":
                parts.append(str(content.get("text", "")))
    return "".join(parts)


@dataclass(frozen=True)
class TurnResult:
    """One ``session/prompt``: how it ended and everything the client saw meanwhile.

    Attributes:
        stop_reason: ``end_turn``, ``cancelled``, ``max_tokens``, ...
        updates: the ``update`` of each ``session/update`` of the turn, in order.
        requests: the agent's requests during the turn, in order.
        usage: the result's (unstable) ``usage``, if the agent sent one.
    """

    stop_reason: str
    updates: list[JSON] = field(default_factory=list)
    requests: list[AgentRequest] = field(default_factory=list)
    usage: JSON | None = None

    @property
    def text(self) -> str:
        """The text of the agent's message chunks, joined."""
        return _text(self.updates, "agent_message_chunk")

    @property
    def thoughts(self) -> str:
        """The text of the agent's thought chunks, joined."""
        return _text(self.updates, "agent_thought_chunk")

    def kinds(self) -> list[str]:
        """The ``sessionUpdate`` kind of each update, in order."""
        return [str(update.get("sessionUpdate")) for update in self.updates]

    @property
    def tool_calls(self) -> dict[str, JSON]:
        """Each tool call as it finally stood: its ``tool_call`` with every later
        ``tool_call_update`` applied, by ``toolCallId``, in announcement order."""
        calls: dict[str, JSON] = {}
        for update in self.updates:
            kind = update.get("sessionUpdate")
            if kind not in ("tool_call", "tool_call_update"):
                continue
            call_id = str(update.get("toolCallId"))
            fields = {k: v for k, v in update.items() if k != "sessionUpdate"}
            calls.setdefault(call_id, {}).update(fields)
        return calls

    @property
    def plan(self) -> list[JSON] | None:
        """The entries of the last ``plan`` update, or None when there was none."""
        plans = [u for u in self.updates if u.get("sessionUpdate") == "plan"]
        return list(plans[-1].get("entries", [])) if plans else None

    def methods(self) -> list[str]:
        """The methods of the agent's requests during the turn, in order."""
        return [request.method for request in self.requests]
