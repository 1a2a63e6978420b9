"""Prompt turns and session setup through AcpServer: the slot, ordering, validation."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from acp_agent.agent import Command, PromptTurn
from acp_agent.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PROMPT_ALREADY_ACTIVE,
    RESOURCE_NOT_FOUND,
    TURN_TIMEOUT,
    RequestError,
)
from acp_agent.session import Session
from tests.core._support import ScriptAgent, checked, prompt_params, text, updates_for
from tests.helpers.memclient import serving

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


class Gate:
    """One turn the test holds open: ``entered`` once the agent waits, ``release`` to go on."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, turn: PromptTurn) -> str:
        self.entered.set()
        await self.release.wait()
        await turn.client.message(f"done {turn.text}")
        return "end_turn"


# --------------------------------------------------------------------------- the slot


async def test_a_second_prompt_while_one_is_active_is_refused() -> None:
    gate = Gate()
    agent = ScriptAgent(lambda t: gate(t) if t.text == "first" else _end(t))
    async with checked(agent) as (client, server):
        sid = await client.new_session()
        first = await client.request("session/prompt", prompt_params(sid, "first"))
        await gate.entered.wait()
        resp, before = await client.call("session/prompt", prompt_params(sid, "second"))
        assert before == []
        assert resp["error"]["code"] == PROMPT_ALREADY_ACTIVE
        assert "already active" in resp["error"]["message"]
        gate.release.set()
        resp, before = await client.until_response(first)
        assert resp["result"] == {"stopReason": "end_turn"}
        assert [u["content"]["text"] for u in updates_for(before, sid)] == ["done first"]
        # the refused prompt left no trace in history
        history = server.sessions[sid].history
        assert len(history.turns) == 1
        resp, _ = await client.call("session/prompt", prompt_params(sid, "third"))
        assert resp["result"] == {"stopReason": "end_turn"}


async def _end(turn: PromptTurn) -> str:
    return "end_turn"


@pytest.mark.parametrize("back_to_back", [False, True], ids=["settled", "back-to-back"])
async def test_queue_policy_runs_prompts_fifo_each_answered_at_its_own_end(
    back_to_back: bool, request: pytest.FixtureRequest
) -> None:
    gates = [Gate(), Gate(), Gate()]
    entered: list[str] = []

    async def script(turn: PromptTurn) -> str:
        gate = gates[len(entered)]
        entered.append(turn.text)
        return await gate(turn)

    async with checked(ScriptAgent(script), busy_policy="queue") as (client, _server):
        sid = await client.new_session()
        ids = []
        for name in ("one", "two", "three"):
            ids.append(await client.request("session/prompt", prompt_params(sid, name)))
            if back_to_back:
                continue
            if name == "one":
                await gates[0].entered.wait()  # (also: the protocol models are built)
            else:
                await anyio.wait_all_tasks_blocked()  # this prompt is queued
        for i, name in enumerate(("one", "two", "three")):
            await gates[i].entered.wait()
            await anyio.wait_all_tasks_blocked()
            assert entered == ["one", "two", "three"][: i + 1], "a queued prompt ran early"
            gates[i].release.set()
            resp, before = await client.until_response(ids[i])
            assert resp["result"] == {"stopReason": "end_turn"}
            # only this turn's update, nothing of the others
            assert [u["content"]["text"] for u in updates_for(before, sid)] == [f"done {name}"]
            assert all("method" in b for b in before)


async def test_queued_prompt_of_a_closed_session_is_refused() -> None:
    gate = Gate()
    agent = ScriptAgent(gate)
    async with checked(agent, busy_policy="queue") as (client, _server):
        sid = await client.new_session()
        first = await client.request("session/prompt", prompt_params(sid, "a"))
        await gate.entered.wait()
        queued = await client.request("session/prompt", prompt_params(sid, "b"))
        await anyio.wait_all_tasks_blocked()
        close = await client.request("session/close", {"sessionId": sid})
        answers: dict[Any, JSON] = {}
        while len(answers) < 3:
            msg = await client.recv()
            if "method" not in msg:
                answers[msg["id"]] = msg
        assert answers[first]["result"] == {"stopReason": "cancelled"}
        assert answers[close]["result"] == {}
        assert answers[queued]["error"]["code"] == RESOURCE_NOT_FOUND


async def test_all_updates_of_a_turn_precede_its_response() -> None:
    async def chatty(turn: PromptTurn) -> str:
        for i in range(50):
            await turn.client.message(str(i))
            if i % 10 == 0:
                await anyio.lowlevel.checkpoint()
        return "end_turn"

    async with checked(ScriptAgent(chatty)) as (client, _server):
        sid = await client.new_session()
        resp, before = await client.call("session/prompt", prompt_params(sid))
        assert resp["result"] == {"stopReason": "end_turn"}
        assert [u["content"]["text"] for u in updates_for(before, sid)] == [
            str(i) for i in range(50)
        ]
        # nothing of the turn follows its response (checked() ends with a round trip)


class CommandAgent(ScriptAgent):
    def commands(self, session: Session) -> list[Command]:
        return [{"name": "echo", "description": "Echo the input", "input": {"hint": "text"}}]


async def test_available_commands_follow_the_session_new_response() -> None:
    async with checked(CommandAgent()) as (client, _server):
        rid = await client.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        first = await client.recv()
        assert first.get("id") == rid and "result" in first, "the response must come first"
        sid = first["result"]["sessionId"]
        second = await client.recv()
        assert second["method"] == "session/update"
        assert second["params"]["sessionId"] == sid
        assert second["params"]["update"]["sessionUpdate"] == "available_commands_update"
        assert second["params"]["update"]["availableCommands"][0]["name"] == "echo"


async def test_an_invalid_stop_reason_is_an_internal_error() -> None:
    async def bad(turn: PromptTurn) -> str:
        return "error" if turn.text == "bad" else "end_turn"

    async with checked(ScriptAgent(bad)) as (client, server):
        sid = await client.new_session()
        resp, _ = await client.call("session/prompt", prompt_params(sid, "bad"))
        assert resp["error"]["code"] == INTERNAL_ERROR
        assert server.sessions[sid].history.turns[-1].interrupted
        resp, _ = await client.call("session/prompt", prompt_params(sid, "good"))
        assert resp["result"] == {"stopReason": "end_turn"}


async def test_agent_request_error_is_kept_and_the_session_stays_usable() -> None:
    async def fails(turn: PromptTurn) -> str:
        if turn.text == "fail":
            raise RequestError("quota exhausted", {"retryAfter": 3}, code=-32050)
        if turn.text == "bug":
            raise RuntimeError("agent bug with secret")
        return "end_turn"

    async with checked(ScriptAgent(fails)) as (client, _server):
        sid = await client.new_session()
        resp, _ = await client.call("session/prompt", prompt_params(sid, "fail"))
        assert resp["error"] == {
            "code": -32050,
            "message": "quota exhausted",
            "data": {"retryAfter": 3},
        }
        resp, _ = await client.call("session/prompt", prompt_params(sid, "bug"))
        assert resp["error"]["code"] == INTERNAL_ERROR
        assert "secret" not in resp["error"]["message"]
        resp, _ = await client.call("session/prompt", prompt_params(sid, "ok"))
        assert resp["result"] == {"stopReason": "end_turn"}


async def test_turn_timeout_answers_32011_and_frees_the_slot() -> None:
    async def stuck(turn: PromptTurn) -> str:
        if turn.text == "stuck":
            await anyio.Event().wait()
        return "end_turn"

    async with checked(ScriptAgent(stuck), turn_timeout=0.05) as (client, server):
        sid = await client.new_session()
        resp, _ = await client.call("session/prompt", prompt_params(sid, "stuck"))
        assert resp["error"]["code"] == TURN_TIMEOUT
        assert server.sessions[sid].slot.turn is None
        resp, _ = await client.call("session/prompt", prompt_params(sid, "quick"))
        assert resp["result"] == {"stopReason": "end_turn"}


# --------------------------------------------------------------------------- routing


async def test_prompt_for_an_unknown_session_is_32002_naming_it() -> None:
    async with checked(ScriptAgent()) as (client, _server):
        resp, _ = await client.call("session/prompt", prompt_params("sess_does_not_exist"))
        assert resp["error"]["code"] == RESOURCE_NOT_FOUND
        assert "sess_does_not_exist" in resp["error"]["message"]


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("session/new", {"cwd": "/tmp", "mcpServers": []}),
        ("session/prompt", {"sessionId": "x", "prompt": []}),
        ("session/list", {}),
    ],
)
async def test_requests_before_initialize_are_refused(method: str, params: JSON) -> None:
    async with serving(ScriptAgent()) as (client, _server):
        resp, _ = await client.call(method, params)
        assert resp["error"]["code"] == INVALID_REQUEST
        await client.initialize()
        resp, _ = await client.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        assert "sessionId" in resp["result"]


async def test_initialize_can_be_sent_again_with_any_id_type() -> None:
    async with serving(ScriptAgent()) as (client, _server):
        params = {"protocolVersion": 1, "clientCapabilities": {}}
        await client.request("initialize", params, id=424242)
        first = await client.recv()
        await client.request("initialize", params, id="tck-string-id")
        second = await client.recv()
        assert first["id"] == 424242 and second["id"] == "tck-string-id"
        assert first["result"] == second["result"]
        assert first["result"]["protocolVersion"] == 1
        assert first["result"]["authMethods"] == []


@pytest.mark.parametrize("version", [65535, 0, 2, 1])
async def test_protocol_version_is_always_1(version: int) -> None:
    async with serving(ScriptAgent()) as (client, _server):
        resp, _ = await client.call(
            "initialize",
            {"protocolVersion": version, "clientCapabilities": {}, "info": {"name": "x"}},
        )
        assert resp["result"]["protocolVersion"] == 1


async def test_meta_cannot_change_the_handlers_arguments(tmp_path: Any) -> None:
    meta = {
        "sessionId": "sess_evil",
        "prompt": text("injected"),
        "cwd": "/evil",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    agent = ScriptAgent()
    async with checked(agent) as (client, server):
        resp, _ = await client.call(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [], "_meta": meta}
        )
        sid = resp["result"]["sessionId"]
        assert server.sessions[sid].cwd == str(tmp_path)
        params = {**prompt_params(sid, "real"), "_meta": meta}
        resp, _ = await client.call("session/prompt", params)
        assert resp["result"] == {"stopReason": "end_turn"}
    turn = agent.turns[0]
    assert turn.session.session_id == sid
    assert turn.blocks == text("real")
    assert turn.text == "real"
    assert turn.request.field_meta == meta
    assert turn.session.cwd == str(tmp_path)


# --------------------------------------------------------------------------- validation


class ImageAgent(ScriptAgent):
    prompt_capabilities = {"image": True}


IMAGE = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}


@pytest.mark.parametrize(
    "block",
    [
        IMAGE,
        {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "a"}},
    ],
    ids=["image", "audio", "resource"],
)
async def test_gated_prompt_blocks_without_the_capability_are_invalid(block: JSON) -> None:
    agent = ScriptAgent()
    async with checked(agent) as (client, _server):
        sid = await client.new_session()
        resp, _ = await client.call(
            "session/prompt", {"sessionId": sid, "prompt": [*text("look"), block]}
        )
        assert resp["error"]["code"] == INVALID_PARAMS
        assert agent.turns == []
        resp, _ = await client.call("session/prompt", prompt_params(sid))
        assert resp["result"] == {"stopReason": "end_turn"}


async def test_image_block_with_the_capability_is_accepted() -> None:
    agent = ImageAgent()
    async with checked(agent) as (client, _server):
        init, _ = await client.call("initialize", {"protocolVersion": 1})
        assert init["result"]["agentCapabilities"]["promptCapabilities"]["image"] is True
        sid = await client.new_session()
        resp, _ = await client.call(
            "session/prompt", {"sessionId": sid, "prompt": [*text("look"), IMAGE]}
        )
        assert resp["result"] == {"stopReason": "end_turn"}
    assert agent.turns[0].blocks[1] == IMAGE


async def test_resource_link_is_always_accepted() -> None:
    async with checked(ScriptAgent()) as (client, _server):
        sid = await client.new_session()
        block = {"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt"}
        resp, _ = await client.call("session/prompt", {"sessionId": sid, "prompt": [block]})
        assert resp["result"] == {"stopReason": "end_turn"}


@pytest.mark.parametrize(
    "params",
    [
        {"mcpServers": []},
        {"cwd": "relative/dir", "mcpServers": []},
        {"cwd": "", "mcpServers": []},
        {"cwd": 42, "mcpServers": []},
        {"cwd": "/tmp", "mcpServers": [], "additionalDirectories": ["relative"]},
        {"cwd": "/tmp", "mcpServers": [], "additionalDirectories": ["/ok", "rel"]},
        {"cwd": "/tmp", "mcpServers": [], "additionalDirectories": "/tmp"},
        {"cwd": "/tmp", "mcpServers": [], "additionalDirectories": [None]},
        {"cwd": "/tmp", "mcpServers": [{"type": "http", "name": "h", "url": "http://x"}]},
        {"cwd": "/tmp", "mcpServers": [{"type": "sse", "name": "s", "url": "http://x"}]},
        {"cwd": "/tmp", "mcpServers": "none"},
        {"cwd": "/tmp", "mcpServers": [{"name": "stdio-without-command"}]},
    ],
    ids=[
        "missing-cwd",
        "relative-cwd",
        "empty-cwd",
        "number-cwd",
        "relative-extra-dir",
        "one-bad-extra-dir",
        "extra-dirs-not-array",
        "null-extra-dir",
        "http-mcp-unsupported",
        "sse-mcp-unsupported",
        "mcp-not-array",
        "stdio-mcp-without-command",
    ],
)
async def test_session_new_rejects_bad_params_with_32602(params: JSON) -> None:
    async with checked(ScriptAgent()) as (client, server):
        resp, _ = await client.call("session/new", params)
        assert resp["error"]["code"] == INVALID_PARAMS
        assert "\n" not in resp["error"]["message"]
        assert server.sessions == {}


async def test_session_new_without_mcp_servers_is_accepted() -> None:
    async with checked(ScriptAgent()) as (client, server):
        resp, _ = await client.call("session/new", {"cwd": "/tmp"})
        sid = resp["result"]["sessionId"]
        assert server.sessions[sid].mcp_servers == []


async def test_session_new_keeps_additional_directories_as_roots() -> None:
    async with checked(ScriptAgent()) as (client, server):
        resp, _ = await client.call(
            "session/new",
            {"cwd": "/tmp/a", "mcpServers": [], "additionalDirectories": ["/tmp/b", "/srv/c/"]},
        )
        session = server.sessions[resp["result"]["sessionId"]]
        assert session.roots == ("/tmp/a", "/tmp/b", "/srv/c")


class HttpAgent(ScriptAgent):
    mcp_http = True


async def test_http_mcp_server_accepted_when_supported() -> None:
    server_def = {"type": "http", "name": "h", "url": "http://localhost:1", "headers": []}
    async with checked(HttpAgent()) as (client, server):
        resp, _ = await client.call("session/new", {"cwd": "/tmp", "mcpServers": [server_def]})
        sid = resp["result"]["sessionId"]
        assert server.sessions[sid].mcp_servers == [server_def]


@pytest.mark.parametrize(
    "params",
    [
        {"prompt": text("x")},
        {"sessionId": "", "prompt": text("x")},
        {"sessionId": 5, "prompt": text("x")},
    ],
)
async def test_prompt_with_bad_session_id_is_32602(params: JSON) -> None:
    async with checked(ScriptAgent()) as (client, _server):
        await client.new_session()
        resp, _ = await client.call("session/prompt", params)
        assert resp["error"]["code"] == INVALID_PARAMS


async def test_prompt_without_prompt_field_is_32602() -> None:
    async with checked(ScriptAgent()) as (client, _server):
        sid = await client.new_session()
        resp, _ = await client.call("session/prompt", {"sessionId": sid})
        assert resp["error"]["code"] == INVALID_PARAMS
        resp, _ = await client.call("session/prompt", {"sessionId": sid, "prompt": "text"})
        assert resp["error"]["code"] == INVALID_PARAMS


async def test_a_prompt_read_after_a_cancel_queues_behind_the_waiting_ones() -> None:
    """session/cancel frees the slot of the running turn; the prompts already queued
    keep their places, and one read after the cancel runs after them."""
    entered: list[str] = []
    running = Gate()

    async def script(turn: PromptTurn) -> str:
        entered.append(turn.text)
        if turn.text == "long":
            await running(turn)
        return "end_turn"

    async with checked(ScriptAgent(script), busy_policy="queue") as (client, _server):
        sid = await client.new_session()
        long = await client.request("session/prompt", prompt_params(sid, "long"))
        await running.entered.wait()
        queued = await client.request("session/prompt", prompt_params(sid, "queued"))
        await anyio.wait_all_tasks_blocked()  # it waits in the queue
        await client.notify("session/cancel", {"sessionId": sid})
        late = await client.request("session/prompt", prompt_params(sid, "late"))
        answers = {}
        while len(answers) < 3:
            message = await client.recv()
            if "method" not in message:
                answers[message["id"]] = message
        assert answers[long]["result"] == {"stopReason": "cancelled"}
        assert answers[queued]["result"] == {"stopReason": "end_turn"}
        assert answers[late]["result"] == {"stopReason": "end_turn"}
        assert entered == ["long", "queued", "late"]


# --------------------------------------------------------------------------- one path


def _frame(message: JSON) -> bytes:
    import orjson

    return orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n"


async def test_a_cancel_read_with_its_prompt_in_one_chunk_cancels_that_prompt() -> None:
    """The prompt takes the slot when it is read, so a session/cancel in the same chunk
    finds it, and a prompt after the cancel runs normally."""
    entered: list[str] = []

    async def script(turn: PromptTurn) -> str:
        entered.append(turn.text)
        if turn.text == "a":
            await anyio.Event().wait()  # only a cancel ends it
        return "end_turn"

    async with checked(ScriptAgent(script)) as (client, server):
        sid = await client.new_session()
        await client.send_raw(
            _frame({"id": 10, "method": "session/prompt", "params": prompt_params(sid, "a")})
            + _frame({"method": "session/cancel", "params": {"sessionId": sid}})
        )
        with anyio.fail_after(5):
            resp, _ = await client.until_response(10)
        assert resp["result"] == {"stopReason": "cancelled"}
        assert server.sessions[sid].history.turns[-1].stop_reason == "cancelled"
        resp, _ = await client.call("session/prompt", prompt_params(sid, "b"))
        assert resp["result"] == {"stopReason": "end_turn"}
        assert entered == ["a", "b"]


async def test_a_cancel_request_for_a_queued_prompt_answers_32800_and_the_line_goes_on() -> None:
    gate = Gate()
    entered: list[str] = []

    async def script(turn: PromptTurn) -> str:
        entered.append(turn.text)
        return await gate(turn) if turn.text == "first" else "end_turn"

    async with checked(ScriptAgent(script), busy_policy="queue") as (client, server):
        sid = await client.new_session()
        first = await client.request("session/prompt", prompt_params(sid, "first"))
        await gate.entered.wait()
        queued = await client.request("session/prompt", prompt_params(sid, "queued"))
        last = await client.request("session/prompt", prompt_params(sid, "last"))
        await anyio.wait_all_tasks_blocked()
        await client.notify("$/cancel_request", {"requestId": queued})
        resp, _ = await client.until_response(queued)
        assert resp["error"]["code"] == -32800
        gate.release.set()
        for rid in (first, last):
            resp, _ = await client.until_response(rid)
            assert resp["result"] == {"stopReason": "end_turn"}
        assert entered == ["first", "last"]
        assert len(server.sessions[sid].history.turns) == 2  # the cancelled one never began
