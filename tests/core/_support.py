"""Test agents and checks shared by the core tests that drive an AcpServer in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from acp_agent.agent import Agent, PromptTurn
from acp_agent.prompt_slot import SlotState
from acp_agent.server import AcpServer
from tests.helpers.memclient import WireClient, serving

JSON = dict[str, Any]
Script = Callable[[PromptTurn], Awaitable[Any]]


class ScriptAgent(Agent):
    """An agent whose ``prompt`` runs ``script`` (default: answer ``end_turn`` at once)."""

    name = "script-agent"

    def __init__(self, script: Script | None = None) -> None:
        self.script = script
        self.turns: list[PromptTurn] = []

    async def prompt(self, turn: PromptTurn) -> Any:
        self.turns.append(turn)
        if self.script is None:
            return "end_turn"
        return await self.script(turn)


def text(value: str) -> list[JSON]:
    return [{"type": "text", "text": value}]


def prompt_params(session_id: str, value: str = "hi") -> JSON:
    return {"sessionId": session_id, "prompt": text(value)}


def assert_no_leaks(server: AcpServer) -> None:
    """Nothing of a finished exchange is left behind on the connection or the sessions."""
    conn = server.connection
    assert conn.pending_count == 0, "an outbound request is still pending"
    assert conn.inflight_count == 0, "an inbound request is still in flight"
    for session in server.sessions.values():
        assert session.slot.turn is None, "a turn still holds the prompt slot"
        assert session.slot.state in (SlotState.IDLE, SlotState.CLOSED)
        if session.last_turn is not None:
            assert session.last_turn.finished, "the last turn never finished"
        assert session.history.current is None, "a history turn is still open"


@asynccontextmanager
async def checked(
    agent: Agent, caps: JSON | None = None, **options: Any
) -> AsyncIterator[tuple[WireClient, AcpServer]]:
    """``serving`` + ``initialize``; on a clean exit, a final round trip and a leak check."""
    async with serving(agent, **options) as (client, server):
        await client.initialize(caps)
        yield client, server
        resp, before = await client.call("session/list", {})
        assert "result" in resp, resp
        assert before == [], f"frames arrived unasked: {before}"
        assert_no_leaks(server)
    assert client.after_eof == [], f"frames after EOF: {client.after_eof}"


def updates_for(frames: list[JSON], session_id: str) -> list[JSON]:
    """The ``update`` objects of the ``session/update`` notifications for one session."""
    return [
        f["params"]["update"]
        for f in frames
        if f.get("method") == "session/update" and f["params"]["sessionId"] == session_id
    ]
