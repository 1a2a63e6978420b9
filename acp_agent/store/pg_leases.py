"""The leases one PostgreSQL store instance holds, as it knows them: a thread-safe table.

It owns the in-memory side of leases (``acp_agent.store.postgres`` owns the SQL): for each
session this host serves, the fencing token it holds, how many acquisitions are not yet
released, and whether the lease is known lost to another host. The event loop's calls and the
renewal thread both use it, under one lock. It does no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from acp_agent.errors import SessionLeased


@dataclass(slots=True)
class _Lease:
    token: int
    generation: int  # when it was recorded (see ``lose_missing``)
    count: int  # acquisitions not yet released
    lost: bool = False


class LeaseTable:
    """Session id -> the lease this host holds on it."""

    def __init__(self) -> None:
        self._leases: dict[str, _Lease] = {}
        self._generation = 0  # leases recorded so far
        self._lock = threading.Lock()

    def join(self, session_id: str) -> bool:
        """Count one more acquisition of a lease held and not lost; False if there is none."""
        with self._lock:
            lease = self._leases.get(session_id)
            if lease is None or lease.lost:
                return False
            lease.count += 1
            return True

    def record(self, session_id: str, token: int, count: int) -> int:
        """Record a lease just taken with ``token`` (``count`` acquisitions); if that very
        lease is recorded already, add the acquisitions. A lost lease it replaces passes on
        its acquisitions: their releases are still to come. Returns the token held."""
        with self._lock:
            lease = self._leases.get(session_id)
            if lease is not None and not lease.lost and lease.token == token:
                lease.count += count
            else:
                count += lease.count if lease is not None else 0
                self._generation += 1
                self._leases[session_id] = _Lease(token, self._generation, count)
            return token

    def release(self, session_id: str) -> int | None:
        """Count one release; the token to give back in the database when it was the last
        acquisition of a lease not lost, else ``None``."""
        with self._lock:
            lease = self._leases.get(session_id)
            if lease is None:
                return None
            lease.count -= 1
            if lease.count > 0:
                return None
            del self._leases[session_id]
            return None if lease.lost else lease.token

    def token(self, session_id: str) -> int | None:
        """The token held on the session (``None``: no lease); ``SessionLeased`` if lost."""
        with self._lock:
            lease = self._leases.get(session_id)
        if lease is None:
            return None
        if lease.lost:
            raise SessionLeased.lost(session_id)
        return lease.token

    def lose(self, session_id: str) -> SessionLeased:
        """Mark the lease lost (a write was fenced out); returns the error to raise."""
        with self._lock:
            lease = self._leases.get(session_id)
            if lease is not None:
                lease.lost = True
        return SessionLeased.lost(session_id)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._leases.pop(session_id, None)

    def generation(self) -> int:
        """A mark to pass to ``lose_missing``: leases recorded after it are not judged."""
        with self._lock:
            return self._generation

    def lose_missing(self, kept: Mapping[str, int], before: int) -> list[str]:
        """After a renewal that kept ``kept`` (session id -> token): mark lost every lease
        recorded up to ``before`` that is not among them; returns those session ids."""
        lost: list[str] = []
        with self._lock:
            for session_id, lease in self._leases.items():
                judged = lease.generation <= before and not lease.lost
                if judged and kept.get(session_id) != lease.token:
                    lease.lost = True
                    lost.append(session_id)
        return lost

    def clear(self) -> None:
        with self._lock:
            self._leases.clear()
