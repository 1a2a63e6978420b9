"""What a store shared by several agent processes or hosts adds to ``SessionStore``.

Two interfaces, apart from ``SessionStore`` so that a store has only what it does:

- session *leases* (``SessionLeases``), which make one process or host the live owner of a
  session: the PostgreSQL store (``acp_agent.store.postgres``: expiring leases, fenced
  writes) and the SQLite store (``acp_agent.store.sqlite_locks``: a lock per session that
  the kernel drops with its process);
- *held prompts* (``HeldPrompts``), the durable queue of prompts waiting for a busy session
  (``--busy-policy queue``): the PostgreSQL store only.

The memory store has neither: ``leases_of`` and ``held_prompts_of`` answer ``None`` for a
store without them, and the server skips those steps.
"""

from __future__ import annotations

import builtins
from typing import Protocol, runtime_checkable

from acp_agent.store.base import JsonText


@runtime_checkable
class SessionLeases(Protocol):
    """One live owner per session. The server takes a lease when it loads a session
    (the store's ``create`` takes it for a new one), checks it before each prompt, and gives it back
    when the session closes or the connection ends; the store renews it meanwhile and
    fences every write with it."""

    async def acquire(self, session_id: str) -> None:
        """Take the session's lease for this host (counted: one ``release`` per call).

        Raises ``SessionLeased`` if another host holds a live lease on it.
        """
        ...

    async def release(self, session_id: str) -> None:
        """Give back one acquisition (never raises: an unreleased lease expires)."""
        ...

    def check_lease(self, session_id: str) -> None:
        """Raise ``SessionLeased`` if this host's lease is known to be lost (no I/O)."""
        ...


@runtime_checkable
class HeldPrompts(Protocol):
    """Prompts waiting for a busy session, kept until their turn begins.

    A held prompt is removed by the ``write_turn`` that begins its turn (same turn id, same
    transaction), so it runs once, or by ``drop_prompt`` when it is answered without a turn.
    Whichever host owns the session next runs what is left, in arrival order.
    """

    async def hold_prompt(
        self, session_id: str, turn_id: str, request: JsonText, arrival: int
    ) -> None:
        """Keep the ``session/prompt`` params ``request`` that will run as ``turn_id``.

        ``arrival`` orders the held prompts of a session (a host's clock, nanoseconds).
        """
        ...

    async def drop_prompt(self, session_id: str, turn_id: str) -> None:
        """Forget a held prompt that was answered without running."""
        ...

    async def held_prompts(self, session_id: str) -> builtins.list[tuple[str, JsonText]]:
        """The session's held prompts, ``(turn_id, request)``, in arrival order."""
        ...


def leases_of(store: object) -> SessionLeases | None:
    """``store`` as ``SessionLeases`` if it has leases, else ``None``."""
    return store if isinstance(store, SessionLeases) else None


def held_prompts_of(store: object) -> HeldPrompts | None:
    """``store`` as ``HeldPrompts`` if it keeps waiting prompts, else ``None``."""
    return store if isinstance(store, HeldPrompts) else None
