"""TLS on the wire: ``https://`` (HTTP/1.1 and HTTP/2) and ``wss://`` with a certificate
made in the test, checked by the client against its authority."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from acp_agent.errors import ConnectionClosed
from acp_agent.transport.remote import open_remote

from ._support import KINDS, RemoteClient, running_server, sole_error, url_for, workdir
from ._tls import Certs, make_certs

pytestmark = pytest.mark.anyio


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    (tmp_path / "tls").mkdir()
    return make_certs(tmp_path / "tls")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_turn_over_tls(kind: str, certs: Certs, tmp_path: Path) -> None:
    async with running_server(tls=certs.tls) as url:
        assert url.startswith("https://")
        async with open_remote(url_for(url, kind), ca_file=certs.ca_file) as transport:
            client = RemoteClient(transport)
            await client.initialize()
            session_id, _, _ = await client.new_session(workdir(tmp_path))
            turn = await client.prompt(session_id, "/echo over tls")
            assert turn.texts() == ["over tls"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_client_refuses_a_certificate_it_cannot_check(kind: str, certs: Certs) -> None:
    async with running_server(tls=certs.tls) as url:
        with pytest.raises(BaseException) as refused:
            async with open_remote(url_for(url, kind)) as transport:  # system authorities
                await RemoteClient(transport).initialize()
    failure = sole_error(refused.value)
    assert isinstance(failure, ConnectionClosed), failure  # on opening, either way
    assert "certificate verify failed" in str(failure)


async def test_http2_over_tls(certs: Certs, tmp_path: Path) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    new = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/new",
        "params": {"cwd": workdir(tmp_path), "mcpServers": []},
    }
    async with (
        running_server(tls=certs.tls) as url,
        httpx.AsyncClient(http2=True, verify=certs.client_context(), timeout=10) as http,
    ):
        opened = await http.post(url, json=init)
        assert (opened.status_code, opened.http_version) == (200, "HTTP/2")
        head = {"Acp-Connection-Id": opened.headers["acp-connection-id"]}
        stream = {"Accept": "text/event-stream", **head}
        async with http.stream("GET", url, headers=stream) as events:
            assert (events.status_code, events.http_version) == (200, "HTTP/2")
            posted = await http.post(url, json=new, headers=head)
            assert posted.status_code == 202
            answers = []
            async for line in events.aiter_lines():  # read to the end: it ends with DELETE
                if line.startswith("data:"):
                    message = orjson.loads(line[5:])
                    if message.get("id") == 2:
                        answers.append(message)
                        assert (await http.delete(url, headers=head)).status_code == 202
            assert answers[0]["result"]["sessionId"]
