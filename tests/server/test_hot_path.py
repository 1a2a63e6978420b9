"""The shape of a short prompt turn: its update and its answer in one write, and its store
write made at once when the store can."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from acp_agent.errors import INTERNAL_ERROR
from acp_agent.store import MemorySessionStore, SessionStore, SqliteSessionStore
from tests.helpers.memclient import WireClient, serving

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


class Recording(MemorySessionStore):
    """A memory store that records how each turn write reached it; ``now`` is what its
    ``write_turn_now`` does: write (True), decline (False) or fail (an exception)."""

    def __init__(self, now: bool | Exception) -> None:
        super().__init__()
        self.now = now
        self.calls: list[str] = []

    def write_turn_now(self, *args: Any, **kwargs: Any) -> bool:
        self.calls.append("now")
        if isinstance(self.now, Exception):
            raise self.now
        return super().write_turn_now(*args, **kwargs) if self.now else False

    async def write_turn(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append("awaited")
        await super().write_turn(*args, **kwargs)


async def prompt(client: WireClient, session: str, text: str) -> dict[str, Any]:
    response, _ = await client.call(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    )
    return response


@pytest.mark.parametrize(("now", "calls"), [(True, ["now"]), (False, ["now", "awaited"])])
async def test_a_turn_ends_with_a_write_made_at_once_when_the_store_can(
    now: bool, calls: list[str]
) -> None:
    store = Recording(now)
    async with serving(Echo(), store=store) as (client, _server):
        await client.initialize()
        session = await client.new_session()
        for text in ("one", "two"):
            assert (await prompt(client, session, text))["result"] == {"stopReason": "end_turn"}
        assert store.calls == calls * 2
        history = await store.load_history(session)
        assert [t.updates[-1]["content"]["text"] for t in history] == ["one", "two"]


async def test_a_failing_immediate_write_fails_the_turn_like_any_store_failure() -> None:
    store = Recording(OSError("disk gone"))
    async with serving(Echo(), store=store) as (client, _server):
        await client.initialize()
        session = await client.new_session()
        response = await prompt(client, session, "one")
        assert response["error"]["code"] == INTERNAL_ERROR
        assert "session store failed" in response["error"]["message"]
