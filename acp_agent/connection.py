"""``AgentSession``: one JSON-RPC connection, where the sans-IO core meets I/O.

One ``AgentSession`` serves one transport (one stdio pipe pair). It is *not* an ACP
session (a ``sessionId``): those live in :mod:`acp_agent.session` and are routed by
:mod:`acp_agent.server`.

This module owns:

* the receive loop (framing and decoding through :mod:`acp_agent.jsonrpc`), which
  never waits on a handler: every inbound request and notification runs in a task of
  its own, so ``session/cancel`` and the client's responses are read while a
  ``session/prompt`` waits;
* the ordering guarantee: each task is started with ``await task_group.start(...)``,
  so a handler's code up to its first ``await`` (its first checkpoint) runs before
  the next inbound message is read. Cooperative scheduling gives this on asyncio and
  trio alike. Whatever a handler must do in arrival order (take its place in a
  session's line, claim the prompt slot, apply ``session/cancel`` to the prompts read
  before it) it does before its first ``await``;
* waiting for the client's answers to our outbound requests, with optional time
  limits; ids, correlation, ``$/cancel_request`` both ways and the one exception ->
  JSON-RPC error boundary are the sans-IO :class:`~acp_agent.jsonrpc.Peer`'s, and
  every request is answered exactly once (:meth:`AgentSession._run_request`);
* cancelling a request (``$/cancel_request``, shutdown) cancels its cancel scope: if
  the handler catches that and returns a value, that value is the answer (a prompt
  answers ``stopReason: "cancelled"``), else the answer is ``-32800``;
* shutdown: on EOF in-flight handlers are cancelled, pending outbound calls fail with
  :class:`~acp_agent.errors.ConnectionClosed`, the last frames are flushed within a
  bound.

Writing is :class:`~acp_agent.outbox.Outbox`'s. The method table and its
dispatch are :mod:`acp_agent.dispatch`'s. It knows nothing of ACP methods beyond
``$/cancel_request``: the table comes from the layer above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import anyio.lowlevel

from ._loop import CallWaiter, running_asyncio_loop
from .dispatch import Dispatcher, MethodTable, NativeDispatcher, RequestContext
from .errors import (
    LINE_TOO_LONG,
    REQUEST_CANCELLED,
    CallTimeout,
    ConnectionClosed,
    OversizedLine,
)
from .jsonrpc import (
    CancelRequested,
    Event,
    Incoming,
    Notification,
    Peer,
    Request,
    encode_error,
    encode_notification,
    encode_notification_json,
    notification_json_parts,
    sniff_id,
)
from .jsonrpc.trace import Trace
from .outbox import JOIN_LIMIT, Outbox
from .transport import Transport

if TYPE_CHECKING:
    import asyncio

__all__ = ["AgentSession", "Dispatcher", "MethodTable", "NativeDispatcher", "RequestContext"]

log = logging.getLogger("acp_agent.connection")

FINISH_GRACE: Final = 0.2  # seconds in-flight handlers get to finish after EOF
SHUTDOWN_GRACE: Final = 0.5  # seconds cancelled handlers get to answer on shutdown
FLUSH_GRACE: Final = 1.0  # seconds the last writes may take


class AgentSession:
    """Serve one connection. Construct, then ``await serve()``; nothing starts before."""

    def __init__(
        self,
        transport: Transport,
        table: MethodTable,
        *,
        max_line: int = 64 * 1024 * 1024,
        dispatcher: Callable[[MethodTable], Dispatcher] = NativeDispatcher,
    ) -> None:
        self._transport = transport
        self._table = table
        self._dispatcher = dispatcher(table)
        self._max_line = max_line
        self._peer: Peer[CallWaiter, RequestContext] = Peer(
            lambda req: RequestContext(req.id, req.method), max_line=max_line
        )
        self._out = Outbox(transport)
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the asyncio loop, if any
        self._tg: anyio.abc.TaskGroup | None = None
        self._idle: anyio.Event | None = None  # set when the last in-flight request ends
        # lists, not deques: they stay short, and an empty deque costs 600 bytes
        #: debug lines for an operator (None unless acp_agent.rpc logs DEBUG)
        self._trace: Trace | None = Trace() if Trace.enabled() else None
        self._reading = anyio.CancelScope()  # cancelled by stop_reading

    # ------------------------------------------------------------------ state

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_count(self) -> int:
        """Outbound requests still waiting for a response."""
        return self._peer.pending_count

    @property
    def received_count(self) -> int:
        """Lines read so far (a measure of activity)."""
        return self._peer.received

    @property
    def inflight_count(self) -> int:
        """Inbound requests not yet answered."""
        return self._peer.inflight_count

    # ------------------------------------------------------------------ serving

    async def serve(self) -> None:
        """Run until the peer closes the stream (EOF), then shut down cleanly."""
        self._loop = running_asyncio_loop()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._out.start(tg)
            try:
                with self._reading:
                    await self._receive_loop(tg)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                tg.cancel_scope.cancel()
        self._tg = None

    def stop_reading(self) -> None:
        """End input as EOF does (SIGTERM): in-flight requests get the same grace and
        the same answers, then :meth:`serve` returns."""
        self._reading.cancel()

    async def _receive_loop(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                data = await self._transport.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._on_events(self._peer.receive_eof(), tg)
                return
            await self._on_events(self._peer.receive_data(data), tg)
            del data

    async def _on_events(
        self, events: list[Event[RequestContext]], tg: anyio.abc.TaskGroup
    ) -> None:
        for event in events:
            if isinstance(event, Incoming):
                req, ctx = event
                if self._trace is not None:
                    ctx.started = self._trace.now()
                    self._trace.request(req.method, req.id, req.params)
                await self._start(tg, self._run_request, req, ctx)
            elif isinstance(event, Notification):
                await self._on_notification(event, tg)
            elif isinstance(event, CancelRequested):
                if not event.context.cancelled:
                    event.context.cancel()
            elif isinstance(event, OversizedLine):
                log.error("discarded an input line: %s", event)
                # Answer the request with its own id when its head shows one, so the
                # client is not left waiting; else with id null.
                self._out.enqueue(
                    encode_error(
                        sniff_id(event.head),
                        LINE_TOO_LONG,
                        f"Message exceeds the {self._max_line}-byte line limit",
                    )
                )
            else:
                if self._trace is not None:
                    self._trace.invalid(event.id, event.code, event.message, event.answerable)
                if event.answerable:
                    self._out.enqueue(encode_error(event.id, event.code, event.message))
                else:
                    log.warning("ignored an invalid notification: %s", event.message)

    @staticmethod
    async def _start(tg: anyio.abc.TaskGroup, fn: Callable[..., Any], *args: Any) -> None:
        """Start ``fn(*args)`` as a task and let it run to its first ``await`` before
        the next message is looked at: that is how arrival order is kept.

        Shielded: a task cancelled before its first step would never run (nor answer).
        """
        with anyio.CancelScope(shield=True):
            await tg.start(fn, *args)

    async def _on_notification(self, note: Notification, tg: anyio.abc.TaskGroup) -> None:
        if self._trace is not None:
            self._trace.notification(note.method, note.params)
        await self._start(tg, self._run_notification, note)

    # ------------------------------------------------------------------ inbound

    async def _run_request(
        self,
        req: Request,
        ctx: RequestContext,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        outcome: tuple[bool, Any] | None = None
        try:
            # A handler that catches its scope's cancel and returns answers with that
            # (a prompt turn answers ``cancelled``).
            with ctx.scope:
                task_status.started()
                outcome = await self._outcome(req, ctx)
            if outcome is None:  # the scope was cancelled: $/cancel_request or shutdown
                outcome = (False, {"code": REQUEST_CANCELLED, "message": "Request cancelled"})
        finally:
            if outcome is None:  # cancelled from outside (connection shutting down)
                outcome = (False, {"code": REQUEST_CANCELLED, "message": "Request cancelled"})
            frame = self._peer.send_answer(req.id, outcome)
            if not self._peer.inflight_count and self._idle is not None:
                self._idle.set()
            # With follow-ups (e.g. the commands after session/new) the answer waits
            # for them, so both reach the client in one write, before it acts on either.
            self._out.enqueue(frame, urgent=not ctx.after_response)
            if self._trace is not None:
                self._trace.answered(req.method, req.id, req.params, ctx.started, outcome)
        if ctx.after_response:
            try:
                for callback in ctx.after_response:
                    await callback()
            except ConnectionClosed:
                pass  # the client went away after its answer: a normal end
            except Exception:
                log.exception("follow-up of %r failed", req.method)
            finally:
                self._out.kick()

    async def _outcome(self, req: Request, ctx: RequestContext) -> tuple[bool, Any]:
        """The handler's result, or the error it raised as its wire form."""
        try:
            return (True, await self._dispatcher.dispatch(req.method, req.params, ctx))
        except Exception as exc:
            return Peer.outcome_of(exc, req.method)

    async def _run_notification(
        self,
        note: Notification,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        fn = self._table.notifications.get(note.method)
        try:
            if fn is not None:
                await fn(note.params)
            elif self._table.fallback_notification is not None:
                await self._table.fallback_notification(note.method, note.params)
        except Exception:
            # Notifications are never answered; a failing handler is our bug: log it.
            log.exception("notification handler for %r failed", note.method)

    # ------------------------------------------------------------------ outbound

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification. Waits only when the client reads too slowly."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        self._out.enqueue(encode_notification(method, params))
        if self._out.due():
            await self._out.pace()

    async def notify_json(self, method: str, params_json: bytes) -> None:
        """:meth:`notify` with params already encoded as JSON (spliced in as they are)."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        if len(params_json) > JOIN_LIMIT:
            # A large frame is queued as three pieces, written one after the other,
            # rather than copied whole into one frame.
            head, tail = notification_json_parts(method)
            self._out.enqueue(head)
            self._out.enqueue(params_json)
            self._out.enqueue(tail)
        else:
            self._out.enqueue(encode_notification_json(method, params_json))
        if self._out.due():
            await self._out.pace()

    async def call(self, method: str, params: Any, *, timeout: float | None = None) -> Any:
        """Send a request and wait for its response (no time limit unless given).

        Cancelling the caller sends ``$/cancel_request`` for it and drops any late
        reply. Raises :class:`RequestError` for an error response,
        :class:`CallTimeout` past ``timeout``, :class:`ConnectionClosed` if the
        connection ends first.
        """
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        waiter = CallWaiter(self._loop)
        request_id, frame = self._peer.send_request(method, params, waiter)
        self._out.enqueue(frame, urgent=True)
        trace = self._trace
        started = trace.now() if trace is not None else 0.0
        try:
            if timeout is None:
                await waiter.event.wait()
            else:
                with anyio.move_on_after(timeout) as scope:
                    await waiter.event.wait()
                if scope.cancelled_caught and not waiter.event.is_set():
                    self._abandon(request_id)
                    raise CallTimeout(method, timeout)
        except BaseException as exc:
            if not waiter.event.is_set():
                self._abandon(request_id)
            if trace is not None:
                trace.called(method, request_id, params, started, type(exc).__name__)
            raise
        if trace is not None:
            error = waiter.error
            outcome = "ok" if error is None else f"error {getattr(error, 'code', error)}"
            trace.called(method, request_id, params, started, outcome)
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    def _abandon(self, request_id: int) -> None:
        frame = self._peer.send_cancel(request_id)
        if frame is not None and not self._closed:
            self._out.enqueue(frame, urgent=True)

    async def flush(self) -> None:
        """Wait until everything enqueued so far has been written (not just taken)."""
        await self._out.flush()

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        self._closed = True
        # Every waiter wakes: pending outbound calls fail with a named error.
        self._peer.close("the connection closed")
        # In-flight handlers get a moment to finish what the client asked before it
        # closed its end (a piped "initialize, session/new"), then are cancelled and
        # get a moment more to answer.
        for grace, cancel in ((FINISH_GRACE, False), (SHUTDOWN_GRACE, True)):
            if not self._peer.inflight_count:
                break
            if cancel:
                for ctx in self._peer.inflight:
                    ctx.cancel()
            self._idle = anyio.Event()
            with anyio.move_on_after(grace):
                await self._idle.wait()
        with anyio.move_on_after(FLUSH_GRACE):
            await self.flush()
