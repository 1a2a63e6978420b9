"""One end of a JSON-RPC connection as plain state: bytes in, events out.

:class:`Peer` is what the agent's ``AgentSession`` and the chat client share. It owns

* turning inbound bytes into events (framing and decoding through this package);
* the ids of our outbound requests and pairing each answer with its caller's waiter,
  which it settles (``Waiter.settle``) without knowing how that caller waits;
* the inbound requests being answered: a repeated id is refused, ``$/cancel_request``
  names the request to cancel;
* the bytes of every frame we send (``send_*``), and the one place where a handler's
  exception becomes an error answer (:meth:`Peer.outcome_of`).

It does no I/O and knows no event loop: the caller writes the bytes, runs the
handlers and decides what an event means to it (the agent answers an oversized line,
the chat client drops it). It knows nothing of ACP methods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, Generic, NamedTuple, Protocol, TypeVar

from acp_agent.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ConnectionClosed,
    OversizedLine,
    RequestError,
)

from .codec import MISSING, decode, encode_error, encode_notification, encode_request, encode_result
from .framing import DEFAULT_MAX_LINE, LineBuffer
from .messages import ErrorResponse, Invalid, Notification, Request, RequestId, Response
from .pending import PendingCalls

__all__ = ["CANCEL_REQUEST", "CancelRequested", "Incoming", "Outcome", "Peer", "Waiter"]

log = logging.getLogger("acp_agent.jsonrpc")

CANCEL_REQUEST: Final = "$/cancel_request"

#: ``(True, result)`` or ``(False, error object)``: what a request is answered with
Outcome = tuple[bool, Any]


class Waiter(Protocol):
    """What a caller of :meth:`Peer.send_request` leaves to be woken with the answer."""

    def settle(self, result: Any, error: BaseException | None) -> None: ...


W = TypeVar("W", bound=Waiter)
C = TypeVar("C")


class Incoming(NamedTuple, Generic[C]):
    """A new inbound request, with the context the peer made for it."""

    request: Request
    context: C


class CancelRequested(NamedTuple, Generic[C]):
    """The other side asked to cancel the inbound request with this context."""

    context: C


Event = Incoming[C] | CancelRequested[C] | Notification | Invalid | OversizedLine


def _key(request_id: RequestId) -> tuple[type, RequestId]:
    # 1 and "1" are different ids; keep their JSON types apart.
    return (type(request_id), request_id)


class Peer(Generic[W, C]):
    """The JSON-RPC state of one connection. ``new_context`` makes the per-request
    object the caller keeps for an inbound request (a cancel scope, a context)."""

    __slots__ = ("_buffer", "_inflight", "_new_context", "_pending", "received")

    def __init__(
        self, new_context: Callable[[Request], C], *, max_line: int = DEFAULT_MAX_LINE
    ) -> None:
        self._new_context = new_context
        self._buffer = LineBuffer(max_line)
        self._pending: PendingCalls[W] = PendingCalls()
        self._inflight: dict[tuple[type, RequestId], C] = {}
        self.received = 0  # lines read so far

    @property
    def pending_count(self) -> int:
        """Outbound requests still waiting for an answer."""
        return len(self._pending)

    @property
    def inflight(self) -> list[C]:
        """The contexts of the inbound requests not yet answered."""
        return list(self._inflight.values())

    @property
    def inflight_count(self) -> int:
        return len(self._inflight)

    # ------------------------------------------------------------------ inbound

    def receive_data(self, data: bytes) -> list[Event[C]]:
        """The events in ``data`` (lines split across calls are joined)."""
        return self._events(self._buffer.feed(data))

    def receive_eof(self) -> list[Event[C]]:
        """The events of an unterminated last line, at end of input."""
        return self._events(self._buffer.close())

    def _events(self, lines: list[bytes | OversizedLine]) -> list[Event[C]]:
        # Each line is dropped as soon as it is decoded: a 50 MiB prompt must not stay
        # alive as bytes while its turn runs.
        self.received += len(lines)
        events: list[Event[C]] = []
        lines.reverse()
        while lines:
            line = lines.pop()
            if isinstance(line, OversizedLine):
                events.append(line)
                continue
            for msg in decode(line):
                if isinstance(msg, Request):
                    k = _key(msg.id)
                    if k in self._inflight and msg.id is not None:
                        events.append(
                            Invalid(msg.id, INVALID_REQUEST, "Request id is already in use")
                        )
                        continue
                    context = self._new_context(msg)
                    self._inflight[k] = context
                    events.append(Incoming(msg, context))
                elif isinstance(msg, Notification):
                    if msg.method == CANCEL_REQUEST:
                        cancelled = self._cancelled(msg.params)
                        if cancelled is not None:
                            events.append(CancelRequested(cancelled))
                    else:
                        events.append(msg)
                elif isinstance(msg, Response | ErrorResponse):
                    self._settle(msg)
                else:
                    events.append(msg)
        return events

    def _cancelled(self, params: Any) -> C | None:
        # Unknown or finished: ignored; the normal answer stands.
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return None
        return self._inflight.get(_key(request_id))

    def _settle(self, msg: Response | ErrorResponse) -> None:
        entry = self._pending.pop(msg.id)
        if entry is None:
            log.debug("dropped a late or unknown response for id %r", msg.id)
        elif isinstance(msg, Response):
            entry[1].settle(msg.result, None)
        else:
            entry[1].settle(None, RequestError.from_wire(msg.error))

    # ------------------------------------------------------------------ outbound

    def send_request(self, method: str, params: Any, waiter: W) -> tuple[int, bytes]:
        """A new request's id and frame; ``waiter`` is settled with its answer."""
        request_id = self._pending.allocate(method, waiter)
        return request_id, encode_request(request_id, method, params)

    def send_cancel(self, request_id: int) -> bytes | None:
        """Give up on our request: the ``$/cancel_request`` frame, or None when it is
        no longer waiting (answered already)."""
        if self._pending.pop(request_id) is None:
            return None
        return encode_notification(CANCEL_REQUEST, {"requestId": request_id})

    def send_answer(self, request_id: RequestId, outcome: Outcome) -> bytes:
        """The answer to an inbound request; the request is no longer in flight."""
        self._inflight.pop(_key(request_id), None)
        ok, value = outcome
        try:
            if ok:
                return encode_result(request_id, value)
            return encode_error(
                request_id, value["code"], value["message"], value.get("data", MISSING)
            )
        except TypeError as exc:  # a value JSON cannot carry (say, a 2**64 error code)
            log.error("the answer to request %r cannot be encoded: %s", request_id, exc)
            return encode_error(request_id, INTERNAL_ERROR, "Internal error")

    @staticmethod
    def outcome_of(exc: Exception, method: str) -> Outcome:
        """The one place a handler's exception becomes an error answer."""
        if isinstance(exc, RequestError):
            return (False, exc.to_wire())
        if isinstance(exc, ConnectionClosed):  # no one reads this answer
            return (False, {"code": INTERNAL_ERROR, "message": "The connection closed"})
        log.error("handler for %r failed", method, exc_info=exc)
        return (False, {"code": INTERNAL_ERROR, "message": "Internal error"})

    def close(self, why: str) -> None:
        """Settle every waiting call with :class:`ConnectionClosed` (end of input)."""
        for _, method, waiter in self._pending.drain():
            waiter.settle(None, ConnectionClosed(f"{why} before {method!r} was answered"))
