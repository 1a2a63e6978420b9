"""The LLM agent's MCP servers end to end: stdio and HTTP servers, silent, unreachable and
failing ones, and the McpHost's lifespan. The turns themselves are in ``test_agent.py``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent.llm.fake_server import FakeModelServer
from acp_agent.llm.mcp_host import McpHost

from .harness import TIMEOUT, base_config, harness, mcp_web_server

pytestmark = pytest.mark.anyio

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_calc.py")


async def test_mcp_stdio_server_tools(tmp_path: Path) -> None:
    pid_file = tmp_path / "mcp.pid"
    server = {
        "name": "calc",
        "command": sys.executable,
        "args": [FIXTURE],
        "env": [{"name": "MCP_CALC_PID_FILE", "value": str(pid_file)}],
    }
    async with harness(str(tmp_path)) as h:
        sid = await h.session([server])
        assert await h.client.prompt(sid, "fake:mcp") == "end_turn"
        names = {t["function"]["name"] for t in h.fake.requests[0]["tools"]}
        assert {"calc__add", "calc__echo"} <= names
        call = h.client.tool_calls()[0]
        assert call["title"] == "calc: add"
        assert h.client.final_status(call["toolCallId"]) == "completed"
        assert h.client.text().endswith("The MCP tool said: 5")
        assert h.agent.mcp.server_tasks == 1
        await h.client.call("session/close", {"sessionId": sid})
        assert h.agent.mcp.server_tasks == 0
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped and reaped by session/close, not by the EOF


# A stdio "MCP server" that writes its pid, then never answers; it exits on stdin EOF.
SILENT = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); sys.stdin.read()"


async def test_silent_mcp_server_times_out(tmp_path: Path) -> None:
    pid_file = tmp_path / "silent.pid"
    server = {"name": "silent", "command": sys.executable, "args": ["-c", SILENT, str(pid_file)]}
    async with harness(
        str(tmp_path),
        config=lambda fake: replace(base_config(fake), mcp_connect_timeout=0.3),
    ) as h:
        sid = await h.session([server])
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert "MCP server 'silent' could not be started: it did not start within 0.3 s" in (
            h.client.text()
        )
        assert h.agent.mcp.server_tasks == 0
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


async def test_eof_stops_mcp_servers_of_open_sessions(tmp_path: Path) -> None:
    """No session/close: the lifespan's end stops a connected and a connecting server."""
    calc_pid, silent_pid = tmp_path / "calc.pid", tmp_path / "silent.pid"
    calc = {
        "name": "calc",
        "command": sys.executable,
        "args": [FIXTURE],
        "env": [{"name": "MCP_CALC_PID_FILE", "value": str(calc_pid)}],
    }
    silent = {"name": "silent", "command": sys.executable, "args": ["-c", SILENT, str(silent_pid)]}
    async with harness(str(tmp_path)) as h:
        sid = await h.session([calc])
        assert await h.client.prompt(sid, "fake:mcp") == "end_turn"
        await h.session([silent])
        with anyio.fail_after(TIMEOUT):  # the other process says it started: poll its file
            while not silent_pid.exists() or not silent_pid.read_text():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert h.agent.mcp.server_tasks == 2
        agent = h.agent
    assert agent.mcp.server_tasks == 0
    for pid_file in (calc_pid, silent_pid):
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


async def test_mcp_http_server_tools(tmp_path: Path) -> None:
    """Streamable HTTP against a real MCP server on loopback; the headers are sent."""
    async with mcp_web_server("s3cret") as url, harness(str(tmp_path)) as h:
        init = await h.client.initialize()
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": False}
        web = {
            "type": "http",
            "name": "web",
            "url": url,
            "headers": [{"name": "X-Calc-Token", "value": "s3cret"}],
        }
        locked = {
            "type": "http",
            "name": "locked",
            "url": url,
            "headers": [{"name": "X-Calc-Token", "value": "wrong"}],
        }
        sid = await h.session([web, locked])
        assert await h.client.prompt(sid, "fake:mcp") == "end_turn"
        names = {t["function"]["name"] for t in h.fake.requests[0]["tools"]}
        assert {"web__add", "web__echo"} <= names
        assert not any(n.startswith("locked__") for n in names)
        call = h.client.tool_calls()[0]
        assert call["title"] == "web: add"
        assert h.client.final_status(call["toolCallId"]) == "completed"
        text = h.client.text()
        assert text.endswith("The MCP tool said: 5")
        assert text.count("could not be started") == 1
        assert "MCP server 'locked' could not be started" in text
        assert "(HTTP 401)" in text
        await h.client.call("session/close", {"sessionId": sid})
        assert h.agent.mcp.server_tasks == 0


async def test_http_mcp_server_unreachable(tmp_path: Path) -> None:
    async with FakeModelServer.running() as other:
        dead = other.base_url.replace("/v1", "/mcp")  # closed when this block ends
    server = {"type": "http", "name": "gone", "url": dead, "headers": []}
    async with harness(str(tmp_path)) as h:
        sid = await h.session([server])
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert "MCP server 'gone' could not be started" in h.client.text()


async def test_mcp_host_outside_a_lifespan_reports_failures(tmp_path: Path) -> None:
    host = McpHost(TIMEOUT)
    link = await host.open_session([{"name": "calc", "command": "true"}], str(tmp_path))
    assert link.ready.is_set() and not link.tools
    assert link.failures == [
        "MCP server 'calc' could not be started: the agent's lifespan is not running "
        "(serve it with AcpServer.serve)"
    ]
    assert host.server_tasks == 0


async def test_mcp_host_starts_servers_in_the_callers_lifespan(tmp_path: Path) -> None:
    """One host serving two connections at once: each session's servers run, and stop,
    with the lifespan of the connection that opened the session."""
    host = McpHost(TIMEOUT)
    spec = {"name": "calc", "command": sys.executable, "args": [FIXTURE]}
    links: dict[str, Any] = {}
    opened = {"a": anyio.Event(), "b": anyio.Event()}
    ends = {"a": anyio.Event(), "b": anyio.Event()}

    async def connection(name: str) -> None:
        async with host.running():
            links[name] = await host.open_session([spec], str(tmp_path))
            await host.wait_ready(links[name])
            opened[name].set()
            await ends[name].wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(connection, "a")
        tg.start_soon(connection, "b")
        with anyio.fail_after(TIMEOUT):
            await opened["a"].wait()
            await opened["b"].wait()
        assert host.server_tasks == 2 and not links["a"].failures
        ends["a"].set()
        with anyio.fail_after(TIMEOUT):
            await links["a"].servers[0].done.wait()
        assert host.server_tasks == 1 and host.serving
        assert await host.call(links["b"], "calc__add", {"a": 1, "b": 2}) == ("3", False)
        ends["b"].set()
    assert host.server_tasks == 0 and not host.serving


async def test_failing_mcp_server_is_reported(tmp_path: Path) -> None:
    server = {"name": "broken", "command": str(tmp_path / "no-such-binary"), "args": [], "env": []}
    async with harness(str(tmp_path)) as h:
        sid = await h.session([server])
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        text = h.client.text()
        assert "MCP server 'broken' could not be started" in text
        assert text.endswith("Hello from the fake model.")
        system = h.fake.requests[0]["messages"][0]["content"]
        assert "Unavailable MCP servers" in system
        # reported once, not on every turn
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert h.client.text().count("could not be started") == 1
