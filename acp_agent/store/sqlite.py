"""``SqliteSessionStore``: the durable ``SessionStore`` on one SQLite file (the default).

It owns the schema, its migrations and every SQL statement. It drives the standard library's
``sqlite3`` without ever making the event loop wait: the store holds a connection (opened with
``check_same_thread=False``) used only by the store's own worker thread, fed by a queue, so
operations are serialised. An operation that has reached its thread always runs to completion
(cancellation waits for it), so a cancelled caller never leaves a transaction half-open.

One exception keeps a short turn cheap: its write is *journaled*.

- A small ``write_turn`` runs on the caller's thread as one ``os.write`` of a checksummed
  record to this instance's journal segment, a file in the ``<database>-queue`` directory
  beside the database. It touches no SQLite lock, so it never waits, and it costs a few
  microseconds where the cheapest SQLite commit costs tens.
- What the write would check is checked from memory: a new turn needs a session this
  instance created or loaded, whose turn ids it therefore knows, and an id not among them; a
  write to a running turn needs a turn this instance began. Anything else (and any write
  while the worker is busy, so operations keep their order) goes to the worker thread, which
  applies the journals first and raises the exact error.
- The worker applies journal records to the session tables, in order, in batches: before
  any other operation of this store (every read sees every write made before it), once no
  write has been journaled for ``APPLY_IDLE`` seconds, every ``APPLY_AT`` records, and at
  close. How far each segment has been applied is kept in the database
  (``journal_progress``), updated in the transaction that applies the records, so every
  instance sharing the file applies whatever records it finds (its own and other live or
  dead instances') and each record is applied exactly once, even if the process that wrote
  it was killed.
- A segment is locked (``flock``) by its owner for as long as it appends to it; it is
  created under a temporary name and renamed once locked, so no one sees it unlocked. A
  segment whose lock can be taken (its owner closed it, moved on to a fresh segment, or
  died) is deleted once it is wholly applied. A record is found complete by its length and
  checksum, so a write in progress is read as not there yet; a failed write is cut off
  (``ftruncate``) before the next, and the torn tail of a killed writer is never followed
  by another record.
- Only the worker thread writes to SQLite, so only it ever waits for the disk (a checkpoint,
  the sync of a restarted WAL's header).

Durability: the file is in WAL mode with ``synchronous=NORMAL``. A committed transaction,
like a journal record that ``os.write`` has taken, then survives the death of the process (a
killed agent loses nothing that a store call returned for); only an operating-system crash or
power loss can drop the last few writes, never corrupt the file. Each call is one
transaction (``BEGIN IMMEDIATE`` for writes), and ``busy_timeout`` lets several agent
processes (two editor windows) share one file.

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
import struct
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import orjson

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

try:
    import fcntl
except ImportError:  # no flock (Windows): every write goes to the worker thread
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("acp_agent.store.sqlite")

BUSY_TIMEOUT_MS: Final = 5000
INLINE_CHARS: Final = (
    32 * 1024
)  # a turn write up to this size may be journaled on the caller's thread
WAL_BYTES: Final = 4 << 20  # a WAL file larger than this is checkpointed (and cut back to it)
APPLY_AT: Final = 1024  # journaled writes that make the worker apply them (and checkpoint) at once
APPLY_IDLE: Final = 0.05  # seconds without a journaled write after which the worker applies them
APPLY_BATCH: Final = 256  # rows of the (schema 3) queue table applied per transaction
SEGMENT_BYTES: Final = 4 << 20  # a journal segment past this size is left for a fresh one
READ_BYTES: Final = 1 << 20  # journal bytes applied per transaction (a record is far smaller)

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
    # 3 -> 4: small turn writes go to journal files instead (see the module docstring); how
    # far each segment is applied. ``queued_writes`` stays: rows a schema-3 process left are
    # applied as before.
    (
        """
        CREATE TABLE journal_progress (
            segment TEXT PRIMARY KEY NOT NULL,
            applied INTEGER NOT NULL
        ) WITHOUT ROWID
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


def _connect(path: Path) -> sqlite3.Connection:
    """The worker's connection, the file migrated. It does not checkpoint by itself: the
    worker does, between jobs (see ``SqliteSessionStore._checkpoint``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA cache_size = -512")  # KiB: the store reads little back
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_BYTES:d}")
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


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


#: a journaled (or schema-3 queued) write: session_id, turn_id, at, begins, stop_reason, body
#: (the write's history items, one JSON text per line)
_Queued = tuple[str, str, str, bool, str | None, str | None]

_HEAD: Final = struct.Struct("<II")  # a journal record: payload length, CRC-32 of the payload
RECORD_BYTES: Final = READ_BYTES // 2  # the largest record journaled


def _encode_record(row: _Queued) -> bytes:
    payload = orjson.dumps(row)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_records(data: bytes) -> tuple[builtins.list[_Queued], int]:
    """The whole records at the start of ``data``, and the bytes they take.

    Reading stops at the first record that is incomplete or fails its checksum: a record
    being written right now, or the torn tail a failed or killed writer left (a writer cuts
    off a failed write before its next one, so such a tail is never followed by a record).
    """
    rows: builtins.list[_Queued] = []
    pos = 0
    size = len(data)
    view = memoryview(data)
    while pos + _HEAD.size <= size:
        length, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        if end > size:
            break
        payload = view[pos + _HEAD.size : end]
        if zlib.crc32(payload) != crc:
            break
        pos = end
        try:
            sid, tid, at, begins, stop_reason, body = orjson.loads(payload)
        except (orjson.JSONDecodeError, ValueError, TypeError):  # whole, yet not ours
            log.warning("skipped an unreadable journal record of %d bytes", length)
            continue
        rows.append((sid, tid, at, begins, stop_reason, body))
    return rows, pos


def _journal_segments(directory: Path) -> builtins.list[str]:
    """The journal segments in ``directory``, each instance's in the order it wrote them."""
    try:
        return sorted(name for name in os.listdir(directory) if name.endswith(".log"))
    except FileNotFoundError:
        return []


def _create_segment(directory: Path, name: str) -> int:
    """Create the journal segment ``name``, locked, and return its descriptor (append-only).

    It is made under a temporary name and renamed once locked, so no other instance ever
    finds it unlocked (and takes it for a dead instance's).
    """
    assert fcntl is not None
    temporary = directory / f"{name}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(temporary, directory / name)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return fd


# A queued new turn applied: its row, as ``_begin_sync`` writes it.
_APPLY_NEW_TURN: Final = (
    "INSERT INTO turns (session_id, turn_id, seq, started_at, stop_reason, ended_at, body) "
    "VALUES (?1, ?2, (SELECT COALESCE(MAX(seq) + 1, 0) FROM turns WHERE session_id = ?1), "
    "?3, ?4, CASE WHEN ?4 IS NULL THEN NULL ELSE ?3 END, ?5)"
)

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
        # This instance's journal segment (see the module docstring), appended to on the event
        # loop's thread only: its descriptor, name and size.
        self._journal_dir = Path(f"{self.path.expanduser()}-queue")
        self._instance = os.urandom(6).hex()
        self._segment_count = 0
        self._segment_fd: int | None = None
        self._segment = ""
        self._segment_size = 0  # where the next record starts (a failed write is cut back to it)
        self._roll_at = 0  # the size at which the next record goes to a fresh segment
        # Journaled writes: the count written by this instance (event loop thread), the count
        # the worker had seen when it last applied them all (worker thread), the last one's
        # time; and how far the worker last found each segment applied.
        self._queued = 0
        self._applied = 0
        self._last_queued = 0.0
        self._progress: dict[str, int] = {}
        self._retry = 0.0  # seconds before the worker tries a failed apply again
        self._closed = False
        self._open_turns: set[tuple[str, str]] = set()
        #: the turn ids of each session this instance created or loaded (event loop thread):
        #: what lets a new turn be journaled without asking the database
        self._known: dict[str, set[str]] = {}

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
            path = self.path.expanduser()
            try:
                conn = self._conn = await worker.run(lambda: _connect(path))
                # Writes a killed process had journaled are applied now, not at the first call.
                await worker.run(lambda: self._open_journal(conn))
            except BaseException:
                if self._conn is not None:
                    await worker.run(self._conn.close)
                    self._conn = None
                worker.stop()
                raise

    def _open_journal(self, conn: sqlite3.Connection) -> None:
        self._apply_queued(conn)
        if fcntl is None:
            return
        try:
            self._journal_dir.mkdir(exist_ok=True)
        except OSError:
            log.exception("no journal directory; turn writes go to the database")
            return
        self._sweep(conn)

        # Progress rows of segments that are gone (a crash between deleting a segment and
        # its row). Listed inside the transaction: a segment gets its row only in one.
        def forget() -> None:
            present = set(_journal_segments(self._journal_dir))
            for (name,) in conn.execute("SELECT segment FROM journal_progress").fetchall():
                if name not in present:
                    conn.execute("DELETE FROM journal_progress WHERE segment = ?", (name,))

        _transaction(conn, forget, write=True)
        self._next_segment()

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
                segment_fd, self._segment_fd = self._segment_fd, None
                self._open_turns.clear()
                self._known.clear()
                worker, self._worker = self._worker, None
                if worker is not None:
                    # After every operation queued before; the connection last (closing the
                    # last connection checkpoints the WAL, off this thread).
                    if conn is not None:
                        main = conn

                        def finish() -> None:
                            try:
                                self._apply_queued(main)
                            finally:
                                if segment_fd is not None:
                                    os.close(segment_fd)  # unlocked: once applied, it goes
                            if fcntl is not None:
                                self._sweep(main)

                        try:
                            await worker.run(finish)
                        except Exception:  # they stay journaled, for the next instance
                            log.exception("could not apply the journaled writes before closing")
                        await worker.run(conn.close)
                    worker.stop()
                elif segment_fd is not None:
                    os.close(segment_fd)

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
        """Checkpoint the WAL (worker thread), then make the first commit after it: the one
        that restarts the WAL and cuts it back to ``journal_size_limit``."""
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

        def rewrite_version() -> None:  # the same value: any write would do
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            conn.execute(f"PRAGMA user_version = {version:d}")

        _transaction(conn, rewrite_version, write=True)

    # --- the journal: appending (event loop thread) --------------------------------------

    def _next_segment(self) -> None:
        """Start appending to a fresh segment; the one before is unlocked, so it is deleted
        once wholly applied. On failure the current one (if any) is kept."""
        self._segment_count += 1
        name = f"{self._instance}-{self._segment_count:08d}.log"
        try:
            fd = _create_segment(self._journal_dir, name)
        except OSError:
            log.exception("could not create a journal segment")
            self._roll_at = self._segment_size + SEGMENT_BYTES  # the current one goes on
            return
        previous, self._segment_fd = self._segment_fd, fd
        self._segment, self._segment_size, self._roll_at = name, 0, SEGMENT_BYTES
        if previous is not None:
            os.close(previous)

    def _journal(self, row: _Queued) -> bool:
        """Append ``row`` to the segment: True once ``os.write`` has taken all of it. A failed
        write is cut off, so the next record follows the last whole one."""
        fd = self._segment_fd
        if fd is None:
            return False
        record = _encode_record(row)
        if len(record) > RECORD_BYTES:
            return False
        try:
            written = os.write(fd, record)
        except OSError as exc:
            log.warning("could not append to the journal (%s); the write goes to the database", exc)
            written = -1
        if written != len(record):
            try:
                if written > 0:
                    os.ftruncate(fd, self._segment_size)
            except OSError:
                log.exception("could not cut off a failed journal write; starting a fresh segment")
                self._segment_fd = None
                os.close(fd)
                self._next_segment()
            return False
        self._segment_size += written
        if self._segment_size >= self._roll_at:
            self._next_segment()
        return True

    # --- the journal: applying (worker thread) -------------------------------------------

    def _idle_step(self) -> float | None:
        conn = self._conn
        if conn is None or self._queued == self._applied:
            return None
        wait = self._last_queued + APPLY_IDLE - time.monotonic()
        if wait > 0:
            return wait
        try:
            self._flush(conn)
        except Exception:  # they stay journaled and durable; tried again, less and less often
            self._retry = min(2 * self._retry, 60.0) if self._retry else 1.0
            log.exception("could not apply the journaled writes; next try in %g s", self._retry)
            self._last_queued = time.monotonic() + self._retry - APPLY_IDLE
            return self._retry
        self._retry = 0.0
        return None

    def _flush(self, conn: sqlite3.Connection) -> None:
        self._apply_queued(conn)
        self._checkpoint(conn)
        if any(name != self._segment for name in _journal_segments(self._journal_dir)):
            self._sweep(conn)

    def _apply_queued(self, conn: sqlite3.Connection) -> None:
        """Apply every journaled write (and any rows a schema-3 process queued), in order."""
        seen = self._queued
        while conn.execute("SELECT 1 FROM queued_writes LIMIT 1").fetchone() is not None:
            _transaction(conn, partial(self._apply_table_batch, conn), write=True)
        for name in self._pending_segments():
            self._apply_segment_fully(conn, name)
        self._applied = seen

    def _apply_segment_fully(self, conn: sqlite3.Connection, name: str) -> int:
        """Apply every whole record of segment ``name``; how far it is now applied."""
        while True:
            applied, more = _transaction(conn, partial(self._apply_segment, conn, name), write=True)
            self._progress[name] = applied
            if not more:
                return applied

    def _pending_segments(self) -> builtins.list[str]:
        """The segments longer than they were last found applied."""
        pending = []
        for name in _journal_segments(self._journal_dir):
            try:
                size = os.stat(self._journal_dir / name).st_size
            except FileNotFoundError:
                self._progress.pop(name, None)
                continue
            if size > self._progress.get(name, 0):
                pending.append(name)
        return pending

    def _apply_segment(self, conn: sqlite3.Connection, name: str) -> tuple[int, bool]:
        """Apply the next records of segment ``name`` (in a write transaction): how far it is
        now applied, and whether more may follow at once.

        The file is opened inside the transaction: a segment's progress row is deleted (in a
        transaction) only after the file, so a file opened here has its row if it needs it.
        """
        try:
            fd = os.open(self._journal_dir / name, os.O_RDONLY)
        except FileNotFoundError:
            return 0, False  # wholly applied and deleted meanwhile
        try:
            row = conn.execute(
                "SELECT applied FROM journal_progress WHERE segment = ?", (name,)
            ).fetchone()
            start = 0 if row is None else int(row[0])
            data = os.pread(fd, READ_BYTES, start)
        finally:
            os.close(fd)
        rows, used = _decode_records(data)
        if used:
            self._apply_rows(conn, rows)
            conn.execute(
                "INSERT INTO journal_progress (segment, applied) VALUES (?, ?) "
                "ON CONFLICT (segment) DO UPDATE SET applied = excluded.applied",
                (name, start + used),
            )
        return start + used, used > 0 and len(data) == READ_BYTES

    def _sweep(self, conn: sqlite3.Connection) -> None:
        """Delete the segments nobody appends to any more (their lock is free), wholly applied
        first; a torn tail a killed writer left is dropped with them."""
        assert fcntl is not None
        directory = self._journal_dir
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return
        for name in sorted(names):
            path = directory / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its owner is alive and appending
                if name.endswith(".log"):
                    applied = self._apply_segment_fully(conn, name)
                    if applied < os.fstat(fd).st_size:
                        log.warning(
                            "dropped %d bytes of a torn write at the end of journal segment %s",
                            os.fstat(fd).st_size - applied,
                            name,
                        )
                elif not name.endswith(".log.tmp") or time.time() - os.fstat(fd).st_mtime < 60:
                    continue  # not ours; or one being made right now (see _create_segment)
                # The file first, then its row: see ``_apply_segment``.
                os.unlink(path)
                self._progress.pop(name, None)
                conn.execute("DELETE FROM journal_progress WHERE segment = ?", (name,))
            finally:
                os.close(fd)

    def _apply_table_batch(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(
            "SELECT id, session_id, turn_id, at, begins, stop_reason, body FROM queued_writes "
            "ORDER BY id LIMIT ?",
            (APPLY_BATCH,),
        ).fetchall()
        self._apply_rows(
            conn, [(sid, tid, at, bool(b), stop, body) for _, sid, tid, at, b, stop, body in rows]
        )
        if rows:
            conn.execute("DELETE FROM queued_writes WHERE id <= ?", (rows[-1][0],))

    def _apply_rows(self, conn: sqlite3.Connection, rows: Sequence[_Queued]) -> None:
        start = 0
        while start < len(rows):
            # A run of new turns (the common record: a whole short turn) in a few statements;
            # any other record on its own, in order.
            end = start
            while end < len(rows) and rows[end][3]:
                end += 1
            if end > start:
                self._apply_new_turns(conn, rows[start:end])
                start = end
            else:
                self._apply_one(conn, rows[start])
                start += 1

    def _apply_new_turns(self, conn: sqlite3.Connection, rows: Sequence[_Queued]) -> None:
        """What ``_write_sync`` does for each record, as two ``executemany`` calls (far less
        Python, so the worker holds the interpreter lock far less). A journaled body is at
        most one ``updates`` row's worth, so it is the turn's ``body`` as it stands."""
        latest = {row[0]: row[2] for row in rows}  # each session's last activity
        conn.execute("SAVEPOINT new_turns")
        try:
            conn.executemany(
                _APPLY_NEW_TURN,
                [(sid, tid, at, stop, body) for sid, tid, at, _, stop, body in rows],
            )
            conn.executemany(
                "UPDATE sessions SET updated_at = ? WHERE id = ?",
                [(at, sid) for sid, at in latest.items()],
            )
        except sqlite3.IntegrityError:  # one of them cannot apply: one by one, to drop it
            conn.execute("ROLLBACK TO new_turns")
            conn.execute("RELEASE new_turns")
            for row in rows:
                self._apply_one(conn, row)
            return
        conn.execute("RELEASE new_turns")

    def _apply_one(self, conn: sqlite3.Connection, row: _Queued) -> None:
        session_id, turn_id, at, begins, stop_reason, body = row
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
            # back and leaves it journaled.
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

        created = await self._run(run)
        self._known[record.session_id] = set()  # no turns yet
        return created

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

        self._known.pop(session_id, None)
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
            known = self._known.get(session_id) if begun is not None else None
            if known is not None:
                known.add(turn_id)

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
        bodies = [_body(u) for u in updates]
        return self._queue_inline(session_id, turn_id, begun, bodies, end)

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
        """Journal a small turn write here, now, if it needs no database (see the module
        docstring); False when it must go to the worker thread instead."""
        worker = self._worker
        if self._segment_fd is None or worker is None or worker.pending:
            return False
        key = (session_id, turn_id)
        known: set[str] | None = None
        if begun is None:
            if key not in self._open_turns:
                return False  # not a turn this instance runs: the worker checks it
        else:
            known = self._known.get(session_id)
            if known is None or turn_id in known:
                return False  # the worker finds the session or the turn, and says why
        items = bodies if begun is None else [*begun, *bodies]
        try:
            text = "\n".join(items) if items else None  # type: ignore[arg-type]
        except TypeError:
            return False  # a large (packed) item
        if text is not None and len(text) > INLINE_CHARS:
            return False
        row = (session_id, turn_id, self._timestamps.now(), begun is not None, end, text)
        if not self._journal(row):
            return False
        if known is not None:
            known.add(turn_id)
        if begun is not None and end is None:
            self._open_turns.add(key)
        if end is not None:
            self._open_turns.discard(key)
        self._last_queued = time.monotonic()
        self._queued += 1
        waiting = self._queued - self._applied
        if waiting == 1:
            worker.tick()  # the worker starts waiting for the quiet that applies it
        elif waiting % APPLY_AT == 0:
            main = self._conn
            if main is not None:
                worker.post(lambda: self._flush(main))  # a long burst: applied as it goes
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

        history = await self._run(run)
        self._known[session_id] = {turn.turn_id for turn in history}
        return history
