"""An in-process scripted ACP client over the in-memory transport pair.

Tests drive an :class:`~acp_agent.server.AcpServer` with it: write JSON frames, read
the agent's frames one at a time (in order), answer the agent's requests by hand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson

from acp_agent.agent import Agent
from acp_agent.options import ServerOptions
from acp_agent.server import AcpServer
from acp_agent.store import SessionStore
from acp_agent.transport import MemoryTransport, memory_pair

FULL_CAPS: dict[str, Any] = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
}


class WireClient:
    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self._buf = b""
        self._next_id = 100
        self.seen: list[dict[str, Any]] = []
        #: frames the agent wrote after the client sent EOF (filled by ``serving``)
        self.after_eof: list[dict[str, Any]] = []

    async def send(self, obj: Any) -> None:
        await self.transport.send(orjson.dumps(obj) + b"\n")

    async def send_raw(self, data: bytes) -> None:
        await self.transport.send(data)

    async def recv(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            self._buf += await self.transport.receive()
        line, self._buf = self._buf.split(b"\n", 1)
        msg = orjson.loads(line)
        self.seen.append(msg)
        return msg  # type: ignore[no-any-return]

    async def request(self, method: str, params: Any = None, *, id: Any = None) -> Any:
        """Send a request; return its id."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return id

    async def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)

    async def until_response(
        self, id: Any, on_other: Callable[[dict[str, Any]], Any] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read until the response for ``id``; return it and everything before it."""
        before: list[dict[str, Any]] = []
        while True:
            msg = await self.recv()
            if "method" not in msg and msg.get("id") == id:
                return msg, before
            before.append(msg)
            if on_other is not None:
                await on_other(msg)

    async def call(
        self, method: str, params: Any = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        id = await self.request(method, params)
        return await self.until_response(id)

    async def initialize(self, caps: dict[str, Any] | None = None) -> dict[str, Any]:
        resp, _ = await self.call(
            "initialize", {"protocolVersion": 1, "clientCapabilities": caps or {}}
        )
        return resp["result"]  # type: ignore[no-any-return]

    async def new_session(self, cwd: str = "/tmp") -> str:
        resp, _ = await self.call("session/new", {"cwd": cwd, "mcpServers": []})
        return str(resp["result"]["sessionId"])

    async def respond(self, id: Any, result: Any) -> None:
        await self.send({"jsonrpc": "2.0", "id": id, "result": result})


@asynccontextmanager
async def serving(
    agent: Agent, store: SessionStore | None = None, **options: Any
) -> AsyncIterator[tuple[WireClient, AcpServer]]:
    """Run ``agent`` in-process; yield a client. ``options`` are
    :class:`ServerOptions` fields. On exit the client sends EOF and the server must shut
    down by itself."""
    ours, theirs = memory_pair()
    server = AcpServer(agent, store, ServerOptions(**options))

    async def run() -> None:
        try:
            await server.serve(theirs)
        finally:
            await theirs.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        client = WireClient(ours)
        try:
            yield client, server
        finally:
            try:
                with anyio.fail_after(5):
                    await ours.send_eof()
                    # drain until the server closes its side
                    try:
                        while True:
                            client.after_eof.append(await client.recv())
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        pass
            finally:
                # close our receiving end too (an unclosed memory stream warns on GC)
                await ours.aclose()
