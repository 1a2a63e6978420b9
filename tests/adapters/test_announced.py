"""``--agent``: ``initialize`` waits for the module's import (up to
``--initialize-wait``) and announces the object's own capabilities (compared with the
object's own answer, served from Python); past the wait, it announces what every agent
supports, and what it did not announce is refused for the rest of the connection; a
module that fails while importing is one line and exit 2, the requests that waited for
it (``initialize`` among them) answered ``-32603``."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent.adapters.loading import INITIALIZE_WAIT
from acp_agent.cli_args import build_parser
from tests.helpers.wire_client import FULL_CAPS, Message, ProcessClient, is_response, spawn

from .serving import SERVE_FROM_PYTHON, SLOW, WAIT_FOR_IMPORT

pytestmark = pytest.mark.anyio

INIT = {"protocolVersion": 1, "clientCapabilities": FULL_CAPS}

#: object -> the framework it needs
OBJECTS: dict[str, str | None] = {
    "tests.adapters.plain_agent:agent": None,
    "tests.adapters.example_pydantic:agent": "pydantic_ai",
    "tests.adapters.lg_agent:agent": "langgraph",
    "tests.adapters.lg_agent:mcp_user": "langgraph",
    "tests.adapters.oa_agent:served": "agents",
}

#: what a plain ``Agent`` announces, which every object ``--agent`` serves supports
BASELINE = {
    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
    "mcpCapabilities": {"http": False, "sse": False},
}

GATED = "tests.adapters.gated_agent:agent"
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()  # only the header: never decoded
IMAGE = {"type": "image", "mimeType": "image/png", "data": PIXEL}
HTTP_MCP = {"type": "http", "name": "probe", "url": "http://127.0.0.1:9/mcp", "headers": []}


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(flat(inner, f"{prefix}.{key}" if prefix else key))
    return out


async def answer_to_initialize(command: list[str]) -> Message:
    env = {"ACP_FAKE_BASE_URL": "http://127.0.0.1:9/v1", **WAIT_FOR_IMPORT}
    async with spawn(command, env=env) as client:
        request_id = await client.request("initialize", INIT)
        answer, _ = await client.expect(lambda m: is_response(m, request_id), timeout=SLOW)
    result = answer["result"]
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize("spec", sorted(OBJECTS))
async def test_what_agent_announces_is_the_objects_own(spec: str) -> None:
    """On main's code the pydantic-ai adapter's images, embedded resources and HTTP/SSE
    MCP, and the Agents SDK adapter's HTTP/SSE MCP, were not announced."""
    framework = OBJECTS[spec]
    if framework is not None:
        pytest.importorskip(framework)
    announced = await answer_to_initialize(agent_command(spec))
    own = await answer_to_initialize([sys.executable, "-c", SERVE_FROM_PYTHON, spec, "memory"])
    assert flat(announced["agentCapabilities"]) == flat(own["agentCapabilities"])
    assert announced["authMethods"] == own["authMethods"] == []
    assert announced["agentInfo"] == own["agentInfo"]


def agent_command(spec: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "acp_agent", "--store", "memory", *extra, "--agent", spec]


async def next_answer(client: ProcessClient) -> Message:
    answer, _ = await client.expect(lambda m: "id" in m and "method" not in m, timeout=SLOW)
    return answer


def capabilities(answer: Message) -> dict[str, Any]:
    caps = answer["result"]["agentCapabilities"]
    return {key: caps[key] for key in BASELINE}


async def release(gate: Path, said: str) -> None:
    await anyio.to_thread.run_sync(gate.write_text, said)


async def test_initialize_waits_for_the_import_and_announces_the_object(tmp_path: Path) -> None:
    """On main's code ``initialize`` was answered before the import, without the image
    and HTTP MCP the object takes."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    async with spawn(agent_command(GATED), env={"ACP_TEST_GATE": str(gate)}) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        await release(gate, "go")  # the import was waiting for it: initialize too
        first = await next_answer(client)
        assert first["id"] == init
        assert capabilities(first) == {
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},
        }
        assert first["result"]["agentInfo"]["name"] == "capable"
        second = await next_answer(client)
        assert second["id"] == new and "sessionId" in second["result"]
        result, _ = await client.call(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [HTTP_MCP]}
        )
        turn = await client.prompt(result["sessionId"], [{"type": "text", "text": "hi"}, IMAGE])
    assert turn.stop_reason == "end_turn", turn.response


async def test_past_the_wait_initialize_announces_what_every_agent_supports(
    tmp_path: Path,
) -> None:
    """The import held past ``--initialize-wait``: ``initialize`` is answered then, with
    the baseline, and the connection keeps to it once the object (which takes more) is
    loaded. On main's code it was answered at once, and the image was accepted."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    command = agent_command(GATED, "--initialize-wait", "0.5")
    started = time.monotonic()
    async with spawn(command, env={"ACP_TEST_GATE": str(gate)}) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        first = await next_answer(client)  # the gate is still closed
        assert time.monotonic() - started >= 0.5
        assert first["id"] == init and capabilities(first) == BASELINE
        assert first["result"]["agentInfo"]["name"] == "acp-agent-kit"
        await release(gate, "go")
        second = await next_answer(client)
        assert second["id"] == new and "sessionId" in second["result"]
        session = second["result"]["sessionId"]
        again, _ = await client.call("initialize", INIT)  # the first answer decided
        assert capabilities({"result": again}) == BASELINE
        refused = await client.request(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [HTTP_MCP]}
        )
        answer = await next_answer(client)
        assert answer["id"] == refused and answer["error"]["code"] == -32602
        assert "HTTP MCP servers are not supported" in answer["error"]["message"]
        image = await client.prompt(session, [{"type": "text", "text": "hi"}, IMAGE])
        assert image.error is not None and image.error["code"] == -32602
        assert "promptCapabilities.image" in image.error["message"]
        turn = await client.prompt(session, "hi")
    assert turn.stop_reason == "end_turn", turn.response
    assert "you said: hi" in str(turn.updates)


async def test_a_module_failing_to_import_is_one_line_exit_2_and_answers(
    tmp_path: Path,
) -> None:
    """On main's code ``initialize`` was answered as if the agent could be served."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = {"ACP_TEST_GATE": str(gate), **WAIT_FOR_IMPORT}
    async with spawn(agent_command(GATED), env=env) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        listed = await client.request("session/list", {})
        await release(gate, "fail")
        answers = [await next_answer(client) for _ in range(3)]
        with anyio.fail_after(SLOW):
            code = await client.process.wait()
            while not client.stderr.endswith(b"\n"):  # the drain task reads what is left
                await anyio.lowlevel.checkpoint()
    assert [a["id"] for a in answers] == [init, new, listed]  # in arrival order
    line = (
        f"--agent {GATED}: module 'tests.adapters.gated_agent' "
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
    env = {"ACP_TEST_GATE": str(gate), **WAIT_FOR_IMPORT}
    async with spawn(agent_command(GATED), env=env) as client:
        init = await client.request("initialize", INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        answers = [await next_answer(client) for _ in range(2)]
        with anyio.fail_after(SLOW):
            code = await client.process.wait()
    assert sorted(a["id"] for a in answers) == sorted([init, new])
    assert {a["error"]["code"] for a in answers} == {-32800}  # cancelled at EOF
    assert code == 0
    assert b"Traceback" not in client.stderr


@pytest.mark.parametrize(
    ("given", "wait"), [(None, INITIALIZE_WAIT), ("0", 0.0), ("2.5", 2.5), ("-1", None)]
)
def test_initialize_wait_from_the_environment(
    given: str | None, wait: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default is the module's; 0 is allowed (answer at once), a negative refused."""
    if given is None:
        monkeypatch.delenv("ACP_AGENT_INITIALIZE_WAIT", raising=False)
    else:
        monkeypatch.setenv("ACP_AGENT_INITIALIZE_WAIT", given)
    parser = build_parser()
    if wait is None:
        with pytest.raises(SystemExit):
            parser.parse_args([])
        return
    assert parser.parse_args([]).initialize_wait == wait
