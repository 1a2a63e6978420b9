"""session/load replays exactly what the client saw live; resume, list, delete, close.

Every test runs over the in-memory store and over SQLite in tmp_path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent.agent import Command, Mode, PromptTurn
from acp_agent.client import text_content
from acp_agent.errors import RESOURCE_NOT_FOUND
from acp_agent.history import prompt_to_updates
from acp_agent.session import Session
from acp_agent.store import DEFAULT_OWNER, MemorySessionStore, SessionStore, SqliteSessionStore
from tests.core._support import (
    ScriptAgent,
    checked,
    prompt_params,
    updates_for,
)

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]

MODES: list[Mode] = [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]
COMMANDS: list[Command] = [{"name": "echo", "description": "Echo"}]


@pytest.fixture(params=["memory", "sqlite"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: object
) -> AsyncIterator[SessionStore]:
    opened: SessionStore
    if request.param == "memory":
        opened = MemorySessionStore()
    else:
        opened = await SqliteSessionStore.open(tmp_path / "sessions.sqlite3")
    try:
        yield opened
    finally:
        await opened.aclose()


class RichAgent(ScriptAgent):
    """Turns with every kind of update; ``hold`` blocks until cancelled."""

    def __init__(self) -> None:
        super().__init__(self.run)
        self.entered = anyio.Event()

    def modes(self, session: Session) -> list[Mode]:
        return MODES

    def commands(self, session: Session) -> list[Command]:
        return COMMANDS

    async def run(self, turn: PromptTurn) -> str:
        c = turn.client
        if turn.text == "rich":
            await c.thought("thinking", message_id="m1")
            await c.message("part 1 ", message_id="m2")
            await c.message("part 2", message_id="m2")
            await c.plan([{"content": "step", "priority": "high", "status": "pending"}])
            tool = await c.tool_call("read x", kind="read", locations=[{"path": "x", "line": 1}])
            await tool.start()
            await tool.complete(content=[text_content("done")], raw_output={"ok": True})
            await c.plan([{"content": "step", "priority": "high", "status": "completed"}])
            await c.session_info(title="A title")
            await c.usage(10, 100)
            return "end_turn"
        if turn.text == "hold":
            await c.message("working")
            tool = await c.tool_call("long", kind="execute", status="in_progress")
            try:
                self.entered.set()
                await anyio.Event().wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await tool.fail(content=[text_content("cancelled")])
        await c.message(f"echo {turn.text}")
        return "max_tokens" if turn.text == "long" else "end_turn"


async def new_session(client: Any, cwd: str) -> str:
    """session/new, then the command list that follows its response."""
    sid = await client.new_session(cwd)
    update = await client.recv()
    assert update["params"]["update"]["sessionUpdate"] == "available_commands_update"
    return str(sid)


def load_params(sid: str, cwd: str) -> JSON:
    return {"sessionId": sid, "cwd": cwd, "mcpServers": []}


async def run_turns(client: Any, sid: str, agent: RichAgent, script: list[str]) -> list[JSON]:
    """Run the prompts in order; return what a replay must show (user chunks + live updates)."""
    expected: list[JSON] = []
    for value in script:
        params = prompt_params(sid, value)
        rid = await client.request("session/prompt", params)
        if value == "hold":
            await agent.entered.wait()
            await client.notify("session/cancel", {"sessionId": sid})
        resp, before = await client.until_response(rid)
        assert "result" in resp, resp
        expected += prompt_to_updates(params["prompt"])
        expected += updates_for(before, sid)
    return expected


SCRIPT = ["rich", "hold", "plain", "long"]


async def test_load_replays_exactly_what_was_seen_live(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    agent = RichAgent()
    async with checked(agent, store=store) as (client, _server):
        sid = await new_session(client, cwd)
        expected = await run_turns(client, sid, agent, SCRIPT)
    kinds = {u["sessionUpdate"] for u in expected}
    assert {"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"} <= kinds
    assert {"tool_call", "tool_call_update", "plan"} <= kinds

    # a new connection over the same store
    async with checked(RichAgent(), store=store) as (client, _server):
        resp, before = await client.call("session/load", load_params(sid, cwd))
        assert resp["result"]["modes"]["currentModeId"] == "ask"
        replay = updates_for(before, sid)
        assert all(f.get("method") == "session/update" for f in before)
        # history first, exactly; then the command list and the mode, still before the response
        assert replay[: len(expected)] == expected
        extras = [u["sessionUpdate"] for u in replay[len(expected) :]]
        assert extras == ["available_commands_update", "current_mode_update"]
        # the session works on after the load
        resp, _ = await client.call("session/prompt", prompt_params(sid, "again"))
        assert resp["result"] == {"stopReason": "end_turn"}


async def test_load_on_the_same_connection_replays_too(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    agent = RichAgent()
    async with checked(agent, store=store) as (client, _server):
        sid = await new_session(client, cwd)
        expected = await run_turns(client, sid, agent, ["rich", "plain"])
        resp, before = await client.call("session/load", load_params(sid, cwd))
        assert "result" in resp
        assert updates_for(before, sid)[: len(expected)] == expected


async def test_load_twice_gives_the_same_replay(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    agent = RichAgent()
    async with checked(agent, store=store) as (client, _server):
        sid = await new_session(client, cwd)
        await run_turns(client, sid, agent, ["rich", "hold"])
    replays = []
    for _ in range(2):
        async with checked(RichAgent(), store=store) as (client, _server):
            resp, before = await client.call("session/load", load_params(sid, cwd))
            assert "result" in resp, resp
            replays.append(updates_for(before, sid))
    assert replays[0] == replays[1]


async def test_resume_replays_nothing(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    agent = RichAgent()
    async with checked(agent, store=store) as (client, _server):
        sid = await new_session(client, cwd)
        await run_turns(client, sid, agent, ["rich"])
    async with checked(RichAgent(), store=store) as (client, _server):
        resp, before = await client.call("session/resume", {"sessionId": sid, "cwd": cwd})
        assert "result" in resp, resp
        kinds = [u["sessionUpdate"] for u in updates_for(before, sid)]
        assert kinds == ["available_commands_update", "current_mode_update"]
        resp, _ = await client.call("session/prompt", prompt_params(sid, "after resume"))
        assert resp["result"] == {"stopReason": "end_turn"}


@pytest.mark.parametrize("method", ["session/load", "session/resume"])
async def test_load_or_resume_of_an_unknown_session_is_32002(
    store: SessionStore, tmp_path: Path, method: str
) -> None:
    async with checked(RichAgent(), store=store) as (client, _server):
        resp, before = await client.call(method, load_params("sess_nope", str(tmp_path)))
        assert before == []
        assert resp["error"]["code"] == RESOURCE_NOT_FOUND
        assert "sess_nope" in resp["error"]["message"]


async def test_list_sessions_with_cwd_filter(store: SessionStore, tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    async with checked(RichAgent(), store=store) as (client, _server):
        sid_a = await new_session(client, a)
        sid_b = await new_session(client, b)
        resp, _ = await client.call("session/list", {})
        listed = {s["sessionId"]: s for s in resp["result"]["sessions"]}
        assert set(listed) == {sid_a, sid_b}
        assert listed[sid_a]["cwd"] == a
        resp, _ = await client.call("session/list", {"cwd": b})
        assert [s["sessionId"] for s in resp["result"]["sessions"]] == [sid_b]
        resp, _ = await client.call("session/list")  # params absent
        assert len(resp["result"]["sessions"]) == 2


async def test_delete_removes_the_session(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    async with checked(RichAgent(), store=store) as (client, server):
        sid = await new_session(client, cwd)
        keep = await new_session(client, cwd)
        resp, _ = await client.call("session/delete", {"sessionId": sid})
        assert resp["result"] == {}
        assert sid not in server.sessions
        resp, _ = await client.call("session/list", {})
        assert [s["sessionId"] for s in resp["result"]["sessions"]] == [keep]
        resp, _ = await client.call("session/load", load_params(sid, cwd))
        assert resp["error"]["code"] == RESOURCE_NOT_FOUND
        resp, _ = await client.call("session/prompt", prompt_params(sid))
        assert resp["error"]["code"] == RESOURCE_NOT_FOUND
        # deleting an unknown id succeeds silently
        resp, _ = await client.call("session/delete", {"sessionId": "sess_unknown"})
        assert resp["result"] == {}


async def test_delete_during_a_turn_cancels_it(store: SessionStore, tmp_path: Path) -> None:
    agent = RichAgent()
    async with checked(agent, store=store) as (client, _server):
        sid = await new_session(client, str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid, "hold"))
        await agent.entered.wait()
        did = await client.request("session/delete", {"sessionId": sid})
        answers: dict[Any, JSON] = {}
        while len(answers) < 2:
            msg = await client.recv()
            if "method" not in msg:
                answers[msg["id"]] = msg
        assert answers[rid]["result"] == {"stopReason": "cancelled"}
        assert answers[did]["result"] == {}
        assert await store.get(DEFAULT_OWNER, sid) is None


async def test_close_semantics(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    async with checked(RichAgent(), store=store) as (client, server):
        sid = await new_session(client, cwd)
        resp, _ = await client.call("session/close", {"sessionId": sid})
        assert resp["result"] == {}
        assert sid not in server.sessions
        # closing again: the session is stored but not live -> still {}
        resp, _ = await client.call("session/close", {"sessionId": sid})
        assert resp["result"] == {}
        resp, _ = await client.call("session/prompt", prompt_params(sid))
        assert resp["error"]["code"] == RESOURCE_NOT_FOUND
        assert sid in resp["error"]["message"]
        resp, _ = await client.call("session/close", {"sessionId": "sess_unknown"})
        assert resp["error"]["code"] == RESOURCE_NOT_FOUND
        # a closed session stays listed (it is stored)
        resp, _ = await client.call("session/list", {})
        assert [s["sessionId"] for s in resp["result"]["sessions"]] == [sid]


async def test_a_closed_session_can_be_loaded_again(store: SessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    agent = RichAgent()
    async with checked(agent, store=store) as (client, _server):
        sid = await new_session(client, cwd)
        expected = await run_turns(client, sid, agent, ["plain"])
        await client.call("session/close", {"sessionId": sid})
        resp, before = await client.call("session/load", load_params(sid, cwd))
        assert "result" in resp
        assert updates_for(before, sid)[: len(expected)] == expected
        resp, _ = await client.call("session/prompt", prompt_params(sid, "more"))
        assert resp["result"] == {"stopReason": "end_turn"}
