"""Which process has a session of a SQLite store open: one lock byte per session.

A process that creates or loads a session takes an exclusive POSIX record lock
(``lockf``) on one byte of ``<database>.locks``, at an offset drawn from a hash of the
session id, and holds it until the session closes; another process is refused the session
(``SessionLeased``, reason ``leased``, as the PostgreSQL store refuses another host) while
the lock is held, told which process holds it where the system says (``/proc/locks`` on
Linux). The kernel drops every lock of a process that dies, so a session whose
process is gone is taken over at once: no row to expire, no process id to check (which could
be reused, or belong to another process namespace). Acquisitions within this store are
counted, so that several connections of one process may share a session.

POSIX record locks belong to the process: two stores of one process on the same file do not
exclude each other (the server gives a session to one connection at a time itself), and
closing the lock file drops them all, so only ``aclose`` closes it. Without ``fcntl``
(Windows) there are no locks and every acquisition succeeds.

It owns the lock file and the counts; it knows nothing of SQL or the sessions' rows.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Final

from acp_agent.errors import SessionLeased
from acp_agent.store.files import create_private_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["RETRY_AFTER", "SessionLocks"]

RETRY_AFTER: Final = 1.0
"""Seconds a refused client is told to wait (the holder keeps the session until it closes)."""

_OFFSETS: Final = 1 << 62  # lock bytes are drawn from [0, 2**62): collisions are negligible


def _offset(session_id: str) -> int:
    digest = hashlib.blake2b(session_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _OFFSETS


def _holder(fd: int, offset: int) -> int | None:
    """The id of the process holding the lock byte at ``offset`` of the open file ``fd``,
    if the system says (Linux: ``/proc/locks``); None otherwise."""
    inode = f":{os.fstat(fd).st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            for line in table:
                # "1: POSIX  ADVISORY  WRITE <pid> <maj>:<min>:<inode> <start> <end>"
                fields = line.split()
                if len(fields) >= 8 and fields[5].endswith(inode) and fields[6] == str(offset):
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


class SessionLocks:
    """The session locks one store holds in its lock file."""

    def __init__(self, path: Path) -> None:
        """Create (if needed) and open the lock file: an error here is the store's."""
        create_private_file(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        self._held: dict[str, int] = {}
        self._mutex = threading.Lock()  # calls come from the event loop and the store's thread

    def acquire(self, session_id: str) -> None:
        """Hold the session for this process (counted); ``SessionLeased`` if another
        process holds it."""
        with self._mutex:
            count = self._held.get(session_id, 0)
            if count == 0 and fcntl is not None:
                try:
                    fcntl.lockf(
                        self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _offset(session_id), os.SEEK_SET
                    )
                except (BlockingIOError, PermissionError):
                    holder = _holder(self._fd, _offset(session_id))
                    raise SessionLeased.in_process(session_id, holder, RETRY_AFTER) from None
            self._held[session_id] = count + 1

    def release(self, session_id: str) -> None:
        """Give back one acquisition; the last one unlocks the session."""
        with self._mutex:
            count = self._held.get(session_id, 0)
            if count > 1:
                self._held[session_id] = count - 1
                return
            self._held.pop(session_id, None)
            if count == 1 and fcntl is not None:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, _offset(session_id), os.SEEK_SET)

    def held(self, session_id: str) -> bool:
        with self._mutex:
            return session_id in self._held

    def close(self) -> None:
        """Drop every lock (idempotent)."""
        with self._mutex:
            self._held.clear()
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
