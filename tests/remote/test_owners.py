"""One live connection per session in one process: a load on another connection takes
the session over, and the connection that had it open loses it as if it were closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.wire_client import is_response

from ._support import KINDS, connect, running_server, workdir

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["session/load", "session/resume"])
async def test_a_load_on_another_connection_takes_the_session_over(
    kind: str, method: str, tmp_path: Path
) -> None:
    cwd = workdir(tmp_path)
    async with (
        running_server() as url,
        connect(url, kind) as first,
        connect(url, kind) as second,
    ):
        await first.initialize()
        await second.initialize()
        sid, _, _ = await first.new_session(cwd)
        running = await first.start_prompt(sid, "/write note.txt hello")
        # It runs, and waits for a permission that never comes.
        await first.expect(lambda m: m.get("method") == "session/request_permission")
        await second.call(method, {"sessionId": sid, "cwd": cwd, "mcpServers": []})
        # The first connection's turn ended cancelled, before the takeover was answered.
        assert (await first.finish_prompt(running)).stop_reason == "cancelled"
        late = await first.start_prompt(sid, "/echo still mine?")
        response, _ = await first.expect(lambda m: is_response(m, late))
        assert response["error"]["code"] == -32002, response
        turn = await second.prompt(sid, "/echo now here")
        assert turn.texts() == ["now here"]
        # The session stays the second connection's: the first one's close is a no-op.
        closed = await first.request("session/close", {"sessionId": sid})
        await first.expect(lambda m: is_response(m, closed))
        assert (await second.prompt(sid, "/echo still here")).texts() == ["still here"]
