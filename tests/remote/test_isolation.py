"""Two principals on one server: each sees only its own sessions and connections.

Every session method bob may try on alice's session must answer exactly as it does for
an id that exists nowhere (the ids themselves aside).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from acp_agent.errors import ConnectionClosed
from acp_agent.remote import Principals, RemoteConfigError, serve_http
from tests.helpers.wire_client import is_response

from ._support import TOKENS, RemoteClient, connect, principals, running_server, workdir

pytestmark = pytest.mark.anyio


def _methods(session_id: str, cwd: str) -> list[tuple[str, dict[str, Any]]]:
    sid = {"sessionId": session_id}
    where = {**sid, "cwd": cwd, "mcpServers": []}
    return [
        ("session/load", where),
        ("session/resume", where),
        ("session/fork", where),
        ("session/close", sid),
        ("session/delete", sid),
        ("session/prompt", {**sid, "prompt": [{"type": "text", "text": "/echo mine now"}]}),
        ("session/set_mode", {**sid, "modeId": "auto"}),
        ("session/set_config_option", {**sid, "configId": "mode", "value": "auto"}),
    ]


async def _answer(client: RemoteClient, method: str, params: dict[str, Any]) -> Any:
    request_id = await client.request(method, params)
    response, before = await client.expect(lambda m: is_response(m, request_id))
    response.pop("id")
    return response, before


def _without(value: Any, session_id: str) -> str:
    return orjson.dumps(value).decode().replace(session_id, "<id>")


@pytest.mark.parametrize("kind", ["websocket", "http"])
async def test_another_principals_session_is_as_unknown_as_no_session(
    kind: str, tmp_path: Path
) -> None:
    cwd = workdir(tmp_path)
    async with (
        running_server(principals=principals()) as url,
        connect(url, kind, token=TOKENS["alice"]) as alice,
        connect(url, kind, token=TOKENS["bob"]) as bob,
    ):
        await alice.initialize()
        await bob.initialize()
        theirs, _, _ = await alice.new_session(cwd)
        await alice.prompt(theirs, "/echo alice's words")
        nowhere = "sess_" + secrets.token_hex(12)
        assert len(nowhere) == len(theirs)

        for method, params in _methods(theirs, cwd):
            crossed = await _answer(bob, method, params)
            unknown_params = orjson.loads(orjson.dumps(params).replace(theirs.encode(), b"<x>"))
            unknown_params = orjson.loads(
                orjson.dumps(unknown_params).replace(b"<x>", nowhere.encode())
            )
            unknown = await _answer(bob, method, unknown_params)
            assert _without(crossed, theirs) == _without(unknown, nowhere), method

        listed, _ = await bob.call("session/list", {})
        assert listed["sessions"] == []
        listed, _ = await bob.call("session/list", {"cwd": cwd})
        assert listed["sessions"] == []

        # alice's session is untouched by all of that, and hers alone
        mine, _ = await alice.call("session/list", {})
        assert [s["sessionId"] for s in mine["sessions"]] == [theirs]
        _, replay = await alice.call(
            "session/load", {"sessionId": theirs, "cwd": cwd, "mcpServers": []}
        )
        texts = [m["params"]["update"].get("content", {}).get("text") for m in replay]
        assert "alice's words" in texts


@pytest.mark.parametrize("kind", ["websocket", "http"])
async def test_a_cancel_for_another_principals_session_cancels_nothing(
    kind: str, tmp_path: Path
) -> None:
    async with (
        running_server(principals=principals()) as url,
        connect(url, kind, token=TOKENS["alice"]) as alice,
        connect(url, kind, token=TOKENS["bob"]) as bob,
    ):
        await alice.initialize()
        await bob.initialize()
        theirs, _, _ = await alice.new_session(workdir(tmp_path))
        running = await alice.start_prompt(theirs, "/sleep 60000")
        await bob.notify("session/cancel", {"sessionId": theirs})
        await bob.call("session/list", {})  # bob's cancel has been applied by now
        busy = await alice.start_prompt(theirs, "/echo still busy?")
        refused, _ = await alice.expect(lambda m: is_response(m, busy))
        assert refused["error"]["code"] == -32010  # the sleep is still running
        turn = await alice.cancel(theirs, running)
        assert turn.stop_reason == "cancelled"


async def test_connections_answer_only_to_the_principal_that_opened_them() -> None:
    async with running_server(principals=principals()) as url, httpx.AsyncClient() as http:
        alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
        bob = {"Authorization": f"Bearer {TOKENS['bob']}"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        opened = await http.post(url, json=init, headers=alice)
        assert opened.status_code == 200
        alices = opened.headers["acp-connection-id"]
        unknown = secrets.token_hex(16)
        note = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}}
        for conn_id in (alices, unknown):
            head = {**bob, "Acp-Connection-Id": conn_id}
            posted = await http.post(url, json=note, headers=head)
            deleted = await http.delete(url, headers=head)
            async with http.stream(
                "GET", url, headers={**head, "Accept": "text/event-stream"}
            ) as got:
                await got.aread()
            assert (posted.status_code, deleted.status_code, got.status_code) == (404, 404, 404)
            assert posted.content == deleted.content == b"unknown Acp-Connection-Id"
        # still alice's, and alive
        head = {**alice, "Acp-Connection-Id": alices}
        assert (await http.post(url, json=note, headers=head)).status_code == 202
        assert (await http.delete(url, headers=head)).status_code == 202


async def test_requests_without_a_valid_token_are_refused() -> None:
    async with running_server(principals=principals()) as url, httpx.AsyncClient() as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-0123456789"},
            {"Authorization": TOKENS["alice"]},
        ):
            refused = await http.post(url, json=init, headers=headers)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"
        with pytest.raises(ConnectionClosed, match="HTTP 401"):
            async with connect(url, "websocket", token="wrong-token-0123456789"):
                pass


async def test_without_a_token_file_only_loopback_is_served() -> None:
    with pytest.raises(RemoteConfigError, match="without --token-file"):
        await serve_http(object, listen="0.0.0.0:0", store="memory")  # type: ignore[arg-type]
    with pytest.raises(RemoteConfigError, match="without --token-file"):
        await serve_http(object, listen="[::]:0", store="memory", principals=Principals())  # type: ignore[arg-type]
