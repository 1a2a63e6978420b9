"""Large messages: one WebSocket message or one SSE event per JSON-RPC message, whatever
its size (the server writes a large frame to its link in pieces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._support import KINDS, connect, running_server, workdir

pytestmark = pytest.mark.anyio

BIG = 3 * 1024 * 1024 // 2  # characters in one update: over 1 MiB


@pytest.mark.parametrize("kind", KINDS)
async def test_an_update_over_1_mib_arrives_whole(kind: str, tmp_path: Path) -> None:
    async with running_server() as url, connect(url, kind) as client:
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        turn = await client.prompt(session_id, f"/stream 3 {BIG}")
        assert turn.stop_reason == "end_turn"
        assert [len(text) for text in turn.texts()] == [BIG] * 3
        assert (await client.prompt(session_id, "/echo after")).texts() == ["after"]
