"""``SqliteSessionStore``: the durable ``SessionStore`` on one SQLite file (the default).

It owns the schema, its migrations and every SQL statement. It drives the standard library's
``sqlite3`` without ever making the event loop wait: the store holds a connection (opened with
``check_same_thread=False``) used only by the store's own worker thread, fed by a queue, so
operations are serialised. An operation that has reached its thread always runs to completion
(cancellation waits for it), so a cancelled caller never leaves a transaction half-open.

One exception keeps a short turn cheap: its write is *queued*.

- A small ``write_turn`` runs on the caller's thread, on a second connection that never waits
  (its ``busy_timeout`` is 0), as one ``INSERT`` into the ``queued_writes`` table. A row
  appended to one small table is the cheapest commit SQLite has: one page, where the write
  itself touches about six (the turn's table, its indexes, the session's recency).
- The insert checks what the write would (the session exists; a new turn's id is unused, in
  the tables and among this instance's queued turns), so the caller gets the same errors; what
  it cannot decide at once goes to the worker thread, which applies the queue first and raises
  the exact error. So does a write while the worker is busy (operations keep their order) or
  while another process holds the write lock.
- The worker applies queued rows to the session tables, in order, in batches: before any
  other operation of this store (every read sees every write made before it), once no write
  has been queued for ``APPLY_IDLE`` seconds, every ``APPLY_AT`` rows, and at close.
  Applying a row and deleting it is one transaction, and every instance sharing the file
  applies whatever rows it finds (its own and others'), so a queued write is applied exactly
  once, even if the process that queued it was killed.
- Only the worker checkpoints the WAL (the step that syncs to disk), and it then makes the
  first commit after the checkpoint itself (the one that restarts the WAL, whose header SQLite
  syncs), so the caller's thread never waits for a disk sync.

Durability: the file is in WAL mode with ``synchronous=NORMAL``. A committed transaction (a
queued row is one) then survives the death of the process (a killed agent loses nothing that
a store call returned for); only an operating-system crash or power loss can drop the last
few commits, never corrupt the file. Each call is one transaction (``BEGIN IMMEDIATE`` for
writes), and ``busy_timeout`` lets several agent processes (two editor windows) share one
file.

Schema versions live in ``PRAGMA user_version``; ``_MIGRATIONS`` lists the steps, applied in
order inside one transaction when a store opens. A file newer than this code is refused.

Which turns are open *in this instance* is kept in memory: a turn without a stop reason that
this instance did not begin is reported ``interrupted``. The store knows nothing of JSON-RPC,
the connection or pydantic.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from acp_agent._loop import threadsafe_soon
from acp_agent.errors import IllegalTransition, ResourceNotFound
from acp_agent.store.base import (
    UNSET,
    Clock,
    HistoryItem,
    PackedJson,
    SessionRecord,
    Timestamps,
    TurnRecord,
    Unset,
    check_limit,
    decode_cursor,
    dump_text,
    encode_cursor,
    load_json,
    session_exists,
    session_not_found,
    turn_not_found,
    turn_refused,
)

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "SchemaVersionError", "SqliteSessionStore"]

_T = TypeVar("_T")

log = logging.getLogger("acp_agent.store.sqlite")

BUSY_TIMEOUT_MS: Final = 5000
_SQLITE_BUSY: Final = 5  # primary result codes (sqlite3 names them only from 3.11)
_SQLITE_LOCKED: Final = 6
INLINE_CHARS: Final = 32 * 1024  # a turn write up to this size may be queued on the caller's thread
WAL_BYTES: Final = 4 << 20  # a WAL file larger than this is checkpointed (and cut back to it)
APPLY_AT: Final = 1024  # queued rows that make the worker apply them (and checkpoint) at once
APPLY_IDLE: Final = 0.05  # seconds without a queued write after which the worker applies them
APPLY_BATCH: Final = 256  # rows applied per transaction

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # 0 -> 1: sessions, turns, updates.
    (
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY NOT NULL,
            cwd TEXT NOT NULL,
            additional_directories TEXT NOT NULL DEFAULT '[]',
            title TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            mode_id TEXT,
            config TEXT NOT NULL DEFAULT '{}',
            meta TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC)",
        "CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at DESC, id DESC)",
        """
        CREATE TABLE turns (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            turn_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            stop_reason TEXT,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            PRIMARY KEY (session_id, turn_id),
            UNIQUE (session_id, seq)
        )
        """,
        """
        CREATE TABLE updates (
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, turn_id, idx),
            FOREIGN KEY (session_id, turn_id)
                REFERENCES turns (session_id, turn_id) ON DELETE CASCADE
        )
        """,
    ),
    # 1 -> 2: a turn's first row of history lives in its ``turns`` row (``body``; its
    # ``updates`` rows follow it), so a short turn writes one row, not two (two pages
    # fewer per commit).
    ("ALTER TABLE turns ADD COLUMN body TEXT",),
    # 2 -> 3: small turn writes are queued as one row each and applied in batches by the
    # worker (see the module docstring). ``body`` holds the write's history items, one JSON
    # text per line. No index: a row is only ever appended, read in order and deleted.
    (
        """
        CREATE TABLE queued_writes (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            at TEXT NOT NULL,
            begins INTEGER NOT NULL,
            stop_reason TEXT,
            body TEXT
        )
        """,
    ),
)

SCHEMA_VERSION: Final = len(_MIGRATIONS)

_SESSION_COLUMNS: Final = (
    "id, cwd, additional_directories, title, created_at, updated_at, mode_id, config, meta"
)


class SchemaVersionError(RuntimeError):
    """The database file was written by a newer acp-agent (its schema version is unknown)."""


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema version {version} is newer than this acp-agent's {SCHEMA_VERSION}"
            )
        for step in _MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _connect(path: Path, *, inline: bool = False) -> sqlite3.Connection:
    """The worker's connection (migrating the file), or with ``inline`` the connection for
    writes on the event loop's thread: it never waits for a lock. Neither checkpoints by
    itself: the worker does (see ``SqliteSessionStore._checkpoint``)."""
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {0 if inline else BUSY_TIMEOUT_MS:d}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA cache_size = -512")  # KiB: the store reads little back
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_BYTES:d}")
        if not inline:
            _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says another connection holds a lock we would have to wait for."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _transaction(conn: sqlite3.Connection, fn: Callable[[], _T], *, write: bool) -> _T:
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = fn()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


ROW_BYTES: Final = 1 << 18  # history items are grouped into rows of about this size


Body = str | PackedJson
"""A history item on its way to a row: its JSON text, or packed (a large item)."""


def _body(item: HistoryItem) -> Body:
    return item if isinstance(item, PackedJson) else dump_text(item)


def _pack_rows(bodies: Sequence[Body]) -> builtins.list[Body]:
    """History items grouped into ``updates`` rows: JSON texts joined by newlines.

    A JSON text never holds a raw newline (it is escaped inside strings), so the split is
    exact; a row written before batching held one item and reads the same way. Grouping
    keeps a streaming turn's writes to a few INSERTs, not one per update; a large item
    gets a row of its own, so it is never copied into a joined string (a packed one is
    written in pieces, see ``_insert_rows``).
    """
    rows: builtins.list[Body] = []
    group: builtins.list[str] = []
    size = 0
    for body in bodies:
        if isinstance(body, PackedJson):
            if group:
                rows.append("\n".join(group))
                group, size = [], 0
            rows.append(body)
            continue
        if group and size + len(body) > ROW_BYTES:
            rows.append("\n".join(group))
            group, size = [], 0
        group.append(body)
        size += len(body) + 1
    if group:
        rows.append("\n".join(group))
    return rows


def _unpack_rows(text: str | bytes) -> builtins.list[Any]:
    if isinstance(text, bytes):  # a row written in pieces (a BLOB)
        return [load_json(line) for line in text.split(b"\n")]
    return [load_json(line) for line in text.split("\n")]


_QUEUE: Final = (
    "INSERT INTO queued_writes (session_id, turn_id, at, begins, stop_reason, body) "
    "VALUES (?, ?, ?, 0, ?, ?)"
)
# A new turn is queued only if its session exists and no applied turn has its id (the turns
# this instance queued and the worker has not applied yet are known in memory).
_QUEUE_NEW_TURN: Final = (
    "INSERT INTO queued_writes (session_id, turn_id, at, begins, stop_reason, body) "
    "SELECT ?1, ?2, ?3, 1, ?4, ?5 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1) "
    "AND NOT EXISTS (SELECT 1 FROM turns WHERE session_id = ?1 AND turn_id = ?2)"
)

# A queued new turn applied: its row, as ``_begin_sync`` writes it.
_APPLY_NEW_TURN: Final = (
    "INSERT INTO turns (session_id, turn_id, seq, started_at, stop_reason, ended_at, body) "
    "VALUES (?1, ?2, (SELECT COALESCE(MAX(seq) + 1, 0) FROM turns WHERE session_id = ?1), "
    "?3, ?4, CASE WHEN ?4 IS NULL THEN NULL ELSE ?3 END, ?5)"
)
#: a ``queued_writes`` row: id, session_id, turn_id, at, begins, stop_reason, body
_Queued = tuple[int, str, str, str, int, str | None, str | None]

_INSERT_ROW: Final = "INSERT INTO updates (session_id, turn_id, idx, body) VALUES (?, ?, ?, ?)"


def _insert_rows(
    conn: sqlite3.Connection, session_id: str, turn_id: str, start: int, rows: Sequence[Body]
) -> None:
    """Insert ``rows`` as the turn's rows ``start``, ``start + 1``, ...

    A packed row is written in pieces into a zero-filled BLOB of its size, so that neither
    its text nor SQLite's copies of it (the bound value, the record) are ever whole in
    memory; it reads back as bytes (see ``_unpack_rows``).
    """
    if len(rows) == 1 and isinstance(rows[0], str):
        conn.execute(_INSERT_ROW, (session_id, turn_id, start, rows[0]))
        return
    conn.executemany(
        _INSERT_ROW,
        [
            (session_id, turn_id, start + i, row)
            for i, row in enumerate(rows)
            if isinstance(row, str)
        ],
    )
    for i, row in enumerate(rows):
        if not isinstance(row, PackedJson):
            continue
        blobopen = getattr(conn, "blobopen", None)  # Python 3.11+
        if blobopen is None:
            conn.execute(_INSERT_ROW, (session_id, turn_id, start + i, row.text()))
            continue
        rowid = conn.execute(
            "INSERT INTO updates (session_id, turn_id, idx, body) VALUES (?, ?, ?, zeroblob(?))",
            (session_id, turn_id, start + i, row.size),
        ).lastrowid
        with blobopen("updates", "body", rowid) as blob:
            for piece in row.pieces():
                blob.write(piece)


def _record(row: tuple[Any, ...]) -> SessionRecord:
    sid, cwd, dirs, title, created_at, updated_at, mode_id, config, meta = row
    return SessionRecord(
        session_id=sid,
        cwd=cwd,
        additional_directories=tuple(load_json(dirs)),
        title=title,
        created_at=created_at,
        updated_at=updated_at,
        mode_id=mode_id,
        config=load_json(config),
        meta=load_json(meta),
    )


_TICK: Final = object()  # a job that only wakes the worker


class _Worker:
    """The one thread that owns the connection; operations run there in arrival order.

    A plain thread and a queue, and a completion handed back to the event loop without the
    thread waiting for it, cost far less than a generic worker-thread hop. The caller
    waits shielded: an operation that has started always finishes, so a cancelled caller
    never leaves a transaction half-open.
    """

    def __init__(self, idle: Callable[[], float | None] | None = None) -> None:
        """``idle`` runs on the thread between jobs; it returns how many seconds to wait for
        the next job before it runs again (None: until the next job or ``tick``)."""
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="acp-agent-sqlite", daemon=True)
        self._idle = idle
        #: operations queued or running (``post``-ed ones not counted); event loop thread only
        self.pending = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            timeout = self._idle() if self._idle is not None else None
            try:
                job = self._jobs.get(timeout=timeout)
            except queue.Empty:
                continue
            if job is None:
                return
            if job is _TICK:
                continue
            fn, box, wake = job
            try:
                result = (True, fn())
            except BaseException as exc:  # handed to the waiting task, which raises it
                result = (False, exc)
            if box is None:  # posted: nobody waits
                if not result[0]:
                    log.warning("background store job failed: %s", result[1])
                del result
                continue
            box.append(result)
            del result
            with contextlib.suppress(RuntimeError):  # the event loop is already gone
                wake()
            del wake

    async def run(self, fn: Callable[[], _T]) -> _T:
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller starts nothing
        done = anyio.Event()
        box: builtins.list[tuple[bool, Any]] = []
        self.pending += 1
        try:
            self._jobs.put((fn, box, partial(threadsafe_soon(), done.set)))
            with anyio.CancelScope(shield=True):
                await done.wait()
        finally:
            self.pending -= 1
        ok, value = box[0]
        if ok:
            return cast(_T, value)
        raise value

    def post(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` without waiting for it (a failure is logged)."""
        self._jobs.put((fn, None, None))

    def tick(self) -> None:
        """Make the thread run ``idle`` now (it may be waiting for a job with no time limit)."""
        self._jobs.put(_TICK)


class SqliteSessionStore:
    """A ``SessionStore`` on one SQLite file; create it with ``await SqliteSessionStore.open``."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        """Remember the path; no I/O happens until ``open``/``aopen``."""
        self.path = Path(path)
        self._timestamps = Timestamps(clock)
        self._lock = anyio.Lock()
        self._worker: _Worker | None = None
        self._conn: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None  # see the module docstring
        # Queued writes: the count queued by this instance (event loop thread), the count the
        # worker had seen when it last applied them all (worker thread), the last one's time,
        # and the turns begun by queued writes, each with its place in that count.
        self._queued = 0
        self._applied = 0
        self._last_queued = 0.0
        self._queued_turns: dict[tuple[str, str], int] = {}
        self._pruned = 0
        self._checkpointing = False  # set by the worker thread while it checkpoints
        self._retry = 0.0  # seconds before the worker tries a failed apply again
        self._closed = False
        self._open_turns: set[tuple[str, str]] = set()

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, clock: Clock | None = None
    ) -> SqliteSessionStore:
        """Open (creating and migrating as needed) the store at ``path``."""
        store = cls(path, clock=clock)
        await store.aopen()
        return store

    async def aopen(self) -> None:
        """Connect and migrate. Called once, by ``open``."""
        async with self._lock:
            if self._conn is not None or self._closed or self._worker is not None:
                raise RuntimeError("a SqliteSessionStore can be opened only once")
            worker = self._worker = _Worker(self._idle_step)
            worker.start()
            path = self.path
            try:
                conn = self._conn = await worker.run(lambda: _connect(path))
                self._inline = await worker.run(lambda: _connect(path, inline=True))
                # Writes a killed process had queued are applied now, not at the first call.
                await worker.run(lambda: self._apply_queued(conn))
            except BaseException:
                if self._conn is not None:
                    await worker.run(self._conn.close)
                    self._conn = None
                worker.stop()
                raise

    async def __aenter__(self) -> SqliteSessionStore:
        if self._conn is None and not self._closed:
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
                conn, self._conn = self._conn, None
                inline, self._inline = self._inline, None
                self._open_turns.clear()
                worker, self._worker = self._worker, None
                if worker is not None:
                    # After every operation queued before; the worker's connection last
                    # (closing the last connection checkpoints the WAL, off this thread).
                    if conn is not None:
                        main = conn
                        try:
                            await worker.run(lambda: self._apply_queued(main))
                        except Exception:  # they stay queued, for the next instance
                            log.exception("could not apply the queued writes before closing")
                    if inline is not None:
                        await worker.run(inline.close)
                    if conn is not None:
                        await worker.run(conn.close)
                    worker.stop()

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn
        worker = self._worker
        if conn is None or worker is None:
            await anyio.lowlevel.checkpoint()
            raise anyio.ClosedResourceError(
                "the store is closed" if self._closed else "the store was never opened"
            )
        return await worker.run(lambda: self._after_queued(conn, fn))

    def _after_queued(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        self._apply_queued(conn)  # every operation sees every write made before it
        try:
            return fn(conn)
        finally:
            try:
                if os.stat(f"{self.path.expanduser()}-wal").st_size > WAL_BYTES:
                    self._checkpoint(conn)  # a large write grew it
            except Exception:  # the WAL only grows until the next checkpoint
                log.exception("WAL checkpoint failed")

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Checkpoint the WAL on the worker thread, and be the first to write after it.

        The first commit after a complete checkpoint restarts the WAL, and SQLite then syncs
        the new WAL header to disk (a millisecond or more). A tiny write here takes that
        sync, so that it is never the event loop's inline connection that waits for it;
        that connection does not write meanwhile (see ``_queue_inline``).
        """
        self._checkpointing = True
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

            def rewrite_version() -> None:  # the same value: any write would do
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                conn.execute(f"PRAGMA user_version = {version:d}")

            _transaction(conn, rewrite_version, write=True)
        finally:
            self._checkpointing = False

    # --- queued writes (worker thread; see the module docstring) -------------------------

    def _idle_step(self) -> float | None:
        conn = self._conn
        if conn is None or self._queued == self._applied:
            return None
        wait = self._last_queued + APPLY_IDLE - time.monotonic()
        if wait > 0:
            return wait
        try:
            self._flush(conn)
        except Exception:  # they stay queued and durable; tried again, less and less often
            self._retry = min(2 * self._retry, 60.0) if self._retry else 1.0
            log.exception("could not apply the queued writes; next try in %g s", self._retry)
            self._last_queued = time.monotonic() + self._retry - APPLY_IDLE
            return self._retry
        self._retry = 0.0
        return None

    def _flush(self, conn: sqlite3.Connection) -> None:
        self._apply_queued(conn)
        self._checkpoint(conn)

    def _apply_queued(self, conn: sqlite3.Connection) -> None:
        """Apply every queued row, in order, ``APPLY_BATCH`` per transaction."""
        seen = self._queued
        while conn.execute("SELECT 1 FROM queued_writes LIMIT 1").fetchone() is not None:
            _transaction(conn, partial(self._apply_batch, conn), write=True)
        self._applied = seen

    def _apply_batch(self, conn: sqlite3.Connection) -> None:
        rows: builtins.list[_Queued] = conn.execute(
            "SELECT id, session_id, turn_id, at, begins, stop_reason, body FROM queued_writes "
            "ORDER BY id LIMIT ?",
            (APPLY_BATCH,),
        ).fetchall()
        start = 0
        while start < len(rows):
            # A run of new turns (the common row: a whole short turn) in a few statements;
            # any other row on its own, in order.
            end = start
            while end < len(rows) and rows[end][4]:
                end += 1
            if end > start:
                self._apply_new_turns(conn, rows[start:end])
                start = end
            else:
                self._apply_one(conn, rows[start])
                start += 1
        if rows:
            conn.execute("DELETE FROM queued_writes WHERE id <= ?", (rows[-1][0],))

    def _apply_new_turns(self, conn: sqlite3.Connection, rows: Sequence[_Queued]) -> None:
        """What ``_write_sync`` does for each row, as two ``executemany`` calls (far less
        Python, so the worker holds the interpreter lock far less). A queued body is at
        most one ``updates`` row's worth, so it is the turn's ``body`` as it stands."""
        latest = {row[1]: row[3] for row in rows}  # each session's last activity
        conn.execute("SAVEPOINT new_turns")
        try:
            conn.executemany(
                _APPLY_NEW_TURN,
                [(sid, tid, at, stop, body) for _, sid, tid, at, _, stop, body in rows],
            )
            conn.executemany(
                "UPDATE sessions SET updated_at = ? WHERE id = ?",
                [(at, sid) for sid, at in latest.items()],
            )
        except sqlite3.IntegrityError:  # one of them cannot apply: row by row, to drop it
            conn.execute("ROLLBACK TO new_turns")
            conn.execute("RELEASE new_turns")
            for row in rows:
                self._apply_one(conn, row)
            return
        conn.execute("RELEASE new_turns")

    def _apply_one(self, conn: sqlite3.Connection, row: _Queued) -> None:
        _, session_id, turn_id, at, begins, stop_reason, body = row
        items: builtins.list[Body] = [] if body is None else [*body.split("\n")]
        conn.execute("SAVEPOINT queued")
        try:
            if begins:
                self._write_sync(conn, session_id, turn_id, items, [], stop_reason, at)
            else:
                self._write_sync(conn, session_id, turn_id, None, items, stop_reason, at)
        except (ResourceNotFound, IllegalTransition, sqlite3.IntegrityError) as exc:
            # Another process deleted the session meanwhile (or reused a turn id): this
            # write can never apply. Anything else (I/O, a full disk) rolls the batch
            # back and leaves it queued.
            conn.execute("ROLLBACK TO queued")
            log.warning("dropped a queued write to turn %s of %s: %s", turn_id, session_id, exc)
        conn.execute("RELEASE queued")

    # --- sessions ------------------------------------------------------------------------

    async def create(self, record: SessionRecord) -> SessionRecord:
        dirs = dump_text(list(record.additional_directories))
        config = dump_text(dict(record.config))
        meta = dump_text(dict(record.meta))

        def run(conn: sqlite3.Connection) -> SessionRecord:
            def body() -> SessionRecord:
                if conn.execute(
                    "SELECT 1 FROM sessions WHERE id = ?", (record.session_id,)
                ).fetchone():
                    raise session_exists(record.session_id)
                now = self._timestamps.now()
                row = (
                    record.session_id,
                    record.cwd,
                    dirs,
                    record.title,
                    record.created_at or now,
                    record.updated_at or now,
                    record.mode_id,
                    config,
                    meta,
                )
                conn.execute(
                    f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", row
                )
                return _record(row)

            return _transaction(conn, body, write=True)

        return await self._run(run)

    async def get(self, session_id: str) -> SessionRecord | None:
        def run(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return None if row is None else _record(row)

        return await self._run(run)

    async def update(
        self,
        session_id: str,
        *,
        title: str | Unset | None = UNSET,
        mode_id: str | Unset | None = UNSET,
        config: Mapping[str, Any] | Unset = UNSET,
        meta: Mapping[str, Any] | Unset = UNSET,
        cwd: str | Unset = UNSET,
        additional_directories: Sequence[str] | Unset = UNSET,
    ) -> SessionRecord:
        changes: dict[str, Any] = {}
        if not isinstance(title, Unset):
            changes["title"] = title
        if not isinstance(mode_id, Unset):
            changes["mode_id"] = mode_id
        if not isinstance(config, Unset):
            changes["config"] = dump_text(dict(config))
        if not isinstance(meta, Unset):
            changes["meta"] = dump_text(dict(meta))
        if not isinstance(cwd, Unset):
            changes["cwd"] = cwd
        if not isinstance(additional_directories, Unset):
            changes["additional_directories"] = dump_text(list(additional_directories))

        def run(conn: sqlite3.Connection) -> SessionRecord:
            def body() -> SessionRecord:
                if changes:
                    assignments = ", ".join(f"{column} = ?" for column in changes)
                    cursor = conn.execute(
                        f"UPDATE sessions SET {assignments}, updated_at = ? WHERE id = ?",
                        (*changes.values(), self._timestamps.now(), session_id),
                    )
                    if cursor.rowcount == 0:
                        raise session_not_found(session_id)
                row = conn.execute(
                    f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
                ).fetchone()
                if row is None:
                    raise session_not_found(session_id)
                return _record(row)

            return _transaction(conn, body, write=bool(changes))

        return await self._run(run)

    async def list(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        check_limit(limit)
        conditions: builtins.list[str] = []
        params: builtins.list[Any] = []
        if cwd is not None:
            conditions.append("cwd = ?")
            params.append(cwd)
        if cursor is not None:
            conditions.append("(updated_at, id) < (?, ?)")
            params.extend(decode_cursor(cursor))
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        query = (
            f"SELECT {_SESSION_COLUMNS} FROM sessions {where} "
            "ORDER BY updated_at DESC, id DESC LIMIT ?"
        )
        params.append(limit + 1)

        def run(conn: sqlite3.Connection) -> builtins.list[SessionRecord]:
            return [_record(row) for row in conn.execute(query, params)]

        rows = await self._run(run)
        page = rows[:limit]
        more = len(rows) > limit
        next_cursor = encode_cursor(page[-1].updated_at, page[-1].session_id) if more else None
        return page, next_cursor

    async def delete(self, session_id: str) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            deleted = _transaction(
                conn,
                lambda: conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount,
                write=True,
            )
            self._open_turns = {key for key in self._open_turns if key[0] != session_id}
            return bool(deleted)

        return await self._run(run)

    # --- turns ---------------------------------------------------------------------------

    def _check_turn(
        self, conn: sqlite3.Connection, session_id: str, turn_id: str, event: str
    ) -> None:
        row = conn.execute(
            "SELECT stop_reason FROM turns WHERE session_id = ? AND turn_id = ?",
            (session_id, turn_id),
        ).fetchone()
        if row is None:
            if not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                raise session_not_found(session_id)
            raise turn_not_found(session_id, turn_id)
        if row[0] is not None:
            raise turn_refused(turn_id, "ended", event)

    def _touch(self, conn: sqlite3.Connection, session_id: str, now: str) -> None:
        conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))

    # -- turns: each step is a plain function on a connection, so write_turn can run
    # -- several of them in one transaction (one thread hop, one commit).

    def _begin_sync(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        turn_id: str,
        bodies: Sequence[Body],
        *,
        now: str,
        end: str | None,
    ) -> None:
        # No checks first: the foreign key and the primary key refuse a missing session
        # and a repeated turn, and only then do we look at which it was.
        rows = _pack_rows(bodies)
        # The first row rides in the turn's own row: a short turn is one INSERT.
        first = rows[0] if rows and isinstance(rows[0], str) else None
        try:
            conn.execute(
                "INSERT INTO turns "
                "(session_id, turn_id, seq, started_at, stop_reason, ended_at, body) "
                "VALUES (?, ?, (SELECT COALESCE(MAX(seq) + 1, 0) FROM turns WHERE session_id = ?),"
                " ?, ?, ?, ?)",
                (session_id, turn_id, session_id, now, end, None if end is None else now, first),
            )
        except sqlite3.IntegrityError:
            if not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                raise session_not_found(session_id) from None
            row = conn.execute(
                "SELECT stop_reason FROM turns WHERE session_id = ? AND turn_id = ?",
                (session_id, turn_id),
            ).fetchone()
            if row is not None:
                state = "running" if row[0] is None else "ended"
                raise turn_refused(turn_id, state, "begin_turn") from None
            raise
        rest = rows if first is None else rows[1:]
        if rest:
            _insert_rows(conn, session_id, turn_id, 0, rest)

    def _insert_updates(
        self, conn: sqlite3.Connection, session_id: str, turn_id: str, bodies: Sequence[Body]
    ) -> None:
        start = conn.execute(
            "SELECT COALESCE(MAX(idx) + 1, 0) FROM updates WHERE session_id = ? AND turn_id = ?",
            (session_id, turn_id),
        ).fetchone()[0]
        _insert_rows(conn, session_id, turn_id, start, _pack_rows(bodies))

    async def begin_turn(
        self, session_id: str, turn_id: str, prompt_updates: Sequence[dict[str, Any]]
    ) -> None:
        await self.write_turn(session_id, turn_id, begin=prompt_updates)

    async def append_updates(
        self, session_id: str, turn_id: str, updates: Sequence[HistoryItem]
    ) -> None:
        await self.write_turn(session_id, turn_id, updates=updates)

    async def end_turn(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        await self.write_turn(session_id, turn_id, end=stop_reason)

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> None:
        begun = [_body(u) for u in begin] if begin is not None else None
        bodies = [_body(u) for u in updates]

        def run(conn: sqlite3.Connection) -> None:
            _transaction(
                conn,
                lambda: self._write_sync(
                    conn, session_id, turn_id, begun, bodies, end, self._timestamps.now()
                ),
                write=True,
            )
            if begun is not None and end is None:
                self._open_turns.add((session_id, turn_id))
            if end is not None:
                self._open_turns.discard((session_id, turn_id))

        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller writes nothing
        if not self._queue_inline(session_id, turn_id, begun, bodies, end):
            await self._run(run)

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> bool:
        """A small ``write_turn`` queued at once (see ``ImmediateTurnWrites``); ``False``
        when it must go to the worker thread."""
        begun = [_body(u) for u in begin] if begin is not None else None
        return self._queue_inline(session_id, turn_id, begun, [_body(u) for u in updates], end)

    def _write_sync(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        turn_id: str,
        begun: Sequence[Body] | None,
        bodies: Sequence[Body],
        end: str | None,
        now: str,
    ) -> None:
        # One pass: the fewest statements for the common shapes (a whole short turn; a
        # batch of updates of a running turn).
        if begun is not None:
            self._begin_sync(conn, session_id, turn_id, [*begun, *bodies], now=now, end=end)
        else:
            self._check_turn(conn, session_id, turn_id, "append_updates" if bodies else "end_turn")
            if bodies:
                self._insert_updates(conn, session_id, turn_id, bodies)
            if end is not None:
                conn.execute(
                    "UPDATE turns SET stop_reason = ?, ended_at = ? "
                    "WHERE session_id = ? AND turn_id = ?",
                    (end, now, session_id, turn_id),
                )
        self._touch(conn, session_id, now)

    def _queue_inline(
        self,
        session_id: str,
        turn_id: str,
        begun: Sequence[Body] | None,
        bodies: Sequence[Body],
        end: str | None,
    ) -> bool:
        """Queue a small turn write here, now, if that needs no waiting (see the module
        docstring); False when it must go to the worker thread instead."""
        conn = self._inline
        worker = self._worker
        main = self._conn
        if conn is None or worker is None or main is None or worker.pending:
            return False
        if self._checkpointing:
            return False  # the worker is to write first after the checkpoint
        key = (session_id, turn_id)
        if begun is None:
            if key not in self._open_turns:
                return False  # not a turn this instance runs: the worker checks it
        elif self._queued_turns.get(key, 0) > self._applied:
            return False  # begun by a write still queued: the worker refuses it
        items: builtins.list[str] = []
        size = 0
        for item in bodies if begun is None else [*begun, *bodies]:
            if not isinstance(item, str):
                return False  # a large (packed) item
            items.append(item)
            size += len(item)
        if size > INLINE_CHARS:
            return False
        text = "\n".join(items) if items else None
        now = self._timestamps.now()
        try:
            if begun is None:
                conn.execute(_QUEUE, (session_id, turn_id, now, end, text))
            elif conn.execute(_QUEUE_NEW_TURN, (session_id, turn_id, now, end, text)).rowcount == 0:
                return False  # no such session, or the turn exists: the worker says which
        except sqlite3.OperationalError as exc:
            if _busy(exc):
                return False  # another process is writing: wait for it on the worker
            raise
        if begun is not None and end is None:
            self._open_turns.add(key)
        if end is not None:
            self._open_turns.discard(key)
        self._last_queued = time.monotonic()
        self._queued += 1
        applied = self._applied
        if begun is not None:
            if self._pruned != applied:  # forget the turns the worker has applied since
                self._pruned = applied
                self._queued_turns = {k: n for k, n in self._queued_turns.items() if n > applied}
            self._queued_turns[key] = self._queued
        waiting = self._queued - applied
        if waiting == 1:
            worker.tick()  # the worker starts waiting for the quiet that applies it
        elif waiting % APPLY_AT == 0:
            # A long burst: one pause of the inline path (the worker holds the write lock,
            # then checkpoints) per APPLY_AT writes, for both jobs at once.
            worker.post(lambda: self._flush(main))
        return True

    async def load_history(self, session_id: str) -> builtins.list[TurnRecord]:
        def run(conn: sqlite3.Connection) -> builtins.list[TurnRecord]:
            def body() -> builtins.list[TurnRecord]:
                if not conn.execute(
                    "SELECT 1 FROM sessions WHERE id = ?", (session_id,)
                ).fetchone():
                    raise session_not_found(session_id)
                turns = conn.execute(
                    "SELECT turn_id, seq, stop_reason, body FROM turns "
                    "WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                ).fetchall()
                bodies: dict[str, builtins.list[Any]] = {
                    t[0]: [] if t[3] is None else _unpack_rows(t[3]) for t in turns
                }
                for turn_id, text in conn.execute(
                    "SELECT turn_id, body FROM updates WHERE session_id = ? ORDER BY turn_id, idx",
                    (session_id,),
                ):
                    bodies[turn_id].extend(_unpack_rows(text))
                return [
                    TurnRecord(
                        turn_id=turn_id,
                        seq=seq,
                        updates=tuple(bodies[turn_id]),
                        stop_reason=stop_reason,
                        interrupted=stop_reason is None
                        and (session_id, turn_id) not in self._open_turns,
                    )
                    for turn_id, seq, stop_reason, _ in turns
                ]

            return _transaction(conn, body, write=False)

        return await self._run(run)
