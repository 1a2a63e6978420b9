"""The SQLite store's checkpoints, off the event loop: one passive checkpoint at a time, on a
thread of its own with a connection of its own, once the WAL holds enough to be worth it.
It knows nothing of sessions or of the commits that grew the WAL."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Final

__all__ = ["CHECKPOINT_BYTES", "CHECKPOINT_COMMITS", "Checkpoints"]

log = logging.getLogger("acp_agent.store")

#: the WAL file grown by this much since the last checkpoint began: checkpoint it
CHECKPOINT_BYTES: Final = 4 * 1024 * 1024
#: or this many commits since then: a WAL reused from its start refills without growing
CHECKPOINT_COMMITS: Final = 256


class Checkpoints:
    """At most one passive checkpoint of ``path`` running at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._wal = Path(f"{path}-wal")
        self.running: threading.Thread | None = None  # the last one started, if any
        self._commits = 0  # commits since the last one began
        self._size = 0  # the WAL file's size when the last one began

    def committed(self) -> None:
        """After a commit: start a passive checkpoint if one is due and none is running."""
        self._commits += 1
        running = self.running
        if running is not None and running.is_alive():
            return
        try:
            size = os.stat(self._wal).st_size
        except OSError:
            return  # no WAL yet (or gone with the file: the next write says so)
        if self._commits < CHECKPOINT_COMMITS and size < self._size + CHECKPOINT_BYTES:
            return
        if running is not None:
            running.join()  # finished: reaped
        self._commits, self._size = 0, size
        self.running = threading.Thread(target=self.passive, name="acp-sqlite-checkpoint")
        self.running.start()

    def passive(self) -> None:
        """One passive checkpoint on a connection of its own; a failure is logged: the WAL
        keeps every commit meanwhile, and the next one retries."""
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                conn.close()
        except (sqlite3.Error, OSError) as exc:
            log.warning("session store %s: checkpoint failed: %s", self.path, exc)

    def join(self) -> None:
        """Wait for the running one (a passive checkpoint never waits for a lock)."""
        running, self.running = self.running, None
        if running is not None:
            running.join()
