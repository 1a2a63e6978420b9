"""``MemorySessionStore``: the ``SessionStore`` held in dicts (tests, ``--store memory``).

It owns plain dicts and nothing else: no threads, no files, nothing outlives the process.
History items are strings (immutable), so they are kept as given, and large ones as history
packed them, expanded only when loaded; config is kept as its JSON
text, so a caller that changes its mapping later changes nothing stored.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field, replace

import anyio
import anyio.lowlevel
import orjson

from acp_agent.store.base import (
    Clock,
    JsonText,
    SessionRecord,
    Timestamps,
    TurnRecord,
    TurnWrite,
    check_limit,
    check_turn_write,
    decode_cursor,
    encode_cursor,
    session_exists,
    session_not_found,
)
from acp_agent.store.packed import PackedJson, text_of

__all__ = ["MemorySessionStore"]


@dataclass(slots=True)
class _Turn:
    updates: builtins.list[JsonText | PackedJson]
    stop_reason: str | None = None


@dataclass(slots=True)
class _Session:
    record: SessionRecord  # with an empty config: the config is kept as text
    config: str  # text: orjson's bytes would keep a 4 KiB buffer per session
    turns: dict[str, _Turn] = field(default_factory=dict)  # in the order they began

    def export(self) -> SessionRecord:
        return replace(self.record, config=orjson.loads(self.config))


class MemorySessionStore:
    """A ``SessionStore`` in dicts."""

    writes_inline = True  # its one checkpoint comes before it changes anything

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._timestamps = Timestamps(clock)
        self._sessions: dict[str, _Session] = {}
        self._closed = False

    async def _enter(self) -> None:
        # A checkpoint, so that every call may be cancelled and yields as a real store does.
        await anyio.lowlevel.checkpoint()
        if self._closed:
            raise anyio.ClosedResourceError

    def _owned(self, owner: str, session_id: str) -> _Session | None:
        session = self._sessions.get(session_id)
        return session if session is not None and session.record.owner == owner else None

    async def create(self, record: SessionRecord) -> SessionRecord:
        config = orjson.dumps(dict(record.config)).decode()
        await self._enter()
        if record.session_id in self._sessions:
            raise session_exists(record.session_id)
        now = self._timestamps.now()
        stored = replace(
            record,
            additional_directories=tuple(record.additional_directories),
            config={},
            created_at=record.created_at or now,
            updated_at=record.updated_at or now,
        )
        session = self._sessions[record.session_id] = _Session(stored, config)
        return session.export()

    async def get(self, owner: str, session_id: str) -> SessionRecord | None:
        await self._enter()
        session = self._owned(owner, session_id)
        return None if session is None else session.export()

    async def update(self, record: SessionRecord) -> SessionRecord:
        config = orjson.dumps(dict(record.config)).decode()
        await self._enter()
        session = self._owned(record.owner, record.session_id)
        if session is None:
            raise session_not_found(record.session_id)
        session.record = replace(
            session.record,
            cwd=record.cwd,
            additional_directories=tuple(record.additional_directories),
            title=record.title,
            mode_id=record.mode_id,
            updated_at=self._timestamps.now(),
        )
        session.config = config
        return session.export()

    async def list(
        self, owner: str, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        await self._enter()
        rows = sorted(
            (
                s.record
                for s in self._sessions.values()
                if s.record.owner == owner
                if cwd is None or s.record.cwd == cwd
                if after is None or (s.record.updated_at, s.record.session_id) < after
            ),
            key=lambda r: (r.updated_at, r.session_id),
            reverse=True,
        )
        page = [self._sessions[r.session_id].export() for r in rows[:limit]]
        return page, encode_cursor(page[-1]) if len(rows) > limit else None

    async def delete(self, owner: str, session_id: str) -> bool:
        await self._enter()
        if self._owned(owner, session_id) is None:
            return False
        del self._sessions[session_id]
        return True

    async def write_turn(self, write: TurnWrite) -> None:
        await self._enter()
        session = self._sessions.get(write.session_id)
        if session is None:
            raise session_not_found(write.session_id)
        turn = session.turns.get(write.turn_id)
        check_turn_write(
            write,
            exists=turn is not None,
            stop_reason=None if turn is None else turn.stop_reason,
        )
        if turn is None:
            turn = session.turns[write.turn_id] = _Turn(builtins.list(write.begin or ()))
        turn.updates.extend(write.updates)
        if write.end is not None:
            turn.stop_reason = write.end
        session.record = replace(session.record, updated_at=self._timestamps.now())

    async def load_history(self, owner: str, session_id: str) -> builtins.list[TurnRecord]:
        await self._enter()
        session = self._owned(owner, session_id)
        if session is None:
            raise session_not_found(session_id)
        return [
            TurnRecord(turn_id, tuple(map(text_of, turn.updates)), turn.stop_reason)
            for turn_id, turn in session.turns.items()
        ]

    async def aclose(self) -> None:
        self._closed = True
        self._sessions.clear()
