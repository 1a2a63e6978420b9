"""Regression tests for the breaks a hostile client found (issue 14), on a real agent process.

Each test drives ``python -m acp_agent`` over real pipes with the scripted wire client
and checks that the input is answered as the protocol says, and that the process lives
on (its next request is answered) and ends with exit 0 and a quiet stderr.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from acp_agent.errors import RequestError
from tests.helpers.memclient import serving
from tests.helpers.wire_client import ProcessClient, is_response, spawn

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    # The agent under test is a subprocess on its own loop; the client side needs one.
    return "asyncio"


async def still_alive(client: ProcessClient) -> None:
    result, _ = await client.call("session/list", {})
    assert "sessions" in result


def quiet(client: ProcessClient) -> None:
    text = bytes(client.stderr).decode(errors="replace")
    assert "Traceback" not in text and "ERROR" not in text, text


async def test_an_error_code_past_64_bits_is_a_bad_argument(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, "/fail 18446744073709551616 x")
        assert turn.error is not None and turn.error["code"] == -32602
        turn = await client.prompt(sid, "/fail -9223372036854775809 x")
        assert turn.error is not None and turn.error["code"] == -32602
        await still_alive(client)
    assert client.process.returncode == 0


@pytest.mark.parametrize(
    "text",
    [
        "/sleep " + "9" * 400,
        "/read /tmp/a\x00b",
        "/write /tmp/a\x00b hello",
    ],
)
async def test_unusable_command_arguments_are_bad_params(tmp_path: Path, text: str) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        turn = await client.prompt(sid, text)
        assert turn.error is not None and turn.error["code"] == -32602, turn.response
        await still_alive(client)
    assert client.process.returncode == 0
    quiet(client)


async def test_a_cwd_with_a_nul_is_bad_params(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize()
        request_id = await client.request(
            "session/new", {"cwd": f"{tmp_path}/a\x00b", "mcpServers": []}
        )
        response, _ = await client.expect(lambda m: is_response(m, request_id))
        assert response["error"]["code"] == -32602
        await still_alive(client)
    quiet(client)


@pytest.mark.parametrize(
    "params",
    [
        b"[1e999]",
        b'["\\ud800"]',
        b"[" * 2000 + b"]" * 2000,
    ],
)
async def test_valid_json_orjson_cannot_read_is_answered_with_its_id(params: bytes) -> None:
    async with spawn() as client:
        await client.initialize()
        line = b'{"jsonrpc":"2.0","id":"mine","method":"_x/y","params":' + params + b"}\n"
        assert client.process.stdin is not None
        await client.process.stdin.send(line)
        response, _ = await client.expect(lambda m: "method" not in m)
        assert response["id"] == "mine", response
        assert response["error"]["code"] in (-32700, -32601, -32602)
        await still_alive(client)
    assert client.process.returncode == 0


async def test_unparseable_garbage_is_still_answered_with_id_null() -> None:
    async with spawn() as client:
        assert client.process.stdin is not None
        await client.process.stdin.send(b'{"jsonrpc": "2.0", "method": "x", "id"\n')
        response, _ = await client.expect(lambda m: "method" not in m)
        assert response == {"jsonrpc": "2.0", "id": None, "error": response["error"]}
        assert response["error"]["code"] == -32700


class Unencodable(Agent):
    """Answers prompts with values JSON cannot carry."""

    async def prompt(self, turn: PromptTurn) -> StopReason:
        if turn.text == "code":
            raise RequestError("huge", code=2**64)
        raise RequestError("huge data", data={"n": -(2**70)})


@pytest.mark.parametrize("text", ["code", "data"])
async def test_an_answer_that_cannot_be_encoded_is_an_internal_error(text: str) -> None:
    async with serving(Unencodable()) as (client, _server):
        await client.initialize()
        sid = await client.new_session()
        response, _ = await client.call(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )
        assert response["error"]["code"] == -32603
        listed, _ = await client.call("session/list", {})
        assert "result" in listed


async def test_end_of_input_right_after_session_new_is_a_normal_end(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize()
        # Input ends before the agent has sent the session's commands update.
        await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        with anyio.fail_after(10):
            await client.process.wait()
    assert client.process.returncode == 0
    quiet(client)


async def answered_cancelled_then_exit(client: ProcessClient, request_id: int) -> None:
    response, _ = await client.expect(lambda m: is_response(m, request_id))
    assert response.get("result") == {"stopReason": "cancelled"}, response
    with anyio.fail_after(10):
        await client.process.wait()


@pytest.mark.parametrize("end", ["eof", "sigterm"])
async def test_a_running_turn_answers_cancelled_however_input_ends(
    tmp_path: Path, end: str
) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        request_id = await client.start_prompt(sid, "/sleep 60000")
        await client.call("session/list", {})  # the prompt was read and is running
        assert client.process.stdin is not None
        if end == "eof":
            await client.process.stdin.aclose()
        else:
            client.process.send_signal(signal.SIGTERM)
        await answered_cancelled_then_exit(client, request_id)
    assert client.process.returncode == 0
    quiet(client)


async def test_end_of_input_during_a_permission_question_is_cancelled_quietly(
    tmp_path: Path,
) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        request_id = await client.start_prompt(sid, f"/write {tmp_path}/f.txt hello")
        await client.expect(lambda m: m.get("method") == "session/request_permission")
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        await answered_cancelled_then_exit(client, request_id)
    assert client.process.returncode == 0
    quiet(client)


async def test_requests_pipelined_behind_a_load_apply_after_it(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        for method in ("session/load", "session/resume"):
            opened = await client.request(
                method, {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            )
            mode = await client.request("session/set_mode", {"sessionId": sid, "modeId": "auto"})
            option = await client.request(
                "session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "ask"}
            )
            for request_id in (opened, mode, option):
                response, _ = await client.expect(lambda m, i=request_id: is_response(m, i))
                assert "result" in response, (method, response)
    quiet(client)


async def test_a_delete_racing_a_load_is_final_and_spills_nowhere(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    async with spawn([sys.executable, "-m", "acp_agent", "--store", str(db)]) as client:
        await client.initialize()
        doomed, _, _ = await client.new_session(tmp_path)
        other, _, _ = await client.new_session(tmp_path)
        assert (await client.prompt(doomed, "/echo first")).stop_reason == "end_turn"
        params = {"sessionId": doomed, "cwd": str(tmp_path), "mcpServers": []}
        load = await client.request("session/load", params)
        delete = await client.request("session/delete", {"sessionId": doomed})
        reload = await client.request("session/load", params)
        prompt = await client.start_prompt(doomed, "/echo after delete")
        answers = {}
        for request_id in (load, delete, reload, prompt):
            response, _ = await client.expect(lambda m, i=request_id: is_response(m, i))
            answers[request_id] = response
        assert "result" in answers[load], answers[load]
        assert "result" in answers[delete], answers[delete]
        assert answers[reload]["error"]["code"] == -32002, answers[reload]
        assert answers[prompt]["error"]["code"] == -32002, answers[prompt]
        for _ in range(3):
            assert (await client.prompt(other, "/echo still here")).stop_reason == "end_turn"
        listed, _ = await client.call("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [other]
    assert client.process.returncode == 0
    quiet(client)


def nested(levels: int) -> dict[str, object]:
    value: dict[str, object] = {"leaf": True}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


async def send_deep(client: ProcessClient, session_id: str, block: dict[str, object]) -> str:
    """Send a prompt with stdlib json (the client's orjson stops at 254 levels)."""
    request_id = f"deep-{id(block)}"
    params = {"sessionId": session_id, "prompt": [block]}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}
    assert client.process.stdin is not None
    await client.process.stdin.send(json.dumps(message).encode() + b"\n")
    return request_id


async def test_a_prompt_is_refused_up_front_or_replayed_by_load(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    command = [sys.executable, "-m", "acp_agent", "--store", str(db)]
    accepted: list[int] = []
    async with spawn(command) as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        for levels in (20, 100, 124, 126, 200, 250, 252, 300):
            block = {"type": "text", "text": "/echo deep", "_meta": nested(levels)}
            request_id = await send_deep(client, sid, block)
            turn = await client.finish_prompt(request_id)
            if turn.error is None:
                assert turn.stop_reason == "end_turn"
                accepted.append(levels)
            else:
                assert turn.error["code"] == -32602, (levels, turn.error)
        assert 100 in accepted and 250 not in accepted and 300 not in accepted
    quiet(client)
    async with spawn(command) as client:  # a new process reads the store
        await client.initialize()
        _, frames = await client.call(
            "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
        replayed = [
            f["params"]["update"]["content"]["_meta"]
            for f in frames
            if f.get("method") == "session/update"
            and f["params"]["update"]["sessionUpdate"] == "user_message_chunk"
        ]
        assert replayed == [nested(levels) for levels in accepted]
    quiet(client)


#: the LLM agent in a process that cannot import ``mcp`` (the default install)
WITHOUT_MCP = """
import importlib.abc, sys

class HideMcp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, HideMcp())
from acp_agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


async def test_mcp_servers_without_the_mcp_package_cost_no_time(tmp_path: Path) -> None:
    command = [sys.executable, "-c", WITHOUT_MCP, "--model", "m", "--store", "memory", "--no-check"]
    command += ["--base-url", "http://127.0.0.1:9/v1"]
    stdio = {"name": "tools", "command": "/bin/true", "args": [], "env": []}
    http = {"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": []}
    async with spawn(command, env={"ACP_AGENT_API_KEY": "k"}) as client:
        result = await client.initialize()
        assert result["agentCapabilities"]["mcpCapabilities"]["http"] is False
        refused = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": [http]})
        response, _ = await client.expect(lambda m: is_response(m, refused))
        assert response["error"]["code"] == -32602
        with anyio.fail_after(3):
            opened, _ = await client.call(
                "session/new", {"cwd": str(tmp_path), "mcpServers": [stdio]}
            )
            await client.call("session/close", {"sessionId": opened["sessionId"]})
            await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": [stdio]})
            assert client.process.stdin is not None
            await client.process.stdin.aclose()
            await client.process.wait()
    assert client.process.returncode == 0


async def test_cancel_then_an_invalid_and_a_valid_prompt_behind_an_unwinding_turn(
    tmp_path: Path,
) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        running = await client.start_prompt(sid, "/run sleep 100")
        create, _ = await client.expect(lambda m: m.get("method") == "terminal/create")
        await client.send({"jsonrpc": "2.0", "id": create["id"], "result": {"terminalId": "t1"}})
        await client.expect(lambda m: m.get("method") == "terminal/wait_for_exit")
        await client.notify("session/cancel", {"sessionId": sid})
        # The cancelled turn unwinds: it kills its terminal and waits for our answer.
        kill, _ = await client.expect(lambda m: m.get("method") == "terminal/kill")
        invalid = await client.request("session/prompt", {"sessionId": sid, "prompt": "x"})
        response, _ = await client.expect(lambda m: is_response(m, invalid))
        assert response["error"]["code"] == -32602
        valid = await client.start_prompt(sid, "/echo next")
        await client.send({"jsonrpc": "2.0", "id": kill["id"], "result": {}})
        answers: dict[int, Any] = {}
        while len(answers) < 2:
            message = await client.receive()
            if message.get("method") == "terminal/release":
                await client.send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
            elif "method" not in message and message.get("id") in (running, valid):
                answers[message["id"]] = message
        assert answers[running]["result"] == {"stopReason": "cancelled"}
        assert answers[valid].get("result") == {"stopReason": "end_turn"}, answers[valid]
    quiet(client)


async def test_a_cancel_reaches_a_prompt_waiting_behind_a_load(tmp_path: Path) -> None:
    async with spawn() as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        assert (await client.prompt(sid, "/echo first")).stop_reason == "end_turn"
        load, prompt = 100, 101
        lines = [
            {
                "jsonrpc": "2.0",
                "id": load,
                "method": "session/load",
                "params": {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []},
            },
            {
                "jsonrpc": "2.0",
                "id": prompt,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "/echo no"}]},
            },
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}},
        ]
        assert client.process.stdin is not None  # one write: read before the load ends
        await client.process.stdin.send(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
        loaded, _ = await client.expect(lambda m: is_response(m, load))
        assert "result" in loaded, loaded
        turn = await client.finish_prompt(prompt)
        assert turn.stop_reason == "cancelled", turn.response
        assert "no" not in turn.texts()  # it never ran
        assert (await client.prompt(sid, "/echo after")).texts() == ["after"]
        await still_alive(client)
    assert client.process.returncode == 0
    quiet(client)
