"""Hosts sharing one PostgreSQL: turns per second and p99 turn latency.

``python -m benchmarks.pg_hosts [--hosts 1 2 4] [--sessions 50] [--turns 20]`` starts a
throwaway PostgreSQL server (tests/helpers/postgres.py, the server's default durability:
``fsync`` and ``synchronous_commit`` on), then for each host count starts that many
``acp-agent --store postgresql://...`` processes on a fresh schema, opens ``--sessions``
sessions on each and runs ``--turns`` ``/echo`` turns in every session, every session at once
(one prompt in flight per session), through a raw JSON-RPC client. A turn's latency is from
the prompt's request to its response; every turn is durable before its response. It runs
twice: with the server's defaults (each commit waits for its WAL flush), and with
``synchronous_commit=off`` for the store's sessions (a commit survives the agent's death but
the database server's crash may lose the last fraction of a second: the durability class of
the SQLite store, whose WAL runs ``synchronous=NORMAL``). The same run on one host with the
default SQLite store (a file in a temporary directory) is printed beside it, and so is
``pgbench`` on the same server (one-row insert transactions, 1 and 50 clients): the most
commits per second the server and its disk give, the limit of any store on it. Needs
PostgreSQL's server binaries (``pgbench`` among them) and the ``postgres`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.helpers.postgres import find_bin_dir, fresh_schema_url, running

CAPS = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}


@dataclass
class Host:
    """One agent process and its pending requests."""

    process: asyncio.subprocess.Process
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    waiting: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    async def start(cls, store: str, cwd: str) -> Host:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "acp_agent",
            "--store",
            store,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=cwd,
            limit=1 << 24,
        )
        return cls(process)

    async def read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = orjson.loads(line)
            future = self.waiting.pop(message.get("id"), None) if "method" not in message else None
            if future is not None:
                future.set_result(message)

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        future = self.waiting[request_id] = asyncio.get_running_loop().create_future()
        assert self.process.stdin is not None
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.process.stdin.write(orjson.dumps(frame) + b"\n")
        response = await future
        if "error" in response:
            raise RuntimeError(f"{method}: {response['error']}")
        result: dict[str, Any] = response["result"]
        return result

    async def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


async def run(store: str, hosts: int, sessions: int, turns: int, cwd: str) -> tuple[float, float]:
    """(turns per second, p99 turn latency in ms) with ``hosts`` processes on ``store``."""
    started = [await Host.start(store, cwd) for _ in range(hosts)]
    readers = [asyncio.create_task(host.read()) for host in started]
    latencies: list[float] = []
    try:
        for host in started:
            await host.call("initialize", {"protocolVersion": 1, "clientCapabilities": CAPS})
        opened = [
            (host, (await host.call("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"])
            for host in started
            for _ in range(sessions)
        ]

        async def one(host: Host, sid: str, text: str) -> None:
            begun = time.perf_counter()
            await host.call("session/prompt", {"sessionId": sid, "prompt": [text_block(text)]})
            latencies.append(time.perf_counter() - begun)

        async def session_turns(host: Host, sid: str) -> None:
            for n in range(turns):
                await one(host, sid, f"/echo turn {n}")

        await asyncio.gather(*(one(host, sid, "/echo warm") for host, sid in opened))
        latencies.clear()
        begun = time.perf_counter()
        await asyncio.gather(*(session_turns(host, sid) for host, sid in opened))
        elapsed = time.perf_counter() - begun
    finally:
        for host in started:
            await host.stop()
        for reader in readers:
            reader.cancel()
    return len(latencies) / elapsed, p99(latencies) * 1000


def text_block(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


#: PostgreSQL configurations measured: (name, settings of the store's sessions)
CONFIGURATIONS = [
    ("PostgreSQL", {}),
    ("PostgreSQL, synchronous_commit=off", {"synchronous_commit": "off"}),
]


PGBENCH_SECONDS = 5


def pgbench(url: str, clients: int, cwd: str) -> float:
    """Transactions per second of ``pgbench`` inserting one row per transaction."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pgbench_one (id bigserial, body text)")
    script = os.path.join(cwd, "one-row-insert.sql")
    with open(script, "w") as file:
        file.write("INSERT INTO pgbench_one (body) VALUES ('x');\n")
    command = [str(find_bin_dir() / "pgbench"), "-n", "-f", script, "-c", str(clients)]
    command += ["-j", str(min(clients, 2)), "-T", str(PGBENCH_SECONDS), url]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if found is None:
        raise RuntimeError(f"pgbench said: {done.stdout} {done.stderr}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sessions", type=int, default=50, help="per host")
    parser.add_argument("--turns", type=int, default=20, help="per session")
    args = parser.parse_args()
    rows: list[tuple[str, int, float, float]] = []

    def measure(name: str, store: str, hosts: int, cwd: str) -> None:
        rate, tail = asyncio.run(run(store, hosts, args.sessions, args.turns, cwd))
        rows.append((name, hosts, rate, tail))
        print(f"{name}, {hosts} hosts: {rate:.0f} turns/s, p99 {tail:.1f} ms", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="acp-agent-bench-") as cwd:
        measure("SQLite (the default store)", os.path.join(cwd, "sessions.sqlite3"), 1, cwd)
        with running(durable=True) as server:
            for name, settings in CONFIGURATIONS:
                for hosts in args.hosts:
                    measure(name, fresh_schema_url(server, **settings), hosts, cwd)
            limits = [(clients, pgbench(server, clients, cwd)) for clients in (1, 50)]
    print(f"`/echo` turns, {args.sessions} sessions per host, {args.turns} turns per session\n")
    print("| store | hosts | turns/s | p99 turn latency (ms) |")
    print("|---|---:|---:|---:|")
    for name, hosts, rate, tail in rows:
        print(f"| {name} | {hosts} | {rate:.0f} | {tail:.1f} |")
    for clients, tps in limits:
        noun = "client" if clients == 1 else "clients"
        print(f"| `pgbench`, one-row insert transactions, {clients} {noun} | | {tps:.0f} tps | |")


if __name__ == "__main__":
    main()
