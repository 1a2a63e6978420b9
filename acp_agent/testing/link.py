"""The test client's JSON-RPC connection: the shared sans-IO peer on any transport.

:class:`Link` reads frames with :class:`~acp_agent.jsonrpc.Peer` (the agent and the
chat client use it too), hands notifications to a callback *inline*, in arrival order
(so every ``session/update`` of a turn is seen before its ``session/prompt`` answer),
runs each request of the agent in a task of its own, and sends ours. Sending a
request and waiting for its answer are two steps (:meth:`Link.send_request`,
:meth:`Link.wait`), so a test can send a prompt, then a cancel, in that order.

It knows nothing of ACP methods: :mod:`acp_agent.testing.client` gives them meaning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from acp_agent.connection import Reply
from acp_agent.errors import REQUEST_CANCELLED, ConnectionClosed
from acp_agent.jsonrpc import (
    CancelRequested,
    Incoming,
    Invalid,
    Notification,
    Peer,
    Request,
    encode_notification,
)
from acp_agent.transport import Transport

log = logging.getLogger("acp_agent.testing")

#: what receiving raises once the agent's side is closed
GONE = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)

#: a notification from the agent: (method, params); must not block
OnNotification = Callable[[str, Any], None]
#: a request from the agent: (method, params) -> result, or raise ``RequestError``
OnRequest = Callable[[str, Any], Awaitable[Any]]


class Link:
    """One JSON-RPC connection to an agent. Run :meth:`serve` in a task."""

    def __init__(
        self, transport: Transport, on_notification: OnNotification, on_request: OnRequest
    ) -> None:
        self._transport = transport
        self._on_notification = on_notification
        self._on_request = on_request
        self._peer: Peer[Reply, anyio.CancelScope] = Peer(lambda _: anyio.CancelScope())
        self.closed = False

    async def serve(self) -> None:
        """Read until the agent closes its side; then fail every call still waiting."""
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    try:
                        data = await self._transport.receive()
                    except GONE:
                        break
                    for event in self._peer.receive_data(data):
                        self._dispatch(event, tg)
                tg.cancel_scope.cancel()
        finally:
            self.closed = True
            self._peer.close("the agent closed the connection")

    def _dispatch(self, event: object, tg: anyio.abc.TaskGroup) -> None:
        if isinstance(event, Notification):
            self._on_notification(event.method, event.params)
        elif isinstance(event, Incoming):
            tg.start_soon(self._answer, event.request, event.context)
        elif isinstance(event, CancelRequested):
            event.context.cancel()
        elif isinstance(event, Invalid):
            log.warning("the agent sent an invalid frame: %s", event.message)
        else:
            log.warning("the agent sent an oversized line: %s", event)

    async def _answer(self, request: Request, scope: anyio.CancelScope) -> None:
        outcome: tuple[bool, Any] = (
            False,
            {"code": REQUEST_CANCELLED, "message": "Request cancelled"},
        )
        with scope:
            try:
                outcome = (True, await self._on_request(request.method, request.params))
            except Exception as exc:
                outcome = Peer.outcome_of(exc, request.method)
        with anyio.CancelScope(shield=True):
            await self._send(self._peer.send_answer(request.id, outcome))

    async def _send(self, frame: bytes) -> None:
        try:
            await self._transport.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionClosed("the agent closed its input") from exc

    async def send_request(self, method: str, params: Any) -> Reply:
        """Send a request; return what :meth:`wait` waits on. The frame is on its way
        when this returns."""
        if self.closed:
            raise ConnectionClosed(f"cannot send {method!r}: the agent is gone")
        answer = Reply()
        _, frame = self._peer.send_request(method, params, answer)
        await self._send(frame)
        return answer

    @staticmethod
    async def wait(answer: Reply) -> Any:
        """The answer's result; an error answer raises its
        :class:`~acp_agent.errors.RequestError`."""
        await answer.settled.wait()
        if answer.error is not None:
            raise answer.error
        return answer.result

    async def call(self, method: str, params: Any) -> Any:
        """Send a request and wait for its result."""
        return await self.wait(await self.send_request(method, params))

    async def notify(self, method: str, params: Any) -> None:
        if self.closed:
            raise ConnectionClosed(f"cannot send {method!r}: the agent is gone")
        await self._send(encode_notification(method, params))
