"""A store failure stays with its session: the other sessions of the connection go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from acp_agent.errors import INTERNAL_ERROR
from acp_agent.store import DEFAULT_OWNER, MemorySessionStore, TurnWrite
from tests.helpers.memclient import WireClient, serving

pytestmark = pytest.mark.anyio


class Echo(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message(turn.text)
        return "end_turn"


class FailingFor(MemorySessionStore):
    """A memory store whose turn writes fail for the sessions in ``broken``."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: set[str] = set()

    async def write_turn(self, write: TurnWrite) -> None:
        if write.session_id in self.broken:
            raise OSError("disk gone")
        await super().write_turn(write)


async def prompt(client: WireClient, session: str, text: str) -> dict[str, Any]:
    response, _ = await client.call(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    )
    return response


async def test_a_failed_write_fails_only_its_own_session() -> None:
    store = FailingFor()
    async with serving(Echo(), store=store) as (client, _server):
        await client.initialize()
        bad = await client.new_session()
        good = await client.new_session()
        store.broken.add(bad)
        for _ in range(2):
            response = await prompt(client, bad, "lost")
            assert response["error"]["code"] == INTERNAL_ERROR
            assert "session store FailingFor: disk gone" in response["error"]["message"]
        assert (await prompt(client, good, "kept"))["result"] == {"stopReason": "end_turn"}
        later = await client.new_session()
        assert (await prompt(client, later, "new"))["result"] == {"stopReason": "end_turn"}
        for sid in (good, later):
            [turn] = await store.load_history(DEFAULT_OWNER, sid)
            assert turn.stop_reason == "end_turn"


async def test_rows_deleted_under_a_live_session_fail_that_session_only(tmp_path: Path) -> None:
    # What a session/load racing a session/delete left behind: a live session whose rows
    # are gone. Its writes fail; the other sessions are not touched.
    store = MemorySessionStore()
    async with serving(Echo(), store=store) as (client, _server):
        await client.initialize()
        gone = await client.new_session()
        other = await client.new_session()
        assert await store.delete(DEFAULT_OWNER, gone)
        assert (await prompt(client, gone, "x"))["error"]["code"] == INTERNAL_ERROR
        assert (await prompt(client, other, "y"))["result"] == {"stopReason": "end_turn"}
        assert (await prompt(client, other, "z"))["result"] == {"stopReason": "end_turn"}
        turns = await store.load_history(DEFAULT_OWNER, other)
        assert [t.stop_reason for t in turns] == ["end_turn", "end_turn"]


async def test_a_session_opened_again_after_a_failure_works(tmp_path: Path) -> None:
    store = FailingFor()
    async with serving(Echo(), store=store) as (client, _server):
        await client.initialize()
        sid = await client.new_session(str(tmp_path))
        store.broken.add(sid)
        assert (await prompt(client, sid, "lost"))["error"]["code"] == INTERNAL_ERROR
        store.broken.clear()
        response, _ = await client.call(
            "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
        assert "result" in response
        assert (await prompt(client, sid, "back"))["result"] == {"stopReason": "end_turn"}
