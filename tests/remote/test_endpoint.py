"""The ``/acp`` endpoint's HTTP surface and its bounds, checked with a plain HTTP client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from acp_agent.errors import ConnectionClosed

from ._support import Limits, connect, running_server, workdir

pytestmark = pytest.mark.anyio

INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": 1},
}


async def _open(http: httpx.AsyncClient, url: str) -> str:
    opened = await http.post(url, json=INIT)
    assert opened.status_code == 200, opened.text
    assert opened.json()["result"]["protocolVersion"] == 1
    return opened.headers["acp-connection-id"]


async def test_requests_the_endpoint_refuses() -> None:
    async with running_server() as url, httpx.AsyncClient() as http:
        conn = await _open(http, url)
        head = {"Acp-Connection-Id": conn}
        note = b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}'
        cases = [
            (http.post(url, content=note, headers={"Content-Type": "text/plain", **head}), 415),
            (http.post(url, json=[INIT], headers=head), 501),
            (http.post(url, content=note, headers={"Content-Type": "application/json"}), 400),
            (http.post(url, json=INIT, headers={"Acp-Connection-Id": "nope"}), 404),
            (http.get(url, headers={"Accept": "application/json", **head}), 406),
            (http.get(url, headers={"Accept": "text/event-stream"}), 400),
            (http.delete(url), 404),
            (http.put(url, content=b"{}"), 405),
            (http.post(url.replace("/acp", "/other"), json=INIT), 404),
            (http.post(url, json=INIT, headers={"Origin": "https://evil.example"}), 403),
        ]
        for request, status in cases:
            response = await request
            assert response.status_code == status, (status, response.text)
        batch = await http.post(url, json=[INIT], headers=head)
        assert batch.json()["error"]["code"] == -32600
        same_origin = await http.post(url, json=INIT, headers={"Origin": "http://127.0.0.1"})
        assert same_origin.status_code == 200


async def test_one_stream_per_connection_and_session_streams_stay_open(tmp_path: Path) -> None:
    async with running_server() as url, httpx.AsyncClient(timeout=10) as http:
        conn = await _open(http, url)
        head = {"Acp-Connection-Id": conn, "Accept": "text/event-stream"}
        async with http.stream("GET", url, headers=head) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"] == "text/event-stream"
            second = await http.get(url, headers=head)
            assert second.status_code == 409
            session_head = {**head, "Acp-Session-Id": "sess_any"}
            async with http.stream("GET", url, headers=session_head) as per_session:
                assert per_session.status_code == 200
                lines = per_session.aiter_lines()
                assert await anext(lines) == ": acp"
                deleted = await http.delete(url, headers={"Acp-Connection-Id": conn})
                assert deleted.status_code == 202
                rest = [line async for line in lines]
                assert all(line == "" or line.startswith(":") for line in rest)
            events = [line async for line in stream.aiter_lines()]
            assert events[0] == ": acp"
        gone = await http.post(url, json=INIT, headers={"Acp-Connection-Id": conn})
        assert gone.status_code == 404


async def test_connections_per_principal_are_bounded(tmp_path: Path) -> None:
    async with running_server(limits=Limits(connections=2)) as url, httpx.AsyncClient() as http:
        first = await _open(http, url)
        await _open(http, url)
        refused = await http.post(url, json=INIT)
        assert refused.status_code == 429
        with pytest.raises(ConnectionClosed, match="HTTP 429"):
            async with connect(url, "websocket"):
                pass
        head = {"Acp-Connection-Id": first, "Accept": "text/event-stream"}
        async with http.stream("GET", url, headers=head) as stream:
            assert (await http.delete(url, headers=head)).status_code == 202
            await stream.aread()  # the stream ends once the connection is gone
        assert (await http.post(url, json=INIT)).status_code == 200


@pytest.mark.parametrize("kind", ["websocket", "http"])
async def test_an_idle_connection_is_closed_and_a_busy_one_is_not(
    kind: str, tmp_path: Path
) -> None:
    async with (
        running_server(limits=Limits(idle_timeout=0.5)) as url,
        connect(url, kind) as idle,
        connect(url, kind) as busy,
    ):
        # The busy one has a request pending before the idle one's clock starts, so on a
        # slow machine it is never judged idle; it stays pending until it is cancelled.
        await busy.initialize()
        session_id, _, _ = await busy.new_session(workdir(tmp_path))
        running = await busy.start_prompt(session_id, "/sleep 100000")
        await idle.initialize()
        assert await idle.closed()
        turn = await busy.cancel(session_id, running)
        assert turn.stop_reason == "cancelled"


async def test_the_models_are_built_before_the_server_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import acp_agent.server.models as base_module

    monkeypatch.setattr(base_module, "_models_built", False)  # as in a fresh process
    async with running_server():
        # built once at start-up, not on some connection's time and memory
        assert base_module.models_built()
