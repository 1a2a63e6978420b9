"""A store that opens its real store on first use.

Opening SQLite (file, WAL, migrations) costs milliseconds that do not belong on the
path to the ``initialize`` response; ``LazyStore`` defers them to the first call that
needs the store. It owns only that deferral: every call is forwarded unchanged.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from acp_agent.store.base import (
    UNSET,
    HistoryItem,
    ImmediateTurnWrites,
    SessionRecord,
    SessionStore,
    TurnRecord,
    Unset,
)


class LazyStore:
    """Forward every call to the store ``opener`` returns, opened once, on first use."""

    def __init__(self, opener: Callable[[], Awaitable[SessionStore]]) -> None:
        self._opener = opener
        self._store: SessionStore | None = None
        self._write_now: Callable[..., bool] | None = None
        self._lock = anyio.Lock()
        self._closed = False

    async def _get(self) -> SessionStore:
        if self._store is None:
            async with self._lock:
                if self._closed:
                    raise anyio.ClosedResourceError
                if self._store is None:
                    store = self._store = await self._opener()
                    if isinstance(store, ImmediateTurnWrites):  # a slow check: once
                        self._write_now = store.write_turn_now
        return self._store

    async def create(self, record: SessionRecord) -> SessionRecord:
        return await (await self._get()).create(record)

    async def get(self, session_id: str) -> SessionRecord | None:
        return await (await self._get()).get(session_id)

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
        return await (await self._get()).update(
            session_id,
            title=title,
            mode_id=mode_id,
            config=config,
            meta=meta,
            cwd=cwd,
            additional_directories=additional_directories,
        )

    async def list(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        return await (await self._get()).list(cwd=cwd, cursor=cursor, limit=limit)

    async def delete(self, session_id: str) -> bool:
        return await (await self._get()).delete(session_id)

    async def begin_turn(
        self, session_id: str, turn_id: str, prompt_updates: Sequence[dict[str, Any]]
    ) -> None:
        await (await self._get()).begin_turn(session_id, turn_id, prompt_updates)

    async def append_updates(
        self, session_id: str, turn_id: str, updates: Sequence[HistoryItem]
    ) -> None:
        await (await self._get()).append_updates(session_id, turn_id, updates)

    async def end_turn(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        await (await self._get()).end_turn(session_id, turn_id, stop_reason)

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> None:
        await (await self._get()).write_turn(
            session_id, turn_id, begin=begin, updates=updates, end=end
        )

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[HistoryItem] | None = None,
        updates: Sequence[HistoryItem] = (),
        end: str | None = None,
    ) -> bool:
        write_now = self._write_now
        if write_now is None:
            return False
        return write_now(session_id, turn_id, begin=begin, updates=updates, end=end)

    async def load_history(self, session_id: str) -> builtins.list[TurnRecord]:
        return await (await self._get()).load_history(session_id)

    async def aclose(self) -> None:
        async with self._lock:
            self._closed = True
            if self._store is not None:
                await self._store.aclose()
