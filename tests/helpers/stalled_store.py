"""A memory store whose turn writes wait until the test lets them through."""

from __future__ import annotations

from typing import Any

import anyio

from acp_agent.store import MemorySessionStore


class StalledStore(MemorySessionStore):
    """Turn writes never happen at once, and ``write_turn`` waits until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = anyio.Event()

    def write_turn_now(self, *args: Any, **kwargs: Any) -> bool:
        return False

    async def write_turn(self, *args: Any, **kwargs: Any) -> None:
        await self.go.wait()
        super().write_turn_now(*args, **kwargs)
