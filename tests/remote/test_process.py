"""``acp-agent-kit serve`` as a real process: it starts, refuses what it must, and stops
gracefully on SIGTERM (open turns answer ``cancelled``, streams close, exit 0)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from acp_agent._loop import uvloop_installed
from tests.helpers.wire_client import ROOT, child_env, spawn

from ._raw import open_socket, raw_websocket, wait_stalled
from ._support import TOKENS, RemoteClient, connect, running_server, url_for, workdir

pytestmark = pytest.mark.anyio

SERVE = [sys.executable, "-m", "acp_agent", "--store", "memory", "serve"]
STOP_WITHIN = 10.0  # seconds SIGTERM may take to stop the server, whatever its clients do

ONE_LOOP = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server's is its own
#: the event loops the server runs on (its own, in its process)
SERVER_BACKENDS = ["asyncio", *(["uvloop"] if uvloop_installed() else []), "trio"]


@asynccontextmanager
async def serving(
    *args: str, backend: str = "auto", python: Sequence[str] = (sys.executable,)
) -> AsyncIterator[tuple[anyio.abc.Process, str, bytearray]]:
    """Start ``acp-agent-kit serve ARGS`` on a free loopback port (the server on
    ``backend``, run by ``python``); yield the process, its URL and its stderr so far
    (growing)."""
    command = [*python, *SERVE[1:-1], "--backend", backend, SERVE[-1]]
    process = await anyio.open_process(
        [*command, "--listen", "127.0.0.1:0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        cwd=str(ROOT),
    )
    stderr = bytearray()
    started = anyio.Event()

    async def read_stderr() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            stderr.extend(chunk)
            if b"serving http" in stderr:
                started.set()

    async with process, anyio.create_task_group() as tg:
        tg.start_soon(read_stderr)
        try:
            with anyio.fail_after(20):
                await started.wait()
            url = stderr.split(b"serving ", 1)[1].split()[0].decode()
            yield process, url, stderr
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("kind", ["websocket", "http"])
async def test_sigterm_answers_open_turns_cancelled_and_exits_0(kind: str, tmp_path: Path) -> None:
    async with serving() as (process, url, stderr), connect(url, kind) as client:
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        running = await client.start_prompt(session_id, "/sleep 60000")
        await client.call("session/list", {})  # the prompt has been read
        process.send_signal(signal.SIGTERM)
        turn = await client.finish_prompt(running)
        assert turn.stop_reason == "cancelled"
        assert await client.closed()
        with anyio.fail_after(20):
            assert await process.wait() == 0
    assert b"Traceback" not in stderr and b"ERROR" not in stderr, stderr.decode()


async def test_a_token_file_is_required_beyond_loopback(tmp_path: Path) -> None:
    refused = await anyio.run_process(
        [*SERVE, "--listen", "0.0.0.0:0"], check=False, env=child_env(), cwd=str(ROOT)
    )
    assert refused.returncode == 2
    assert b"without --token-file" in refused.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text("alice short\n")
    tokens.chmod(0o600)
    refused = await anyio.run_process(
        [*SERVE, "--token-file", str(tokens)], check=False, env=child_env(), cwd=str(ROOT)
    )
    assert refused.returncode == 2
    assert b"line 1: the token is shorter than 16 characters" in refused.stderr


async def test_the_token_file_names_the_principals(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{name} {token}\n" for name, token in TOKENS.items()))
    tokens.chmod(0o600)
    async with (
        serving("--token-file", str(tokens)) as (_, url, _stderr),
        connect(url, "websocket", token=TOKENS["bob"]) as bob,
    ):
        await bob.initialize()
        session_id, _, _ = await bob.new_session(workdir(tmp_path))
        listed, _ = await bob.call("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [session_id]
        async with connect(url, "http", token=TOKENS["alice"]) as alice:
            await alice.initialize()
            listed, _ = await alice.call("session/list", {})
            assert listed["sessions"] == []


@pytest.mark.parametrize("kind", ["websocket", "http"])
async def test_the_bridge_serves_a_remote_agent_over_stdio(kind: str, tmp_path: Path) -> None:
    async with running_server() as url:
        bridge = [sys.executable, "-m", "acp_agent.remote.bridge", url_for(url, kind)]
        async with spawn(bridge) as client:
            await client.initialize()
            session_id, _, _ = await client.new_session(workdir(tmp_path))
            assert (await client.prompt(session_id, "/echo bridged")).texts() == ["bridged"]
            running = await client.start_prompt(session_id, "/sleep 60000")
            await client.call("session/list", {})
            assert client.process.stdin is not None
            await client.process.stdin.aclose()  # end of input ends the connection
            if kind == "http":  # the answer still comes (a WebSocket cannot half-close)
                turn = await client.finish_prompt(running)
                assert turn.stop_reason == "cancelled"
            with anyio.fail_after(20):
                assert await client.process.wait() == 0


@ONE_LOOP
@pytest.mark.parametrize("server_backend", SERVER_BACKENDS)
async def test_sigterm_stops_the_server_while_a_websocket_client_reads_nothing(
    server_backend: str, tmp_path: Path
) -> None:
    async with (
        serving(backend=server_backend) as (process, url, stderr),
        raw_websocket(url) as ws,
    ):
        client = RemoteClient(ws)
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        await client.start_prompt(session_id, "/stream 100000 1000")  # ~100 MB, never read
        await client.call("session/list", {})  # the prompt has been read
        await wait_stalled(ws.stream)  # the server's writes wait for us, and we never read
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(STOP_WITHIN):
            assert await process.wait() == 0
    assert b"Traceback" not in stderr and b"ERROR" not in stderr, stderr.decode()


@ONE_LOOP
@pytest.mark.parametrize("server_backend", SERVER_BACKENDS)
async def test_sigterm_stops_the_server_while_an_sse_client_reads_nothing(
    server_backend: str, tmp_path: Path
) -> None:
    init = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'
    async with (
        serving(backend=server_backend) as (process, url, stderr),
        httpx.AsyncClient(timeout=10) as http,
    ):
        json = {"Content-Type": "application/json"}
        opened = await http.post(url, content=init, headers=json)
        head = {"Acp-Connection-Id": opened.headers["acp-connection-id"], **json}
        async with open_socket(url) as stream:
            get = "GET /acp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
            await stream.send(
                f"{get}Acp-Connection-Id: {head['Acp-Connection-Id']}\r\n\r\n".encode()
            )
            new = {"cwd": workdir(tmp_path), "mcpServers": []}
            await http.post(url, json=_request(2, "session/new", new), headers=head)
            seen = b""
            while (found := re.search(rb'"sessionId":"([^"]+)"', seen)) is None:
                seen += await stream.receive()
            prompt = {"sessionId": found[1].decode(), "prompt": [_text("/stream 100000 1000")]}
            await http.post(url, json=_request(3, "session/prompt", prompt), headers=head)
            await wait_stalled(stream)  # we read no more of the stream
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(STOP_WITHIN):
                assert await process.wait() == 0
    assert b"Traceback" not in stderr and b"ERROR" not in stderr, stderr.decode()


def _request(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}
