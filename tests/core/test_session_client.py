"""SessionClient on its own, without a connection: tool-call status moves, capability
encodings, the capability error raised before any await. Gating over the wire is in
``test_capabilities.py``.
"""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from acp_agent.agent import PromptTurn
from acp_agent.client import (
    TOOL_TRANSITIONS,
    ClientCapabilities,
    SessionClient,
    diff_content,
    text_content,
)
from acp_agent.errors import CapabilityError, IllegalTransition, PathOutsideRoots
from acp_agent.session import Session
from tests.core._support import ScriptAgent, checked, prompt_params

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


class FakeOutbound:
    """Records what a SessionClient sends, without a connection."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def call(self, method: str, params: JSON, *, timeout: float | None = None) -> Any:
        self.sent.append((method, params))
        return {}

    async def notify(self, method: str, params: JSON) -> None:
        self.sent.append((method, params))

    async def notify_json(self, method: str, params_json: bytes) -> None:
        self.sent.append((method, orjson.loads(params_json)))


def make_client(caps: JSON | None = None) -> tuple[SessionClient, FakeOutbound]:
    out = FakeOutbound()
    client = SessionClient(Session("sess_x", "/tmp/proj"), out, ClientCapabilities(caps))
    return client, out


STATUSES = ["pending", "in_progress", "completed", "failed"]


@pytest.mark.parametrize("start", STATUSES)
@pytest.mark.parametrize("target", STATUSES)
async def test_tool_call_status_moves_follow_the_table(start: str, target: str) -> None:
    client, out = make_client()
    tool = await client.tool_call("t", status=start)  # type: ignore[arg-type]
    before = len(out.sent)
    if target in TOOL_TRANSITIONS[start]:
        await tool.update(status=target)  # type: ignore[arg-type]
        assert tool.status == target
        assert out.sent[-1][1]["update"] == {
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool.id,
            "status": target,
        }
    else:
        with pytest.raises(IllegalTransition):
            await tool.update(status=target)  # type: ignore[arg-type]
        assert len(out.sent) == before, "an illegal move must send nothing"
        assert tool.status == start


async def test_finished_tool_calls_cannot_move_but_may_update_content() -> None:
    client, out = make_client()
    tool = await client.tool_call("t")
    await tool.start()
    await tool.complete()
    assert tool.finished
    with pytest.raises(IllegalTransition):
        await tool.fail()
    await tool.update(title="renamed")  # no status: allowed
    assert out.sent[-1][1]["update"] == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": tool.id,
        "title": "renamed",
    }


async def test_no_cancelled_tool_status_in_v1() -> None:
    assert all("cancelled" not in moves for moves in TOOL_TRANSITIONS.values())
    assert "cancelled" not in TOOL_TRANSITIONS


async def test_tool_call_fields_are_sent_only_when_given_under_wire_names() -> None:
    client, out = make_client()
    tool = await client.tool_call("t", tool_call_id="c1")
    await tool.update(title="u")
    content = ({"type": "content", "content": {"type": "text", "text": "x"}},)
    full = await client.tool_call(
        "f",
        content=content,
        locations=({"path": "/tmp/proj/a"},),
        raw_input={"a": 1},
        meta={"m": 1},
    )
    await full.update(content=content, raw_input=2, raw_output={"o": 1}, meta={"n": 1})
    bare, bare_update, announced, updated = [params["update"] for _, params in out.sent]
    assert bare == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "t",
        "kind": "other",
        "status": "pending",
    }
    assert bare_update == {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "u"}
    assert announced["content"] == list(content) and announced["locations"] == [
        {"path": "/tmp/proj/a"}
    ]
    assert (announced["rawInput"], announced["_meta"]) == ({"a": 1}, {"m": 1})
    assert "rawOutput" not in announced
    assert updated == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": full.id,
        "content": list(content),
        "rawInput": 2,
        "rawOutput": {"o": 1},
        "_meta": {"n": 1},
    }


async def test_tool_call_paths_are_made_absolute_against_the_cwd() -> None:
    client, out = make_client()
    call = await client.tool_call(
        "edit",
        kind="edit",
        locations=[{"path": "src/a.py", "line": 3}],
        content=[diff_content("src/a.py", "new", "old"), text_content("note")],
    )
    await call.update(locations=[{"path": "./b/../c.txt"}], content=[diff_content("d", "x")])
    await client.request_permission({"toolCallId": call.id, "locations": [{"path": "e"}]})
    announced, updated = (params["update"] for _, params in out.sent[:2])
    assert announced["locations"] == [{"path": "/tmp/proj/src/a.py", "line": 3}]
    assert announced["content"][0] == {
        "type": "diff",
        "path": "/tmp/proj/src/a.py",
        "newText": "new",
        "oldText": "old",
    }
    assert announced["content"][1] == text_content("note")
    assert updated["locations"] == [{"path": "/tmp/proj/c.txt"}]
    assert updated["content"][0]["path"] == "/tmp/proj/d"
    assert out.sent[2][1]["toolCall"]["locations"] == [{"path": "/tmp/proj/e"}]


@pytest.mark.parametrize(
    "fields",
    [
        {"locations": [{"path": "../elsewhere.py"}]},
        {"locations": [{"path": "/etc/passwd"}]},
        {"content": [diff_content("/etc/hosts", "x")]},
    ],
)
async def test_tool_call_paths_outside_the_roots_are_refused_unsent(fields: JSON) -> None:
    client, out = make_client()
    with pytest.raises(PathOutsideRoots, match="outside the session roots"):
        await client.tool_call("t", **fields)
    call = await client.tool_call("t")
    with pytest.raises(PathOutsideRoots):
        await call.update(**fields)
    assert [params["update"]["sessionUpdate"] for _, params in out.sent] == ["tool_call"]
    allowed, out = make_client()
    allowed.allow_outside_roots = True
    await allowed.tool_call("t", **fields)
    assert len(out.sent) == 1


async def test_tool_call_ids_are_unique() -> None:
    client, _ = make_client()
    other, _ = make_client()
    ids = [(await client.tool_call(f"t{i}")).id for i in range(50)]
    ids += [(await other.tool_call(f"t{i}")).id for i in range(50)]
    assert len(set(ids)) == 100


async def test_illegal_move_over_the_wire_sends_nothing() -> None:
    caught: list[BaseException] = []

    async def script(turn: PromptTurn) -> str:
        tool = await turn.client.tool_call("t")
        await tool.complete()
        try:
            await tool.start()
        except IllegalTransition as exc:
            caught.append(exc)
        return "end_turn"

    async with checked(ScriptAgent(script)) as (client, _server):
        sid = await client.new_session()
        _resp, before = await client.call("session/prompt", prompt_params(sid))
        kinds = [m["params"]["update"]["sessionUpdate"] for m in before]
        assert kinds == ["tool_call", "tool_call_update"]
        assert before[1]["params"]["update"]["status"] == "completed"
    assert len(caught) == 1


# --------------------------------------------------------------------------- encodings


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, {}),
        (None, {}),
        ("junk", {}),
        ({"terminal": "yes"}, {}),
        ({"terminal": 1}, {}),
        ({"terminal": True}, {"terminal"}),
        ({"fs": {"readTextFile": True}}, {"read_text_file"}),
        ({"fs": {"readTextFile": "true", "writeTextFile": True}}, {"write_text_file"}),
        ({"fs": True}, {}),
        ({"elicitation": {}}, {}),
        ({"elicitation": {"form": None}}, {}),
        ({"elicitation": {"form": True}}, {}),
        ({"elicitation": {"form": {}}}, {"elicitation_form"}),
        ({"elicitation": {"url": {}}}, {"elicitation_url"}),
        ({"session": {"configOptions": {"boolean": {}}}}, {"boolean_config_options"}),
        ({"session": {"configOptions": {"boolean": None}}}, {}),
        ({"session": {"configOptions": {"boolean": True}}}, {}),
        ({"session": {"configOptions": {}}}, {}),
        ({"auth": {"terminal": True}}, {"auth_terminal"}),
        ({"auth": {"terminal": {}}}, {}),
    ],
)
async def test_client_capability_encodings(raw: Any, expected: set[str]) -> None:
    caps = ClientCapabilities(raw)
    flags = {
        "read_text_file",
        "write_text_file",
        "terminal",
        "auth_terminal",
        "elicitation_form",
        "elicitation_url",
        "boolean_config_options",
    }
    assert {f for f in flags if getattr(caps, f)} == set(expected)


async def test_capability_error_is_raised_before_any_await() -> None:
    client, out = make_client({})
    with anyio.CancelScope() as scope:
        scope.cancel()  # even a cancelled caller gets the CapabilityError, nothing sent
        with pytest.raises(CapabilityError):
            await client.read_text_file("x")
    assert out.sent == []


def test_legacy_terminal_auth_meta_counts_as_auth_terminal() -> None:
    assert ClientCapabilities({"_meta": {"terminal-auth": True}}).auth_terminal
    assert ClientCapabilities({"auth": {"terminal": True}}).auth_terminal
    assert not ClientCapabilities({"_meta": {"terminal-auth": "yes"}}).auth_terminal
    assert not ClientCapabilities({}).auth_terminal
