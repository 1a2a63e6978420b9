"""Which PostgreSQL driver for the store: round trips per second of its hot statement.

Runs the statement a turn write costs (one fenced insert of a turn's row and a touch of its
session, one autocommit statement) and the read a load starts with, against a throwaway server,
through three drivers:

- psycopg 3, synchronous, each statement on an anyio worker thread (asyncio and trio alike);
- psycopg 3's asyncio API (asyncio only);
- asyncpg (asyncio only).

Each with one caller and with 8 concurrent callers (a pool of 8 connections). Needs the
``postgres`` extra, asyncpg (``pip install asyncpg``, measurement only) and PostgreSQL's server
binaries. ``python -m benchmarks.pg_drivers [--seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread

from tests.helpers.postgres import running

SETUP = """
CREATE TABLE s (id text PRIMARY KEY, token bigint NOT NULL, updated timestamptz NOT NULL);
CREATE TABLE t (session text NOT NULL, seq bigint NOT NULL, body text NOT NULL,
                PRIMARY KEY (session, seq));
INSERT INTO s SELECT 's' || n, 1, now() FROM generate_series(0, 63) AS n;
"""
# A turn write: refused (no row) when the token is stale.
WRITE = """
WITH ok AS (UPDATE s SET updated = now() WHERE id = %(s)s AND token = %(k)s RETURNING id)
INSERT INTO t SELECT id, %(n)s, %(b)s FROM ok
"""
READ = "SELECT seq, body FROM t WHERE session = %(s)s ORDER BY seq DESC LIMIT 4"
SEQ = itertools.count()  # unique turn numbers across every run
BODY = '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}}'


def asyncpg_sql(sql: str) -> str:
    for index, name in enumerate(("s", "k", "n", "b"), 1):
        sql = sql.replace(f"%({name})s", f"${index}")
    return sql


async def measure(
    name: str, callers: int, seconds: float, one: Callable[[int, int], Awaitable[None]]
) -> None:
    counts = [0] * callers
    deadline = time.perf_counter() + seconds

    async def caller(index: int) -> None:
        n = 0
        while time.perf_counter() < deadline:
            await one(index, n)
            n += 1
        counts[index] = n

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(callers):
            group.start_soon(caller, index)
    elapsed = time.perf_counter() - start
    print(f"{name:<42} {callers} callers  {sum(counts) / elapsed:8.0f} statements/s")


async def psycopg_threads(url: str, callers: int, seconds: float, backend: str) -> None:
    import psycopg_pool

    with psycopg_pool.ConnectionPool(
        url, min_size=callers, max_size=callers, kwargs={"autocommit": True}, open=True
    ) as pool:
        pool.wait()
        for kind, sql in (("write", WRITE), ("read", READ)):

            def run(index: int, n: int, sql: str = sql, kind: str = kind) -> None:
                with pool.connection() as conn:
                    params = {"s": f"s{index}", "k": 1, "n": next(SEQ), "b": BODY}
                    conn.execute(sql, params, prepare=True)

            async def one(index: int, n: int, run: Callable[[int, int], None] = run) -> None:
                await anyio.to_thread.run_sync(run, index, n)

            await measure(f"psycopg sync on threads ({backend}) {kind}", callers, seconds, one)


async def psycopg_async(url: str, callers: int, seconds: float) -> None:
    import psycopg_pool

    async with psycopg_pool.AsyncConnectionPool(
        url, min_size=callers, max_size=callers, kwargs={"autocommit": True}, open=False
    ) as pool:
        await pool.wait()
        for kind, sql in (("write", WRITE), ("read", READ)):

            async def one(index: int, n: int, sql: str = sql, kind: str = kind) -> None:
                async with pool.connection() as conn:
                    params = {"s": f"s{index}", "k": 1, "n": next(SEQ), "b": BODY}
                    await conn.execute(sql, params, prepare=True)

            await measure(f"psycopg async (asyncio) {kind}", callers, seconds, one)


async def asyncpg_run(url: str, callers: int, seconds: float) -> None:
    import asyncpg

    async with asyncpg.create_pool(url, min_size=callers, max_size=callers) as pool:
        for kind, sql in (("write", WRITE), ("read", READ)):
            text = asyncpg_sql(sql)

            async def one(index: int, n: int, text: str = text, kind: str = kind) -> None:
                async with pool.acquire() as conn:
                    args: tuple[object, ...] = (f"s{index}",)
                    if kind == "write":
                        args += (1, next(SEQ), BODY)
                    await conn.execute(text, *args)

            await measure(f"asyncpg (asyncio) {kind}", callers, seconds, one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    import psycopg

    with running(durable=True) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SETUP)
        for callers in (1, 8):
            for backend in ("asyncio", "trio"):
                anyio.run(psycopg_threads, url, callers, args.seconds, backend, backend=backend)
            asyncio.run(psycopg_async(url, callers, args.seconds))
            asyncio.run(asyncpg_run(url, callers, args.seconds))


if __name__ == "__main__":
    main()
