"""Persistence glue: queues each turn's steps as History reports them and writes them
to the :class:`~acp_agent.store.SessionStore` in order, in batches: at once when the store
can write without waiting (``TurnWritesNow``), else from a task of its own or awaited by
the turn's end.

It owns the write queue (:class:`Persister`), one batch of a turn's consecutive steps
(:class:`TurnBatch`) and the per-session :class:`~acp_agent.session.TurnSink` handed to
``History`` (:class:`SessionSink`). A failed write fails its own session only: that
session's later writes are dropped and its turns answer an error until it is opened
again; every other session goes on. It does not know ACP, JSON-RPC or the session
objects; the store itself lives in :mod:`acp_agent.store`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import orjson

from ._loop import Soon, soon
from .errors import InternalError, SessionLeased
from .store import JsonText, PackedJson, SessionStore
from .store.packed import text_of
from .store.shared import held_prompts_of, leases_of

log = logging.getLogger("acp_agent.persistence")

#: a batch whose updates' text reaches this length is written at once, if the store can
#: (the SQLite store writes up to 256 KiB on the caller's thread)
FLUSH_BYTES = 128 * 1024
#: queued update text above which a streaming turn waits for the store (``catch_up``)
BEHIND_BYTES = 1024 * 1024


class TurnBatch:
    """Consecutive steps of one turn, written to the store in one ``write_turn``."""

    __slots__ = ("begin", "count", "end", "sealed", "session_id", "size", "turn_id", "updates")

    def __init__(self, session_id: str, turn_id: str) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self.begin: list[Any] | None = None
        self.updates: list[Any] = []
        self.end: str | None = None
        self.count = 0  # how many pushes this batch holds
        self.size = 0  # the length of its updates' text (a packed one counts as large)
        self.sealed = False  # being written: later pushes start a new batch


class Persister:
    """Writes turns to the store in order, off the turn's hot path, in batches.

    :class:`~acp_agent.session.History` reports a turn's start and events
    synchronously as updates are sent; they queue here and one task writes them,
    started (in the task group given to :meth:`start`) only while there is work.
    The steps of a turn queued since its last write merge into one store call (one
    transaction), so a short turn costs one write, and turns streaming at once in several
    sessions do not split each other's batches. ``sync()`` waits until everything queued so far
    is durable.
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._soon: Soon | None = None  # loop.call_soon on asyncio (set by run)
        self._check_scheduled = False
        self._batches: list[TurnBatch] = []  # short; a deque costs 600 bytes empty
        self._open: dict[str, TurnBatch] = {}  # each session's last batch in the queue
        self._queued = 0
        self._done = 0
        self._queued_bytes = 0  # the updates' text in the queue (as ``TurnBatch.size``)
        self._tg: anyio.abc.TaskGroup | None = None  # where the writer runs (set by start)
        self._writer_running = False
        self._progress: anyio.Event | None = None  # made by the first ``sync`` that waits
        self._busy = False  # a write_turn is in progress
        #: sessions whose write failed: their later writes are dropped
        self.failed: dict[str, Exception] = {}
        self._leases = leases_of(store)  # None: a store of one host, no leases
        self._refused: dict[str, SessionLeased] = {}  # writes fenced out, by session
        self._held = held_prompts_of(store)  # None: waiting prompts are kept in memory only
        #: the store's ``write_turn_now`` (see ``TurnWritesNow``), if it has one
        self._write_now = getattr(store, "write_turn_now", None)

    def sink_for(self, session_id: str) -> SessionSink:
        """The sink of a session being opened: a failure of an earlier opening is forgotten
        (the store's history is what the new opening starts from)."""
        self.failed.pop(session_id, None)
        return SessionSink(self, session_id)

    def _batch(self, session_id: str, turn_id: str, *, fresh: bool = False) -> TurnBatch:
        # The session's open batch, wherever it is in the queue: sessions streaming at
        # once each fill a batch of their own (a session's steps stay in order; the
        # order between sessions does not matter).
        last = None if fresh else self._open.get(session_id)
        if last is not None and not last.sealed and last.end is None and last.turn_id == turn_id:
            return last
        batch = TurnBatch(session_id, turn_id)
        self._batches.append(batch)
        self._open[session_id] = batch
        if self._soon is None:
            self._wake()
        elif not self._check_scheduled:
            # The writer task is woken on the loop's next pass only if the batch is still
            # waiting then: a short turn has written it itself by then (see sync).
            self._check_scheduled = True
            self._soon(self._check)
        return batch

    def _check(self) -> None:
        self._check_scheduled = False
        if self._batches and not self._busy:
            self._wake()

    def _wake(self) -> None:
        """Start the writer task unless it runs (it ends once nothing is queued)."""
        if self._tg is not None and not self._writer_running:
            self._writer_running = True
            self._tg.start_soon(self._write_queued, name="acp-persister")

    # Each push counts itself (batch.count, _queued): inline, as they run for every update.

    def begin(self, session_id: str, turn_id: str, prompt: list[Any]) -> None:
        batch = self._batch(session_id, turn_id, fresh=True)
        batch.begin = prompt
        batch.count += 1
        self._queued += 1

    def append(self, session_id: str, turn_id: str, update: Any) -> None:
        batch = self._batch(session_id, turn_id)
        batch.updates.append(update)
        batch.count += 1
        self._queued += 1
        size = FLUSH_BYTES if isinstance(update, PackedJson) else len(update)
        batch.size += size
        self._queued_bytes += size
        if batch.size >= FLUSH_BYTES and not self._busy:
            # A long turn is written as it goes, here if the store can do it at once: a
            # worker thread would hardly get the interpreter from a busy loop meanwhile.
            self._write_queued_now()

    def end(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        batch = self._batch(session_id, turn_id)
        batch.end = stop_reason
        batch.count += 1
        self._queued += 1

    async def sync(self, session_id: str | None = None) -> None:
        """Wait until everything queued so far is written; then, if ``session_id`` is given
        and a write of that session failed, raise ``InternalError``.

        The caller writes what is queued itself when no write is in progress: a turn
        that ends costs one store call, not a wake-up of the writer task and another
        of the turn.
        """
        target = self._queued
        while self._done < target:
            if not self._busy and self._batches:
                await self._write_next()
                continue
            await self._next_progress()
        if session_id is not None and session_id in self.failed:
            raise InternalError("the session store failed for this session; see the agent's log")

    def behind(self) -> bool:
        """Whether more than ``BEHIND_BYTES`` of updates wait for the store."""
        return self._queued_bytes > BEHIND_BYTES

    async def catch_up(self) -> None:
        """Wait while the store is ``behind``: a turn streaming faster than the store
        writes (a slow disk or server, a worker busy with other writes) waits for it,
        so that what is queued stays bounded. The writer task (see :meth:`start`) does
        the writing: a turn cancelled while it waits leaves no write half done."""
        while self.behind():
            self._wake()
            await self._next_progress()

    async def _next_progress(self) -> None:
        """Wait until the next batch is written."""
        if self._progress is None:
            self._progress = anyio.Event()
        await self._progress.wait()

    def sync_now(self, session_id: str) -> bool:
        """``sync(session_id)`` without waiting, if the store can write what is queued at
        once (see ``TurnWritesNow``): True when all is written, False when ``sync`` must
        wait for the rest. Raises like ``sync``."""
        if not self._busy:
            self._write_queued_now()
        if self._done < self._queued:
            return False
        if session_id in self.failed:
            raise InternalError("the session store failed for this session; see the agent's log")
        return True

    def _write_queued_now(self) -> None:
        """Write the queued batches, in order, as long as the store can at once."""
        write_now = self._write_now
        while write_now is not None and self._batches:
            batch = self._batches[0]
            try:
                if batch.session_id not in self.failed:
                    begin, updates = self._items(batch)
                    if not write_now(
                        batch.session_id, batch.turn_id, begin=begin, updates=updates, end=batch.end
                    ):
                        return
                    _stored(batch)
            except Exception as exc:
                self._failed(batch, exc)
            self._written(batch)

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Write batches in the background from now on, in tasks of ``tg`` (long turns
        stream to the store as they go). Call it on the running loop."""
        self._soon = soon()
        self._tg = tg

    async def _write_queued(self) -> None:
        # No task waits between bursts: an idle connection holds none.
        try:
            while self._batches and not self._busy:
                await self._write_next()
        finally:
            self._writer_running = False

    async def _write_next(self) -> None:
        batch = self._batches[0]
        batch.sealed = True  # later pushes for this turn start a new batch
        self._busy = True
        try:
            if batch.session_id not in self.failed:
                begin, updates = self._items(batch)
                now = self._write_now
                if now is None or not now(
                    batch.session_id, batch.turn_id, begin=begin, updates=updates, end=batch.end
                ):
                    await self.store.write_turn(
                        batch.session_id, batch.turn_id, begin=begin, updates=updates, end=batch.end
                    )
        except Exception as exc:
            self._failed(batch, exc)
        else:
            _stored(batch)
        finally:
            self._busy = False
            self._written(batch)

    def _items(self, batch: TurnBatch) -> tuple[list[Any] | None, list[Any]]:
        """The batch's prompt and updates as its store takes them: large items stay packed
        for a store that keeps them packed, others get their text."""
        if getattr(self.store, "takes_packed_items", False):
            return batch.begin, batch.updates
        begin = None if batch.begin is None else [text_of(u) for u in batch.begin]
        return begin, [text_of(u) for u in batch.updates]

    def _failed(self, batch: TurnBatch, exc: Exception) -> None:
        if isinstance(exc, SessionLeased):
            # Another host owns the session now: only its turn fails (see ``refused``).
            log.warning("session %s: %s", batch.session_id, exc.message)
            self._refused.setdefault(batch.session_id, exc)
            return
        # Fail this session's turns (and drop its later writes); the others go on.
        log.error("session store write failed for %s", batch.session_id, exc_info=exc)
        self.failed[batch.session_id] = exc

    # --- leases (stores shared by several hosts; no-ops otherwise) --------------------------

    async def take_lease(self, session_id: str) -> None:
        """Make this host the session's live owner (``SessionLeased`` if another is)."""
        if self._leases is not None:
            await self._leases.acquire(session_id)
            self._refused.pop(session_id, None)

    async def give_back_lease(self, session_id: str) -> None:
        """Write what is queued, then give the session's lease back."""
        if self._leases is not None:
            await self.sync()
            await self._leases.release(session_id)

    def check_lease(self, session_id: str) -> None:
        """Before a turn: raise ``SessionLeased`` if this host is known to have lost the
        session to another host (the writes are fenced in any case)."""
        if self._leases is not None:
            refused = self._refused.get(session_id)
            if refused is not None:
                raise SessionLeased.lost(session_id)
            self._leases.check_lease(session_id)

    def refused(self, session_id: str) -> SessionLeased | None:
        """After a turn's sync: the refusal of a write of it, if another host owned the
        session by then (that turn's history is not this host's to write)."""
        return None if self._leases is None else self._refused.get(session_id)

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

    def _written(self, batch: TurnBatch) -> None:
        batch.sealed = True
        del self._batches[0]
        if self._open.get(batch.session_id) is batch:
            del self._open[batch.session_id]
        self._done += batch.count
        self._queued_bytes -= batch.size
        progress, self._progress = self._progress, None
        if progress is not None:
            progress.set()
        if self._batches:
            self._wake()


def _stored(batch: TurnBatch) -> None:
    log.debug(
        "stored %d steps of turn %s (session %s)", batch.count, batch.turn_id, batch.session_id
    )


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


__all__ = ["Persister", "SessionSink", "TurnBatch"]
