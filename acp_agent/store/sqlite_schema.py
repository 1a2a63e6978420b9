"""Opening the SQLite store's file: its pragmas, its schema and the schema's version.

It owns what a connection is set to (WAL, ``synchronous=NORMAL``, no busy timeout and no
automatic checkpoints: the store waits out another process's lock asynchronously, and
checkpoints off the event loop), the tables and indexes, the one transaction
helper, and what to say when a file cannot be opened. The statements that read and write
sessions live in ``sqlite``. The schema's version is ``PRAGMA user_version``; a file of
another version is refused (nothing released has another).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from acp_agent.store.files import create_private_file

__all__ = [
    "SCHEMA_VERSION",
    "SchemaVersionError",
    "connect",
    "transaction",
    "why_unusable",
]

_T = TypeVar("_T")

SCHEMA_VERSION: Final = 1
OPEN_BUSY_TIMEOUT_MS: Final = 200  # opening waits this long for another process's lock

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


def connect(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` with the store's settings and schema (made if missing)."""
    create_private_file(path)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {OPEN_BUSY_TIMEOUT_MS:d}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints leave the commit path
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        transaction(conn, lambda: _create_schema(conn), write=True)
        conn.execute("PRAGMA busy_timeout = 0")  # from now on the store waits, asynchronously
    except BaseException:
        conn.close()
        raise
    return conn


def why_unusable(path: Path, exc: Exception) -> str:
    """What to tell a person whose store at ``path`` failed to open with ``exc``."""
    if path.is_dir():
        return "is a directory, not a file"
    if isinstance(exc, SchemaVersionError):
        return str(exc)
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return "is not a SQLite database"  # "file is not a database"
    ancestor = path.parent
    while not ancestor.exists() and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    if isinstance(exc, OSError):
        return f"cannot be created or opened: {exc.strerror or exc}"
    return f"cannot be opened: {exc}"


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
