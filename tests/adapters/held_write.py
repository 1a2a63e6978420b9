"""Serve an agent on a SQLite store whose first turn-ending write is held by the test.

Run as ``python -m tests.adapters.held_write SPEC DB HELD GO``: ``SPEC`` as ``--agent``
takes it (``reference`` for the built-in agent), ``DB`` the store's file, ``HELD`` and
``GO`` two FIFOs. The first ``write_turn`` that ends a turn writes a line to ``HELD`` and
waits until the test writes to ``GO``, then writes: the window in which that turn is
answered and not yet saved, held open for as long as the test needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import anyio.to_thread

from acp_agent.adapters import load
from acp_agent.reference import ReferenceAgent
from acp_agent.runner import serve_stdio
from acp_agent.store import SqliteSessionStore, TurnWrite


class HeldStore(SqliteSessionStore):
    writes_inline = False  # its held write waits on a thread: the writer task makes it

    def __init__(self, path: str, held: Path, go: Path) -> None:
        super().__init__(path)
        self.held, self.go = held, go
        self.holding = True

    async def write_turn(self, write: TurnWrite) -> None:
        if write.end is not None and self.holding:
            self.holding = False
            await anyio.to_thread.run_sync(self._hold)
        await super().write_turn(write)

    def _hold(self) -> None:
        self.held.write_text("held\n")  # waits for the test to read it
        self.go.read_text()  # waits for the test to let the write through


async def main() -> None:
    spec, db, held, go = sys.argv[1:5]
    agent = ReferenceAgent() if spec == "reference" else load(spec)
    async with HeldStore(db, Path(held), Path(go)) as store:
        await serve_stdio(agent, store=store)


if __name__ == "__main__":
    anyio.run(main)
