"""Which connection of this process has each ACP session open: one live owner each.

A process that serves many connections (``acp-agent-kit serve``) gives all their servers
one :class:`SessionOwners`; servers given none share the one of their store object
(:func:`owners_of`), so two connections on one store never both serve a session (a
store's lease or lock belongs to the process, and cannot tell its connections apart).
A ``session/load`` or ``session/resume`` on one connection takes the session over from
another connection that has it open: that connection closes its copy first (a turn
running there ends ``cancelled``, its history written), and only then is the history
read, so no two connections ever write one session. A load that another connection's
load overtook while it read is refused (``SessionLeased``, ``reason: "takenOver"``). A
connection that ends gives its sessions up.

It does not know what a store holds (the store object is only a key): sessions shared by
several processes are leased through the store (:mod:`acp_agent.store.shared`).
"""

from __future__ import annotations

import weakref
from typing import Protocol


class Owner(Protocol):
    """A connection's server, as the registry sees it."""

    async def give_up(self, session_id: str) -> None:
        """Close this connection's live copy of the session, if it has one."""
        ...


class SessionOwners:
    """Session id -> the connection that has it open (or is opening it)."""

    __slots__ = ("_owners",)

    def __init__(self) -> None:
        self._owners: dict[str, Owner] = {}

    def holder(self, session_id: str) -> Owner | None:
        return self._owners.get(session_id)

    def claim(self, session_id: str, owner: Owner) -> Owner | None:
        """Make ``owner`` the session's owner; return the other owner it had, if any."""
        previous = self._owners.get(session_id)
        self._owners[session_id] = owner
        return previous if previous is not owner else None

    def release(self, session_id: str, owner: Owner) -> None:
        """Forget ``owner``'s claim, if it still holds the session (compare-and-set)."""
        if self._owners.get(session_id) is owner:
            del self._owners[session_id]


_BY_STORE: weakref.WeakKeyDictionary[object, SessionOwners] = weakref.WeakKeyDictionary()


def owners_of(store: object) -> SessionOwners:
    """The owners shared by every server on ``store`` that was given none."""
    owners = _BY_STORE.get(store)
    if owners is None:
        owners = _BY_STORE[store] = SessionOwners()
    return owners
