"""Remote ACP under load: acp-agent-kit serve beside the official Python SDK's server.

Both servers run the reference-agent contract (``shared/reference-agent.md``) on loopback,
under the same ASGI server (Hypercorn, asyncio on uvloop), each in a process of its own,
beside a floor (``peers/floor_remote.py``: a bare app that only answers these scenarios);
one client process (asyncio on uvloop, the ``websockets`` client, orjson) drives them in
turn with the same two scenarios:

- **fan-out**: ``--connections`` WebSocket connections at once, each with one session doing
  ``/echo`` turns back to back for ``--seconds``: turns per second over all of them, the
  p50 and p99 turn latency (prompt sent to response read) and the server's RSS growth per
  open connection (after every connection has initialized and made its session);
- **streams**: one WebSocket connection, ``--sessions`` sessions each sent
  ``/stream --chunks`` at once, then ``session/cancel`` for every other session: the time
  from the first prompt sent to the last response read, with each response checked
  (``end_turn`` after every chunk for the streams left alone, ``cancelled`` for the rest).

    python -m benchmarks.remote [--connections 1000 --seconds 10 --sessions 200 --chunks 1000]

Progress goes to stderr, the markdown table to stdout. The client shares the machine with the
server it measures, and both servers are measured by the same client.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks.client import TICKS, cpu_ticks, status_kib

ROOT = Path(__file__).resolve().parents[1]
PEERS: dict[str, list[str]] = {
    "acp-agent": [sys.executable, "-m", "acp_agent", "--store", "memory", "serve"],
    "sdk": [sys.executable, str(ROOT / "benchmarks" / "peers" / "sdk_remote.py")],
    "floor": [sys.executable, str(ROOT / "benchmarks" / "peers" / "floor_remote.py")],
}
# acp-agent-kit serve's bounds, opened up for the benchmark's load
OPEN_BOUNDS = ["--max-connections", "100000", "--max-pending", "100000"]


@dataclass
class Result:
    turns_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    rss_kib_per_conn: float = 0.0
    stream_s: float = 0.0
    stream_server_cpu_s: float = 0.0  # the server's CPU time during the streams run
    stream_client_cpu_s: float = 0.0  # the client's
    streams_ok: bool = False
    cancelled: int = 0
    chunks: int = 0  # chunks the streams run delivered


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _request(request_id: int, method: str, params: dict[str, Any]) -> str:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return orjson.dumps(message).decode()


def _prompt(request_id: int, session_id: str, text: str) -> str:
    blocks = [{"type": "text", "text": text}]
    return _request(request_id, "session/prompt", {"sessionId": session_id, "prompt": blocks})


async def _answer(ws: Any, request_id: int) -> dict[str, Any]:
    """Read until the response to ``request_id``; notifications are skipped unparsed."""
    while True:
        text = await ws.recv()
        if '"method"' in text[:40]:
            continue
        message = orjson.loads(text)
        if message.get("id") == request_id:
            return message


async def _open(url: str) -> tuple[Any, str]:
    import websockets

    ws = await websockets.connect(url, max_size=None, compression=None, ping_interval=None)
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    await ws.send(_request(1, "initialize", init))
    await _answer(ws, 1)
    await ws.send(_request(2, "session/new", {"cwd": str(ROOT), "mcpServers": []}))
    created = await _answer(ws, 2)
    return ws, created["result"]["sessionId"]


async def fan_out(url: str, pid: int, connections: int, seconds: float, result: Result) -> None:
    base = status_kib(pid, "VmRSS") or 0
    gate = asyncio.Semaphore(64)

    async def opened() -> tuple[Any, str]:
        async with gate:
            return await _open(url)

    pairs = await asyncio.gather(*(opened() for _ in range(connections)))
    result.rss_kib_per_conn = ((status_kib(pid, "VmRSS") or 0) - base) / connections
    log(f"  {connections} connections open, each with a session")
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def turns(ws: Any, session_id: str) -> None:
        request_id = 10
        while time.perf_counter() < deadline:
            request_id += 1
            start = time.perf_counter()
            await ws.send(_prompt(request_id, session_id, "/echo hi"))
            answer = await _answer(ws, request_id)
            assert answer["result"]["stopReason"] == "end_turn", answer
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(turns(ws, sid) for ws, sid in pairs))
    elapsed = time.perf_counter() - start
    result.turns_per_s = len(latencies) / elapsed
    latencies.sort()
    result.p50_ms = statistics.median(latencies) * 1000
    result.p99_ms = latencies[int(len(latencies) * 0.99)] * 1000
    await asyncio.gather(*(ws.close() for ws, _ in pairs))


def cpu_seconds(pid: int) -> float:
    return cpu_ticks(pid) / TICKS


async def streams(url: str, pid: int, sessions: int, chunks: int, result: Result) -> None:
    import websockets

    async with websockets.connect(
        url, max_size=None, compression=None, ping_interval=None, max_queue=None
    ) as ws:
        await ws.send(_request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        await _answer(ws, 1)
        ids: list[str] = []
        for i in range(sessions):
            await ws.send(_request(100 + i, "session/new", {"cwd": str(ROOT), "mcpServers": []}))
            ids.append((await _answer(ws, 100 + i))["result"]["sessionId"])
        start, server_cpu, client_cpu = time.perf_counter(), cpu_seconds(pid), time.process_time()
        for i, session_id in enumerate(ids):
            await ws.send(_prompt(1000 + i, session_id, f"/stream {chunks}"))
        for session_id in ids[::2]:
            cancel = {"jsonrpc": "2.0", "method": "session/cancel"}
            await ws.send(orjson.dumps({**cancel, "params": {"sessionId": session_id}}).decode())
        stops: dict[int, str] = {}
        chunks_seen: dict[str, int] = dict.fromkeys(ids, 0)
        while len(stops) < sessions:
            message = orjson.loads(await ws.recv())
            if message.get("method") == "session/update":
                params = message["params"]
                if params["update"].get("sessionUpdate") == "agent_message_chunk":
                    chunks_seen[params["sessionId"]] += 1
            elif "id" in message and message["id"] >= 1000:
                stops[message["id"] - 1000] = message.get("result", {}).get("stopReason", "error")
        result.stream_s = time.perf_counter() - start
        result.stream_server_cpu_s = cpu_seconds(pid) - server_cpu
        result.stream_client_cpu_s = time.process_time() - client_cpu
        # a stream left alone ends after every chunk; one sent a cancel ends cancelled,
        # unless it had already finished when the cancel arrived
        finished = [i for i in range(sessions) if stops[i] == "end_turn"]
        whole = all(chunks_seen[ids[i]] == chunks for i in finished)
        result.chunks = sum(chunks_seen.values())
        result.cancelled = sum(stops[i] == "cancelled" for i in range(0, sessions, 2))
        result.streams_ok = whole and len(finished) + result.cancelled == sessions
        if not result.streams_ok:
            log(f"  streams: unexpected outcome {sorted(set(stops.values()))}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the server did not start listening")


def run_peer(name: str, args: argparse.Namespace) -> Result:
    import uvloop

    port = _free_port()
    command = [*PEERS[name], "--listen", f"127.0.0.1:{port}"]
    if name == "acp-agent":
        command += OPEN_BOUNDS
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    result = Result()
    try:
        _wait_port(port, proc)
        url = f"ws://127.0.0.1:{port}/acp"
        log(f"{name}: fan-out")
        uvloop.run(fan_out(url, proc.pid, args.connections, args.seconds, result))
        log(f"{name}: streams")
        uvloop.run(streams(url, proc.pid, args.sessions, args.chunks, result))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--peer", action="append", choices=sorted(PEERS), default=None)
    args = parser.parse_args()
    results = {name: run_peer(name, args) for name in args.peer or list(PEERS)}
    print(
        f"| server | turns/s ({args.connections} WebSockets) | p50 turn | p99 turn | "
        f"RSS per connection | {args.sessions} x {args.chunks} chunks, half cancelled | "
        "chunks | server CPU per chunk | client CPU per chunk |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        stream = f"{r.stream_s:.2f} s ({r.cancelled} cancelled)"
        stream += "" if r.streams_ok else " WRONG OUTCOME"
        print(
            f"| {name} | {r.turns_per_s:,.0f} | {r.p50_ms:.1f} ms | {r.p99_ms:.1f} ms | "
            f"{r.rss_kib_per_conn:.0f} KiB | {stream} | "
            f"{r.chunks:,} | {r.stream_server_cpu_s / max(r.chunks, 1) * 1e6:.1f} µs | "
            f"{r.stream_client_cpu_s / max(r.chunks, 1) * 1e6:.1f} µs |"
        )


if __name__ == "__main__":
    main()
