"""Capability gating of agent -> client calls over the wire: what is sent with and without
each capability, the shape of every request, the path rules, notices and compactions.
SessionClient on its own (tool-call moves, encodings) is in ``test_session_client.py``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from acp_agent.agent import PromptTurn
from acp_agent.errors import CapabilityError, IllegalTransition, PathOutsideRoots
from acp_agent.session import Session
from tests.core._support import ScriptAgent, checked, prompt_params
from tests.helpers.memclient import FULL_CAPS

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]
Call = Callable[[PromptTurn], Awaitable[Any]]


SCHEMA = {"type": "object", "properties": {"choice": {"type": "string", "enum": ["a", "b"]}}}


async def _read(turn: PromptTurn) -> Any:
    return await turn.client.read_text_file("notes.txt")


async def _write(turn: PromptTurn) -> Any:
    return await turn.client.write_text_file("out.txt", "data")


async def _terminal(turn: PromptTurn) -> Any:
    async with turn.client.terminal("ls") as term:
        return term.id


async def _form(turn: PromptTurn) -> Any:
    return await turn.client.elicit_form("Pick one", SCHEMA)


async def _url(turn: PromptTurn) -> Any:
    return await turn.client.elicit_url("Sign in", "https://example.com/auth", "el-1")


async def _complete(turn: PromptTurn) -> Any:
    return await turn.client.complete_elicitation("el-1")


async def _notice(turn: PromptTurn) -> Any:
    return await turn.client.notice("info", "hello")


async def _compaction(turn: PromptTurn) -> Any:
    return await turn.client.compaction()


async def _raw_compaction_chunk(turn: PromptTurn) -> Any:
    chunk = {"type": "text", "text": "x"}
    return await turn.client.update(
        {"sessionUpdate": "compaction_summary_chunk", "compactionId": "c", "content": chunk}
    )


GATED: dict[str, Call] = {
    "session/update notice": _notice,
    "session/update compaction": _compaction,
    "session/update compaction_summary_chunk": _raw_compaction_chunk,
    "fs/read_text_file": _read,
    "fs/write_text_file": _write,
    "terminal/create": _terminal,
    "elicitation/create form": _form,
    "elicitation/create url": _url,
    "elicitation/complete": _complete,
}


class Recorder:
    def __init__(self, call: Call) -> None:
        self.call = call
        self.errors: list[BaseException] = []
        self.results: list[Any] = []

    async def __call__(self, turn: PromptTurn) -> str:
        try:
            self.results.append(await self.call(turn))
        except (CapabilityError, PathOutsideRoots, IllegalTransition) as exc:
            self.errors.append(exc)
        return "end_turn"


@pytest.mark.parametrize("name", list(GATED))
@pytest.mark.parametrize(
    "caps",
    [
        {},
        {"elicitation": {}},
        {"elicitation": {"form": None, "url": None}},
        {"fs": {"readTextFile": False, "writeTextFile": "true"}, "terminal": "yes"},
        {"fs": None, "terminal": 1},
        {"session": {"notices": None, "compaction": None}},
    ],
    ids=[
        "empty",
        "elicitation-empty",
        "elicitation-null-modes",
        "wrong-types",
        "null-fs",
        "session-null",
    ],
)
async def test_without_the_capability_nothing_is_sent(
    name: str, caps: JSON, tmp_path: Path
) -> None:
    recorder = Recorder(GATED[name])
    async with checked(ScriptAgent(recorder), caps) as (client, _server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        first = await client.recv()
        assert first["id"] == rid and "method" not in first, f"sent without capability: {first}"
        assert first["result"] == {"stopReason": "end_turn"}
    assert len(recorder.errors) == 1
    assert isinstance(recorder.errors[0], CapabilityError)
    assert recorder.errors[0].method == name.split()[0]


ALL_CAPS: JSON = {
    **FULL_CAPS,
    "elicitation": {"form": {}, "url": {}},
}


async def _answer_all(client: Any, until: Any) -> tuple[JSON, list[JSON]]:
    answers = {
        "fs/read_text_file": {"content": "abc\n"},
        "fs/write_text_file": None,
        "terminal/create": {"terminalId": "term-9"},
        "terminal/release": {},
        "elicitation/create": {"action": "accept", "content": {"choice": "a"}},
    }

    async def answer(msg: JSON) -> None:
        if "id" in msg and msg.get("method") in answers:
            await client.respond(msg["id"], answers[msg["method"]])

    return await client.until_response(until, on_other=answer)  # type: ignore[no-any-return]


async def test_with_the_capabilities_every_request_has_the_right_shape(tmp_path: Path) -> None:
    results: dict[str, Any] = {}

    async def script(turn: PromptTurn) -> str:
        c = turn.client
        results["read"] = await c.read_text_file("notes.txt", line=2, limit=3)
        results["write"] = await c.write_text_file("sub/out.txt", "data")
        async with c.terminal(
            "make", ["-j", "2"], env={"A": "1"}, cwd="build", output_byte_limit=1000
        ) as term:
            results["terminal"] = term.id
        results["form"] = await c.elicit_form("Pick one", SCHEMA, tool_call_id="call-1")
        results["url"] = await c.elicit_url("Sign in", "https://example.com/a", "el-7")
        await c.complete_elicitation("el-7")
        return "end_turn"

    cwd = str(tmp_path)
    async with checked(ScriptAgent(script), ALL_CAPS) as (client, _server):
        sid = await client.new_session(cwd)
        rid = await client.request("session/prompt", prompt_params(sid))
        resp, before = await _answer_all(client, rid)
        assert resp["result"] == {"stopReason": "end_turn"}
    sent = [(m["method"], m.get("params")) for m in before]
    assert sent == [
        (
            "fs/read_text_file",
            {"sessionId": sid, "path": os.path.join(cwd, "notes.txt"), "line": 2, "limit": 3},
        ),
        (
            "fs/write_text_file",
            {"sessionId": sid, "path": os.path.join(cwd, "sub", "out.txt"), "content": "data"},
        ),
        (
            "terminal/create",
            {
                "sessionId": sid,
                "command": "make",
                "args": ["-j", "2"],
                "env": [{"name": "A", "value": "1"}],
                "cwd": os.path.join(cwd, "build"),
                "outputByteLimit": 1000,
            },
        ),
        ("terminal/release", {"sessionId": sid, "terminalId": "term-9"}),
        (
            "elicitation/create",
            {
                "sessionId": sid,
                "mode": "form",
                "message": "Pick one",
                "requestedSchema": SCHEMA,
                "toolCallId": "call-1",
            },
        ),
        (
            "elicitation/create",
            {
                "sessionId": sid,
                "mode": "url",
                "message": "Sign in",
                "url": "https://example.com/a",
                "elicitationId": "el-7",
            },
        ),
        ("elicitation/complete", {"elicitationId": "el-7"}),
    ]
    assert all("id" not in m for m in before if m["method"] == "elicitation/complete")
    assert results["read"] == "abc\n"
    assert results["write"] is None
    assert results["terminal"] == "term-9"
    assert results["form"] == {"action": "accept", "content": {"choice": "a"}}


async def test_terminal_defaults_to_the_session_cwd(tmp_path: Path) -> None:
    async with checked(ScriptAgent(Recorder(_terminal)), FULL_CAPS) as (client, _server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        _, before = await _answer_all(client, rid)
    create = before[0]
    assert create["params"] == {"sessionId": sid, "command": "ls", "cwd": str(tmp_path)}


async def test_write_accepts_an_empty_object_answer(tmp_path: Path) -> None:
    recorder = Recorder(_write)
    async with checked(ScriptAgent(recorder), FULL_CAPS) as (client, _server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        msg = await client.recv()
        await client.respond(msg["id"], {})
        resp, _ = await client.until_response(rid)
        assert resp["result"] == {"stopReason": "end_turn"}
    assert recorder.errors == [] and recorder.results == [None]


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../outside.txt", "sub/../../outside.txt", "/"], ids=str
)
@pytest.mark.parametrize("op", ["read", "write"])
async def test_paths_outside_the_roots_are_refused_before_sending(
    path: str, op: str, tmp_path: Path
) -> None:
    cwd = tmp_path / "proj"
    cwd.mkdir()

    async def call(turn: PromptTurn) -> Any:
        if op == "read":
            return await turn.client.read_text_file(path)
        return await turn.client.write_text_file(path, "x")

    recorder = Recorder(call)
    async with checked(ScriptAgent(recorder), FULL_CAPS) as (client, _server):
        sid = await client.new_session(str(cwd))
        resp, before = await client.call("session/prompt", prompt_params(sid))
        assert before == []
        assert resp["result"] == {"stopReason": "end_turn"}
    assert len(recorder.errors) == 1
    assert isinstance(recorder.errors[0], PathOutsideRoots)


async def test_a_symlink_escaping_the_roots_is_refused(tmp_path: Path) -> None:
    cwd = tmp_path / "proj"
    cwd.mkdir()
    (tmp_path / "secret.txt").write_text("s")
    (cwd / "link.txt").symlink_to(tmp_path / "secret.txt")
    recorder = Recorder(lambda t: t.client.read_text_file("link.txt"))
    async with checked(ScriptAgent(recorder), FULL_CAPS) as (client, _server):
        sid = await client.new_session(str(cwd))
        _resp, before = await client.call("session/prompt", prompt_params(sid))
        assert before == []
    assert isinstance(recorder.errors[0], PathOutsideRoots)


async def test_additional_directories_are_roots(tmp_path: Path) -> None:
    cwd, extra = tmp_path / "a", tmp_path / "b"
    cwd.mkdir()
    extra.mkdir()
    target = str(extra / "f.txt")
    recorder = Recorder(lambda t: t.client.read_text_file(target))
    async with checked(ScriptAgent(recorder), FULL_CAPS) as (client, _server):
        resp, _ = await client.call(
            "session/new",
            {"cwd": str(cwd), "mcpServers": [], "additionalDirectories": [str(extra)]},
        )
        sid = resp["result"]["sessionId"]
        rid = await client.request("session/prompt", prompt_params(sid))
        resp, before = await _answer_all(client, rid)
    assert before[0]["params"]["path"] == target
    assert recorder.results == ["abc\n"]


async def test_allow_outside_roots_lets_the_path_through(tmp_path: Path) -> None:
    recorder = Recorder(lambda t: t.client.read_text_file("/etc/hostname"))
    async with checked(ScriptAgent(recorder), FULL_CAPS, allow_outside_roots=True) as (
        client,
        _server,
    ):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        _, before = await _answer_all(client, rid)
    assert before[0]["params"]["path"] == "/etc/hostname"
    assert recorder.errors == []


CAPS_125: JSON = {**FULL_CAPS, "session": {"notices": {}, "compaction": {}}}


async def test_notices_are_live_only_compactions_and_tool_names_are_recorded(
    tmp_path: Path,
) -> None:
    sessions: list[Session] = []

    async def script(turn: PromptTurn) -> str:
        c = turn.client
        sessions.append(turn.session)
        await c.notice("warning", "careful", description="details")
        compaction = await c.compaction("cmp-1")
        await compaction.chunk("older turns, summarised")
        await compaction.complete()
        with pytest.raises(IllegalTransition):
            await compaction.chunk("too late")
        call = await c.tool_call("Reading", kind="read", name="read_file")
        await call.update(status="completed", name="read_file")
        return "end_turn"

    async with checked(ScriptAgent(script), CAPS_125) as (client, _server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        resp, before = await client.until_response(rid)
        assert resp["result"] == {"stopReason": "end_turn"}
    sent = [m["params"]["update"] for m in before]
    assert sent[0] == {
        "sessionUpdate": "notice",
        "severity": "warning",
        "title": "careful",
        "description": "details",
    }
    assert [u["sessionUpdate"] for u in sent[1:]] == [
        "compaction_update",
        "compaction_summary_chunk",
        "compaction_update",
        "tool_call",
        "tool_call_update",
    ]
    assert sent[4]["name"] == "read_file" and sent[5]["name"] == "read_file"
    recorded = [
        e for e in sessions[0].history.events() if e["sessionUpdate"] != "user_message_chunk"
    ]
    assert recorded == sent[1:], "everything but the notice is history"
