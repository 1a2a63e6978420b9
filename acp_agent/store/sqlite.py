"""``SqliteSessionStore``: the ``SessionStore`` on one SQLite file (the default store).

It owns every statement that reads or writes sessions (the schema and the connections'
settings are ``sqlite_schema``'s, the thread ``sqlite_worker``'s). Every operation runs on
the store's worker thread, in arrival order, each in one transaction (``BEGIN IMMEDIATE``
for writes), on the worker's connection. An operation that has reached the thread always
runs to completion (its caller waits shielded), so a cancelled caller never leaves a
transaction half-open.

One exception keeps a short turn from waiting for a thread: ``write_turn_now`` commits a
small turn write on the caller's thread, on a second connection whose busy timeout is
zero, when no operation is queued or running on the worker (so none is overtaken). If
another process holds the write lock, it is rolled back at once and the caller awaits
``write_turn`` instead: the event loop never waits for another process.

How a turn's items are laid out in rows (a write's items share one) is ``sqlite_rows``'s.

``turn_writer``, ``transaction_now`` and ``post_transaction`` serve the journal layer
(``journal``), which makes a turn's end durable before the tables have it.

The worker checkpoints the WAL when it has nothing else to do and the WAL has grown past
``WAL_BYTES`` (writes on the caller's thread wake it now and then to check), so no turn
waits for a checkpoint (SQLite's own would run inside the commit that crosses its
threshold).

Durability: the file is in WAL mode with ``synchronous=NORMAL``. A committed transaction
survives the death of the process (a killed agent loses nothing a store call returned for);
an operating-system crash or power loss may drop the last few, never corrupt the file.
``busy_timeout`` lets several agent processes (two editor windows) share one file. The
database and its side files are readable by their owner only, and so are the directories
made for them, whatever the umask (see ``files``).
"""

from __future__ import annotations

import builtins
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

import anyio
import anyio.lowlevel
import orjson

from acp_agent.store.base import (
    Clock,
    JsonText,
    SessionRecord,
    Timestamps,
    TurnRecord,
    as_created,
    check_limit,
    check_turn_write,
    decode_cursor,
    encode_cursor,
    session_exists,
    session_not_found,
)
from acp_agent.store.packed import PackedJson
from acp_agent.store.sqlite_rows import insert_items, items_of, rowid
from acp_agent.store.sqlite_schema import (
    BUSY_TIMEOUT_MS,
    SCHEMA_VERSION,
    WAL_BYTES,
    SchemaVersionError,
    connect_pair,
    transaction,
)
from acp_agent.store.sqlite_worker import Worker

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "SchemaVersionError", "SqliteSessionStore"]

_T = TypeVar("_T")

log = logging.getLogger("acp_agent.store.sqlite")

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


INLINE_BYTES: Final = 256 << 10  # a turn write up to this size may run on the caller's thread
CHECK_WAL_EVERY: Final = 64  # turn writes on the caller's thread between two WAL checks


def _small(
    begin: Sequence[JsonText | PackedJson] | None, updates: Sequence[JsonText | PackedJson]
) -> bool:
    size = 0
    for items in (begin or (), updates):
        for item in items:
            if isinstance(item, PackedJson):
                return False
            size += len(item)
    return size <= INLINE_BYTES


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite said SQLITE_BUSY: another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return code & 0xFF == 5 if code is not None else "database is locked" in str(exc)


TurnWriter = Callable[[sqlite3.Connection], None]


class SqliteSessionStore:
    """A ``SessionStore`` on one SQLite file; create it with ``await SqliteSessionStore.open``."""

    #: ``write_turn`` also takes :class:`PackedJson` items, stored compressed
    takes_packed_items: Final = True

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        """Remember the path; no I/O happens until ``open``/``aopen``."""
        self.path = Path(path).expanduser()
        self._timestamps = Timestamps(clock)
        self._lock = anyio.Lock()
        self._worker: Worker | None = None
        self._conn: sqlite3.Connection | None = None  # the worker's
        self._now_conn: sqlite3.Connection | None = None  # write_turn_now's: never waits
        self._written_now = 0
        self._closed = False

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, clock: Clock | None = None
    ) -> SqliteSessionStore:
        """Open the store at ``path``, creating the file and its schema if needed."""
        store = cls(path, clock=clock)
        await store.aopen()
        return store

    async def aopen(self) -> None:
        """Start the worker and connect. Called once, by ``open``."""
        async with self._lock:
            if self._worker is not None or self._closed:
                raise RuntimeError("a SqliteSessionStore can be opened only once")
            worker = self._worker = Worker(self._checkpoint)
            worker.start()
            try:
                self._conn, self._now_conn = await worker.run(lambda: connect_pair(self.path))
            except BaseException:
                self._worker = None
                worker.stop()
                raise

    def _checkpoint(self) -> None:
        """Checkpoint a WAL grown past ``WAL_BYTES`` (worker thread, when idle)."""
        conn = self._conn
        try:
            if conn is not None and os.stat(f"{self.path}-wal").st_size > WAL_BYTES:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (OSError, sqlite3.Error) as exc:  # the WAL only grows until the next try
            log.warning("WAL checkpoint failed: %s", exc)

    async def __aenter__(self) -> SqliteSessionStore:
        if self._worker is None and not self._closed:
            await self.aopen()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                self._closed = True
                conns = [c for c in (self._conn, self._now_conn) if c is not None]
                self._conn = self._now_conn = None
                worker, self._worker = self._worker, None
                if worker is not None:
                    for conn in conns:
                        await worker.run(conn.close)  # after every operation queued before
                    worker.stop()

    async def _run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        conn, worker = self._conn, self._worker
        if conn is None or worker is None:
            await anyio.lowlevel.checkpoint()
            raise anyio.ClosedResourceError(
                "the store is closed" if self._closed else "the store was never opened"
            )
        return await worker.run(lambda: transaction(conn, lambda: fn(conn), write=write))

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

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[JsonText | PackedJson] | None = None,
        updates: Sequence[JsonText | PackedJson] = (),
        end: str | None = None,
    ) -> None:
        await self._run(self.turn_writer(session_id, turn_id, begin, updates, end), write=True)

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[JsonText | PackedJson] | None = None,
        updates: Sequence[JsonText | PackedJson] = (),
        end: str | None = None,
    ) -> bool:
        """``write_turn`` on the calling thread (see ``TurnWritesNow``) when it is small and
        the connection is free: no job of the worker queued or running, no other process
        writing (no busy wait); ``False`` otherwise, with nothing written."""
        if not _small(begin, updates):
            return False
        return self._now(self.turn_writer(session_id, turn_id, begin, updates, end))

    def _now(self, write: TurnWriter) -> bool:
        conn, worker = self._now_conn, self._worker
        if conn is None or worker is None:
            raise anyio.ClosedResourceError
        if not worker.free:
            return False
        try:
            transaction(conn, lambda: write(conn), write=True)
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):  # rolled back: the worker writes it, waiting its turn
                return False
            raise
        self._written_now += 1
        if self._written_now % CHECK_WAL_EVERY == 0:
            worker.nudge()  # whose idle step checkpoints the WAL if it has grown
        return True

    # --- for the journal (``journal``): turn writes made later ---------------------------

    def transaction_now(self, write: TurnWriter) -> bool:
        """Run ``write`` in a write transaction on the calling thread, when that needs no
        waiting (as ``write_turn_now``); else ``False``, with nothing run."""
        return self._now(write)

    def post_transaction(self, write: TurnWriter, done: Callable[[bool], object]) -> None:
        """Run ``write`` in a write transaction on the worker thread, after every operation
        queued before, without waiting; ``done(committed)`` runs on the worker thread."""
        conn, worker = self._conn, self._worker
        if conn is None or worker is None:
            raise anyio.ClosedResourceError

        def finished(outcome: tuple[bool, Any]) -> None:
            if not outcome[0]:
                log.warning("a posted transaction failed: %s", outcome[1])
            done(outcome[0])

        worker.post(lambda: transaction(conn, lambda: write(conn), write=True), finished)

    def turn_writer(
        self,
        session_id: str,
        turn_id: str,
        begin: Sequence[JsonText | PackedJson] | None,
        updates: Sequence[JsonText | PackedJson],
        end: str | None,
    ) -> TurnWriter:
        """The ``write_turn`` to make inside a transaction (stamped now, on this thread)."""
        bodies = [*(begin or ()), *updates]
        now = self._timestamps.now()  # on the event loop's thread, as every timestamp

        def run(conn: sqlite3.Connection) -> None:
            if not conn.execute(
                "UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id)
            ).rowcount:
                raise session_not_found(session_id)
            row = conn.execute(
                "SELECT id, stop_reason FROM turns WHERE session_id = ? AND turn_id = ?",
                (session_id, turn_id),
            ).fetchone()
            check_turn_write(
                session_id,
                turn_id,
                exists=row is not None,
                stop_reason=None if row is None else row[1],
                begin=begin,
                end=end,
            )
            if row is None:
                turn = rowid(
                    conn.execute(
                        "INSERT INTO turns (session_id, turn_id, stop_reason) VALUES (?, ?, ?)",
                        (session_id, turn_id, end),
                    )
                )
            else:
                turn = row[0]
                if end is not None:
                    conn.execute("UPDATE turns SET stop_reason = ? WHERE id = ?", (end, turn))
            insert_items(conn, turn, bodies)

        return run

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

    async def vacuum(self) -> None:
        """Give the space of deleted rows back to the file system."""
        conn, worker = self._conn, self._worker
        if conn is None or worker is None:
            raise anyio.ClosedResourceError
        await worker.run(lambda: conn.execute("VACUUM"))
        await worker.run(lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())

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
