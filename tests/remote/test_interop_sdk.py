"""Interop: the official Python SDK's remote clients (``acp.http``, ``acp.ws``) drive the
reference agent through its whole command table, over a real server on loopback, in
clear and over TLS (``https://``, where the SDK's client speaks HTTP/2, and ``wss://``)
with a certificate made in the test.

The SDK's clients run on asyncio only, so these tests do too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

acp = pytest.importorskip("acp")
pytest.importorskip("acp.http.client", reason="agent-client-protocol[http] is not installed")

from acp import RequestError, connect_to_agent, text_block  # noqa: E402
from acp.http import create_http_stream  # noqa: E402
from acp.schema import (  # noqa: E402
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    FileSystemCapabilities,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from acp.ws import create_websocket_stream  # noqa: E402

from ._support import running_server, url_for, workdir  # noqa: E402
from ._tls import make_certs  # noqa: E402

pytestmark = pytest.mark.anyio

FS_CAPS = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SdkClient:
    """An SDK ``Client`` that serves files and a fake terminal and allows every write."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.updates: list[Any] = []
        self.calls: list[str] = []
        self.reading = asyncio.Event()
        self.hold: asyncio.Event | None = None  # set: reads wait for it

    def on_connect(self, conn: Any) -> None:
        pass

    def take(self) -> list[Any]:
        taken, self.updates = self.updates, []
        return taken

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kw: Any):
        self.calls.append("request_permission")
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id)
        )

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any):
        self.calls.append("read_text_file")
        self.reading.set()
        if self.hold is not None:
            await self.hold.wait()
        return ReadTextFileResponse(content=await anyio.Path(path).read_text())

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any):
        self.calls.append("write_text_file")
        await anyio.Path(path).write_text(content)
        return WriteTextFileResponse()

    async def create_terminal(self, session_id: str, command: str, **kwargs: Any):
        self.calls.append("create_terminal")
        return CreateTerminalResponse(terminal_id="term-1")

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any):
        return TerminalOutputResponse(output="hi\n", truncated=False)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any):
        return WaitForTerminalExitResponse(exit_code=0)

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any):
        return ReleaseTerminalResponse()

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any):
        return None


KINDS = ["http", "websocket", "https", "wss"]


@pytest.fixture
def tls_options(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, Any]]:
    """The server's options for ``kind``; over TLS the SDK's clients trust the test's
    authority (the HTTP one through the httpx client it is given, the WebSocket one,
    which takes no TLS option, through ``SSL_CERT_FILE`` as any program would)."""
    if kind not in ("https", "wss"):
        return {}
    (tmp_path / "tls").mkdir()
    certs = make_certs(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", certs.ca_file)
    return {"tls": certs.tls}


@asynccontextmanager
async def sdk_connection(url: str, kind: str, client: SdkClient) -> AsyncIterator[Any]:
    async with contextlib.AsyncExitStack() as stack:
        versions: set[str] = set()
        if kind in ("http", "https"):
            http = None
            if kind == "https":  # the SDK's own client, given the authority to trust
                verify = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])

                async def seen(response: httpx.Response) -> None:
                    versions.add(response.http_version)

                http = httpx.AsyncClient(
                    http2=True,
                    timeout=httpx.Timeout(None),
                    verify=verify,
                    event_hooks={"response": [seen]},
                )
                await stack.enter_async_context(http)
            transport = create_http_stream(url, client=http)
        else:
            transport = await create_websocket_stream(url_for(url, "websocket"))
        conn = connect_to_agent(client, transport)
        try:
            yield conn
        finally:
            await conn.close()
        if kind == "https":
            assert versions == {"HTTP/2"}  # ALPN chose HTTP/2, as the SDK's client asks


def _texts(updates: list[Any], kind: str = "agent_message_chunk") -> list[str]:
    return [u.content.text for u in updates if u.session_update == kind]


def _kinds(updates: list[Any]) -> list[str]:
    return [u.session_update for u in updates]


@pytest.mark.parametrize("kind", KINDS)
async def test_the_sdk_client_drives_every_command(
    kind: str, tls_options: dict[str, Any], tmp_path: Path
) -> None:
    cwd = Path(workdir(tmp_path))
    (cwd / "in.txt").write_text("twelve chars")
    client = SdkClient(cwd)
    caps = FS_CAPS.model_copy(update={"terminal": True})
    async with running_server(**tls_options) as url, sdk_connection(url, kind, client) as conn:
        assert url.startswith("https://" if tls_options else "http://")
        init = await conn.initialize(protocol_version=1, client_capabilities=caps)
        assert init.protocol_version == 1
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        sid = session.session_id

        async def run(text: str) -> tuple[str, list[Any]]:
            response = await conn.prompt(session_id=sid, prompt=[text_block(text)])
            return response.stop_reason, client.take()

        client.take()
        stop, updates = await run("/echo hello sdk")
        assert (stop, _texts(updates)) == ("end_turn", ["hello sdk"])
        stop, updates = await run("/stream 5 3")
        assert [len(t) for t in _texts(updates)] == [3] * 5
        stop, updates = await run("/think deeply")
        assert _texts(updates, "agent_thought_chunk") == ["deeply"]
        stop, updates = await run("/plan 2")
        assert _kinds(updates) == ["plan"] * 3
        stop, updates = await run("/tools 2")
        assert _kinds(updates) == ["tool_call", "tool_call_update", "tool_call_update"] * 2
        stop, updates = await run("/read in.txt")
        assert _texts(updates) == ["read 12 chars"]
        stop, updates = await run("/write out.txt written remotely")
        assert stop == "end_turn"
        assert (cwd / "out.txt").read_text() == "written remotely"
        stop, updates = await run("/run echo hi")
        assert stop == "end_turn" and "exit 0" in _texts(updates)
        stop, updates = await run("/help")
        listing = _texts(updates)[0]
        assert "/echo" in listing
        if "/notice" in listing:  # commands of the contract's newer revision
            stop, updates = await run("/notice info heads up")
            assert _texts(updates) == ["notice: heads up"]
        if "/compact" in listing:
            stop, updates = await run("/compact 2")
            assert _texts(updates) == ["compaction is not supported by this client"]
        stop, updates = await run("plain words")
        assert "plain words" in _texts(updates)[0]
        with pytest.raises(RequestError) as failed:
            await run("/fail -32042 on purpose")
        assert (failed.value.code, str(failed.value)) == (-32042, "on purpose")
        assert client.calls.count("read_text_file") == 1
        assert {"request_permission", "write_text_file", "create_terminal"} <= set(client.calls)

        await conn.set_session_mode(session_id=sid, mode_id="auto")
        await conn.set_config_option(session_id=sid, config_id="mode", value="ask")
        listed = await conn.list_sessions()
        assert [s.session_id for s in listed.sessions] == [sid]


@pytest.mark.parametrize("kind", KINDS)
async def test_the_sdk_client_cancels_and_reloads(
    kind: str, tls_options: dict[str, Any], tmp_path: Path
) -> None:
    cwd = Path(workdir(tmp_path))
    async with running_server(**tls_options) as url:
        client = SdkClient(cwd)
        async with sdk_connection(url, kind, client) as conn:
            await conn.initialize(protocol_version=1, client_capabilities=FS_CAPS)
            sid = (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("/echo kept")])
            (cwd / "held.txt").write_text("held")
            client.hold = asyncio.Event()
            reading = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[text_block("/read held.txt")])
            )
            with anyio.fail_after(10):
                await client.reading.wait()  # the turn waits on our answer to its read
            await conn.cancel(session_id=sid)
            client.hold.set()
            assert (await reading).stop_reason == "cancelled"

        again = SdkClient(cwd)
        async with sdk_connection(url, kind, again) as conn:
            await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
            await conn.load_session(session_id=sid, cwd=str(cwd), mcp_servers=[])
            replayed = again.take()
            assert "kept" in _texts(replayed)
            await conn.resume_session(session_id=sid, cwd=str(cwd), mcp_servers=[])
            response = await conn.prompt(session_id=sid, prompt=[text_block("/echo resumed")])
            assert response.stop_reason == "end_turn"
            assert _texts(again.take())[-1] == "resumed"
            await conn.close_session(session_id=sid)


@pytest.mark.parametrize("kind", ["http", "https"])
async def test_the_sdk_client_takes_an_update_over_1_mib(
    kind: str, tls_options: dict[str, Any], tmp_path: Path
) -> None:
    # (not over acp.ws: its websockets client refuses frames over 1 MiB by default)
    cwd = Path(workdir(tmp_path))
    client = SdkClient(cwd)
    async with running_server(**tls_options) as url, sdk_connection(url, kind, client) as conn:
        await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
        sid = (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id
        client.take()
        size = 3 * 1024 * 1024 // 2
        response = await conn.prompt(session_id=sid, prompt=[text_block(f"/stream 2 {size}")])
        assert response.stop_reason == "end_turn"
        assert [len(text) for text in _texts(client.take())] == [size, size]
