"""Test an ACP agent: a client that drives it, and a pytest plugin.

``connect(agent)`` runs an :class:`~acp_agent.agent.Agent` in memory, or spawns any agent
command, and yields an :class:`AgentClient` that initializes it, opens sessions,
prompts, answers its permission questions, serves its file reads and writes (from a
dict or a directory) and, if asked, its terminals::

    from acp_agent.testing import connect

    async def test_shouty():
        async with connect(Shouty()) as client:
            session = await client.new_session()
            turn = await session.prompt("/shout hello")
        assert turn.stop_reason == "end_turn"
        assert turn.text == "HELLO"

With pytest, the plugin (:mod:`acp_agent.testing.pytest_plugin`, loaded by itself once
acp-agent-kit is installed) gives the ``acp_client`` fixture, which connects and cleans
up for you.

It is the project's public testing API; it owns no protocol rules (the server does).
"""

from __future__ import annotations

from .client import (
    AgentClient,
    ClientSession,
    MemoryFiles,
    PendingTurn,
    Permission,
    connect,
)
from .results import AgentRequest, TurnResult

__all__ = [
    "AgentClient",
    "AgentRequest",
    "ClientSession",
    "MemoryFiles",
    "PendingTurn",
    "Permission",
    "TurnResult",
    "connect",
]
