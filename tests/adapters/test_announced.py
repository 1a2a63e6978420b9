"""``--agent``: ``initialize`` is answered while the module is still being imported, and
what it announces is true of the object served (compared with the object's own answer,
served from Python); a module that fails while importing is one line and exit 2, the
requests that waited for it answered ``-32603``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers.wire_client import FULL_CAPS, Message, ProcessClient, is_response, spawn

from .serving import SERVE_FROM_PYTHON, SLOW

pytestmark = pytest.mark.anyio

INIT = {"protocolVersion": 1, "clientCapabilities": FULL_CAPS}

MCP_REMOTE = {"mcpCapabilities.http", "mcpCapabilities.sse"}

#: object -> (the framework it needs, the capabilities of its own answer that ``--agent``
#: does not announce: docs/adapters.md says so): pydantic-ai's images and resources, and
#: the remote MCP transports of the pydantic-ai and Agents SDK adapters and of a LangGraph
#: graph with session_mcp()
OBJECTS: dict[str, tuple[str | None, set[str]]] = {
    "tests.adapters.plain_agent:agent": (None, set()),
    "tests.adapters.example_pydantic:agent": (
        "pydantic_ai",
        {"promptCapabilities.image", "promptCapabilities.embeddedContext", *MCP_REMOTE},
    ),
    "tests.adapters.lg_agent:agent": ("langgraph", set()),
    "tests.adapters.lg_agent:mcp_user": ("langgraph", {"mcpCapabilities.http"}),
    "tests.adapters.oa_agent:served": ("agents", MCP_REMOTE),
}


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(flat(inner, f"{prefix}.{key}" if prefix else key))
    return out


async def answer_to_initialize(command: list[str]) -> Message:
    async with spawn(command, env={"ACP_FAKE_BASE_URL": "http://127.0.0.1:9/v1"}) as client:
        request_id = await client.request("initialize", INIT)
        answer, _ = await client.expect(lambda m: is_response(m, request_id), timeout=SLOW)
    result = answer["result"]
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize("spec", sorted(OBJECTS))
async def test_what_agent_announces_is_true_of_the_object(spec: str) -> None:
    framework, not_announced = OBJECTS[spec]
    if framework is not None:
        pytest.importorskip(framework)
    announced = await answer_to_initialize(
        [sys.executable, "-m", "acp_agent", "--store", "memory", "--agent", spec]
    )
    own = await answer_to_initialize([sys.executable, "-c", SERVE_FROM_PYTHON, spec, "memory"])
    said, true = flat(announced["agentCapabilities"]), flat(own["agentCapabilities"])
    assert said.keys() == true.keys()
    differ = {key for key in said if said[key] != true[key]}
    assert differ == not_announced
    assert all(said[key] is False and true[key] is True for key in differ)  # never more
    assert announced["authMethods"] == own["authMethods"] == []


def agent_command(spec: str) -> list[str]:
    return [sys.executable, "-m", "acp_agent", "--store", "memory", "--agent", spec]


async def next_answer(client: ProcessClient) -> Message:
    answer, _ = await client.expect(lambda m: "id" in m and "method" not in m, timeout=SLOW)
    return answer


async def test_initialize_is_answered_while_the_module_is_imported(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    command = agent_command("tests.adapters.gated_agent:agent")
    async with spawn(command, env={"ACP_TEST_GATE": str(gate)}) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        # the import waits for the gate, which nobody has written yet
        first = await next_answer(client)
        assert first["id"] == init and "result" in first
        await anyio.to_thread.run_sync(gate.write_text, "go")
        second = await next_answer(client)
        assert second["id"] == new and "sessionId" in second["result"]
        prompt = await client.request(
            "session/prompt",
            {
                "sessionId": second["result"]["sessionId"],
                "prompt": [{"type": "text", "text": "hi"}],
            },
        )
        answer, before = await client.expect(lambda m: is_response(m, prompt), timeout=SLOW)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert "you said: hi" in str(before)


async def test_a_module_failing_to_import_is_one_line_exit_2_and_answers(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    command = agent_command("tests.adapters.gated_agent:agent")
    async with spawn(command, env={"ACP_TEST_GATE": str(gate)}) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        listed = await client.request("session/list", {})
        assert (await next_answer(client))["id"] == init
        await anyio.to_thread.run_sync(gate.write_text, "fail")
        answers = [await next_answer(client), await next_answer(client)]
        with anyio.fail_after(SLOW):
            code = await client.process.wait()
            while not client.stderr.endswith(b"\n"):  # the drain task reads what is left
                await anyio.lowlevel.checkpoint()
    assert [a["id"] for a in answers] == [new, listed]  # in arrival order
    line = (
        "--agent tests.adapters.gated_agent:agent: module 'tests.adapters.gated_agent' "
        "failed while being imported: RuntimeError: told to fail"
    )
    for answer in answers:
        assert answer["error"]["code"] == -32603
        assert answer["error"]["message"] == f"The agent could not be served: {line}"
    assert code == 2
    assert client.stderr.decode().splitlines() == [f"acp-agent-kit: {line}"]


def test_a_module_that_cannot_be_found_is_refused_before_serving(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acp_agent", "--agent", "no_such_pkg.agents:agent"],
        cwd=tmp_path,
        input=b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n',
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        "acp-agent-kit: --agent no_such_pkg.agents:agent: cannot find module 'no_such_pkg.agents'"
    ]


async def test_a_client_leaving_during_the_import_ends_the_process(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)  # never written: the import waits for ever
    command = agent_command("tests.adapters.gated_agent:agent")
    async with spawn(command, env={"ACP_TEST_GATE": str(gate)}) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert (await next_answer(client))["id"] == init
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        answer = await next_answer(client)
        with anyio.fail_after(SLOW):
            code = await client.process.wait()
    assert answer["id"] == new and answer["error"]["code"] == -32800  # cancelled at EOF
    assert code == 0


@pytest.mark.parametrize(
    "spec", sorted(spec for spec, (_, hidden) in OBJECTS.items() if hidden >= MCP_REMOTE)
)
async def test_an_mcp_transport_not_announced_is_refused(spec: str, tmp_path: Path) -> None:
    framework = OBJECTS[spec][0]
    assert framework is not None
    pytest.importorskip(framework)
    command = [sys.executable, "-m", "acp_agent", "--store", "memory", "--agent", spec]
    http = {"type": "http", "name": "probe", "url": "http://127.0.0.1:9/mcp", "headers": []}
    async with spawn(command, env={"ACP_FAKE_BASE_URL": "http://127.0.0.1:9/v1"}) as client:
        await client.initialize()
        request_id = await client.request(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [http]}
        )
        answer, _ = await client.expect(lambda m: is_response(m, request_id), timeout=SLOW)
        assert answer["error"]["code"] == -32602, answer
        assert "HTTP MCP servers are not supported" in answer["error"]["message"]
        result, _ = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert result["sessionId"]
