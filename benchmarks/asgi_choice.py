"""Which ASGI server carries acp-agent's remote transport: a measurement.

Each candidate serves the same tiny ASGI app on 127.0.0.1 (a WebSocket that echoes
every text frame, and a POST that answers 202), in a subprocess of its own; one
client process then opens ``--connections`` WebSockets that each do ``--rounds``
echo round trips, and sends ``--posts`` POSTs over ``--concurrency`` keep-alive
connections. Reported: round trips per second, POSTs per second, the server's
RSS per open WebSocket.

    python -m benchmarks.asgi_choice [--connections 200 --rounds 50 --posts 2000]

The clients (websockets, httpx) are the same for every server, so only the
server side differs between rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from benchmarks.client import status_kib

CANDIDATES: dict[str, list[str]] = {
    "hypercorn+wsproto (asyncio, uvloop)": ["hypercorn", "uvloop"],
    "hypercorn+wsproto (trio)": ["hypercorn", "trio"],
    "uvicorn+websockets (uvloop)": ["uvicorn", "websockets"],
    "uvicorn+wsproto (uvloop)": ["uvicorn", "wsproto"],
}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            await send({"type": "websocket.send", "text": message.get("text") or ""})
    if scope["type"] == "http":
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def serve(kind: str, flavour: str, port: int) -> None:
    if kind == "hypercorn":
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        config.errorlog = None
        if flavour == "trio":
            import trio
            from hypercorn.trio import serve as trio_serve

            trio.run(trio_serve, app, config)
        else:
            import uvloop
            from hypercorn.asyncio import serve as asyncio_serve

            uvloop.run(asyncio_serve(app, config))  # type: ignore[arg-type]
    else:
        import uvicorn

        uvicorn.run(
            app, host="127.0.0.1", port=port, ws=flavour, loop="uvloop", log_level="warning"
        )


async def _client(port: int, pid: int, connections: int, rounds: int, posts: int, conc: int):
    import httpx
    import websockets

    url = f"ws://127.0.0.1:{port}/acp"
    base = status_kib(pid, "VmRSS") or 0
    sockets = [await websockets.connect(url, max_size=None) for _ in range(connections)]
    open_rss = status_kib(pid, "VmRSS") or 0
    frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {}})

    async def echo(ws: Any) -> None:
        for _ in range(rounds):
            await ws.send(frame)
            await ws.recv()

    start = time.perf_counter()
    await asyncio.gather(*(echo(ws) for ws in sockets))
    ws_rate = connections * rounds / (time.perf_counter() - start)
    for ws in sockets:
        await ws.close()

    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits) as client:
        http_url = f"http://127.0.0.1:{port}/acp"

        async def poster(count: int) -> None:
            for _ in range(count):
                await client.post(http_url, content=frame)

        start = time.perf_counter()
        await asyncio.gather(*(poster(posts // conc) for _ in range(conc)))
        post_rate = (posts // conc) * conc / (time.perf_counter() - start)
    return ws_rate, post_rate, (open_rss - base) / connections


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], args.serve[1], int(args.serve[2]))
        return
    print("| server | WS round trips/s | POSTs/s | server RSS per WebSocket |")
    print("|---|---:|---:|---:|")
    for name, (kind, flavour) in CANDIDATES.items():
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        cmd = [sys.executable, "-m", "benchmarks.asgi_choice", "--serve", kind, flavour, str(port)]
        proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            _wait_port(port)
            ws_rate, post_rate, rss = asyncio.run(
                _client(port, proc.pid, args.connections, args.rounds, args.posts, args.concurrency)
            )
            print(f"| {name} | {ws_rate:,.0f} | {post_rate:,.0f} | {rss:.1f} KiB |", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
