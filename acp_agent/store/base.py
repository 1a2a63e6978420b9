"""The session store interface: records, the ``SessionStore`` protocol and shared helpers.

This module owns what a stored ACP *session* looks like (``SessionRecord``), what a stored
prompt turn looks like (``TurnRecord``), the async interface every store implements, and the
small pieces both implementations share: timestamps, the list cursor and JSON encoding of
history items.

It deliberately knows nothing of JSON-RPC, the connection (``AgentSession``), pydantic or the
ACP models: a history item is an opaque JSON-ready ``dict`` (in practice the exact ``update``
object of a ``session/update`` notification) that goes in and comes back equal, after a round
trip through orjson (so tuples come back as lists, exactly as they would on the wire).

Semantics every implementation keeps (the contract suite in ``tests/store`` checks them):

- ``updated_at`` is bumped on every change, including turns; timestamps are fixed-width
  ISO 8601 UTC strings (``2025-01-31T12:00:00.000000Z``), strictly increasing within one store
  instance, so string order is time order.
- ``list`` returns newest ``updated_at`` first, ties broken by ``session_id`` (descending), with
  keyset pagination: a cursor names the last row of a page, so sessions inserted while a client
  pages never make a row repeat. A session *changed* while a client pages moves to the front
  and may be skipped by that walk.
- A turn whose ``stop_reason`` is ``None`` and that is not open in *this* store instance is
  reported ``interrupted`` (its process died mid-turn, or another process is running it).
- Unknown sessions and turns raise ``ResourceNotFound`` naming the id; a duplicate session id
  raises ``InvalidParams``; turn misuse (beginning a turn id twice, appending to or ending a turn
  that has ended) raises ``IllegalTransition``; any call after ``aclose`` raises
  ``anyio.ClosedResourceError``.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import enum
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Protocol, runtime_checkable

import orjson

from acp_agent.errors import IllegalTransition, InvalidParams, ResourceNotFound

__all__ = [
    "UNSET",
    "Clock",
    "HistoryItem",
    "PackedJson",
    "SessionRecord",
    "SessionStore",
    "TurnRecord",
    "Unset",
]

Clock = Callable[[], datetime]
"""Returns the current time as an aware ``datetime`` (tests pass a fake one)."""


JsonText = str
"""A history item already encoded as JSON text (a JSON object's text): stored as is,
without decoding and re-encoding. History items are objects, so a ``str`` item is
always such text."""


@dataclass(frozen=True, slots=True)
class PackedJson:
    """A large history item's JSON text, zlib-compressed, as history keeps it.

    History hands a large item (a pasted file, a big tool output) to the store in this form,
    so that no second full-size copy of it lives while the turn runs: a store keeps it as it
    is, or expands it in pieces (:meth:`pieces`). ``size`` is the length of the UTF-8 text.
    """

    data: bytes
    size: int

    @classmethod
    def pack(cls, text: bytes | memoryview) -> PackedJson:
        """Compress ``text`` (the UTF-8 JSON text of one object)."""
        return cls(zlib.compress(text, 1), len(text))

    def text(self) -> str:
        return zlib.decompress(self.data).decode()

    def load(self) -> Any:
        return orjson.loads(zlib.decompress(self.data))

    def pieces(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The UTF-8 text in pieces of at most ``size`` bytes."""
        unpack = zlib.decompressobj()
        data = self.data
        while data:
            piece = unpack.decompress(data, size)
            data = unpack.unconsumed_tail
            if piece:
                yield piece
        rest = unpack.flush()
        if rest:
            yield rest


HistoryItem = dict[str, Any] | JsonText | PackedJson
"""What a store takes as a history item: a JSON-ready dict, its JSON text, or packed."""


class Unset(enum.Enum):
    """The type of ``UNSET``: "this field was not given" in ``SessionStore.update``."""

    UNSET = enum.auto()


UNSET: Final = Unset.UNSET


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One stored ACP session (not an ``AgentSession``, which is a connection)."""

    session_id: str
    cwd: str
    additional_directories: tuple[str, ...] = ()
    title: str | None = None
    created_at: str = ""
    """ISO 8601 UTC; set by the store on ``create`` when empty."""
    updated_at: str = ""
    """ISO 8601 UTC; set on ``create`` when empty, bumped by the store on every change."""
    mode_id: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    """Config option id -> value."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form (for example the ``_meta`` reported by ``session/list``)."""


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One prompt turn of a session, as loaded for ``session/load`` replay."""

    turn_id: str
    seq: int
    """Order of the turn within its session, from 0."""
    updates: tuple[dict[str, Any], ...]
    """The user prompt chunks first, then everything sent during the turn, in order."""
    stop_reason: str | None
    """``None`` while running, or if the turn never ended."""
    interrupted: bool
    """``True`` when the turn never ended and is not open in this store instance."""


class SessionStore(Protocol):
    """Durable ACP session state: records, prompt turns and their history.

    Every method may wait (they are all ``async``); none of them blocks the event loop.
    """

    async def create(self, record: SessionRecord) -> SessionRecord:
        """Store a new session and return it with its timestamps filled in.

        Raises ``InvalidParams`` if ``record.session_id`` already exists.
        """
        ...

    async def get(self, session_id: str) -> SessionRecord | None:
        """The session with this id, or ``None``."""
        ...

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
        """Change only the fields given, bump ``updated_at`` and return the new record.

        With no field given nothing changes. Raises ``ResourceNotFound`` for an unknown id.
        """
        ...

    async def list(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        """One page of sessions, newest ``updated_at`` first, and the cursor of the next page.

        The next cursor is ``None`` when no more sessions follow. ``cwd`` filters on exact
        equality. A cursor this store did not produce raises ``InvalidParams``.
        """
        ...

    async def delete(self, session_id: str) -> bool:
        """Remove the session and all its history; ``False`` if it did not exist."""
        ...

    async def begin_turn(
        self, session_id: str, turn_id: str, prompt_updates: Sequence[dict[str, Any]]
    ) -> None:
        """Open a new turn holding the prompt's updates; durable when this returns."""
        ...

    async def append_updates(
        self, session_id: str, turn_id: str, updates: Sequence[HistoryItem]
    ) -> None:
        """Append updates, in order, to a turn that has not ended (see ``HistoryItem``)."""
        ...

    async def end_turn(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        """Record how a turn ended; durable when this returns."""
        ...

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> None:
        """Several steps of one turn at once, in order: begin it (with ``begin``, the
        prompt's updates), append ``updates``, end it (with ``end``, the stop reason).
        One transaction; durable when this returns. The batching path of the server."""
        ...

    async def load_history(self, session_id: str) -> builtins.list[TurnRecord]:
        """Every turn of the session in order. Raises ``ResourceNotFound`` for an unknown id."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources. Idempotent."""
        ...


@runtime_checkable
class ImmediateTurnWrites(Protocol):
    """What a store may add to :class:`SessionStore`: a turn write made at once, if it can.

    The server's end of a turn calls it first, so that a short turn is durable without
    any wait (and without the shielded wait it would otherwise need); a store without
    it, or one that answers ``False``, is simply awaited.
    """

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> bool:
        """``write_turn``, done and durable before this returns, if that needs no waiting
        (no lock, no I/O to wait for); ``False``, with nothing written, otherwise: the
        caller then awaits ``write_turn``, which also reports any error the store could
        not decide at once. May raise what ``write_turn`` raises."""
        ...


# --- helpers shared by the implementations ------------------------------------------------

_TS_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"
_SECOND_FORMAT: Final = "%Y-%m-%dT%H:%M:%S"


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
        #: the next timestamp (bound once: called for every stored turn)
        self.now: Callable[[], str] = (
            self._now_system if self._clock is system_clock else self._now_clock
        )

    def _now_clock(self) -> str:
        current = self._clock().astimezone(timezone.utc)
        if self._last is not None and current <= self._last:
            current = self._last + timedelta(microseconds=1)
        self._last = current
        return current.strftime(_TS_FORMAT)

    def _now_system(self) -> str:
        # The same text as the general path, without a datetime per call: the part up to
        # the second is formatted once per second (this runs once per stored turn).
        micros = time.time_ns() // 1000
        if micros <= self._last_micros:
            micros = self._last_micros + 1
        self._last_micros = micros
        second, fraction = divmod(micros, 1_000_000)
        if second != self._second:
            self._second = second
            self._prefix = datetime.fromtimestamp(second, timezone.utc).strftime(_SECOND_FORMAT)
        return f"{self._prefix}.{fraction:06d}Z"


def encode_cursor(updated_at: str, session_id: str) -> str:
    """The opaque cursor naming the last row of a page."""
    return base64.urlsafe_b64encode(orjson.dumps([updated_at, session_id])).decode("ascii")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (updated_at, session_id) a cursor names; ``InvalidParams`` if it is not ours."""
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raise InvalidParams(f"invalid cursor {cursor!r}") from None
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], str)
    ):
        return value[0], value[1]
    raise InvalidParams(f"invalid cursor {cursor!r}")


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")


def dump_json(value: Any) -> bytes:
    """Encode a history item, config or meta (``TypeError`` if not JSON-ready)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, PackedJson):
        return zlib.decompress(value.data)
    return orjson.dumps(value)


def dump_text(value: Any) -> str:
    """Like :func:`dump_json`, as compact text (orjson's bytes keep a 4 KiB buffer each)."""
    if isinstance(value, str):
        return value
    if isinstance(value, PackedJson):
        return value.text()
    return orjson.dumps(value).decode()


def load_json(data: bytes | str | PackedJson) -> Any:
    if isinstance(data, PackedJson):
        return data.load()
    return orjson.loads(data)


def session_not_found(session_id: str) -> ResourceNotFound:
    return ResourceNotFound(f"session {session_id!r} not found", data={"sessionId": session_id})


def turn_not_found(session_id: str, turn_id: str) -> ResourceNotFound:
    return ResourceNotFound(
        f"turn {turn_id!r} of session {session_id!r} not found",
        data={"sessionId": session_id, "turnId": turn_id},
    )


def session_exists(session_id: str) -> InvalidParams:
    return InvalidParams(f"session {session_id!r} already exists", data={"sessionId": session_id})


def turn_refused(turn_id: str, state: str, event: str) -> IllegalTransition:
    return IllegalTransition(f"turn {turn_id!r}", state, event)
