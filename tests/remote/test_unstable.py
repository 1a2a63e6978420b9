"""``acp-agent-kit --unstable serve``: the unstable features over WebSocket and HTTP too."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_agent.options import ServerOptions

from ._support import KINDS, connect, running_server, workdir

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("unstable", [False, True])
async def test_unstable_features_follow_the_flag(kind: str, unstable: bool, tmp_path: Path) -> None:
    options = ServerOptions(unstable=unstable)
    async with running_server(options=options) as url, connect(url, kind) as client:
        init = await client.initialize()
        caps = init["agentCapabilities"]["sessionCapabilities"]
        assert ("fork" in caps, "title" in caps) == (unstable, unstable)
        sid, _, _ = await client.new_session(workdir(tmp_path))
        turn = await client.prompt(sid, "/echo over the network")
        assert ("usage" in turn.response["result"]) == unstable
