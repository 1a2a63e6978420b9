"""``AgentSession``: one JSON-RPC connection, where the sans-IO core meets I/O.

The trip of one message::

    transport.receive() -> bytes          one loop, reading one chunk at a time
      Peer.receive_data(bytes) -> events  framing, decoding, answers to our calls
      await tg.start(handler task)        one task per inbound request or notification
        table[method](params, ctx)        the layer above's handler
        self._frames.put(answer)          one bounded queue of frames
      writer task -> transport.send()     the one place bytes are written

One ``AgentSession`` serves one transport (one stdio pipe pair). It is *not* an ACP
session (a ``sessionId``): those live in :mod:`acp_agent.session` and are routed by
:mod:`acp_agent.server`.

This module owns:

* the receive loop, which never waits on a handler: every inbound request and
  notification runs in a task of its own in the connection's task group, so
  ``session/cancel`` and the client's answers are read while a ``session/prompt`` waits;
* the ordering guarantee: each task is started with ``await task_group.start(...)``,
  so a handler's code up to its first ``await`` (its first checkpoint) runs before the
  next inbound message is looked at. Cooperative scheduling gives this on asyncio and
  trio alike. Whatever a handler must do in arrival order (take its place in a
  session's line, claim the prompt slot, apply ``session/cancel`` to the prompts read
  before it) it does before its first ``await``;
* waiting for the client's answers to our requests (:class:`Reply`, an anyio event),
  with optional time limits; ids, correlation and ``$/cancel_request`` both ways are
  the sans-IO :class:`~acp_agent.jsonrpc.Peer`'s;
* answering every inbound request exactly once (:meth:`AgentSession._run_request`):
  cancelling a request (``$/cancel_request``, shutdown) cancels its cancel scope; if
  the handler catches that and returns a value, that value is the answer (a prompt
  answers ``stopReason: "cancelled"``), else the answer is ``-32800``;
* the one write path: frames go into a bounded queue (a deque) in the order they are
  sent and one writer task hands them to the transport, joining what is waiting into
  one write. A sender waits while the stream is full (back-pressure); a cancelled
  sender never leaves half a frame on the wire;
* shutdown: on EOF pending outbound calls fail with
  :class:`~acp_agent.errors.ConnectionClosed`, in-flight handlers get a grace, are then
  cancelled and answer, and the last frames are written within a bound.

The method table and its dispatch are :mod:`acp_agent.dispatch`'s. This module knows
nothing of ACP methods beyond ``$/cancel_request``.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel

from .dispatch import Dispatcher, MethodTable, NativeDispatcher, RequestContext
from .errors import LINE_TOO_LONG, REQUEST_CANCELLED, CallTimeout, ConnectionClosed, OversizedLine
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
    sniff_id,
)
from .jsonrpc.trace import Trace
from .transport import Transport

__all__ = [
    "AgentSession",
    "Dispatcher",
    "MethodTable",
    "NativeDispatcher",
    "Reply",
    "RequestContext",
]

log = logging.getLogger("acp_agent.connection")

FINISH_GRACE: Final = 0.2  # seconds in-flight handlers get to finish after EOF
SHUTDOWN_GRACE: Final = 0.5  # seconds cancelled handlers get to answer on shutdown
FLUSH_GRACE: Final = 1.0  # seconds the last writes may take
WRITE_BUFFER: Final = 64  # frames waiting for the writer before senders wait
JOIN_LIMIT: Final = 1 << 20  # waiting frames are joined into one write up to this size

_CANCELLED: Final = (False, {"code": REQUEST_CANCELLED, "message": "Request cancelled"})


class Reply:
    """Where the caller of one outbound request waits; the Peer settles it."""

    __slots__ = ("error", "result", "settled")

    def __init__(self) -> None:
        self.settled = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        self.result = result
        self.error = error
        self.settled.set()


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
        self._peer: Peer[Reply, RequestContext] = Peer(
            lambda req: RequestContext(req.id, req.method), max_line=max_line
        )
        self._frames = _Frames(WRITE_BUFFER)
        self._written = anyio.Event()  # set when the writer has ended
        self._closed = False
        self._unanswered = 0  # request tasks whose answer is not yet queued
        self._idle: anyio.Event | None = None  # set when _unanswered drops to 0
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
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write_all, name="acp-writer")
            try:
                with self._reading:
                    await self._receive_loop(tg)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                tg.cancel_scope.cancel()

    def stop_reading(self) -> None:
        """End input as EOF does (SIGTERM): in-flight requests get the same grace and
        the same answers, then :meth:`serve` returns."""
        self._reading.cancel()

    async def _receive_loop(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                data = await self._transport.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                events = self._peer.receive_eof()
                await self._on_events(events, tg)
                return
            events = self._peer.receive_data(data)
            del data  # a 50 MiB chunk is not kept alive while its handler runs
            await self._on_events(events, tg)

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
                if self._trace is not None:
                    self._trace.notification(event.method, event.params)
                await self._start(tg, self._run_notification, event)
            elif isinstance(event, CancelRequested):
                if not event.context.cancelled:
                    event.context.cancel()
            elif isinstance(event, OversizedLine):
                log.error("discarded an input line: %s", event)
                # Answered with the request's own id when its head shows one, so the
                # client is not left waiting; else with id null.
                limit = f"Message exceeds the {self._max_line}-byte line limit"
                await self._write_shielded(encode_error(sniff_id(event.head), LINE_TOO_LONG, limit))
            else:
                if self._trace is not None:
                    self._trace.invalid(event.id, event.code, event.message, event.answerable)
                if event.answerable:
                    await self._write_shielded(encode_error(event.id, event.code, event.message))
                else:
                    log.warning("ignored an invalid notification: %s", event.message)

    @staticmethod
    async def _start(tg: anyio.abc.TaskGroup, fn: Callable[..., Any], *args: Any) -> None:
        """Start ``fn(*args)`` and let it run to its first ``await`` before the next
        message is looked at: that is how arrival order is kept.

        Shielded: a task cancelled before its first step would never run (nor answer).
        """
        with anyio.CancelScope(shield=True):
            await tg.start(fn, *args)

    # ------------------------------------------------------------------ inbound

    async def _run_request(
        self,
        req: Request,
        ctx: RequestContext,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        outcome: tuple[bool, Any] | None = None
        self._unanswered += 1
        try:
            # A handler that catches its scope's cancel and returns answers with that
            # (a prompt turn answers ``cancelled``).
            with ctx.scope:
                task_status.started()
                outcome = await self._outcome(req, ctx)
        finally:
            # outcome is None when the scope or the connection cancelled the handler
            frame = self._peer.send_answer(req.id, outcome or _CANCELLED)
            await self._write_shielded(frame)
            self._unanswered -= 1
            if not self._unanswered and self._idle is not None:
                self._idle.set()
            if self._trace is not None:
                self._trace.answered(
                    req.method, req.id, req.params, ctx.started, outcome or _CANCELLED
                )
        for callback in ctx.after_response:
            try:
                await callback()
            except ConnectionClosed:
                return  # the client went away after its answer: a normal end
            except Exception:
                log.exception("follow-up of %r failed", req.method)
                return

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
        """Send a notification. Waits while the writer is behind (back-pressure)."""
        await self._write(method, encode_notification(method, params))

    async def notify_json(self, method: str, params_json: bytes) -> None:
        """:meth:`notify` with params already encoded as JSON (spliced in as they are)."""
        await self._write(method, encode_notification_json(method, params_json))

    async def call(self, method: str, params: Any, *, timeout: float | None = None) -> Any:
        """Send a request and wait for its response (no time limit unless given).

        Cancelling the caller sends ``$/cancel_request`` for it and drops any late
        reply. Raises :class:`RequestError` for an error response,
        :class:`CallTimeout` past ``timeout``, :class:`ConnectionClosed` if the
        connection ends first.
        """
        reply = Reply()
        request_id, frame = self._peer.send_request(method, params, reply)
        trace = self._trace
        started = trace.now() if trace is not None else 0.0
        try:
            await self._write(method, frame)
            if timeout is None:
                await reply.settled.wait()
            else:
                with anyio.move_on_after(timeout):
                    await reply.settled.wait()
                if not reply.settled.is_set():
                    raise CallTimeout(method, timeout)
        except BaseException as exc:
            if not reply.settled.is_set():
                await self._abandon(request_id)
            if trace is not None:
                trace.called(method, request_id, params, started, type(exc).__name__)
            raise
        if trace is not None:
            error = reply.error
            outcome = "ok" if error is None else f"error {getattr(error, 'code', error)}"
            trace.called(method, request_id, params, started, outcome)
        if reply.error is not None:
            raise reply.error
        return reply.result

    async def _abandon(self, request_id: int) -> None:
        frame = self._peer.send_cancel(request_id)
        if frame is not None and not self._closed:
            await self._write_shielded(frame)

    async def _write(self, method: str, frame: bytes) -> None:
        """Queue ``frame`` for the writer; ConnectionClosed once the connection ends."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        try:
            await self._queue(frame)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed") from None

    async def _write_shielded(self, frame: bytes) -> None:
        """Queue an answer; dropped only once writing has ended."""
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._queue(frame)

    async def _queue(self, frame: bytes) -> None:
        """Put ``frame`` behind every frame queued before it. Waits only while the
        stream is full, and then shielded: a frame asked for is written (or the
        connection is gone), never lost to a cancellation, so a session's history
        holds what the client saw; a cancellation is raised once it is queued."""
        if self._frames.put_nowait(frame):
            return
        with anyio.CancelScope(shield=True):
            await self._frames.put(frame)
        await anyio.lowlevel.checkpoint_if_cancelled()

    async def _write_all(self) -> None:
        """The writer: frames in order, what waits joined into one write (up to
        ``JOIN_LIMIT``). Once the client stops reading, the rest is dropped."""
        failed = False
        try:
            while (batch := await self._frames.take(JOIN_LIMIT)) is not None:
                if failed:
                    continue
                try:
                    await self._transport.send(batch)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                    # The client vanished. Handlers unwind as usual; output is dropped.
                    log.warning("the client stopped reading (%s); output is dropped", exc)
                    failed = True
        finally:
            self._frames.close()  # senders waiting for room give up
            self._written.set()

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        self._closed = True
        # Every waiter wakes: pending outbound calls fail with a named error.
        self._peer.close("the connection closed")
        # In-flight handlers get a moment to finish what the client asked before it
        # closed its end (a piped "initialize, session/new"), then are cancelled and
        # get a moment more to answer.
        for grace, cancel in ((FINISH_GRACE, False), (SHUTDOWN_GRACE, True)):
            if not self._unanswered:
                break
            if cancel:
                for ctx in self._peer.inflight:
                    ctx.cancel()
            self._idle = anyio.Event()
            with anyio.move_on_after(grace):
                await self._idle.wait()
        self._frames.close()  # the writer ends once it has written what is queued
        with anyio.move_on_after(FLUSH_GRACE):
            await self._written.wait()


class _Frames:
    """The writer's queue: frames in order, at most ``limit`` waiting; one taker.

    A deque and two events: cheaper per frame than a memory object stream, whose
    ``receive`` yields once more and raises ``WouldBlock`` on every empty check.
    """

    __slots__ = ("_closed", "_frames", "_limit", "_ready", "_room")

    def __init__(self, limit: int) -> None:
        self._frames: deque[bytes] = deque()
        self._limit = limit
        self._ready: anyio.Event | None = None  # the taker waits for a frame
        self._room: anyio.Event | None = None  # putters wait for room
        self._closed = False

    def put_nowait(self, frame: bytes) -> bool:
        """Queue ``frame`` if there is room (False if not); ClosedResourceError once closed."""
        if self._closed:
            raise anyio.ClosedResourceError
        if len(self._frames) >= self._limit:
            return False
        self._frames.append(frame)
        if self._ready is not None:
            self._ready.set()
        return True

    async def put(self, frame: bytes) -> None:
        """Queue ``frame``, waiting for room."""
        while not self.put_nowait(frame):
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()

    async def take(self, limit: int) -> bytes | None:
        """What waits, joined up to ``limit`` bytes (at least one frame); None once
        closed and empty."""
        if not self._frames:
            while not self._frames:
                if self._closed:
                    return None
                ready = self._ready = anyio.Event()
                await ready.wait()
                self._ready = None
            # Woken by the first frame: the tasks ready now run first, so that what they
            # send meanwhile (a turn's answer after its update) leaves in the same write.
            await anyio.lowlevel.checkpoint()
        frames = self._frames
        batch = [frames.popleft()]
        size = len(batch[0])
        while frames and size + len(frames[0]) <= limit:
            size += len(frames[0])
            batch.append(frames.popleft())
        if self._room is not None:
            self._room.set()
            self._room = None
        return batch[0] if len(batch) == 1 else b"".join(batch)

    def close(self) -> None:
        """No more frames; the taker gets what is queued, then None."""
        self._closed = True
        for event in (self._ready, self._room):
            if event is not None:
                event.set()
