"""Fixtures for the store tests: every store implementation, opened and always closed.

A new implementation joins the contract suite with one entry in ``OPENERS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio.to_thread
import pytest

from acp_agent.store import MemorySessionStore, SessionStore, SqliteSessionStore
from acp_agent.store.base import Clock

MakeStore = Callable[..., Awaitable[SessionStore]]

#: opens a fresh, empty store: (the test's request, a directory of its own, a clock or None)
Opener = Callable[[pytest.FixtureRequest, Path, "Clock | None"], Awaitable[SessionStore]]


async def _memory(request: pytest.FixtureRequest, tmp: Path, clock: Clock | None) -> SessionStore:
    return MemorySessionStore(clock=clock)


async def _sqlite(request: pytest.FixtureRequest, tmp: Path, clock: Clock | None) -> SessionStore:
    return await SqliteSessionStore.open(tmp / "store.sqlite3", clock=clock)


async def _postgres(request: pytest.FixtureRequest, tmp: Path, clock: Clock | None) -> SessionStore:
    from acp_agent.store.postgres import PostgresSessionStore
    from tests.helpers.postgres import fresh_schema_url

    server = request.getfixturevalue("postgres_server_url")
    url = await anyio.to_thread.run_sync(fresh_schema_url, server)
    return await PostgresSessionStore.open(url, clock=clock)


OPENERS: dict[str, Opener] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(OPENERS))
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: object
) -> AsyncIterator[MakeStore]:
    """A factory of fresh stores of one kind; every store it made is closed after the test."""
    opened: list[SessionStore] = []

    async def make(*, clock: Clock | None = None) -> SessionStore:
        directory = tmp_path / f"store{len(opened)}"
        directory.mkdir()
        store = await OPENERS[request.param](request, directory, clock)
        opened.append(store)
        return store

    try:
        yield make
    finally:
        for store in opened:
            await store.aclose()


@pytest.fixture
async def store(make_store: MakeStore) -> SessionStore:
    return await make_store()
