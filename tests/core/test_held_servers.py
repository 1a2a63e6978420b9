"""The held servers' lifecycle (``acp_agent.held_servers``) with in-memory openers: the
owner task, its connect deadline, its failures' lines, and stopping. The MCP clients that
use it are tested end to end in ``tests/llm/test_mcp_servers.py`` and
``tests/adapters/test_mcp.py``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from acp_agent import held_servers
from acp_agent.held_servers import Held, HeldServers, server_env, server_name

pytestmark = pytest.mark.anyio

log = logging.getLogger("tests.held_servers")


class Server:
    """An in-memory server: opening waits for ``open_gate``, closing for ``close_gate``."""

    def __init__(self) -> None:
        self.open_gate = anyio.Event()
        self.close_gate = anyio.Event()
        self.opened = self.closed = 0

    @asynccontextmanager
    async def opener(self) -> AsyncIterator[str]:
        await self.open_gate.wait()
        self.opened += 1
        try:
            yield "value"
        finally:
            await self.close_gate.wait()
            self.closed += 1


async def test_a_server_is_opened_held_and_closed_by_its_owner_task() -> None:
    servers: HeldServers[str] = HeldServers(30.0, log)
    server, one = Server(), Held[str]({"name": "a"}, "a")
    settled: list[bool] = []
    server.open_gate.set()
    server.close_gate.set()
    async with servers.running():
        group = servers.group()
        assert group is not None and servers.serving
        servers.hold(group, one, server.opener, lambda: settled.append(one.value is not None))
        await one.ready.wait()
        assert (one.value, one.error, servers.server_tasks, settled) == ("value", None, 1, [True])
        await servers.stop([one])
        assert one.done.is_set() and one.value is None and server.closed == 1
        assert servers.server_tasks == 0 and settled == [True, False]
    assert not servers.serving and servers.group() is None


async def test_the_end_of_running_stops_what_it_still_holds() -> None:
    servers: HeldServers[str] = HeldServers(30.0, log)
    opened, connecting = Server(), Server()
    first, second = Held[str]({}, "opened"), Held[str]({}, "connecting")
    opened.open_gate.set()
    opened.close_gate.set()
    async with servers.running():
        group = servers.group()
        assert group is not None
        servers.hold(group, first, opened.opener)
        servers.hold(group, second, connecting.opener)
        await first.ready.wait()
    assert first.done.is_set() and second.done.is_set() and servers.server_tasks == 0
    assert opened.closed == 1 and connecting.opened == 0
    assert second.error == "the session closed before it started"


async def test_a_server_that_does_not_open_in_time_is_described() -> None:
    servers: HeldServers[str] = HeldServers(0.0, log)
    one = Held[str]({}, "slow")
    async with servers.running():
        group = servers.group()
        assert group is not None
        servers.hold(group, one, Server().opener)
        await one.done.wait()
    assert one.error == "it did not start within 0 s" and one.value is None


class Wrapped(Exception):
    """Shaped as an exception group: its first leaf is the failure described."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__("wrapped")
        self.exceptions = (inner,)


async def test_a_failure_is_one_line_with_the_openers_note() -> None:
    servers: HeldServers[str] = HeldServers(30.0, log)
    one = Held[str]({}, "broken")

    @asynccontextmanager
    async def failing() -> AsyncIterator[str]:
        one.note = "HTTP 401"
        raise Wrapped(RuntimeError("no\n  entry"))
        yield "never"  # pragma: no cover

    async with servers.running():
        group = servers.group()
        assert group is not None
        servers.hold(group, one, failing)
        await one.done.wait()
    assert one.error == "RuntimeError: no entry (HTTP 401)"


async def test_a_server_too_slow_to_close_is_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_servers, "CLOSE_BOUND", 0.0)
    servers: HeldServers[str] = HeldServers(30.0, log)
    server, one = Server(), Held[str]({}, "stuck")
    server.open_gate.set()  # its close_gate never opens
    async with servers.running():
        group = servers.group()
        assert group is not None
        servers.hold(group, one, server.opener)
        await one.ready.wait()
        await servers.stop([one])
        assert one.done.is_set() and server.closed == 0 and servers.server_tasks == 0


async def test_no_group_while_the_block_closes() -> None:
    servers: HeldServers[str] = HeldServers(30.0, log)
    seen: list[object] = []
    server, one = Server(), Held[str]({}, "a")
    server.open_gate.set()

    @asynccontextmanager
    async def watching() -> AsyncIterator[str]:
        async with server.opener() as value:
            yield value
        seen.append(servers.group())  # asked from the block's own task group, closing

    server.close_gate.set()
    async with servers.running():
        group = servers.group()
        assert group is not None
        servers.hold(group, one, watching)
        await one.ready.wait()
    assert seen == [None]


def test_the_mcp_server_shape_readings() -> None:
    assert server_name({"name": "calc"}, 3) == "calc"
    assert server_name({"name": ""}, 3) == server_name({}, 3) == "server3"
    items = [{"name": "A", "value": 1}, {"name": "B"}, {"value": "x"}, "junk"]
    assert server_env(items) == {"A": "1", "B": ""}
    assert server_env(None) == {}
