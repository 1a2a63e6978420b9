"""The shape of a short prompt turn on the wire: its update and its answer in one write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from acp_agent.store import MemorySessionStore, SessionStore, SqliteSessionStore
from tests.helpers.memclient import serving

pytestmark = pytest.mark.anyio


class Echo(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message(turn.text)
        return "end_turn"


@asynccontextmanager
async def open_store(kind: str, tmp_path: Path) -> AsyncIterator[SessionStore]:
    if kind == "memory":
        yield MemorySessionStore()
    else:
        async with await SqliteSessionStore.open(tmp_path / "s.sqlite3") as store:
            yield store


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_short_turn_is_stored_and_answered_in_one_write(kind: str, tmp_path: Path) -> None:
    async with (
        open_store(kind, tmp_path) as store,
        serving(Echo(), store=store) as (client, _server),
    ):
        await client.initialize()
        session = await client.new_session()
        for text in ("one", "two"):
            rid = await client.request(
                "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
            )
            chunk = await client.transport.receive()
            frames = [orjson.loads(line) for line in chunk.splitlines()]
            assert [f.get("method", f.get("id")) for f in frames] == ["session/update", rid]
            assert frames[0]["params"]["update"]["content"]["text"] == text
            assert frames[1]["result"] == {"stopReason": "end_turn"}
        history = await store.load_history(session)
        assert [t.stop_reason for t in history] == ["end_turn", "end_turn"]
