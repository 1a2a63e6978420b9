"""Opening the SQLite store's file: its pragmas, its schema and the schema's version.

It owns what a connection is set to (WAL, ``synchronous=NORMAL``, a busy timeout, no
automatic checkpoint: the store's worker runs them), the tables and indexes, and the one
transaction helper. The statements that read and write sessions live in ``sqlite``.
The schema's version is ``PRAGMA user_version``; a file of another version is refused
(nothing released has another).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from acp_agent.store.files import create_private_file

__all__ = [
    "BUSY_TIMEOUT_MS",
    "SCHEMA_VERSION",
    "WAL_BYTES",
    "SchemaVersionError",
    "connect_pair",
    "transaction",
]

_T = TypeVar("_T")

BUSY_TIMEOUT_MS: Final = 5000
WAL_BYTES: Final = 4 << 20  # a WAL larger than this is checkpointed when the worker is idle
SCHEMA_VERSION: Final = 1

_SCHEMA: Final = (
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL,
        owner TEXT NOT NULL,
        cwd TEXT NOT NULL,
        additional_directories TEXT NOT NULL,
        title TEXT,
        mode_id TEXT,
        config TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE turns (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        turn_id TEXT NOT NULL,
        stop_reason TEXT,
        UNIQUE (session_id, turn_id)
    )
    """,
    """
    CREATE TABLE updates (
        id INTEGER PRIMARY KEY,
        turn INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
        body TEXT NOT NULL
    )
    """,
    "CREATE INDEX updates_by_turn ON updates (turn)",
)


class SchemaVersionError(RuntimeError):
    """The database file has a schema version this code does not know."""


def _connect(path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    create_private_file(path)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms:d}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # the worker does it, when idle
        conn.execute(f"PRAGMA journal_size_limit = {WAL_BYTES:d}")
        transaction(conn, lambda: _create_schema(conn), write=True)
    except BaseException:
        conn.close()
        raise
    return conn


def connect_pair(path: Path) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """The worker's connection, and ``write_turn_now``'s, which never waits for a lock."""
    conn = _connect(path)
    try:
        return conn, _connect(path, busy_timeout_ms=0)
    except BaseException:
        conn.close()
        raise


def _create_schema(conn: sqlite3.Connection) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    if version != 0 or conn.execute("SELECT 1 FROM sqlite_master").fetchone():
        raise SchemaVersionError(
            f"the database has schema version {version}; this acp-agent reads only "
            f"version {SCHEMA_VERSION}: name another file with --store"
        )
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")


def transaction(conn: sqlite3.Connection, fn: Callable[[], _T], *, write: bool) -> _T:
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = fn()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result
