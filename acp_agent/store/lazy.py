"""A store that opens its real store on first use.

Opening SQLite (a file, a thread, the schema) costs milliseconds that do not belong on the
path to the ``initialize`` response; ``LazyStore`` defers them to the first call that needs
the store. It owns only that deferral: every call is forwarded unchanged.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Sequence

import anyio

from acp_agent.store.base import JsonText, SessionRecord, SessionStore, TurnRecord
from acp_agent.store.shared import HeldPrompts, SessionLeases, held_prompts_of, leases_of


class LazyStore:
    """Forward every call to the store ``opener`` returns, opened once, on first use."""

    def __init__(self, opener: Callable[[], Awaitable[SessionStore]]) -> None:
        self._opener = opener
        self._store: SessionStore | None = None
        self._leases: SessionLeases | None = None  # the opened store's, if it has leases
        self._held: HeldPrompts | None = None  # ... and if it keeps waiting prompts
        self._lock = anyio.Lock()
        self._closed = False

    @property
    def takes_packed_items(self) -> bool:
        """Whether the opened store takes packed items (see ``PackedJson``)."""
        return bool(getattr(self._store, "takes_packed_items", False))

    async def _get(self) -> SessionStore:
        if self._store is None:
            async with self._lock:
                if self._closed:
                    raise anyio.ClosedResourceError
                if self._store is None:
                    store = await self._opener()
                    self._leases = leases_of(store)
                    self._held = held_prompts_of(store)
                    self._store = store
        return self._store

    # Leases (see ``SessionLeases``): forwarded when the opened store has them.

    async def acquire(self, session_id: str) -> None:
        await self._get()
        if self._leases is not None:
            await self._leases.acquire(session_id)

    async def release(self, session_id: str) -> None:
        if self._leases is not None:
            await self._leases.release(session_id)

    def check_lease(self, session_id: str) -> None:
        if self._leases is not None:
            self._leases.check_lease(session_id)

    # Held prompts (see ``HeldPrompts``): likewise.

    async def hold_prompt(
        self, session_id: str, turn_id: str, request: JsonText, arrival: int
    ) -> None:
        await self._get()
        if self._held is not None:
            await self._held.hold_prompt(session_id, turn_id, request, arrival)

    async def drop_prompt(self, session_id: str, turn_id: str) -> None:
        if self._held is not None:
            await self._held.drop_prompt(session_id, turn_id)

    async def held_prompts(self, session_id: str) -> builtins.list[tuple[str, JsonText]]:
        await self._get()
        return [] if self._held is None else await self._held.held_prompts(session_id)

    async def create(self, record: SessionRecord) -> SessionRecord:
        return await (await self._get()).create(record)

    async def get(self, owner: str, session_id: str) -> SessionRecord | None:
        return await (await self._get()).get(owner, session_id)

    async def update(self, record: SessionRecord) -> SessionRecord:
        return await (await self._get()).update(record)

    async def list(
        self, owner: str, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        return await (await self._get()).list(owner, cwd=cwd, cursor=cursor, limit=limit)

    async def delete(self, owner: str, session_id: str) -> bool:
        return await (await self._get()).delete(owner, session_id)

    async def write_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[JsonText] | None = None,
        updates: Sequence[JsonText] = (),
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
        begin: Sequence[JsonText] | None = None,
        updates: Sequence[JsonText] = (),
        end: str | None = None,
    ) -> bool:
        """The opened store's ``write_turn_now`` (see ``TurnWritesNow``); ``False`` if it
        has none or is not open yet."""
        write_now = getattr(self._store, "write_turn_now", None)
        if write_now is None:
            return False
        return bool(write_now(session_id, turn_id, begin=begin, updates=updates, end=end))

    async def load_history(self, owner: str, session_id: str) -> builtins.list[TurnRecord]:
        return await (await self._get()).load_history(owner, session_id)

    async def aclose(self) -> None:
        async with self._lock:
            self._closed = True
            if self._store is not None:
                await self._store.aclose()
