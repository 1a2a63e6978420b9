"""The remote floor: the least an ACP server on Hypercorn can do for ``benchmarks/remote.py``.

A bare ASGI app on the same ASGI server (Hypercorn, asyncio on uvloop) that answers the two
scenarios' messages and nothing else: ``initialize``, ``session/new``, ``session/prompt``
with ``/echo TEXT`` (one chunk, then ``end_turn``) or ``/stream N`` (N chunks, then
``end_turn``, or ``cancelled`` once a ``session/cancel`` for its session has arrived), over
WebSocket only. No validation, no store, no error answers: what a frame costs on this
server, with no ACP work around it. Not an ACP implementation.

    python benchmarks/peers/floor_remote.py --listen 127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hypercorn_run import run

Send = Any  # the ASGI send callable


def _chunk(session_id: str, text: str) -> str:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update},
    }
    return orjson.dumps(message).decode()


def _result(request_id: Any, result: Any) -> str:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).decode()


class Connection:
    """One WebSocket connection's sessions and the prompts streaming in them."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.ids = itertools.count()
        self.cancelled: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    async def text(self, text: str) -> None:
        await self.send({"type": "websocket.send", "text": text})

    async def handle(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            await self.text(_result(message["id"], {"protocolVersion": 1}))
        elif method == "session/new":
            await self.text(_result(message["id"], {"sessionId": f"floor-{next(self.ids)}"}))
        elif method == "session/cancel":
            self.cancelled.add(params["sessionId"])
        elif method == "session/prompt":
            self.cancelled.discard(params["sessionId"])
            task = asyncio.create_task(self.prompt(message["id"], params))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def prompt(self, request_id: Any, params: dict[str, Any]) -> None:
        session_id = params["sessionId"]
        command, _, rest = params["prompt"][0]["text"].partition(" ")
        stop = "end_turn"
        if command == "/echo":
            await self.text(_chunk(session_id, rest))
        else:
            for i in range(int(rest)):
                if session_id in self.cancelled:
                    stop = "cancelled"
                    break
                await self.text(_chunk(session_id, f"chunk {i} "))
        await self.text(_result(request_id, {"stopReason": stop}))


async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    connection = Connection(send)
    try:
        while (event := await receive())["type"] == "websocket.receive":
            await connection.handle(orjson.loads(event.get("text") or event.get("bytes")))
    finally:
        for task in connection.tasks:
            task.cancel()


if __name__ == "__main__":
    run(app)
