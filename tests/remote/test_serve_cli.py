"""``acp-agent-kit serve`` as a real process: TLS, token files, and one line with exit
code 2 for each command-line mistake."""

from __future__ import annotations

import hashlib
import re
import signal
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from acp_agent.transport.remote import open_remote
from tests.helpers.wire_client import ROOT, child_env, spawn

from ._raw import open_socket, raw_websocket, reset
from ._support import TOKENS, RemoteClient, sole_error, url_for, workdir
from ._tls import Certs, make_certs
from .test_process import SERVE, serving

pytestmark = pytest.mark.anyio


INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'
NEW = b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"%s","mcpServers":[]}}'
PROMPT = b'{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"SID",'
PROMPT += b'"prompt":[{"type":"text","text":"%s"}]}}'
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server is a process of its own: one event loop here is enough


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    (tmp_path / "tls").mkdir()
    return make_certs(tmp_path / "tls")


def token_file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


async def refused(*args: str) -> str:
    """Run ``serve ARGS`` (and ``chat ARGS`` when they start with it), expecting exit 2
    and exactly one line on stderr, which is returned."""
    command = [*SERVE, *args] if args[0] != "chat" else [*SERVE[:-1], *args]
    done = await anyio.run_process(command, check=False, env=child_env(), cwd=str(ROOT))
    text = done.stderr.decode()
    assert done.returncode == 2, text
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert "Traceback" not in text
    return text


async def test_plain_http_beyond_loopback_needs_insecure_http(tmp_path: Path) -> None:
    tokens = token_file(tmp_path, f"alice {TOKENS['alice']}\n")
    line = await refused("--token-file", tokens, "--listen", "0.0.0.0:0")
    assert "over plain HTTP" in line and "--insecure-http" in line
    async with serving("--token-file", tokens, "--listen", "0.0.0.0:0", "--insecure-http") as (
        process,
        url,
        _stderr,
    ):
        assert url.startswith("http://0.0.0.0:")
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await process.wait() == 0


async def test_a_token_file_open_to_others_is_refused(tmp_path: Path) -> None:
    for mode in (0o644, 0o640, 0o604):
        tokens = token_file(tmp_path, f"alice {TOKENS['alice']}\n", mode)
        line = await refused("--token-file", tokens)
        assert f"(mode {mode:04o})" in line and "chmod 600" in line


async def test_mistakes_in_tls_and_token_flags_are_one_line(tmp_path: Path, certs: Certs) -> None:
    assert "go together" in await refused("--tls-cert", certs.tls.cert)
    assert "go together" in await refused("--tls-key", certs.tls.key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    line = await refused("--tls-cert", str(garbage), "--tls-key", certs.tls.key)
    assert "cannot use --tls-cert" in line
    line = await refused("--tls-cert", certs.tls.cert, "--tls-key", str(tmp_path / "missing"))
    assert "cannot use --tls-cert" in line
    assert "must be positive" in await refused("--body-timeout", "0")
    assert "unrecognized arguments" in await refused("--no-such-flag")
    assert "expected HOST:PORT" in await refused("--listen", "nowhere")
    tokens = token_file(tmp_path, "alice sha256:abcd\n")
    assert "64 hex digits" in await refused("--token-file", tokens)
    line = await refused("chat", "--url", "https://127.0.0.1:1/acp", "--ca-file", str(garbage))
    assert "cannot use CA file" in line


async def test_tls_with_tokens_stored_as_digests(tmp_path: Path, certs: Certs) -> None:
    digest = hashlib.sha256(TOKENS["alice"].encode()).hexdigest()
    tokens = token_file(tmp_path, f"alice sha256:{digest}\nbob {TOKENS['bob']}\n")
    args = ("--token-file", tokens, "--tls-cert", certs.tls.cert, "--tls-key", certs.tls.key)
    async with serving(*args) as (process, url, stderr):
        assert url.startswith("https://")
        assert b"and wss://" in stderr
        for kind in ("websocket", "http"):
            async with open_remote(
                url_for(url, kind), token=TOKENS["alice"], ca_file=certs.ca_file
            ) as transport:
                client = RemoteClient(transport)
                await client.initialize()
                session_id, _, _ = await client.new_session(workdir(tmp_path))
                assert (await client.prompt(session_id, "/echo secret")).texts() == ["secret"]
        client_token = token_file(tmp_path / "work", TOKENS["alice"])
        wss = url_for(url, "websocket")
        bridge = [sys.executable, "-m", "acp_agent.remote.bridge", wss, "--ca-file"]
        async with spawn([*bridge, certs.ca_file, "--token-file", client_token]) as client:
            await client.initialize()
            listed, _ = await client.call("session/list", {})
            assert len(listed["sessions"]) == 2  # alice's, from both connections
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await process.wait() == 0
    assert b"Traceback" not in stderr and b"ERROR" not in stderr, stderr.decode()


async def test_clients_going_away_leave_no_trace(tmp_path: Path, certs: Certs) -> None:
    args = ("--tls-cert", certs.tls.cert, "--tls-key", certs.tls.key)
    async with serving(*args) as (process, url, stderr):
        plain = url.replace("https://", "http://", 1)
        async with open_socket(plain) as sock:  # plain HTTP to the TLS port
            await sock.send(b"GET /acp HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(BaseException) as refused:  # the client refuses our certificate
            async with open_remote(url) as transport:
                await RemoteClient(transport).initialize()
        assert "certificate" in str(sole_error(refused.value))
        tls = certs.client_context()
        async with raw_websocket(url, ssl_context=tls) as ws:  # gone mid-turn, no goodbye
            client = RemoteClient(ws)
            await client.initialize()
            session_id, _, _ = await client.new_session(workdir(tmp_path))
            await client.start_prompt(session_id, "/stream 100000 100")
            await client.receive()  # the turn is streaming
            reset(ws.stream)
        async with httpx.AsyncClient(verify=tls, timeout=10) as http:  # the same over SSE
            opened = await http.post(url, content=INIT, headers=JSON)
            head = {"Acp-Connection-Id": opened.headers["acp-connection-id"]}
            async with open_socket(url, tls) as stream:
                get = "GET /acp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                get += f"Acp-Connection-Id: {head['Acp-Connection-Id']}\r\n\r\n"
                await stream.send(get.encode())
                await stream.receive()  # the stream is open
                new = NEW % workdir(tmp_path).encode()
                assert (await http.post(url, content=new, headers=head | JSON)).is_success
                seen = b""
                while (found := re.search(rb'"sessionId":"([^"]+)"', seen)) is None:
                    seen += await stream.receive()
                prompt = PROMPT.replace(b"SID", found[1]) % b"/stream 100000 100"
                assert (await http.post(url, content=prompt, headers=head | JSON)).is_success
                while b"agent_message_chunk" not in seen:  # the turn is streaming
                    seen += await stream.receive()
                reset(stream)
            cut = "POST /acp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            cut += f"Acp-Connection-Id: {head['Acp-Connection-Id']}\r\nContent-Length: 99\r\n\r\n"
            async with open_socket(url, tls) as stream:  # a body cut short
                await stream.send(cut.encode() + b'{"jsonrpc":')
                reset(stream)
        async with open_remote(url, ca_file=certs.ca_file) as transport:
            client = RemoteClient(transport)  # still serving
            await client.initialize()
            session_id, _, _ = await client.new_session(workdir(tmp_path))
            assert (await client.prompt(session_id, "/echo still here")).texts() == ["still here"]
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await process.wait() == 0
    assert b"Traceback" not in stderr and b"ERROR" not in stderr, stderr.decode()


@pytest.mark.parametrize("kind", ["wss", "https"])
async def test_chat_reaches_a_tls_server_with_its_ca_file(
    kind: str, tmp_path: Path, certs: Certs
) -> None:
    args = ("--tls-cert", certs.tls.cert, "--tls-key", certs.tls.key)
    async with serving(*args) as (process, url, _stderr):
        chat = [*SERVE[:-1], "chat", "--url", url_for(url, kind), "--ca-file", certs.ca_file]
        done = await anyio.run_process(
            [*chat, "--cwd", workdir(tmp_path)],
            input=b"/echo over tls\n",
            check=False,
            env=child_env(),
            cwd=str(ROOT),
        )
        assert done.returncode == 0, done.stderr.decode()
        assert "over tls" in done.stdout.decode()
        untrusting = [*chat[:-2], "--cwd", workdir(tmp_path)]  # the system's authorities
        done = await anyio.run_process(untrusting, check=False, env=child_env(), cwd=str(ROOT))
        assert done.returncode == 1
        said = (done.stdout + done.stderr).decode().strip().splitlines()  # (chat's console)
        assert len(said) == 1 and "certificate verify failed" in said[0], said
        process.send_signal(signal.SIGTERM)
