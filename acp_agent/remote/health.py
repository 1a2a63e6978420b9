"""Whether the session store answers: what ``GET /healthz`` reports.

This module owns :class:`StoreHealth`: one probe of the store at a time (a read of a
session id no one has), run in the server's task group so that a store that never
answers holds one task, not one per request; a check waits for the probe at most
``timeout`` seconds and then says the store does not answer. A probe that finished
within the last ``FRESH`` seconds is reused, so a load balancer polling often costs
the store little.

It knows nothing of HTTP (:mod:`acp_agent.remote.asgi` turns the answer into a
response) and nothing of what the store holds.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio
import anyio.abc

from ..store import SessionStore

__all__ = ["StoreHealth"]

log = logging.getLogger("acp_agent.remote")

TIMEOUT: Final = 2.0  # seconds a health check waits for the store
FRESH: Final = 1.0  # seconds a finished probe's answer is reused
PROBE_OWNER: Final = "$healthz"  # an owner no principal can be (names hold no "$")


class StoreHealth:
    """Probes ``store`` from ``tg`` (bound by :meth:`start`) when asked."""

    def __init__(self, store: SessionStore, timeout: float = TIMEOUT) -> None:
        self._store = store
        self.timeout = timeout
        self._tg: anyio.abc.TaskGroup | None = None
        self._probe: anyio.Event | None = None  # set when the running probe ends
        self._answered_at: float | None = None  # when the last probe succeeded
        self._ok = False

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    async def check(self) -> bool:
        """True if the store answered a read within ``timeout`` seconds."""
        answered = self._answered_at
        if self._probe is None and answered is not None and anyio.current_time() - answered < FRESH:
            return self._ok
        if self._probe is None:
            if self._tg is None:
                return False  # not serving yet
            self._probe = anyio.Event()
            self._tg.start_soon(self._run_probe, self._probe, name="acp-healthz")
        probe = self._probe
        with anyio.move_on_after(self.timeout):
            await probe.wait()
            return self._ok
        return False

    async def _run_probe(self, done: anyio.Event) -> None:
        try:
            await self._store.get(PROBE_OWNER, "healthz")
            self._ok = True
        except Exception as exc:  # the store's failure is the answer, said once
            if self._ok or self._answered_at is None:
                log.warning("health check: the session store failed: %s", exc)
            self._ok = False
        finally:
            self._answered_at = anyio.current_time()
            self._probe = None
            done.set()
