"""Fixtures for the store tests: every store implementation, opened and always closed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from acp_agent.store import MemorySessionStore, SessionStore, SqliteSessionStore
from acp_agent.store.base import Clock

MakeStore = Callable[..., Awaitable[SessionStore]]


@pytest.fixture(params=["memory", "sqlite"])
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: object
) -> AsyncIterator[MakeStore]:
    """A factory of stores of one kind; every store it made is closed after the test."""
    opened: list[SessionStore] = []

    async def make(*, clock: Clock | None = None) -> SessionStore:
        store: SessionStore
        if request.param == "memory":
            store = MemorySessionStore(clock=clock)
        else:
            store = await SqliteSessionStore.open(
                tmp_path / f"store{len(opened)}.sqlite3", clock=clock
            )
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
