"""The server on ACP 1.25: initialize leniency, logout, and the unstable features behind
``--unstable`` (fork, set_title, usage), durable across processes on a real SQLite file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wire_client import AgentError, ProcessClient, spawn, update_kind

pytestmark = pytest.mark.anyio


def server(db: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "acp_agent", "--store", str(db), *flags]


async def _load(client: ProcessClient, sid: str, cwd: Path) -> list[str]:
    """The texts of the user and agent chunks ``session/load`` replays."""
    load_id = await client.request(
        "session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []}
    )
    response, frames = await client.expect(lambda m: m.get("id") == load_id and "method" not in m)
    assert "result" in response, response
    return [
        m["params"]["update"]["content"]["text"]
        for m in frames
        if update_kind(m) in ("user_message_chunk", "agent_message_chunk")
    ]


@pytest.mark.parametrize("version", ["1", "2025-06-18", 1, 7])
async def test_a_string_protocol_version_negotiates_version_1(version: Any) -> None:
    async with spawn() as client:
        result, _ = await client.call(
            "initialize", {"protocolVersion": version, "clientCapabilities": {}}
        )
        assert result["protocolVersion"] == 1


@pytest.mark.parametrize("version", [None, True, 1.5, {"major": 1}])
async def test_other_protocol_versions_are_still_refused(version: Any) -> None:
    async with spawn() as client:
        with pytest.raises(AgentError) as info:
            await client.call("initialize", {"protocolVersion": version})
        assert info.value.code == -32602


async def test_without_authentication_logout_is_not_there(tmp_path: Path) -> None:
    async with spawn() as client:
        init = await client.initialize()
        assert "auth" not in init["agentCapabilities"]
        with pytest.raises(AgentError) as info:
            await client.call("logout", {})
        assert info.value.code == -32601


async def test_unstable_features_are_off_by_default(tmp_path: Path) -> None:
    async with spawn(server(tmp_path / "s.db")) as client:
        init = await client.initialize()
        session_caps = init["agentCapabilities"]["sessionCapabilities"]
        assert "fork" not in session_caps and "title" not in session_caps
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, "/echo hi")
        assert turn.response["result"] == {"stopReason": "end_turn"}
        for method, params in (
            ("session/fork", {"sessionId": sid, "cwd": str(tmp_path)}),
            ("session/set_title", {"sessionId": sid, "title": "t"}),
        ):
            with pytest.raises(AgentError) as info:
                await client.call(method, params)
            assert info.value.code == -32601


async def test_unstable_fork_title_and_usage_are_durable(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with spawn(server(db, "--unstable")) as client:
        init = await client.initialize()
        session_caps = init["agentCapabilities"]["sessionCapabilities"]
        assert session_caps["fork"] == {} and session_caps["title"] == {}
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, "/echo before")
        usage = turn.response["result"]["usage"]
        assert usage == {"totalTokens": 0, "inputTokens": 0, "outputTokens": 0}
        forked, _ = await client.call(
            "session/fork", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
        fork_id = forked["sessionId"]
        assert fork_id != sid and forked["modes"]["currentModeId"] == "ask"
        commands, _ = await client.expect(lambda m: update_kind(m) == "available_commands_update")
        assert commands["params"]["sessionId"] == fork_id  # after the response, as for new
        assert (await client.prompt(fork_id, "/echo after")).texts() == ["after"]
        titled, _ = await client.call(
            "session/set_title", {"sessionId": sid, "title": "  Fix   the build \n"}
        )
        assert titled == {"title": "Fix the build"}
        for bad, code in (
            ({"sessionId": sid, "title": " \t "}, -32602),
            ({"sessionId": sid}, -32602),
            ({"sessionId": "sess_nope", "title": "x"}, -32002),
        ):
            with pytest.raises(AgentError) as info:
                await client.call("session/set_title", bad)
            assert info.value.code == code
        with pytest.raises(AgentError) as info:
            await client.call("session/fork", {"sessionId": "sess_nope", "cwd": str(tmp_path)})
        assert info.value.code == -32002

    async with spawn(server(db, "--unstable")) as client:
        await client.initialize()
        listed, _ = await client.call("session/list", {})
        titles = {s["sessionId"]: s.get("title") for s in listed["sessions"]}
        assert titles == {sid: "Fix the build", fork_id: None}
        assert await _load(client, fork_id, tmp_path) == [
            "/echo before",
            "before",
            "/echo after",
            "after",
        ]
        assert await _load(client, sid, tmp_path) == ["/echo before", "before"]
