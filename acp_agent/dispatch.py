"""What a connection serves: the method table, each inbound request's context, and the
native dispatcher that turns a request into its handler's call.

This module owns how a method name finds its handler (requests, notifications sent as
requests, the fallbacks) and what a handler learns about its request (id, cancel
scope, follow-ups after the answer). It does not read, write or answer: that is
:class:`~acp_agent.connection.AgentSession`'s. :class:`RequestContext` belongs to one
JSON-RPC request, not to an ACP session (a ``sessionId``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from .errors import METHOD_NOT_FOUND, RequestError
from .jsonrpc import RequestId

__all__ = [
    "Dispatcher",
    "MethodTable",
    "NativeDispatcher",
    "NotificationFn",
    "RequestContext",
    "RequestFn",
]


class RequestContext:
    """Per inbound request: its id, its cancel scope, what to do after the answer."""

    __slots__ = ("_scope", "after_response", "cancelled", "id", "method", "started")

    def __init__(self, request_id: RequestId, method: str) -> None:
        self.id = request_id
        self.method = method
        self.started = 0.0  # when it was read (set only while tracing)
        self._scope: anyio.CancelScope | None = None  # made when first needed
        self.cancelled = False
        self.after_response: list[Callable[[], Awaitable[None]]] = []

    @property
    def scope(self) -> anyio.CancelScope:
        """The scope the handler runs in (already cancelled if the request was)."""
        if self._scope is None:
            self._scope = anyio.CancelScope()
            if self.cancelled:
                self._scope.cancel()
        return self._scope

    def cancel(self) -> None:
        """Cancel this request (``$/cancel_request`` or shutdown)."""
        self.cancelled = True
        if self._scope is not None:
            self._scope.cancel()


RequestFn = Callable[[Any, RequestContext], Awaitable[Any]]
NotificationFn = Callable[[Any], Awaitable[None]]


@dataclass
class MethodTable:
    """The methods a connection serves. ``fallback_*`` take the method name first.

    Order: every handler runs in a task of its own, started in arrival order; its
    code up to its first ``await`` runs before the next message is read (see
    :mod:`acp_agent.connection`), so a ``session/cancel`` applies exactly to the
    prompts read before it.
    """

    requests: dict[str, RequestFn] = field(default_factory=dict)
    notifications: dict[str, NotificationFn] = field(default_factory=dict)
    fallback_request: Callable[[str, Any, RequestContext], Awaitable[Any]] | None = None
    fallback_notification: Callable[[str, Any], Awaitable[None]] | None = None


class Dispatcher(Protocol):
    """Turns one inbound request into its result (or raises a RequestError)."""

    def dispatch(self, method: str, params: Any, ctx: RequestContext) -> Awaitable[Any]: ...


class NativeDispatcher:
    """A dictionary lookup and a call: the default (see README for the measurements)."""

    __slots__ = ("_table",)

    def __init__(self, table: MethodTable) -> None:
        self._table = table

    def dispatch(self, method: str, params: Any, ctx: RequestContext) -> Awaitable[Any]:
        # The handler's own awaitable when there is one: no coroutine of ours around it.
        fn = self._table.requests.get(method)
        if fn is not None:
            return fn(params, ctx)
        return self._other(method, params, ctx)

    async def _other(self, method: str, params: Any, ctx: RequestContext) -> Any:
        note = self._table.notifications.get(method)
        if note is not None:
            # A notification method sent as a request (some clients send session/cancel
            # with an id): do it, and answer so the client is not left waiting.
            await note(params)
            return None
        if self._table.fallback_request is not None:
            return await self._table.fallback_request(method, params, ctx)
        raise RequestError(f"Method not found: {method[:100]}", code=METHOD_NOT_FOUND)
