"""Session persistence behind one small interface: SQLite (the default) and in memory.

This package owns where ACP sessions and their turn-by-turn history are kept between
processes, and how a store is chosen (``open_store``). It knows nothing of JSON-RPC, the
connection (``AgentSession``) or pydantic: history items are opaque JSON-ready dicts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from acp_agent.errors import InternalError
from acp_agent.store.base import (
    DEFAULT_OWNER,
    JsonText,
    SessionRecord,
    SessionStore,
    StoreFailed,
    TurnRecord,
    TurnWrite,
)
from acp_agent.store.memory import MemorySessionStore
from acp_agent.store.packed import PackedJson
from acp_agent.store.shared import HeldPrompts, SessionLeases

if TYPE_CHECKING:
    from acp_agent.store.sqlite import SchemaVersionError, SqliteSessionStore


def __getattr__(name: str) -> Any:
    # The SQLite store (sqlite3, the schema) is imported when first used: a process on
    # another store does not pay for it.
    if name in ("SqliteSessionStore", "SchemaVersionError"):
        from acp_agent.store import sqlite

        return getattr(sqlite, name)
    raise AttributeError(f"module 'acp_agent.store' has no attribute {name!r}")


__all__ = [
    "DB_ENV_VAR",
    "DEFAULT_OWNER",
    "LOCK_WAIT_ENV_VAR",
    "REFERENCE_AGENT",
    "HeldPrompts",
    "JsonText",
    "MemorySessionStore",
    "PackedJson",
    "SchemaVersionError",
    "SessionLeases",
    "SessionRecord",
    "SessionStore",
    "SqliteSessionStore",
    "StoreFailed",
    "TurnRecord",
    "TurnWrite",
    "default_db_path",
    "open_store",
]

DB_ENV_VAR: Final = "ACP_AGENT_DB"
"""Environment variable that overrides the default database location (or says ``memory``)."""

_MEMORY_NAMES: Final = frozenset({":memory:", "memory"})


LOCK_WAIT_ENV_VAR: Final = "ACP_AGENT_LOCK_WAIT"
"""Environment variable: seconds a SQLite write waits for another process's lock."""


REFERENCE_AGENT: Final = "acp-agent"
"""The name of the reference agent, whose default store is ``acp-agent.sqlite3``."""


def default_db_path(agent: str = REFERENCE_AGENT) -> Path:
    """The SQLite file used when no store is named: ``$ACP_AGENT_DB`` if set, else
    ``sessions/<agent>.sqlite3`` in the user's data directory for ``acp-agent``: each
    agent keeps its sessions apart from the others'."""
    override = os.environ.get(DB_ENV_VAR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in agent).strip(".-")
    directory = Path(platformdirs.user_data_dir("acp-agent")) / "sessions"
    return directory / f"{name or 'agent'}.sqlite3"


async def open_store(
    url_or_path: str | None = None,
    *,
    lease_timeout: float | None = None,
    agent: str = REFERENCE_AGENT,
) -> SessionStore:
    """Open the store named by ``url_or_path``, or raise ``StoreFailed`` saying why it
    cannot be used.

    ``None`` means ``$ACP_AGENT_DB`` or else ``agent``'s default file (see
    ``default_db_path``);
    ``":memory:"`` or ``"memory"`` gives a ``MemorySessionStore``; a libpq URL
    (``postgresql://...``) a ``PostgresSessionStore`` (whose leases last ``lease_timeout``
    seconds); anything else is the path of a SQLite file (``~`` is expanded and missing
    parent directories are created), whose writes wait ``$ACP_AGENT_LOCK_WAIT`` seconds
    (default ``LOCK_WAIT``) for another process's lock.
    """
    target = url_or_path
    if target is None:
        target = os.environ.get(DB_ENV_VAR) or str(default_db_path(agent))
    if target in _MEMORY_NAMES:
        return MemorySessionStore()
    if target.startswith(("postgresql://", "postgres://")):
        # Named "PostgreSQL", not by its URL, which may hold a password.
        try:
            from acp_agent.store.postgres import DEFAULT_LEASE_TIMEOUT, PostgresSessionStore
        except ImportError:
            raise StoreFailed(
                "PostgreSQL", "needs the postgres extra: pip install 'acp-agent-kit[postgres]'"
            ) from None
        try:
            return await PostgresSessionStore.open(
                target, lease_timeout=lease_timeout or DEFAULT_LEASE_TIMEOUT
            )
        except InternalError as exc:  # unreachable, refused: its message says which
            raise StoreFailed("PostgreSQL", exc.message) from None
    from acp_agent.store.sqlite import LOCK_WAIT, SqliteSessionStore

    return await SqliteSessionStore.open(target, lock_wait=_lock_wait(LOCK_WAIT))


def _lock_wait(default: float) -> float:
    value = os.environ.get(LOCK_WAIT_ENV_VAR)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise StoreFailed(f"${LOCK_WAIT_ENV_VAR}", f"{value!r} is not a number of seconds")
    return seconds
