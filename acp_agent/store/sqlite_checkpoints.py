"""The SQLite store's checkpoints, off the event loop: when the WAL file has grown past
``CHECKPOINT_BYTES``, one passive checkpoint on a thread of its own, with a connection of
its own. It knows nothing of sessions or of the commits that grew the WAL."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Final

__all__ = ["CHECKPOINT_BYTES", "Checkpoints"]

log = logging.getLogger("acp_agent.store")

CHECKPOINT_BYTES: Final = 4 * 1024 * 1024  # a WAL this big is checkpointed (SQLite's default)


class Checkpoints:
    """At most one passive checkpoint of ``path`` running at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._wal = Path(f"{path}-wal")
        self.running: threading.Thread | None = None  # the last one started, if any

    def start_if_due(self) -> None:
        """Start a passive checkpoint if the WAL has grown past ``CHECKPOINT_BYTES`` and
        none is running."""
        running = self.running
        if running is not None and running.is_alive():
            return
        try:
            size = os.stat(self._wal).st_size
        except OSError:
            return  # no WAL yet (or gone with the file: the next write says so)
        if size < CHECKPOINT_BYTES:
            return
        if running is not None:
            running.join()  # finished: reaped
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
