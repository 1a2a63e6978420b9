"""A memory store whose turn writes wait until the test lets them through."""

from __future__ import annotations

import anyio

from acp_agent.store import MemorySessionStore, TurnWrite


class StalledStore(MemorySessionStore):
    """``write_turn`` waits until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = anyio.Event()

    async def write_turn(self, write: TurnWrite) -> None:
        await self.go.wait()
        await super().write_turn(write)
