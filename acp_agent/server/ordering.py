"""Arrival order per ACP session: requests that change one session apply one at a time.

A ``session/load`` and a ``session/delete`` of the same session, or a ``set_mode``
pipelined behind a ``load``, would otherwise run interleaved in their handler tasks.
Each such request takes a place in its session's line when it is read (synchronously,
in the receive loop's order) and its handler waits until it is first. A prompt takes a
place only while others wait, and gives it up as soon as it holds or queues for the
prompt slot, so a long turn never holds the line (a ``session/close`` behind it must
reach it to cancel it). A ``session/cancel`` marks the places in its session's line: a prompt
waiting there answers ``cancelled`` when its turn comes, without running.

It does not know what the requests do; it only orders them.
"""

from __future__ import annotations

from collections import deque

import anyio


class Place:
    """One request's place in its session's line."""

    __slots__ = ("_first", "cancelled", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._first = anyio.Event()
        #: a ``session/cancel`` was read while it waited (what that means is its request's)
        self.cancelled = False

    async def wait(self) -> None:
        """Wait until every request read before this one for the session is done."""
        await self._first.wait()


class ArrivalOrder:
    """The lines of all sessions of one connection."""

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: dict[str, deque[Place]] = {}

    def busy(self, session_id: str) -> bool:
        """Whether a request for the session is waiting or running in the line."""
        return session_id in self._lines

    def enter(self, session_id: str) -> Place:
        """Take the last place in the session's line (call it in arrival order)."""
        place = Place(session_id)
        line = self._lines.get(session_id)
        if line is None:
            self._lines[session_id] = deque((place,))
            place._first.set()
        else:
            line.append(place)
        return place

    def cancel(self, session_id: str) -> None:
        """Mark every place now in the session's line as cancelled."""
        for place in self._lines.get(session_id, ()):
            place.cancelled = True

    def leave(self, place: Place) -> None:
        """Give the place up (done, failed or cancelled); the next one goes."""
        line = self._lines.get(place.session_id)
        if line is None or place not in line:
            return
        was_first = line[0] is place
        line.remove(place)
        if not line:
            del self._lines[place.session_id]
        elif was_first:
            line[0]._first.set()
