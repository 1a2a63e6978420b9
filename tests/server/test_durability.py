"""Durable sessions across real agent processes sharing one SQLite file.

A session with several kinds of turns survives its agent: a new process lists it,
replays it exactly on ``session/load`` and continues it. An agent killed with SIGKILL
in the middle of a turn loses nothing it had written: the interrupted turn comes back
sanitised (its unfinished tool call marked failed).
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers.wire_client import FULL_CAPS, Message, spawn

pytestmark = pytest.mark.anyio


def server(db: Path) -> list[str]:
    return [sys.executable, "-m", "acp_agent", "--store", str(db)]


async def allow(request: Message) -> Any:
    if request["method"] == "session/request_permission":
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
    if request["method"] == "fs/write_text_file":
        return {}
    raise AssertionError(request)


def replay_without_extras(frames: list[Message], session_id: str) -> list[Message]:
    """The history part of a load: updates before the trailing commands/mode extras."""
    updates = [
        f["params"]["update"]
        for f in frames
        if f.get("method") == "session/update" and f["params"]["sessionId"] == session_id
    ]
    while updates and updates[-1]["sessionUpdate"] in (
        "available_commands_update",
        "current_mode_update",
    ):
        updates.pop()
    return updates


async def test_a_session_outlives_its_agent_and_replays_exactly(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    work = tmp_path / "work"
    work.mkdir()
    live: list[Message] = []
    async with spawn(server(db)) as agent:
        agent.on_request = allow
        await agent.initialize(FULL_CAPS)
        sid, _, _ = await agent.new_session(work)
        for text in ["/echo hi", "/think hmm", "/tools 2", "/plan 2", f"/write {work}/a.txt x"]:
            turn = await agent.prompt(sid, text)
            assert turn.stop_reason == "end_turn", turn.response
            live += [
                {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}},
                *turn.updates,
            ]
        pid = await agent.start_prompt(sid, "/sleep 30000")
        await agent.notify("session/cancel", {"sessionId": sid})
        cancelled = await agent.finish_prompt(pid)
        assert cancelled.stop_reason == "cancelled"
        live += [
            {
                "sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "/sleep 30000"},
            },
            *cancelled.updates,
        ]

    async with spawn(server(db)) as agent:
        agent.on_request = allow
        await agent.initialize(FULL_CAPS)
        listed, _ = await agent.call("session/list", {"cwd": str(work)})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
        load_id = await agent.request(
            "session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []}
        )
        response, frames = await agent.expect(
            lambda m: m.get("id") == load_id and "method" not in m
        )
        assert response["result"] is not None
        assert replay_without_extras(frames, sid) == live
        turn = await agent.prompt(sid, "/echo again")
        assert turn.stop_reason == "end_turn" and turn.texts() == ["again"]


async def test_sigkill_mid_turn_keeps_what_was_sent(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    work = tmp_path / "work"
    work.mkdir()
    async with spawn(server(db)) as agent:
        await agent.initialize(FULL_CAPS)
        sid, _, _ = await agent.new_session(work)
        first = await agent.prompt(sid, "/echo before the crash")
        assert first.stop_reason == "end_turn"
        # /write announces its tool call, then waits on the permission answer: the
        # agent is mid-turn with one update sent.
        await agent.start_prompt(sid, f"/write {work}/b.txt never")
        _, skipped = await agent.expect(lambda m: m.get("method") == "session/request_permission")
        sent = [m["params"]["update"] for m in skipped if m.get("method") == "session/update"]
        assert [u["sessionUpdate"] for u in sent] == ["tool_call"]
        # The update reaches the store in the background; wait until it is there.
        with anyio.fail_after(10):
            while not _stored_updates(db, sid, "tool_call"):  # noqa: ASYNC110 - another process writes it
                await anyio.sleep(0.01)  # polling the file from outside; no shared clock
        agent.process.send_signal(signal.SIGKILL)
        await agent.process.wait()

    async with spawn(server(db)) as agent:
        await agent.initialize(FULL_CAPS)
        load_id = await agent.request(
            "session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []}
        )
        _, frames = await agent.expect(lambda m: m.get("id") == load_id and "method" not in m)
        replay = replay_without_extras(frames, sid)
        kinds = [u["sessionUpdate"] for u in replay]
        assert kinds == [
            "user_message_chunk",
            "agent_message_chunk",
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
        ]
        assert replay[3] == sent[0]
        assert replay[4] == {
            "sessionUpdate": "tool_call_update",
            "toolCallId": sent[0]["toolCallId"],
            "status": "failed",
        }
        turn = await agent.prompt(sid, "/echo after")
        assert turn.stop_reason == "end_turn" and turn.texts() == ["after"]


def _stored_updates(db: Path, session_id: str, kind: str) -> bool:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            rows = conn.execute(
                "SELECT u.body FROM updates u JOIN turns t ON u.turn = t.id WHERE t.session_id = ?",
                (session_id,),
            ).fetchall()
        except sqlite3.OperationalError:
            return False
    conn.close()
    return any(f'"sessionUpdate":"{kind}"' in str(r[0]) for r in rows)
