"""Which connection of this process has each ACP session open: one live owner each.

A process that serves many connections (``acp-agent-kit serve``) gives all their servers
one :class:`SessionOwners`. A ``session/load`` or ``session/resume`` on one connection
takes the session over from another connection that has it open: that connection closes
its copy first (a turn running there ends ``cancelled``, its history written), and only
then is the history read, so no two connections ever write one session. A load that
another connection's load overtook while it read is refused (``SessionLeased``,
``reason: "takenOver"``). A connection that ends gives its sessions up.

It does not know stores or hosts: sessions shared by several processes are leased through
the store (:mod:`acp_agent.store.shared`).
"""

from __future__ import annotations

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
