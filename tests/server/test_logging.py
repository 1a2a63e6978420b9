"""``--log-level debug`` tells an operator what happened, without what people wrote.

A real agent process: one line per request (method, id, session, outcome, duration),
per notification and per invalid message; session lifecycle; store writes. Prompt
text shows only with ``--log-content``. Stdout stays protocol only (the wire client
parses every line it reads).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.wire_client import SERVER, is_response, spawn

pytestmark = pytest.mark.anyio

SECRET = "words only the person typed"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the agent is a subprocess; the client side needs one loop


async def run_session(tmp_path: Path, *flags: str) -> tuple[str, str]:
    async with spawn([*SERVER, "--log-level", "debug", *flags]) as client:
        await client.initialize()
        sid, _, _ = await client.new_session(tmp_path)
        assert client.process.stdin is not None
        await client.process.stdin.send(b'{"jsonrpc":"2.0","id":77,"method"\n')
        await client.expect(lambda m: m.get("id") is None and "error" in m)
        unknown = await client.request("nope/unknown", {})
        await client.expect(lambda m: is_response(m, unknown))
        turn = await client.prompt(sid, f"/echo {SECRET}")
        assert turn.stop_reason == "end_turn"
        await client.notify("session/cancel", {"sessionId": sid})
        await client.call("session/close", {"sessionId": sid})
    assert client.process.returncode == 0
    return sid, bytes(client.stderr).decode()


async def test_debug_logs_each_message_and_the_session_lifecycle(tmp_path: Path) -> None:
    sid, log = await run_session(tmp_path)
    ms = r"in \d+\.\d ms"
    expected = [
        rf"request initialize id=1: ok {ms}",
        rf"request session/new id=2: ok {ms}",
        r"invalid message \(id=None\): -32700 Parse error, answered",
        rf"request nope/unknown id=\d+: error -32601 .* {ms}",
        rf"request session/prompt id=\d+ session={sid}: ok {ms}",
        rf"notification session/cancel session={sid}",
        rf"session {sid} created \(cwd ",
        rf"turn turn_\w+ of session {sid} ended: end_turn",
        rf"stored \d+ steps of turn turn_\w+ \(session {sid}\)",
        rf"session {sid} closed",
    ]
    for pattern in expected:
        assert re.search(pattern, log), (pattern, log)
    assert SECRET not in log
    assert "Traceback" not in log


async def test_message_contents_are_logged_only_when_asked(tmp_path: Path) -> None:
    _, log = await run_session(tmp_path, "--log-content")
    assert SECRET in log
    assert re.search(r"DEBUG acp_agent.content: request session/prompt id=\d+ params=", log)
