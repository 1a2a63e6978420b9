"""The reference agent's ACP 1.25 commands: ``/notice`` and ``/compact`` (``reference-agent.md``),
over a real subprocess; the compaction is stored and replayed by ``session/load`` in a new
process (a real SQLite file), the notice never is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wire_client import FULL_CAPS, Message, spawn, update_kind

pytestmark = pytest.mark.anyio

CAPS_125: dict[str, Any] = {**FULL_CAPS, "session": {"notices": {}, "compaction": {}}}


def server(db: Path) -> list[str]:
    return [sys.executable, "-m", "acp_agent", "--store", str(db)]


async def test_notice_is_sent_only_to_clients_that_advertise_it(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize(CAPS_125)
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, "/notice warning disk  almost full")
        assert turn.stop_reason == "end_turn"
        assert turn.updates == [
            {"sessionUpdate": "notice", "severity": "warning", "title": "disk  almost full"}
        ]
        for bad, argument in (("/notice loud x", "severity"), ("/notice info", "title")):
            turn = await client.prompt(sid, bad)
            assert turn.error is not None and turn.error["code"] == -32602
            assert turn.error["message"].startswith(f"{argument}:")
    async with spawn() as client:
        await client.initialize(FULL_CAPS)
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, "/notice info hello there")
        assert turn.kinds() == ["agent_message_chunk"]
        assert turn.texts() == ["notice: hello there"]


async def test_compact_without_the_capability_says_so(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize(FULL_CAPS)
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, "/compact 2")
        assert turn.texts() == ["compaction is not supported by this client"]
        assert turn.kinds() == ["agent_message_chunk"]


def _compaction_shape(updates: list[Message]) -> list[tuple[str, Any]]:
    return [
        (u["sessionUpdate"], u.get("status") or u.get("content", {}).get("text"))
        for u in updates
        if u["sessionUpdate"].startswith("compaction")
    ]


async def test_compaction_is_stored_and_replayed_exactly_notices_are_not(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    async with spawn(server(db)) as client:
        await client.initialize(CAPS_125)
        sid, _, _ = await client.new_session(tmp_path)
        notice = await client.prompt(sid, "/notice info live only")
        assert notice.kinds() == ["notice"]
        turn = await client.prompt(sid, "/compact 3")
        assert turn.stop_reason == "end_turn"
        assert _compaction_shape(turn.updates) == [
            ("compaction_update", "in_progress"),
            ("compaction_summary_chunk", "summary 1"),
            ("compaction_summary_chunk", "summary 2"),
            ("compaction_summary_chunk", "summary 3"),
            ("compaction_update", "completed"),
        ]
        ids = {u["compactionId"] for u in turn.updates}
        assert len(ids) == 1
        live = turn.updates

    for caps, expected in ((CAPS_125, live), (FULL_CAPS, [])):
        async with spawn(server(db)) as client:
            await client.initialize(caps)
            load_id = await client.request(
                "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            )
            _, frames = await client.expect(
                lambda m: m.get("id") == load_id and "method" not in m  # noqa: B023
            )
            replayed = [m["params"]["update"] for m in frames if update_kind(m)]
            assert "notice" not in [u["sessionUpdate"] for u in replayed]
            # exactly what was sent, and nothing of it for a client that cannot show it
            assert [u for u in replayed if u["sessionUpdate"].startswith("compaction")] == expected
            assert (await client.prompt(sid, "/echo on")).texts() == ["on"]
