"""Persistence glue: writes each turn's steps to the :class:`~acp_agent.store.SessionStore`,
each session's in order, one :class:`~acp_agent.store.TurnWrite` (one transaction) each.

It owns the queues of turn writes (:class:`Persister`, one queue per session), who writes
them, and the per-session :class:`~acp_agent.history.TurnSink` handed to ``History``
(:class:`SessionSink`). History reports a turn's steps synchronously as updates are sent;
they gather in the session's last queued write. A session's queue is written:

- by whoever waits for it, when the store ``writes_inline`` and nobody is writing it: a
  turn's end (``sync``, before its answer) writes in the turn's own task;
- else by the writer task, one child task per session being written (a session whose write
  is stuck holds no other): at once when someone waits (``sync`` on a store that writes on
  threads, a turn streaming faster than the store, ``catch_up``, a write grown to
  ``FLUSH_BYTES``), otherwise ``FLUSH_DELAY`` after it woke, so that a turn waiting on its
  client has what it sent so far in the store. It wakes at most once per ``FLUSH_DELAY``.

A failed write fails its own session only: the turn it belongs to answers the store's
error, and the session's later steps are kept, not written, until the next prompt of the
session retries them (``before_turn``): if that succeeds the prompt runs, else it is
refused before the agent runs (no side effects without a saved turn). Every other session
goes on.

A turn answered ``cancelled`` while its last write was still in flight (``answered_cancelled``)
holds its session back until that write is confirmed: the next prompt waits for it before
the agent runs (as long as the store's own bound on a write), and is refused only if it
failed; a failed write is kept to be written again ending ``cancelled``, as the turn was
answered. Leases and held prompts are passed through to a store that has them (see
:mod:`acp_agent.store.shared`).

It does not know ACP, JSON-RPC or the session objects; the store itself lives in
:mod:`acp_agent.store`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc
import orjson

from .errors import InternalError, RequestError, SessionLeased
from .store import JsonText, PackedJson, SessionStore, StoreFailed, TurnWrite
from .store.base import writes_inline
from .store.shared import held_prompts_of, leases_of

__all__ = ["Persister", "SessionSink"]

log = logging.getLogger("acp_agent.persistence")

#: a queued write whose updates' text reaches this length is written without delay
FLUSH_BYTES: Final = 128 * 1024
#: queued update text above which a streaming turn waits for the store (``catch_up``)
BEHIND_BYTES: Final = 1024 * 1024
#: seconds a step may wait in the queue before the writer task writes it unasked
FLUSH_DELAY: Final = 0.05


def _size(item: JsonText | PackedJson) -> int:
    return FLUSH_BYTES if isinstance(item, PackedJson) else len(item)


class Persister:
    """Writes turns to the store: each session's writes in order, the sessions at once."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._inline = writes_inline(store)  # a turn's end writes in the turn's task
        self._queues: dict[str, deque[TurnWrite]] = {}  # each session's writes, in order
        self._open: dict[str, TurnWrite] = {}  # each session's last write in the queue
        self._writing: set[str] = set()  # sessions whose writes a child task writes now
        self._queued: dict[str, int] = {}  # steps queued so far, by session
        self._done: dict[str, int] = {}  # steps written (or set aside) so far, by session
        self._queued_bytes = 0
        #: turns answered ``cancelled`` before their write was confirmed: (steps, turn id)
        self._unconfirmed: dict[str, tuple[int, str]] = {}
        self._work = anyio.Event()  # set when a write is queued: the writer task wakes
        self._due = anyio.Event()  # set when someone waits: write without delay
        self._progress: anyio.Event | None = None  # set (and dropped) after a write
        #: set (and dropped) after a write of the session: what a turn's end waits on
        self._written: dict[str, anyio.Event] = {}
        #: sessions whose write failed, with the error; their writes wait in ``_held_back``
        self.failed: dict[str, RequestError] = {}
        self._held_back: dict[str, list[TurnWrite]] = {}
        self._leases = leases_of(store)  # None: a store without leases (memory)
        self._refused: dict[str, SessionLeased] = {}  # writes fenced out, by session
        self._held = held_prompts_of(store)  # None: waiting prompts are kept in memory only

    def sink_for(self, session_id: str) -> SessionSink:
        """The sink of a session being opened: the failure of an earlier opening is
        forgotten, with its unsaved writes (the store's history is what it starts from)."""
        self.failed.pop(session_id, None)
        dropped = self._held_back.pop(session_id, [])
        if dropped:
            log.warning("session %s: %d unsaved turn writes dropped", session_id, len(dropped))
        return SessionSink(self, session_id)

    # --- steps, as History reports them (never wait) -----------------------------------------

    def _write_for(self, session_id: str, turn_id: str, count: int) -> TurnWrite:
        last = self._open.get(session_id)
        if last is None or last.end is not None or last.turn_id != turn_id:
            last = self._open[session_id] = TurnWrite(session_id, turn_id)
            self._queues.setdefault(session_id, deque()).append(last)
            self._work.set()
        self._queued[session_id] = self._queued.get(session_id, 0) + count
        return last

    def begin(self, session_id: str, turn_id: str, prompt: list[Any]) -> None:
        self._open.pop(session_id, None)  # a new turn starts a write of its own
        self._write_for(session_id, turn_id, 1).begin = prompt

    def append(self, session_id: str, turn_id: str, update: JsonText | PackedJson) -> None:
        write = self._write_for(session_id, turn_id, 1)
        write.updates.append(update)
        self._queued_bytes += _size(update)
        if self._queued_bytes >= FLUSH_BYTES:
            self._due.set()

    def end(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        self._write_for(session_id, turn_id, 1).end = stop_reason

    # --- the writer task ---------------------------------------------------------------------

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the writer task in ``tg`` (it runs until ``tg`` is cancelled)."""
        tg.start_soon(self._write_queued, name="acp-persister")

    async def _write_queued(self) -> None:
        """Wake when a write is queued; then, at once if someone waits, else after
        ``FLUSH_DELAY``, start a child task for every session with writes queued and none
        being written (a session being written goes on with its own queue)."""
        async with anyio.create_task_group() as writers:
            while True:
                await self._work.wait()
                if not self._due.is_set():  # a waiter asked already: no timer needed
                    with anyio.move_on_after(FLUSH_DELAY):
                        await self._due.wait()
                self._work = anyio.Event()
                self._due = anyio.Event()
                for session_id, queue in self._queues.items():
                    if queue and session_id not in self._writing:
                        self._writing.add(session_id)
                        writers.start_soon(self._write_session, session_id, queue)

    async def _write_session(self, session_id: str, queue: deque[TurnWrite]) -> None:
        """Write the session's queue in order until it is empty (the caller has put the
        session in ``_writing``). A write cancelled in the store was not made: it stays
        first in the queue, for the writer task."""
        try:
            while queue:
                write = queue[0]
                if self._open.get(session_id) is write:
                    del self._open[session_id]  # later steps start a new write
                await self._write(write)
                queue.popleft()
                self._done[session_id] = self._done.get(session_id, 0) + _steps(write)
                self._queued_bytes -= sum(map(_size, write.updates))
                if self._progress is not None:
                    self._progress.set()
                    self._progress = None
                written = self._written.pop(session_id, None)
                if written is not None:
                    written.set()
        finally:
            self._writing.discard(session_id)
            if queue:  # cancelled: the writer task writes the rest
                self._work.set()
                self._due.set()
            elif self._queues.get(session_id) is queue:
                del self._queues[session_id]

    async def _progressed(self) -> None:
        """Wait for the next write of any session."""
        if self._progress is None:
            self._progress = anyio.Event()
        await self._progress.wait()

    async def _write(self, write: TurnWrite) -> None:
        """Write one write (or set it aside if its session failed)."""
        session_id = write.session_id
        try:
            if session_id in self.failed:
                self._held_back[session_id].append(self._as_answered(write))
            else:
                await self.store.write_turn(write)
                log.debug(
                    "stored %d steps of turn %s (session %s)",
                    _steps(write),
                    write.turn_id,
                    session_id,
                )
        except SessionLeased as exc:
            # Another host owns the session now: only its turn fails (see ``refused``).
            log.warning("session %s: %s", session_id, exc.message)
            self._refused.setdefault(session_id, exc)
        except Exception as exc:
            self.failed[session_id] = _as_store_error(exc, self.store)
            self._held_back[session_id] = [self._as_answered(write)]

    def _as_answered(self, write: TurnWrite) -> TurnWrite:
        """A write kept to be written again, ending as its turn was answered."""
        unconfirmed = self._unconfirmed.get(write.session_id)
        if unconfirmed is not None and unconfirmed[1] == write.turn_id and write.end is not None:
            write.end = "cancelled"
        return write

    # --- waiting for the writer --------------------------------------------------------------

    def _behind_on(self, targets: dict[str, int]) -> bool:
        return any(self._done.get(sid, 0) < steps for sid, steps in targets.items())

    async def wait_written(self, session_id: str | None = None) -> None:
        """Wait until everything queued so far (of ``session_id`` only, if given) is
        written or set aside."""
        if session_id is None:
            targets = dict(self._queued)
            while self._behind_on(targets):
                self._due.set()
                await self._progressed()
            return
        # Woken by the session's own writes only: fifty turn ends waiting at once are not
        # each woken by the other forty-nine sessions' writes.
        target = self._queued.get(session_id, 0)
        while self._done.get(session_id, 0) < target:
            queue = self._queues.get(session_id)
            if self._inline and queue and session_id not in self._writing:
                self._writing.add(session_id)
                await self._write_session(session_id, queue)
                continue
            self._due.set()
            written = self._written.get(session_id)
            if written is None:
                written = self._written[session_id] = anyio.Event()
            await written.wait()

    async def sync(self, session_id: str | None = None) -> None:
        """``wait_written``; then, if ``session_id`` is given and a write of that session
        failed, raise the store's error."""
        await self.wait_written(session_id)
        if session_id is not None and session_id in self.failed:
            reason = self.failed[session_id].message
            raise InternalError(f"{reason}; this turn was not saved")

    def answered_cancelled(self, session_id: str, turn_id: str) -> None:
        """The turn was answered ``cancelled`` while its write was in flight: the next
        prompt waits until that write is confirmed, and it is stored again ending so if it
        fails (see ``before_turn``)."""
        self._unconfirmed[session_id] = (self._queued.get(session_id, 0), turn_id)
        for write in self._held_back.get(session_id, ()):
            self._as_answered(write)

    def behind(self) -> bool:
        """Whether more than ``BEHIND_BYTES`` of updates wait for the store."""
        return self._queued_bytes > BEHIND_BYTES

    async def catch_up(self) -> None:
        """Wait while the store is ``behind``: a turn streaming faster than the store
        writes waits for it, so that what is queued stays bounded. The writer task does
        the writing: a turn cancelled while it waits leaves no write half done."""
        while self.behind():
            self._due.set()
            await self._progressed()

    async def before_turn(self, session_id: str) -> None:
        """Before a prompt of the session runs: raise ``SessionLeased`` if this host lost
        it; wait for the write of a turn answered ``cancelled`` before it was confirmed, and
        raise the store's error if it failed; retry the writes of the session that failed
        before, and raise the store's error if they fail again (the agent does not run)."""
        if self._leases is not None:
            if session_id in self._refused:
                raise SessionLeased.lost(session_id)
            self._leases.check_lease(session_id)
        unconfirmed = self._unconfirmed.get(session_id)
        if unconfirmed is not None:
            # The last turn was answered ``cancelled`` before its write was confirmed:
            # wait for that write (the store bounds it); if it failed, refuse.
            failed_before = session_id in self.failed  # then retried below
            if self._done.get(session_id, 0) < unconfirmed[0]:
                await self.wait_written(session_id)
            del self._unconfirmed[session_id]
            if session_id in self.failed and not failed_before:
                reason = self.failed[session_id].message
                raise InternalError(f"{reason}; the prompt was not run") from None
        if session_id not in self.failed:
            return
        await self.wait_written(session_id)  # every step of it is in ``_held_back`` now
        held = self._held_back.get(session_id, [])
        try:
            while held:
                await self.store.write_turn(held[0])
                del held[0]
        except Exception as exc:
            error = self.failed[session_id] = _as_store_error(exc, self.store)
            raise InternalError(f"{error.message}; the prompt was not run") from None
        del self.failed[session_id], self._held_back[session_id]
        log.warning("session %s: the store works again; its unsaved turns are saved", session_id)

    # --- leases (stores that have them; no-ops otherwise) ------------------------------------

    async def take_lease(self, session_id: str) -> None:
        """Make this process the session's live owner (``SessionLeased`` if another is)."""
        if self._leases is not None:
            await self._leases.acquire(session_id)
            self._refused.pop(session_id, None)

    async def give_back_lease(self, session_id: str) -> None:
        """Write what is queued of the session, then give its lease back (so that the
        next owner, here or on another host, reads all of it)."""
        await self.wait_written(session_id)
        if self._leases is not None:
            await self._leases.release(session_id)

    def refused(self, session_id: str) -> SessionLeased | None:
        """After a turn's sync: the refusal of a write of it, if another host owned the
        session by then (that turn's history is not this host's to write)."""
        return self._refused.get(session_id)

    # --- held prompts (--busy-policy queue on a shared store; no-ops otherwise) -----------

    @property
    def holds_prompts(self) -> bool:
        return self._held is not None

    async def hold_prompt(self, session_id: str, turn_id: str, request: Any, arrival: int) -> None:
        """Keep a waiting prompt durably until the write that begins ``turn_id``."""
        if self._held is not None:
            text = orjson.dumps(request).decode()
            await self._held.hold_prompt(session_id, turn_id, text, arrival)

    async def drop_prompt(self, session_id: str, turn_id: str) -> None:
        """Forget a held prompt that was answered without running."""
        if self._held is not None:
            await self._held.drop_prompt(session_id, turn_id)

    async def held_prompts(self, session_id: str) -> list[tuple[str, Any]]:
        """Prompts other hosts held for the session and never began: (turn id, params)."""
        if self._held is None:
            return []
        held = await self._held.held_prompts(session_id)
        return [(turn_id, orjson.loads(text)) for turn_id, text in held]


def _steps(write: TurnWrite) -> int:
    return (write.begin is not None) + len(write.updates) + (write.end is not None)


def _as_store_error(exc: Exception, store: SessionStore) -> RequestError:
    """A failed write as the error its turn answers. ``StoreFailed`` was logged by its
    store; anything else is logged here, in one line."""
    if isinstance(exc, StoreFailed):
        return exc
    if isinstance(exc, RequestError):  # the session's rows are gone, a turn misused
        log.error("session store write failed: %s", exc.message)
        return StoreFailed(type(store).__name__, exc.message)
    log.error("session store %s failed: %r", type(store).__name__, exc)
    return StoreFailed(type(store).__name__, str(exc) or type(exc).__name__)


@dataclass(slots=True)
class SessionSink:
    persister: Persister
    session_id: str

    def turn_started(self, turn_id: str, prompt_updates: Sequence[JsonText | PackedJson]) -> None:
        self.persister.begin(self.session_id, turn_id, list(prompt_updates))

    def turn_event(self, turn_id: str, update: JsonText | PackedJson) -> None:
        self.persister.append(self.session_id, turn_id, update)

    def behind(self) -> bool:
        return self.persister.behind()

    async def catch_up(self) -> None:
        await self.persister.catch_up()
