"""open_store and default_db_path: how a store is chosen."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from acp_agent.store import (
    MemorySessionStore,
    SessionRecord,
    SqliteSessionStore,
    default_db_path,
    open_store,
)
from acp_agent.store.journal import JournaledStore

pytestmark = pytest.mark.anyio


def test_default_db_path_is_in_the_user_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACP_AGENT_DB", raising=False)
    home = Path(platformdirs.user_data_dir("acp-agent")) / "sessions"
    assert default_db_path() == home / "acp-agent.sqlite3"


def test_default_db_path_honours_the_env_var(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ACP_AGENT_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


@pytest.mark.parametrize("name", [":memory:", "memory"])
async def test_memory_names_give_a_memory_store(name: str) -> None:
    store = await open_store(name)
    try:
        assert isinstance(store, MemorySessionStore)
    finally:
        await store.aclose()


async def test_a_path_gives_a_sqlite_store_and_creates_parents(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "s.sqlite3"
    store = await open_store(str(path))
    try:
        assert isinstance(store, JournaledStore)
        assert isinstance(store.inner, SqliteSessionStore)
        await store.create(SessionRecord("s", cwd="/"))
    finally:
        await store.aclose()
    assert path.is_file()


async def test_none_uses_the_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACP_AGENT_DB", str(tmp_path / "env.sqlite3"))
    store = await open_store(None)
    try:
        assert isinstance(store, JournaledStore)
        assert store.path == tmp_path / "env.sqlite3"
    finally:
        await store.aclose()
    monkeypatch.setenv("ACP_AGENT_DB", "memory")
    store = await open_store(None)
    try:
        assert isinstance(store, MemorySessionStore)
    finally:
        await store.aclose()
