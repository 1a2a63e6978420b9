"""``SqliteSessionStore``: the ``SessionStore`` on one SQLite file (the default store).

It owns every statement that reads or writes sessions (the schema and the connection's
settings are ``sqlite_schema``'s, how a turn's items lie in rows ``sqlite_rows``'s, which
process has a session open ``sqlite_locks``'s). Every operation is one transaction
(``BEGIN IMMEDIATE`` for writes) on the store's one connection, run on the event loop's
thread: in WAL mode with ``synchronous=NORMAL`` a commit is a few ``pwrite``s and no
``fsync``, cheaper than a hop to a worker thread and back. A transaction never spans an
``await``, so none is left half-open; a cancelled caller stops only while it waits for
another process's lock, with nothing written. The turn writes waiting at one moment share
one transaction (``group_commit``), each in a savepoint of its own: a refused write fails
only itself. A disk that stalls stalls the event loop with it (the PostgreSQL store's
driver runs on threads instead).

Checkpoints leave the commit path: the connection's automatic checkpoints are off, and once
the WAL holds enough a passive checkpoint runs on a thread of the store's own
(:mod:`.sqlite_checkpoints`: one at a time, on a connection of its own; joined by
``aclose``). It copies what it can into the database and never waits for a lock; the WAL is
reused from its start once a checkpoint has copied all of it.

What it checks, so that a write is never acknowledged without being in the file:

- The file it opened is still the one at its path (device and inode, before each write):
  a database deleted or replaced under the server makes every write a ``StoreFailed``.
- Another process holding the write lock (a ``sessions prune``, another agent) is waited
  out, retrying with ``anyio.sleep`` (the loop goes on) for up to ``lock_wait`` seconds,
  with the wait in the log; then the write fails with ``StoreFailed``. Nothing is queued
  behind the caller's back.
- Any SQLite or I/O error becomes ``StoreFailed`` naming the file and the reason, logged
  once, without a traceback.

Sessions are held by one process at a time (see ``sqlite_locks``): ``create`` holds the new
session, ``acquire`` a loaded one; another process is refused with ``SessionLeased``.

Durability: the file is in WAL mode with ``synchronous=NORMAL``. A committed transaction
survives the death of the process (a killed agent loses nothing a store call returned for);
an operating-system crash or power loss may drop the last few, never corrupt the file.
The database and its side files are readable by their owner only, and so are the
directories made for them, whatever the umask (see ``files``).
"""

from __future__ import annotations

import builtins
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import orjson

from acp_agent.errors import SessionLeased
from acp_agent.store.base import (
    Clock,
    SessionRecord,
    StoreFailed,
    Timestamps,
    TurnRecord,
    TurnWrite,
    as_created,
    check_limit,
    decode_cursor,
    encode_cursor,
    session_exists,
    session_not_found,
)
from acp_agent.store.group_commit import GroupCommit
from acp_agent.store.sqlite_checkpoints import Checkpoints
from acp_agent.store.sqlite_locks import SessionLocks
from acp_agent.store.sqlite_rows import items_of, write_turn_rows
from acp_agent.store.sqlite_schema import (
    SCHEMA_VERSION,
    SchemaVersionError,
    connect,
    transaction,
    why_unusable,
)

__all__ = ["LOCK_WAIT", "SCHEMA_VERSION", "SchemaVersionError", "SqliteSessionStore"]

_T = TypeVar("_T")

log = logging.getLogger("acp_agent.store.sqlite")

LOCK_WAIT: Final = 30.0
"""Seconds a write waits for another process's write lock before it fails."""

PRUNE_BATCH: Final = 500  # rows deleted per transaction by ``prune``
_RETRY_FIRST, _RETRY_MOST = 0.001, 0.05  # seconds between tries for another process's lock

_COLUMNS: Final = (
    "id, owner, cwd, additional_directories, title, mode_id, config, created_at, updated_at"
)


def _record(row: tuple[Any, ...]) -> SessionRecord:
    sid, owner, cwd, dirs, title, mode_id, config, created_at, updated_at = row
    return SessionRecord(
        session_id=sid,
        cwd=cwd,
        owner=owner,
        additional_directories=tuple(orjson.loads(dirs)),
        title=title,
        mode_id=mode_id,
        config=orjson.loads(config),
        created_at=created_at,
        updated_at=updated_at,
    )


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite said SQLITE_BUSY: another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return code & 0xFF == 5 if code is not None else "database is locked" in str(exc)


def _identity(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


class SqliteSessionStore(anyio.abc.AsyncResource):
    """A ``SessionStore`` on one SQLite file; create it with ``await SqliteSessionStore.open``."""

    writes_inline = True  # commits on the loop's thread; a cancelled write wrote nothing

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        lock_wait: float = LOCK_WAIT,
    ) -> None:
        """Remember the path; no I/O happens until ``aopen``."""
        self.path = Path(path).expanduser()
        self.lock_wait = lock_wait
        self._timestamps = Timestamps(clock)
        self._checkpoints = Checkpoints(self.path)
        self._conn: sqlite3.Connection | None = None
        self._locks: SessionLocks | None = None
        self._identity: tuple[int, int] | None = None  # the opened file's (device, inode)
        self._closed = False
        self._turn_writes: GroupCommit[tuple[TurnWrite, str], Exception | None] = GroupCommit(
            self._write_turns
        )

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        lock_wait: float = LOCK_WAIT,
    ) -> SqliteSessionStore:
        """Open the store at ``path``, creating the file and its schema if needed;
        ``StoreFailed`` saying why if it cannot be used."""
        store = cls(path, clock=clock, lock_wait=lock_wait)
        await store.aopen()
        return store

    async def aopen(self) -> None:
        """Connect and check the file. Called once, by ``open``."""
        if self._conn is not None or self._closed:
            raise RuntimeError("a SqliteSessionStore can be opened only once")
        await anyio.lowlevel.checkpoint()
        try:
            conn = connect(self.path)
        except (sqlite3.Error, OSError, SchemaVersionError) as exc:
            raise StoreFailed(str(self.path), why_unusable(self.path, exc)) from None
        try:
            self._locks = SessionLocks(Path(f"{self.path}.locks"))
            self._identity = _identity(self.path)
        except OSError as exc:
            conn.close()
            raise StoreFailed(str(self.path), f"cannot be used: {exc}") from None
        self._conn = conn

    async def __aenter__(self) -> SqliteSessionStore:
        if self._conn is None and not self._closed:
            await self.aopen()
        return self

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn, self._conn = self._conn, None
        locks, self._locks = self._locks, None
        self._checkpoints.join()
        if conn is not None:
            conn.close()
        if locks is not None:
            locks.close()
        await anyio.lowlevel.checkpoint()

    # --- running operations ------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        """Run ``fn`` in one transaction on this thread, waiting out another process's
        lock (asynchronously) for up to ``lock_wait`` seconds."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        waited_since: float | None = None
        retry = _RETRY_FIRST
        while True:
            conn = self._conn
            if conn is None:
                raise anyio.ClosedResourceError(
                    "the store is closed" if self._closed else "the store was never opened"
                )
            try:
                result = transaction(conn, partial(self._checked, fn, conn, write), write=write)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise self._failed(str(exc)) from None
                now = time.monotonic()
                if waited_since is None:
                    waited_since = now
                    log.warning(
                        "session store %s: another process holds the write lock; "
                        "waiting up to %g s",
                        self.path,
                        self.lock_wait,
                    )
                elif now - waited_since >= self.lock_wait:
                    raise self._failed(
                        f"another process held the write lock for more than {self.lock_wait:g} s"
                    ) from None
                await anyio.sleep(retry)
                retry = min(retry * 2, _RETRY_MOST)
                continue
            except (sqlite3.Error, OSError) as exc:
                raise self._failed(str(exc)) from None
            if waited_since is not None:
                log.warning(
                    "session store %s: got the write lock after %.1f s",
                    self.path,
                    time.monotonic() - waited_since,
                )
            if write:
                self._checkpoints.committed()
            return result

    def _checked(
        self, fn: Callable[[sqlite3.Connection], _T], conn: sqlite3.Connection, write: bool
    ) -> _T:
        if write:  # a file deleted or replaced would take this write with it
            try:
                same = _identity(self.path) == self._identity
            except FileNotFoundError:
                same = False
            if not same:
                raise self._failed("the database file was deleted or replaced while in use")
        return fn(conn)

    def _failed(self, reason: str) -> StoreFailed:
        """The error for a failed operation, logged once (no traceback)."""
        exc = StoreFailed(str(self.path), reason)
        log.error("%s", exc.message)
        return exc

    # --- the SessionStore interface ----------------------------------------------------------

    async def create(self, record: SessionRecord) -> SessionRecord:
        now = self._timestamps.now()
        stored = as_created(record, now)
        row = (
            stored.session_id,
            stored.owner,
            stored.cwd,
            _json(stored.additional_directories),
            stored.title,
            stored.mode_id,
            _json(stored.config),
            stored.created_at,
            stored.updated_at,
        )

        def run(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (row[0],)).fetchone():
                raise session_exists(record.session_id)
            conn.execute(f"INSERT INTO sessions ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", row)

        await self._run(run, write=True)
        if self._locks is not None:
            self._locks.acquire(stored.session_id)  # a new id: no other process has it
        return stored

    async def get(self, owner: str, session_id: str) -> SessionRecord | None:
        def run(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE id = ? AND owner = ?", (session_id, owner)
            ).fetchone()
            return None if row is None else _record(row)

        return await self._run(run, write=False)

    async def update(self, record: SessionRecord) -> SessionRecord:
        values = (
            record.cwd,
            _json(tuple(record.additional_directories)),
            record.title,
            record.mode_id,
            _json(dict(record.config)),
        )

        now = self._timestamps.now()

        def run(conn: sqlite3.Connection) -> SessionRecord:
            changed = conn.execute(
                "UPDATE sessions SET cwd = ?, additional_directories = ?, title = ?, "
                "mode_id = ?, config = ?, updated_at = ? WHERE id = ? AND owner = ?",
                (*values, now, record.session_id, record.owner),
            ).rowcount
            if not changed:
                raise session_not_found(record.session_id)
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE id = ?", (record.session_id,)
            ).fetchone()
            return _record(row)

        return await self._run(run, write=True)

    async def list(
        self, owner: str, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        check_limit(limit)
        sql = f"SELECT {_COLUMNS} FROM sessions WHERE owner = ?"
        args: builtins.list[Any] = [owner]
        if cwd is not None:
            sql += " AND cwd = ?"
            args.append(cwd)
        if cursor is not None:
            sql += " AND (updated_at, id) < (?, ?)"
            args.extend(decode_cursor(cursor))
        sql += " ORDER BY updated_at DESC, id DESC LIMIT ?"
        args.append(limit + 1)

        def run(conn: sqlite3.Connection) -> builtins.list[SessionRecord]:
            return [_record(row) for row in conn.execute(sql, args)]

        rows = await self._run(run, write=False)
        page = rows[:limit]
        return page, encode_cursor(page[-1]) if len(rows) > limit else None

    async def delete(self, owner: str, session_id: str) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            sql = "DELETE FROM sessions WHERE id = ? AND owner = ?"
            return bool(conn.execute(sql, (session_id, owner)).rowcount)

        return await self._run(run, write=True)

    async def write_turn(self, write: TurnWrite) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled call writes nothing
        error = await self._turn_writes.write((write, self._timestamps.now()))
        if error is not None:
            raise error

    async def _write_turns(
        self, batch: Sequence[tuple[TurnWrite, str]]
    ) -> builtins.list[Exception | None]:
        """The turn writes waiting at one moment, in one transaction (group commit): each
        in a savepoint, so that one refused write fails only itself."""

        def run(conn: sqlite3.Connection) -> builtins.list[Exception | None]:
            outcomes: builtins.list[Exception | None] = []
            for write, now in batch:
                conn.execute("SAVEPOINT turn_write")
                try:
                    write_turn_rows(conn, write, now)
                    outcomes.append(None)
                except sqlite3.Error:
                    raise  # the store's own failure: the whole batch (a lock is waited out)
                except Exception as exc:  # this write refused (a turn begun twice, ...)
                    conn.execute("ROLLBACK TO turn_write")
                    outcomes.append(exc)
                conn.execute("RELEASE turn_write")
            return outcomes

        return await self._run(run, write=True)

    # --- sessions held by one process (``SessionLeases``) -----------------------------------

    async def acquire(self, session_id: str) -> None:
        """Hold the session for this process (counted); ``SessionLeased`` if another
        process holds it."""
        await anyio.lowlevel.checkpoint()
        if self._locks is None:
            raise anyio.ClosedResourceError
        self._locks.acquire(session_id)

    async def release(self, session_id: str) -> None:
        """Give back one acquisition (a no-op once closed: closing dropped them all)."""
        if self._locks is not None:
            self._locks.release(session_id)

    def check_lease(self, session_id: str) -> None:
        """Nothing to check: a lock held by this process cannot be lost."""

    # --- for `acp-agent-kit sessions` (not part of the SessionStore interface) ---------------

    async def sizes(self, owner: str) -> dict[str, tuple[int, int]]:
        """Each of the owner's sessions: (its turns, the bytes its history takes in the file)."""

        def run(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
            rows = conn.execute(
                "SELECT s.id, count(DISTINCT t.id), coalesce(sum(length(CAST(u.body AS BLOB))), 0) "
                "FROM sessions s LEFT JOIN turns t ON t.session_id = s.id "
                "LEFT JOIN updates u ON u.turn = t.id WHERE s.owner = ? GROUP BY s.id",
                (owner,),
            )
            return {sid: (turns, size) for sid, turns, size in rows}

        return await self._run(run, write=False)

    async def prune(self, owner: str, before: str) -> builtins.list[str]:
        """Delete the owner's sessions not updated since ``before`` (a timestamp) and that
        no process holds, in transactions of at most ``PRUNE_BATCH`` rows each, so that
        the write lock is never held for long; returns their ids."""

        def old(conn: sqlite3.Connection) -> builtins.list[str]:
            sql = "SELECT id FROM sessions WHERE owner = ? AND updated_at < ?"
            return [row[0] for row in conn.execute(sql, (owner, before))]

        pruned: builtins.list[str] = []
        for session_id in await self._run(old, write=False):
            try:
                await self.acquire(session_id)
            except SessionLeased:
                continue  # open in a live agent
            try:
                await self._delete_in_batches(owner, session_id)
            finally:
                await self.release(session_id)
            pruned.append(session_id)
        return pruned

    async def _delete_in_batches(self, owner: str, session_id: str) -> None:
        def some_updates(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM updates WHERE id IN (SELECT u.id FROM updates u "
                "JOIN turns t ON u.turn = t.id WHERE t.session_id = ? LIMIT ?)",
                (session_id, PRUNE_BATCH),
            ).rowcount

        while await self._run(some_updates, write=True):
            await anyio.lowlevel.checkpoint()  # others' turns go on between batches

        def rest(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM sessions WHERE id = ? AND owner = ?", (session_id, owner))

        await self._run(rest, write=True)

    async def vacuum(self) -> None:
        """Give the space of deleted rows back to the file system (holds the write lock
        for as long as it takes: only when asked)."""

        await anyio.lowlevel.checkpoint()
        conn = self._conn
        if conn is None:
            raise anyio.ClosedResourceError
        try:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except (sqlite3.Error, OSError) as exc:
            raise self._failed(str(exc)) from None

    async def load_history(self, owner: str, session_id: str) -> builtins.list[TurnRecord]:
        def run(conn: sqlite3.Connection) -> builtins.list[TurnRecord]:
            if not conn.execute(
                "SELECT 1 FROM sessions WHERE id = ? AND owner = ?", (session_id, owner)
            ).fetchone():
                raise session_not_found(session_id)
            turns = conn.execute(
                "SELECT id, turn_id, stop_reason FROM turns WHERE session_id = ? ORDER BY id",
                (session_id,),
            ).fetchall()
            bodies: dict[int, builtins.list[str]] = {turn[0]: [] for turn in turns}
            for turn, body in conn.execute(
                "SELECT u.turn, u.body FROM updates u JOIN turns t ON u.turn = t.id "
                "WHERE t.session_id = ? ORDER BY u.id",
                (session_id,),
            ):
                bodies[turn].extend(items_of(body))
            return [TurnRecord(turn_id, tuple(bodies[i]), stop) for i, turn_id, stop in turns]

        return await self._run(run, write=False)
