"""One live connection per session within one process on a PostgreSQL store.

Connections of one process share the store object's lease: the database cannot tell them
apart. So the process itself gives a session to one connection at a time: a ``session/load``
on a second connection takes the session over from the first (its copy is closed first, its
turns written), whether the connections are those of one ``acp-agent-kit serve`` or of two
servers built on one store object, as with the SQLite store. Another host (another store
object) is refused while the process holds the session (``leased``, ``retryAfterMs``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from acp_agent.errors import SessionLeased
from acp_agent.reference import ReferenceAgent
from acp_agent.store import DEFAULT_OWNER
from acp_agent.store.postgres import PostgresSessionStore
from tests.helpers.memclient import serving
from tests.helpers.wire_client import is_response
from tests.remote._support import connect, running_server, workdir

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stores(
    postgres_url: str, anyio_backend: object
) -> AsyncIterator[list[PostgresSessionStore]]:
    """Two store objects on one schema: this process's, and another host's."""
    async with AsyncExitStack() as stack:
        opened = []
        for _ in range(2):
            store = await PostgresSessionStore.open(postgres_url, lease_timeout=30)
            stack.push_async_callback(store.aclose)
            opened.append(store)
        yield opened


async def refused_elsewhere(other_host: PostgresSessionStore, sid: str) -> None:
    with pytest.raises(SessionLeased) as refused:
        await other_host.acquire(sid)
    assert refused.value.data["reason"] == "leased"
    assert refused.value.data["retryAfterMs"] > 0


async def test_connections_of_one_serve_process_hand_a_session_over(
    stores: list[PostgresSessionStore], tmp_path: Path
) -> None:
    store, other_host = stores
    cwd = workdir(tmp_path)
    async with (
        running_server(store=store) as url,
        connect(url, "websocket") as first,
        connect(url, "websocket") as second,
    ):
        await first.initialize()
        await second.initialize()
        sid, _, _ = await first.new_session(cwd)
        assert (await first.prompt(sid, "/echo one")).stop_reason == "end_turn"
        await second.call("session/load", {"sessionId": sid, "cwd": cwd, "mcpServers": []})
        late = await first.start_prompt(sid, "/echo still mine?")
        response, _ = await first.expect(lambda m: is_response(m, late))
        assert response["error"]["code"] == -32002, response  # closed on the first
        assert (await second.prompt(sid, "/echo two")).texts() == ["two"]
        await refused_elsewhere(other_host, sid)
    history = await other_host.load_history(DEFAULT_OWNER, sid)
    assert [t.stop_reason for t in history] == ["end_turn", "end_turn"]


async def test_two_servers_on_one_store_object_hand_a_session_over(
    stores: list[PostgresSessionStore], tmp_path: Path
) -> None:
    store, other_host = stores
    cwd = str(tmp_path)
    async with (
        serving(ReferenceAgent(), store) as (a, _),
        serving(ReferenceAgent(), store) as (b, _),
    ):
        await a.initialize()
        await b.initialize()
        sid = await a.new_session(cwd)
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "/echo one"}]}
        response, _ = await a.call("session/prompt", prompt)
        assert response["result"]["stopReason"] == "end_turn", response
        response, _ = await b.call("session/load", {"sessionId": sid, "cwd": cwd, "mcpServers": []})
        assert "result" in response, response
        response, _ = await a.call("session/prompt", prompt)
        assert response["error"]["code"] == -32002, response  # a's copy was closed
        response, _ = await b.call("session/prompt", prompt)
        assert response["result"]["stopReason"] == "end_turn", response
        await refused_elsewhere(other_host, sid)
    history = await other_host.load_history(DEFAULT_OWNER, sid)
    assert [t.stop_reason for t in history] == ["end_turn", "end_turn"]
