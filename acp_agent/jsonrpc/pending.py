"""Id allocation and bookkeeping for our outstanding requests.

This module owns which ids we have sent and not yet seen answered: it hands out
sequential integer ids (from 0) and pairs a response's id with the method and
caller payload stored at send time.

It deliberately knows nothing about waiting, time limits or I/O: the async layer
stores its own waiter object as the payload and wakes it after :meth:`pop`, and
on shutdown fails every waiter returned by :meth:`drain`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from .messages import RequestId

__all__ = ["PendingCalls"]

T = TypeVar("T")


class PendingCalls(Generic[T]):
    """Outstanding requests by id. Ids are never reused, so they are unique."""

    __slots__ = ("_calls", "_next_id")

    def __init__(self) -> None:
        self._next_id = 0
        self._calls: dict[int, tuple[str, T]] = {}

    def allocate(self, method: str, payload: T) -> int:
        """Record a request about to be sent; return its id."""
        id = self._next_id
        self._next_id = id + 1
        self._calls[id] = (method, payload)
        return id

    def pop(self, id: RequestId) -> tuple[str, T] | None:
        """Take the call a response with ``id`` answers; ``None`` if none is outstanding.

        Only an ``int`` matches: ``"1"``, ``1.0`` and ``True`` never match id ``1``.
        """
        if type(id) is not int:
            return None
        return self._calls.pop(id, None)

    def drain(self) -> list[tuple[int, str, T]]:
        """Take every outstanding call, oldest first (for shutdown)."""
        calls = [(id, method, payload) for id, (method, payload) in self._calls.items()]
        self._calls.clear()
        return calls

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, id: object) -> bool:
        return type(id) is int and id in self._calls

    def __repr__(self) -> str:
        return f"<PendingCalls outstanding={len(self._calls)} next_id={self._next_id}>"
