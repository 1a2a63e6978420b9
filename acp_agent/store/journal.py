"""``JournaledStore``: the SQLite store with a private journal for the ends of short turns.

A turn's last write (the one with its stop reason), when small, is made durable by one
``os.write`` of a checksummed record to this process's journal file, on the caller's
thread, and applied to the tables a moment later: a SQLite commit on the turn's path costs
more than the whole S2 target leaves (see ``benchmarks/README.md``). Everything else goes
to the plain store (``sqlite``) unchanged.

- A write is journaled only when memory says what ``write_turn`` would find: a new turn of a
  session created or loaded here (so all its turn ids are known here), or a turn this
  process began. Anything else is left to the plain store, which checks it.
- Records are applied in order, in batches, one transaction each, after every operation
  queued before: by the worker thread every ``APPLY_AT`` records or ``APPLY_AFTER``
  seconds after the first of a batch; and before any other operation, which so sees every
  write made before it, on the caller's thread if the worker is free. (A long turn that
  starts while the worker applies a batch waits for it once its queue is full: see
  ``persistence.BEHIND_BYTES``.)
- Each process appends to a file of its own in ``<database>.journals/``, locked (``flock``)
  while it is open; the file is emptied once every record in it is in the tables, and
  removed at close. A store that opens applies, then removes, every journal whose lock it
  can take (its process died or closed without applying it). A record is the last write
  of its turn, so one whose turn has ended in the tables was applied before: replaying a
  journal applies each record once. A torn record at a file's end (its process died while
  writing it, before any answer) is ignored.

Durability is the plain store's: a record that ``os.write`` has taken survives the death of
the process, an operating-system crash may lose the last ones. Two processes writing the
same session would each believe it knows the session's turn ids; that misuse is logged when
a record is applied and refused.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import sqlite3
import struct
import uuid
import zlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Final, cast

import anyio
import anyio.to_thread
import orjson

from acp_agent._loop import later, threadsafe_soon
from acp_agent.errors import IllegalTransition, ResourceNotFound
from acp_agent.store.base import Clock, JsonText, SessionRecord, TurnRecord
from acp_agent.store.packed import PackedJson
from acp_agent.store.sqlite import INLINE_BYTES, SqliteSessionStore, TurnWriter

try:
    import fcntl
except ImportError:  # no flock (Windows): nothing is journaled
    fcntl = None  # type: ignore[assignment]

__all__ = ["JournaledStore"]

log = logging.getLogger("acp_agent.store.journal")

_HEADER: Final = struct.Struct("<II")  # the payload's length and its CRC-32
APPLY_AT: Final = 256  # journaled writes handed to the worker together
APPLY_AFTER: Final = 0.05  # seconds after which journaled writes are handed over anyway

Write = tuple[str, str, "list[JsonText] | None", "list[JsonText]", str]


def _encode(write: Write) -> bytes:
    payload = orjson.dumps(write)
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _decode(data: bytes) -> builtins.list[Write]:
    """The whole records at the start of ``data`` (a torn one ends the list)."""
    writes: builtins.list[Write] = []
    at = 0
    while at + _HEADER.size <= len(data):
        size, crc = _HEADER.unpack_from(data, at)
        payload = data[at + _HEADER.size : at + _HEADER.size + size]
        if len(payload) < size or zlib.crc32(payload) != crc:
            break
        session_id, turn_id, begin, updates, end = orjson.loads(payload)
        writes.append((session_id, turn_id, begin, updates, end))
        at += _HEADER.size + size
    return writes


def _take_journals(directory: Path) -> builtins.list[tuple[Path, int, bytes]]:
    """Every journal in ``directory`` whose lock could be taken (its process is gone), with
    its descriptor (holding the lock) and its content."""
    assert fcntl is not None
    directory.mkdir(mode=0o700, exist_ok=True)
    taken = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".journal"):
            continue  # one being created: locked before it gets its name
        path = directory / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # applied by another opener meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its process is alive and applies it itself
            os.close(fd)
            continue
        with open(fd, "rb", closefd=False) as file:
            taken.append((path, fd, file.read()))
    return taken


def _create_journal(directory: Path) -> tuple[Path, int]:
    """A new journal for this process, locked before it gets the name openers look for."""
    assert fcntl is not None
    name = f"{os.getpid()}-{uuid.uuid4().hex}"
    new = directory / f"{name}.new"
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return new.rename(directory / f"{name}.journal"), fd


def _each(writes: Sequence[TurnWriter], conn: sqlite3.Connection) -> None:
    """Make each write (a journal's records, in order) that can still be made."""
    for write in writes:
        conn.execute("SAVEPOINT turn_write")
        try:
            write(conn)
        except IllegalTransition as exc:  # made before (a journal replayed), or refused
            conn.execute("ROLLBACK TO turn_write")
            if exc.state != "ended":
                log.warning("a journaled turn write was refused: %s", exc)
        except (ResourceNotFound, sqlite3.Error) as exc:  # its session deleted meanwhile
            conn.execute("ROLLBACK TO turn_write")
            log.warning("a journaled turn write failed: %s", exc)
        conn.execute("RELEASE turn_write")


def _small(items: Sequence[JsonText | PackedJson]) -> bool:
    size = 0
    for item in items:
        if isinstance(item, PackedJson):
            return False
        size += len(item)
    return size <= INLINE_BYTES


class JournaledStore:
    """A ``SessionStore`` over a :class:`SqliteSessionStore`; open it with ``open``."""

    takes_packed_items: Final = True

    def __init__(self, inner: SqliteSessionStore) -> None:
        self.inner = inner
        self.path = inner.path
        self._dir = Path(f"{inner.path}.journals")  # not -journal: SQLite's own name
        self._fd = -1  # this process's journal, once opened
        self._size = 0  # its length
        self._file: Path | None = None
        self._post = threadsafe_soon()
        self._later = later()  # None on trio: each record is handed over at once
        self._timer = False  # a hand-over is due in APPLY_AFTER
        self._pending: builtins.list[TurnWriter] = []  # journaled, not handed over yet
        self._unapplied = 0  # journaled, not yet known to be in the tables
        self._failed = False  # a batch was not applied: the file is kept for a replay
        self._turn_ids: dict[str, set[str]] = {}  # sessions whose every turn id is known
        self._running: set[tuple[str, str]] = set()  # turns begun here, not ended

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, clock: Clock | None = None
    ) -> JournaledStore:
        """Open the SQLite store at ``path`` and apply the journals left by others."""
        store = cls(await SqliteSessionStore.open(path, clock=clock))
        try:
            await store._recover()
        except BaseException:
            await store.inner.aclose()
            raise
        return store

    async def __aenter__(self) -> JournaledStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _recover(self) -> None:
        if fcntl is None:
            return
        taken = await anyio.to_thread.run_sync(_take_journals, self._dir)
        try:
            for path, _, data in taken:
                writes = [self.inner.turn_writer(*w) for w in _decode(data)]
                if writes:
                    log.info("applying %d turn writes journaled in %s", len(writes), path.name)
                    await self._apply(writes)
                path.unlink(missing_ok=True)
        finally:
            for _, fd, _ in taken:
                os.close(fd)  # and its lock
        self._file, self._fd = await anyio.to_thread.run_sync(_create_journal, self._dir)

    async def _apply(self, writes: Sequence[TurnWriter]) -> None:
        done = anyio.Event()
        committed: builtins.list[bool] = []

        def finished(ok: bool) -> None:  # on the worker thread
            committed.append(ok)
            self._post(done.set)

        self.inner.post_transaction(partial(_each, writes), finished)
        await done.wait()
        if not committed[0]:
            raise OSError("the journal could not be applied; see the log")

    # --- the journal ----------------------------------------------------------------------

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[JsonText | PackedJson] | None = None,
        updates: Sequence[JsonText | PackedJson] = (),
        end: str | None = None,
    ) -> bool:
        """Journal the last write of a turn that memory can check (see the module's
        docstring); else the plain store's ``write_turn_now``."""
        if self._fd < 0 or end is None or not self._known(session_id, turn_id, begin):
            self._hand_over()
            return self._noted(
                self.inner.write_turn_now(
                    session_id, turn_id, begin=begin, updates=updates, end=end
                ),
                session_id,
                turn_id,
                begin,
                end,
            )
        if not _small([*(begin or ()), *updates]):
            self._hand_over()
            return False
        listed = None if begin is None else [cast(JsonText, item) for item in begin]
        record = _encode((session_id, turn_id, listed, [cast(JsonText, u) for u in updates], end))
        try:
            if os.write(self._fd, record) != len(record):
                raise OSError("short write")
        except OSError as exc:
            log.warning("journal write failed (%s); the turn goes to the database", exc)
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            self._hand_over()
            return False
        self._size += len(record)
        self._pending.append(self.inner.turn_writer(session_id, turn_id, begin, updates, end))
        self._unapplied += 1
        self._noted(True, session_id, turn_id, begin, end)
        if len(self._pending) >= APPLY_AT or self._later is None:
            self._hand_over(now=False)
        elif not self._timer:
            self._timer = True
            self._later(APPLY_AFTER, partial(self._hand_over, now=False))
        return True

    def _known(
        self, session_id: str, turn_id: str, begin: Sequence[JsonText | PackedJson] | None
    ) -> bool:
        if begin is None:
            return (session_id, turn_id) in self._running
        ids = self._turn_ids.get(session_id)
        return ids is not None and turn_id not in ids

    def _noted(
        self,
        written: bool,
        session_id: str,
        turn_id: str,
        begin: Sequence[JsonText | PackedJson] | None,
        end: str | None,
    ) -> bool:
        """Remember what a write that was made changed; return ``written``."""
        if written:
            if begin is not None:
                if (ids := self._turn_ids.get(session_id)) is not None:
                    ids.add(turn_id)
                if end is None:
                    self._running.add((session_id, turn_id))
            if end is not None:
                self._running.discard((session_id, turn_id))
        return written

    def _hand_over(self, *, now: bool = True) -> None:
        """Apply what is journaled, behind every operation queued before: on this thread
        if ``now`` and the worker is free, else on the worker. Before another operation it
        is ``now``: a job of the worker behind a busy event loop (a long turn streaming)
        would hardly get the interpreter, and the turn's writes would queue up meanwhile."""
        self._timer = False  # one that fires later finds nothing, or a new batch
        if not self._pending:
            return
        writes, self._pending = self._pending, []
        if now and self.inner.transaction_now(partial(_each, writes)):
            self._applied(len(writes), True)
            return

        def finished(ok: bool) -> None:  # on the worker thread
            self._post(lambda: self._applied(len(writes), ok))

        self.inner.post_transaction(partial(_each, writes), finished)

    def _applied(self, count: int, ok: bool) -> None:
        self._failed = self._failed or not ok
        self._unapplied -= count
        if not self._unapplied and not self._failed and self._fd >= 0:
            with contextlib.suppress(OSError):  # only a longer replay if it stays
                os.ftruncate(self._fd, 0)
                self._size = 0

    # --- everything else: the plain store, after what is journaled ---------------------

    async def create(self, record: SessionRecord) -> SessionRecord:
        self._hand_over()
        stored = await self.inner.create(record)
        self._turn_ids[record.session_id] = set()
        return stored

    async def get(self, owner: str, session_id: str) -> SessionRecord | None:
        self._hand_over()
        return await self.inner.get(owner, session_id)

    async def update(self, record: SessionRecord) -> SessionRecord:
        self._hand_over()
        return await self.inner.update(record)

    async def list(
        self, owner: str, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        self._hand_over()
        return await self.inner.list(owner, cwd=cwd, cursor=cursor, limit=limit)

    async def delete(self, owner: str, session_id: str) -> bool:
        self._hand_over()
        deleted = await self.inner.delete(owner, session_id)
        if deleted:
            self._turn_ids.pop(session_id, None)
            self._running = {key for key in self._running if key[0] != session_id}
        return deleted

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[JsonText | PackedJson] | None = None,
        updates: Sequence[JsonText | PackedJson] = (),
        end: str | None = None,
    ) -> None:
        self._hand_over()
        await self.inner.write_turn(session_id, turn_id, begin=begin, updates=updates, end=end)
        self._noted(True, session_id, turn_id, begin, end)

    async def load_history(self, owner: str, session_id: str) -> builtins.list[TurnRecord]:
        self._hand_over()
        turns = await self.inner.load_history(owner, session_id)
        self._turn_ids[session_id] = {turn.turn_id for turn in turns}
        return turns

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._fd >= 0:
                self._hand_over()
                await self.inner.aclose()  # after every batch handed over
                fd, self._fd = self._fd, -1
                if not self._unapplied and not self._failed and self._file is not None:
                    self._file.unlink(missing_ok=True)  # else the next opener replays it
                os.close(fd)
            await self.inner.aclose()
