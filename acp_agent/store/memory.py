"""``MemorySessionStore``: the in-memory ``SessionStore`` (tests, ``--store memory``).

It owns plain dicts and nothing else: no threads, no files. It keeps the exact semantics of
the SQLite store, including the JSON round trip of every history item (items are stored as
orjson bytes, so a caller mutating its dicts later changes nothing stored). A memory store
never outlives its process, so every turn without a stop reason is one it has open: it never
reports a turn ``interrupted``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.lowlevel

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
    dump_json,
    dump_text,
    encode_cursor,
    load_json,
    session_exists,
    session_not_found,
    turn_not_found,
    turn_refused,
)

__all__ = ["MemorySessionStore"]


def _body(item: HistoryItem) -> str | PackedJson:
    # decoded: orjson leaves a 4 KiB buffer behind each small bytes object; a packed
    # item is kept packed (it is immutable)
    return item if isinstance(item, PackedJson) else dump_text(item)


@dataclass(slots=True)
class _Turn:
    turn_id: str
    seq: int
    bodies: builtins.list[str | PackedJson] = field(default_factory=builtins.list)
    stop_reason: str | None = None


@dataclass(slots=True)
class _Session:
    record: SessionRecord  # everything but the activity time, which is ``updated_at``
    config_json: bytes
    meta_json: bytes
    updated_at: str = ""
    turns: dict[str, _Turn] = field(default_factory=dict)


class MemorySessionStore:
    """A ``SessionStore`` held in dicts."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._timestamps = Timestamps(clock)
        self._sessions: dict[str, _Session] = {}
        self._closed = False

    async def _enter(self) -> None:
        # A checkpoint, so every call may be cancelled and yields like the SQLite store does.
        await anyio.lowlevel.checkpoint()
        if self._closed:
            raise anyio.ClosedResourceError

    def _session(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise session_not_found(session_id) from None

    def _turn(self, session: _Session, turn_id: str) -> _Turn:
        try:
            return session.turns[turn_id]
        except KeyError:
            raise turn_not_found(session.record.session_id, turn_id) from None

    def _touch(self, session: _Session) -> None:
        # Every stored turn touches its session: a string, not a new record.
        session.updated_at = self._timestamps.now()

    @staticmethod
    def _export(session: _Session) -> SessionRecord:
        # Fresh mappings, so callers never alias what is stored.
        return replace(
            session.record,
            updated_at=session.updated_at,
            config=load_json(session.config_json),
            meta=load_json(session.meta_json),
        )

    async def create(self, record: SessionRecord) -> SessionRecord:
        await self._enter()
        if record.session_id in self._sessions:
            raise session_exists(record.session_id)
        now = self._timestamps.now()
        session = _Session(
            record=replace(
                record,
                additional_directories=tuple(record.additional_directories),
                created_at=record.created_at or now,
                config={},
                meta={},
            ),
            config_json=dump_json(dict(record.config)),
            meta_json=dump_json(dict(record.meta)),
            updated_at=record.updated_at or now,
        )
        self._sessions[record.session_id] = session
        return self._export(session)

    async def get(self, session_id: str) -> SessionRecord | None:
        await self._enter()
        session = self._sessions.get(session_id)
        return None if session is None else self._export(session)

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
        await self._enter()
        session = self._session(session_id)
        changes: dict[str, Any] = {}
        if not isinstance(title, Unset):
            changes["title"] = title
        if not isinstance(mode_id, Unset):
            changes["mode_id"] = mode_id
        if not isinstance(cwd, Unset):
            changes["cwd"] = cwd
        if not isinstance(additional_directories, Unset):
            changes["additional_directories"] = tuple(additional_directories)
        config_json = None if isinstance(config, Unset) else dump_json(dict(config))
        meta_json = None if isinstance(meta, Unset) else dump_json(dict(meta))
        if changes or config_json is not None or meta_json is not None:
            if config_json is not None:
                session.config_json = config_json
            if meta_json is not None:
                session.meta_json = meta_json
            session.updated_at = self._timestamps.now()
            session.record = replace(session.record, **changes)
        return self._export(session)

    async def list(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        await self._enter()
        rows = sorted(
            (
                s
                for s in self._sessions.values()
                if cwd is None or s.record.cwd == cwd
                if after is None or (s.updated_at, s.record.session_id) < after
            ),
            key=lambda s: (s.updated_at, s.record.session_id),
            reverse=True,
        )
        page = [self._export(s) for s in rows[:limit]]
        more = len(rows) > limit
        next_cursor = encode_cursor(page[-1].updated_at, page[-1].session_id) if more else None
        return page, next_cursor

    async def delete(self, session_id: str) -> bool:
        await self._enter()
        return self._sessions.pop(session_id, None) is not None

    async def begin_turn(
        self, session_id: str, turn_id: str, prompt_updates: Sequence[dict[str, Any]]
    ) -> None:
        await self._enter()
        self._write(session_id, turn_id, prompt_updates, (), None)

    async def append_updates(
        self, session_id: str, turn_id: str, updates: Sequence[HistoryItem]
    ) -> None:
        await self._enter()
        self._write(session_id, turn_id, None, updates, None)

    async def end_turn(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        await self._enter()
        self._write(session_id, turn_id, None, (), stop_reason)

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> None:
        """begin, append and end in one step (see ``SessionStore.write_turn``)."""
        # No checkpoint unless cancelled: this runs on a turn's way to its response, which
        # a pass of the event loop would delay (and split the turn's last frames into two
        # writes). Everything below is synchronous.
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._write(session_id, turn_id, begin, updates, end)

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> bool:
        """``write_turn`` without a checkpoint: this store never waits (see
        ``ImmediateTurnWrites``)."""
        self._write(session_id, turn_id, begin, updates, end)
        return True

    def _write(
        self,
        session_id: str,
        turn_id: str,
        begin: Sequence[HistoryItem] | None,
        updates: Sequence[HistoryItem],
        end: str | None,
    ) -> None:
        # Every turn step of this store, synchronous: begin, append, end, in that order.
        begun = [_body(u) for u in begin] if begin is not None else None
        bodies = [_body(u) for u in updates]
        if self._closed:
            raise anyio.ClosedResourceError
        session = self._session(session_id)
        if begun is not None:
            existing = session.turns.get(turn_id)
            if existing is not None:
                state = "running" if existing.stop_reason is None else "ended"
                raise turn_refused(turn_id, state, "begin_turn")
            session.turns[turn_id] = _Turn(turn_id, len(session.turns), begun)
        turn = self._turn(session, turn_id)
        if bodies or (begun is None and end is None):
            if turn.stop_reason is not None:
                raise turn_refused(turn_id, "ended", "append_updates")
            turn.bodies.extend(bodies)
        if end is not None:
            if turn.stop_reason is not None:
                raise turn_refused(turn_id, "ended", "end_turn")
            turn.stop_reason = end
        self._touch(session)

    async def load_history(self, session_id: str) -> builtins.list[TurnRecord]:
        await self._enter()
        session = self._session(session_id)
        return [
            TurnRecord(
                turn_id=t.turn_id,
                seq=t.seq,
                updates=tuple(load_json(b) for b in t.bodies),
                stop_reason=t.stop_reason,
                interrupted=False,
            )
            for t in sorted(session.turns.values(), key=lambda t: t.seq)
        ]

    async def aclose(self) -> None:
        self._closed = True
        self._sessions.clear()
