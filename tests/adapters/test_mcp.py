"""MCP servers given in ``session/new`` / ``session/load``, connected by the pydantic-ai
and OpenAI Agents SDK adapters with their framework's own MCP client, and by the
LangGraph adapter with this project's own MCP host: a real
``acp-agent-kit --agent`` subprocess on the fake endpoint, a real stdio MCP server
subprocess (``tests/llm/fixtures/mcp_calc.py``), the SQLite store on disk.

The tests of one session's servers failing share one process per adapter (each in its own
session); the tests of what reaches the store and of the connection's end have their own."""

from __future__ import annotations

import os
import select
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai.mcp")
pytest.importorskip("agents")
pytest.importorskip("langgraph")

from acp_agent.llm.fake_server import FakeModelServer
from tests.llm.harness import mcp_web_server

from .serving import SLOW, Shared, calls, one_test, served, statuses, text

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

CALC = str(Path(__file__).parents[1] / "llm" / "fixtures" / "mcp_calc.py")

#: the agent, and the name its framework gives the calc server's ``add`` tool
AGENTS = {
    "pydantic-ai": ("tests.adapters.example_pydantic:agent", "calc_add"),
    "openai-agents": ("tests.adapters.oa_agent:served", "add"),
    "langgraph": ("tests.adapters.lg_agent:mcp_user", "calc_add"),
}


@pytest.fixture(params=sorted(AGENTS))
def agent(request: pytest.FixtureRequest) -> tuple[str, str]:
    return AGENTS[str(request.param)]


@pytest.fixture(scope="module", params=sorted(AGENTS))
async def shared_process(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Shared]]:
    """An adapter's process on the memory store, and the name it gives ``add``."""
    spec, tool = AGENTS[str(request.param)]
    async with FakeModelServer.running() as fake, served(spec, fake) as client:
        yield tool, Shared(spec, client, fake)


def calc(tmp_path: Path, token: str, **env: str) -> dict[str, Any]:
    """The calc server as ACP's ``McpServer``, carrying a secret in its env."""
    variables = {"CALC_TOKEN": token, "MCP_CALC_STARTS": str(tmp_path / "starts"), **env}
    return {
        "name": "calc",
        "command": sys.executable,
        "args": [CALC],
        "env": [{"name": k, "value": v} for k, v in variables.items()],
    }


def starts(tmp_path: Path) -> list[int]:
    path = tmp_path / "starts"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def test_a_stdio_server_is_held_for_the_session_and_its_tool_answers(
    agent: tuple[str, str], fake: FakeModelServer, tmp_path: Path
) -> None:
    spec, tool = agent
    token = f"tok-{os.urandom(8).hex()}"
    store = tmp_path / "sessions.db"
    async with served(spec, fake, str(store)) as client:
        result, _ = await client.call(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [calc(tmp_path, token)]}
        )
        sid = str(result["sessionId"])
        for n in (2, 3):
            turn = await client.prompt(sid, f"fake:call {tool} a={n} b=3", timeout=SLOW)
            assert turn.stop_reason == "end_turn", turn.response
            [updates] = calls(turn).values()
            assert updates[0]["sessionUpdate"] == "tool_call"
            assert (updates[0]["name"], updates[0]["kind"]) == (tool, "other")
            assert statuses(updates)[-1] == "completed"
            assert text(updates) == str(n + 3)
            # the result reached the model
            tool_messages = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
            assert as_text(tool_messages[-1]["content"]) == str(n + 3)
        assert len(starts(tmp_path)) == 1  # opened once, not per turn
        await client.call("session/close", {"sessionId": sid})
        [pid] = starts(tmp_path)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped and reaped by session/close
        assert holding(store, token) == []  # the store and its WAL, the agent running
    assert holding(store, token) == []


def as_text(content: Any) -> str:
    """A Chat Completions message's content: text, or text parts."""
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def holding(store: Path, secret: str) -> list[str]:
    """The files of the SQLite store (the database, its WAL) whose bytes hold ``secret``."""
    files = [p for p in store.parent.iterdir() if p.name.startswith(store.name)]
    assert store in files
    return [p.name for p in files if secret.encode() in p.read_bytes()]


async def test_a_server_that_cannot_start_fails_the_turn_naming_it(
    shared_process: tuple[str, Shared], tmp_path: Path
) -> None:
    _, shared = shared_process
    missing = {"name": "nowhere", "command": str(tmp_path / "no-such-server"), "args": []}
    async with one_test(shared):
        client = shared.client
        result, _ = await client.call(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [missing]}
        )
        turn = await client.prompt(str(result["sessionId"]), "fake:cold", timeout=SLOW)
    error = turn.response["error"]
    assert error["code"] == -32603
    assert error["message"].startswith("MCP server 'nowhere' could not be started: ")
    assert error["data"]["server"] == "nowhere"


def kill_and_wait(pid: int, timeout: float = 30.0) -> None:
    """SIGKILL process ``pid`` and block until it has exited, through a pidfd opened
    first (its parent may reap it as soon as it dies)."""
    fd = os.pidfd_open(pid)
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        readable, _, _ = select.select([fd], [], [], timeout)
        assert readable, f"process {pid} did not exit"
    finally:
        os.close(fd)


async def test_a_server_that_died_is_started_again_for_the_next_turn(
    shared_process: tuple[str, Shared], tmp_path: Path
) -> None:
    tool, shared = shared_process
    async with one_test(shared):
        client = shared.client
        result, _ = await client.call(
            "session/new", {"cwd": str(tmp_path), "mcpServers": [calc(tmp_path, "t")]}
        )
        sid = str(result["sessionId"])
        turn = await client.prompt(sid, f"fake:call {tool} a=1 b=1", timeout=SLOW)
        assert turn.stop_reason == "end_turn", turn.response
        [first] = starts(tmp_path)
        kill_and_wait(first)
        turn = await client.prompt(sid, f"fake:call {tool} a=2 b=2", timeout=SLOW)
        assert turn.stop_reason == "end_turn", turn.response
        [updates] = calls(turn).values()
        assert (statuses(updates)[-1], text(updates)) == ("completed", "4")
        assert starts(tmp_path)[0] == first and len(starts(tmp_path)) == 2


async def test_session_load_connects_the_servers_and_the_end_stops_them(
    agent: tuple[str, str], fake: FakeModelServer, tmp_path: Path
) -> None:
    """No session/close: the connection's end stops the server; a new process loads the
    session with its servers, which answer again."""
    spec, tool = agent
    store = str(tmp_path / "sessions.db")
    params: dict[str, Any] = {"cwd": str(tmp_path), "mcpServers": [calc(tmp_path, "t")]}
    async with served(spec, fake, store) as client:
        result, _ = await client.call("session/new", params)
        sid = str(result["sessionId"])
        turn = await client.prompt(sid, f"fake:call {tool} a=1 b=2", timeout=SLOW)
        assert turn.stop_reason == "end_turn", turn.response
    [first] = starts(tmp_path)
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)  # stopped and reaped when the connection ended
    async with served(spec, fake, store) as client:
        await client.call("session/load", {**params, "sessionId": sid})
        turn = await client.prompt(sid, f"fake:call {tool} a=3 b=4", timeout=SLOW)
        assert turn.stop_reason == "end_turn", turn.response
        [updates] = calls(turn).values()
        assert (statuses(updates)[-1], text(updates)) == ("completed", "7")
        assert len(starts(tmp_path)) == 2


async def test_a_streamable_http_server_gets_its_headers_which_stay_off_disk(
    agent: tuple[str, str], fake: FakeModelServer, tmp_path: Path
) -> None:
    """Served with ``--agent``, which announces the adapter's HTTP MCP (on main's code it
    was refused ``-32602``): the server answers 401 without the token header, the call
    succeeding shows the header arrived; the store and its WAL never hold it."""
    spec, tool = agent
    tool = tool.replace("calc_", "web_")
    token = f"tok-{os.urandom(8).hex()}"
    store = tmp_path / "sessions.db"
    async with (
        mcp_web_server(token) as url,
        served(spec, fake, str(store)) as client,
    ):
        server = {
            "type": "http",
            "name": "web",
            "url": url,
            "headers": [{"name": "X-Calc-Token", "value": token}],
        }
        result, _ = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]})
        turn = await client.prompt(
            str(result["sessionId"]), f"fake:call {tool} a=2 b=5", timeout=SLOW
        )
        assert turn.stop_reason == "end_turn", turn.response
        [updates] = calls(turn).values()
        assert (updates[0]["name"], statuses(updates)[-1], text(updates)) == (
            tool,
            "completed",
            "7",
        )
        assert holding(store, token) == []
    assert holding(store, token) == []
