"""open_store and default_db_path: how a store is chosen."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from acp_agent.store import (
    LOCK_WAIT_ENV_VAR,
    MemorySessionStore,
    SessionRecord,
    SqliteSessionStore,
    StoreFailed,
    default_db_path,
    open_store,
)

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
        assert isinstance(store, SqliteSessionStore)
        await store.create(SessionRecord("s", cwd="/"))
    finally:
        await store.aclose()
    assert path.is_file()


async def test_none_uses_the_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACP_AGENT_DB", str(tmp_path / "env.sqlite3"))
    store = await open_store(None)
    try:
        assert isinstance(store, SqliteSessionStore)
        assert store.path == tmp_path / "env.sqlite3"
    finally:
        await store.aclose()
    monkeypatch.setenv("ACP_AGENT_DB", "memory")
    store = await open_store(None)
    try:
        assert isinstance(store, MemorySessionStore)
    finally:
        await store.aclose()


async def test_the_lock_wait_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(LOCK_WAIT_ENV_VAR, "0.5")
    store = await open_store(str(tmp_path / "s.sqlite3"))
    try:
        assert isinstance(store, SqliteSessionStore)
        assert store.lock_wait == 0.5
    finally:
        await store.aclose()
    monkeypatch.setenv(LOCK_WAIT_ENV_VAR, "soon")
    with pytest.raises(StoreFailed, match="'soon' is not a number of seconds"):
        await open_store(str(tmp_path / "s.sqlite3"))


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("dir", "is a directory"),
        ("notes.txt", "is not a SQLite database"),
        ("notes.txt/s.db", "is not a directory"),
        ("other.db", "schema version"),
    ],
)
async def test_a_store_that_cannot_be_used_fails_to_open_saying_why(
    tmp_path: Path, where: str, reason: str
) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "notes.txt").write_text("my notes\n")
    import sqlite3

    with sqlite3.connect(tmp_path / "other.db") as conn:
        conn.execute("create table t (x)")
    conn.close()
    with pytest.raises(StoreFailed) as caught:
        await open_store(str(tmp_path / where))
    assert caught.value.message.startswith(f"session store {tmp_path / where}: ")
    assert reason in caught.value.message
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"
