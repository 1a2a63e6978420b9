"""The session store interface: three records, seven methods, and helpers for implementations.

This module owns what a stored ACP *session* looks like (``SessionRecord``), what a stored
prompt turn looks like (``TurnRecord``), one write of a turn (``TurnWrite``), the async
interface every store implements (``SessionStore``) and its failure (``StoreFailed``), plus
the small pieces implementations share: timestamps, the list cursor and the errors they
raise. The contract suite in ``tests/store`` runs against every store; a new store is one
more entry in its fixture.

It deliberately knows nothing of JSON-RPC, the connection, pydantic or the ACP models.
History is JSON text: each item is the text of one JSON object (in practice the ``update``
of a ``session/update`` notification); a store keeps the text as given and returns it as
given, never parsing it.

Semantics every implementation keeps:

- Every session belongs to an ``owner`` (the principal that created it; stdio uses
  ``DEFAULT_OWNER``). ``get``, ``update``, ``list``, ``delete`` and ``load_history`` see
  only the given owner's sessions: another owner's session is "not there". ``write_turn``
  takes no owner: only a session already opened through ``get`` is written to.
- Timestamps are fixed-width ISO 8601 UTC strings (``2025-01-31T12:00:00.000000Z``),
  strictly increasing within one store instance (``Timestamps``), so text order is time
  order. ``updated_at`` is bumped by ``update`` and by every ``write_turn``.
- ``list`` returns newest ``updated_at`` first, ties broken by ``session_id`` (descending),
  with keyset pagination: a cursor names the last row of a page, so sessions inserted while a
  client pages never make a row repeat.
- A duplicate session id raises ``InvalidParams``; an unknown session raises
  ``ResourceNotFound`` naming it (except ``get`` and ``delete``, which answer ``None`` and
  ``False``); ``write_turn`` raises ``IllegalTransition`` for a turn id begun twice or a
  write to a turn that has ended, and ``ResourceNotFound`` for a turn never begun. A call
  that raises changes nothing. Any call after ``aclose`` raises ``anyio.ClosedResourceError``.
  A store that cannot do a call (its file gone, an I/O error) raises ``StoreFailed``.
- Writes are durable when they return: a process killed afterwards loses none of them.
- A store whose class sets ``writes_inline = True`` promises that ``write_turn`` waits on
  nothing but the event loop (no thread, no network) and that a call cancelled while it
  waits has written nothing: a turn's write is then made in the turn's own task.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Protocol

import orjson

from acp_agent.errors import IllegalTransition, InternalError, InvalidParams, ResourceNotFound
from acp_agent.store.packed import PackedJson

__all__ = [
    "DEFAULT_OWNER",
    "Clock",
    "JsonText",
    "SessionRecord",
    "SessionStore",
    "StoreFailed",
    "Timestamps",
    "TurnRecord",
    "TurnWrite",
    "writes_inline",
]

JsonText = str
"""The text of one JSON object, kept and returned by a store exactly as given."""

Clock = Callable[[], datetime]
"""Returns the current time as an aware ``datetime`` (tests pass a fake one)."""

DEFAULT_OWNER: Final = "local"
"""The owner of every session made over stdio (one person, one process)."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One stored ACP session (not an ``AgentSession``, which is a connection)."""

    session_id: str
    cwd: str
    owner: str = DEFAULT_OWNER
    additional_directories: tuple[str, ...] = ()
    title: str | None = None
    mode_id: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    """Config option id -> value (JSON-ready)."""
    created_at: str = ""
    """Set by ``create`` when empty."""
    updated_at: str = ""
    """Set by ``create`` when empty; bumped by the store on every change."""


@dataclass(slots=True)
class TurnWrite:
    """Consecutive steps of one turn, written by one ``write_turn`` in one transaction.

    ``begin`` (the prompt's items) begins the turn when not ``None``; ``updates`` are
    appended; ``end`` (a stop reason) ends it. Items are JSON text, or ``PackedJson`` for a
    large one, which every store takes (and may keep packed).
    """

    session_id: str
    turn_id: str
    begin: list[JsonText | PackedJson] | None = None
    updates: list[JsonText | PackedJson] = field(default_factory=list)
    end: str | None = None


class StoreFailed(InternalError):
    """The store could not do what was asked (a file gone, a lock held too long, an I/O
    error): the message names the store and the reason. It crosses the JSON-RPC boundary
    as -32603 with that message."""

    def __init__(self, store: str, reason: str) -> None:
        super().__init__(f"session store {store}: {reason}")
        self.store = store
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One prompt turn of a session, as ``load_history`` returns it."""

    turn_id: str
    updates: tuple[JsonText, ...]
    """The user prompt's chunks first, then everything sent during the turn, in order."""
    stop_reason: str | None
    """``None`` if the turn never ended (still running elsewhere, or its process died)."""


class SessionStore(Protocol):
    """Durable ACP sessions: their records and their turn-by-turn history.

    Every method may wait; none blocks the event loop for long (the SQLite store commits on
    it: a few writes into its WAL).
    """

    async def create(self, record: SessionRecord) -> SessionRecord:
        """Store a new session; returns it with its timestamps filled in."""
        ...

    async def get(self, owner: str, session_id: str) -> SessionRecord | None:
        """The owner's session with this id, or ``None``."""
        ...

    async def update(self, record: SessionRecord) -> SessionRecord:
        """Replace the session's cwd, directories, title, mode and config with the record's
        (its timestamps are ignored); bumps ``updated_at``; returns the stored record."""
        ...

    async def list(
        self, owner: str, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        """One page of the owner's sessions, newest first, and the next page's cursor
        (``None`` after the last page). ``cwd`` filters on equality. A cursor this store
        did not make raises ``InvalidParams``."""
        ...

    async def delete(self, owner: str, session_id: str) -> bool:
        """Remove the session and its history; ``False`` if the owner has no such session."""
        ...

    async def write_turn(self, write: TurnWrite) -> None:
        """Steps of one turn, in this order, as one transaction: begin the turn
        (``write.begin`` holds the prompt's items), append ``write.updates``, end it
        (``write.end`` is the stop reason)."""
        ...

    async def load_history(self, owner: str, session_id: str) -> builtins.list[TurnRecord]:
        """Every turn of the session, in the order they began."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources. Idempotent."""
        ...


# --- helpers for implementations ------------------------------------------------------------

_TS_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"


def system_clock() -> datetime:
    return datetime.now(timezone.utc)


class Timestamps:
    """Fixed-width ISO 8601 UTC timestamps, strictly increasing within one instance."""

    __slots__ = ("_clock", "_last", "_last_micros", "_prefix", "_second", "now")

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._last: datetime | None = None
        self._last_micros = 0
        self._second = -1
        self._prefix = ""
        #: the next timestamp (a store takes one for every turn write)
        self.now: Callable[[], str] = self._now_clock if clock is not None else self._now_system

    def _now_clock(self) -> str:
        current = self._clock().astimezone(timezone.utc)
        if self._last is not None and current <= self._last:
            current = self._last + timedelta(microseconds=1)
        self._last = current
        return current.strftime(_TS_FORMAT)

    def _now_system(self) -> str:
        # The text of _now_clock without a datetime per call: the part up to the second is
        # formatted once per second.
        micros = time.time_ns() // 1000
        if micros <= self._last_micros:
            micros = self._last_micros + 1
        self._last_micros = micros
        second, fraction = divmod(micros, 1_000_000)
        if second != self._second:
            self._second = second
            self._prefix = datetime.fromtimestamp(second, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S"
            )
        return f"{self._prefix}.{fraction:06d}Z"


def as_created(record: SessionRecord, now: str) -> SessionRecord:
    """``record`` as a store keeps it on ``create``: plain values, stamped ``now`` if unset."""
    return SessionRecord(
        session_id=record.session_id,
        cwd=record.cwd,
        owner=record.owner,
        additional_directories=tuple(record.additional_directories),
        title=record.title,
        mode_id=record.mode_id,
        config=orjson.loads(orjson.dumps(dict(record.config))),
        created_at=record.created_at or now,
        updated_at=record.updated_at or now,
    )


def encode_cursor(record: SessionRecord) -> str:
    """The opaque cursor naming ``record`` as the last row of a page."""
    key = [record.updated_at, record.session_id]
    return base64.urlsafe_b64encode(orjson.dumps(key)).decode("ascii")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (updated_at, session_id) a cursor names; ``InvalidParams`` if it is not ours."""
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raise InvalidParams(f"invalid cursor {cursor[:100]!r}") from None
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], str)
    ):
        return value[0], value[1]
    raise InvalidParams(f"invalid cursor {cursor[:100]!r}")


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")


def session_not_found(session_id: str) -> ResourceNotFound:
    return ResourceNotFound(
        f"session {session_id[:100]!r} not found", data={"sessionId": session_id[:200]}
    )


def turn_not_found(session_id: str, turn_id: str) -> ResourceNotFound:
    return ResourceNotFound(
        f"turn {turn_id[:100]!r} of session {session_id[:100]!r} not found",
        data={"sessionId": session_id[:200], "turnId": turn_id[:200]},
    )


def session_exists(session_id: str) -> InvalidParams:
    return InvalidParams(
        f"session {session_id[:100]!r} already exists", data={"sessionId": session_id[:200]}
    )


def turn_refused(turn_id: str, state: str, event: str) -> IllegalTransition:
    return IllegalTransition(f"turn {turn_id[:100]!r}", state, event)


def check_turn_write(write: TurnWrite, *, exists: bool, stop_reason: str | None) -> None:
    """Raise what the contract says for ``write`` when it finds its turn as given:
    ``exists`` (the session has a turn with this id) and its ``stop_reason``."""
    if write.begin is not None:
        if exists:
            state = "running" if stop_reason is None else "ended"
            raise turn_refused(write.turn_id, state, "begin")
    elif not exists:
        raise turn_not_found(write.session_id, write.turn_id)
    elif stop_reason is not None:
        raise turn_refused(write.turn_id, "ended", "end" if write.end is not None else "append")


def writes_inline(store: object) -> bool:
    """Whether ``store`` may write a turn in the turn's own task (see the module's notes)."""
    return getattr(type(store), "writes_inline", False) is True
