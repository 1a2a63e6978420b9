"""``AgentSession``: one JSON-RPC connection, where the sans-IO core meets I/O.

One ``AgentSession`` serves one transport (one stdio pipe pair). It is *not* an ACP
session (a ``sessionId``): those live in :mod:`acp_agent.session` and are routed by
:mod:`acp_agent.server`.

This module owns:

* the receive loop (framing and decoding through :mod:`acp_agent.jsonrpc`), which
  never waits on a handler: every inbound request runs in a pooled worker task and
  notifications in a task of their own, so ``session/cancel`` and the client's
  responses are read while a ``session/prompt`` waits. A transport that can push
  (``PushReceive``: stdio on asyncio) has its chunks decoded straight from the event
  loop's readiness callback, with no task switch;
* the single ordered outbox: an answer goes out at once when the transport takes it
  without waiting, together with everything queued before it; notifications are
  written on the loop's next pass (a plain callback on asyncio), coalesced; a writer
  task takes over whatever has to wait for a slow reader (back-pressure);
* correlation of the client's responses with our pending outbound requests, their
  optional time limits, and ``$/cancel_request`` in both directions;
* the one exception -> JSON-RPC error boundary (:meth:`AgentSession._answer`): every
  request is answered exactly once, a handler bug becomes ``-32603`` with the
  traceback on stderr only;
* shutdown: on EOF in-flight handlers are cancelled, pending outbound calls fail with
  :class:`~acp_agent.errors.ConnectionClosed`, the last frames are flushed within a
  bound.

It knows nothing of ACP methods beyond ``$/cancel_request``: the method table comes
from the layer above (:class:`MethodTable`).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from ._loop import Soon, running_asyncio_loop, soon
from .errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LINE_TOO_LONG,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    CallTimeout,
    ConnectionClosed,
    OversizedLine,
    RequestError,
)
from .jsonrpc import (
    MISSING,
    ErrorResponse,
    Invalid,
    LineBuffer,
    Notification,
    PendingCalls,
    Request,
    RequestId,
    Response,
    decode,
    encode_error,
    encode_notification,
    encode_notification_json,
    encode_request,
    encode_result,
    notification_json_parts,
    sniff_id,
)
from .jsonrpc.trace import Trace
from .transport import DirectSend, PushReceive, Transport

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("acp_agent.connection")

CANCEL_REQUEST: Final = "$/cancel_request"
JOIN_LIMIT: Final = 1 << 20  # frames are coalesced into one write up to this size
MAX_IDLE_WORKERS: Final = 8  # request worker tasks kept waiting for the next request
HIGH_WATER: Final = 1 << 16  # outbox bytes above which senders wait for the writer
YIELD_EVERY: Final = 64  # enqueues between forced checkpoints (lets the reader run)
FINISH_GRACE: Final = 0.2  # seconds in-flight handlers get to finish after EOF
SHUTDOWN_GRACE: Final = 0.5  # seconds cancelled handlers get to answer on shutdown
FLUSH_GRACE: Final = 1.0  # seconds the last writes may take


class RequestContext:
    """Per inbound request: its id, its cancel scope, what to do after the answer."""

    __slots__ = (
        "_scope",
        "after_response",
        "cancel_hook",
        "cancelled",
        "id",
        "method",
        "started",
        "state",
    )

    def __init__(self, request_id: RequestId, method: str) -> None:
        self.id = request_id
        self.method = method
        self.started = 0.0  # when it was read (set only while tracing)
        self._scope: anyio.CancelScope | None = None  # made when first needed
        self.cancelled = False
        #: set by a handler that answers a cancelled request itself (a prompt turn
        #: answers ``stopReason: "cancelled"`` rather than ``-32800``)
        self.cancel_hook: Callable[[], None] | None = None
        self.after_response: list[Callable[[], Awaitable[None]]] = []
        #: what a ``prepare`` hook hands to the request's handler
        self.state: dict[str, Any] = {}

    @property
    def scope(self) -> anyio.CancelScope:
        """The scope the handler runs in (already cancelled if the request was)."""
        if self._scope is None:
            self._scope = anyio.CancelScope()
            if self.cancelled and self.cancel_hook is None:
                self._scope.cancel()
        return self._scope

    def cancel(self) -> None:
        """Cancel this request (``$/cancel_request`` or shutdown)."""
        self.cancelled = True
        if self.cancel_hook is not None:
            self.cancel_hook()
        elif self._scope is not None:
            self._scope.cancel()


RequestFn = Callable[[Any, RequestContext], Awaitable[Any]]
NotificationFn = Callable[[Any], Awaitable[None]]


@dataclass
class MethodTable:
    """The methods a connection serves. ``fallback_*`` take the method name first.

    Order: inbound frames are seen in arrival order by the synchronous hooks —
    ``prepare`` (run for a request before its handler task starts) and ``inline``
    notification handlers — so that, say, a ``session/cancel`` applies exactly to
    the prompts that arrived before it. Async notification handlers run one at a
    time, in arrival order, in a task of their own.
    """

    requests: dict[str, RequestFn] = field(default_factory=dict)
    notifications: dict[str, NotificationFn] = field(default_factory=dict)
    inline: dict[str, Callable[[Any], None]] = field(default_factory=dict)
    prepare: dict[str, Callable[[Any, RequestContext], None]] = field(default_factory=dict)
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
        inline = self._table.inline.get(method)
        if inline is not None:
            inline(params)
            return None
        note = self._table.notifications.get(method)
        if note is not None:
            # A notification method sent as a request (some clients send session/cancel
            # with an id): do it, and answer so the client is not left waiting.
            await note(params)
            return None
        if self._table.fallback_request is not None:
            return await self._table.fallback_request(method, params, ctx)
        raise RequestError(f"Method not found: {method[:100]}", code=METHOD_NOT_FOUND)


class _Flag:
    """A one-shot event on a bare asyncio future: what ``anyio.Event`` does on asyncio,
    for a fraction of the cost (one is made per outbound call). Set, it stays set, even
    when a wait on it was cancelled first."""

    __slots__ = ("_fut", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._fut: asyncio.Future[None] = loop.create_future()
        self._set = False

    def set(self) -> None:
        self._set = True
        if not self._fut.done():
            self._fut.set_result(None)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if not self._set:
            if self._fut.cancelled():  # an earlier wait was cancelled
                self._fut = self._fut.get_loop().create_future()
            await self._fut


class _Waiter:
    __slots__ = ("error", "event", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.event: _Flag | anyio.Event = anyio.Event() if loop is None else _Flag(loop)
        self.result: Any = None
        self.error: BaseException | None = None


def _key(request_id: RequestId) -> tuple[type, RequestId]:
    # 1 and "1" are different ids; keep their JSON types apart.
    return (type(request_id), request_id)


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
        self._buffer = LineBuffer(max_line)
        self._max_line = max_line
        self._pending: PendingCalls[_Waiter] = PendingCalls()
        self._inflight: dict[tuple[type, RequestId], RequestContext] = {}
        self._outbox: list[bytes] = []
        self._outbox_size = 0
        self._wake = anyio.Event()
        self._drained: anyio.Event | None = None  # made by the first waiter for a drain
        self._since_yield = 0
        self._closed = False
        self._writer_failed = False
        self._writing = False  # the writer holds a batch it has not finished sending
        self._try_send = transport.try_send if isinstance(transport, DirectSend) else None
        self._soon: Soon | None = None  # loop.call_soon on asyncio (set by serve)
        self._loop: asyncio.AbstractEventLoop | None = None  # the asyncio loop, if any
        self._flush_scheduled = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._idle: anyio.Event | None = None  # set when the last in-flight request ends
        self._notes: deque[Notification] = deque()
        self._jobs: deque[tuple[Request, RequestContext]] = deque()
        self._idle_workers: deque[_Flag | anyio.Event] = deque()  # one per waiting worker
        self._received = 0
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
        return len(self._pending)

    @property
    def received_count(self) -> int:
        """Lines read so far (a measure of activity)."""
        return self._received

    @property
    def inflight_count(self) -> int:
        """Inbound requests not yet answered."""
        return len(self._inflight)

    # ------------------------------------------------------------------ serving

    async def serve(self) -> None:
        """Run until the peer closes the stream (EOF), then shut down cleanly."""
        self._loop = running_asyncio_loop()
        self._soon = soon() if self._try_send is not None else None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._writer, name="acp-writer")
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
        transport = self._transport
        if isinstance(transport, PushReceive):
            # Lines are handled straight from the transport's readiness callback:
            # everything below is synchronous, so it needs no task of its own.
            def consume(data: bytes) -> None:
                self._on_lines(self._buffer.feed(data), tg)

            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await transport.receive_each(consume)
            self._on_lines(self._buffer.close(), tg)
            return
        while True:
            try:
                data = await transport.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._on_lines(self._buffer.close(), tg)
                return
            self._on_lines(self._buffer.feed(data), tg)
            del data

    def _on_lines(self, lines: list[bytes | OversizedLine], tg: anyio.abc.TaskGroup) -> None:
        # Each line is dropped as soon as it is decoded: a 50 MiB prompt must not stay
        # alive as bytes while its turn runs.
        self._received += len(lines)
        lines.reverse()
        while lines:
            self._on_line(lines.pop(), tg)

    def _on_line(self, item: bytes | OversizedLine, tg: anyio.abc.TaskGroup) -> None:
        if isinstance(item, OversizedLine):
            log.error("discarded an input line: %s", item)
            # Answer the request with its own id when its head shows one, so the client
            # is not left waiting; else with id null.
            self._enqueue(
                encode_error(
                    sniff_id(item.head),
                    LINE_TOO_LONG,
                    f"Message exceeds the {self._max_line}-byte line limit",
                )
            )
            return
        for msg in decode(item):
            if isinstance(msg, Request):
                ctx = RequestContext(msg.id, msg.method)
                if self._trace is not None:
                    ctx.started = self._trace.now()
                    self._trace.request(msg.method, msg.id, msg.params)
                k = _key(msg.id)
                if k in self._inflight and msg.id is not None:
                    self._enqueue(
                        encode_error(msg.id, INVALID_REQUEST, "Request id is already in use")
                    )
                    continue
                self._inflight[k] = ctx
                prepare = self._table.prepare.get(msg.method)
                if prepare is not None:
                    try:
                        prepare(msg.params, ctx)
                    except Exception:  # the handler will meet the same input and answer
                        log.exception("prepare hook for %r failed", msg.method)
                self._dispatch_job(msg, ctx, tg)
            elif isinstance(msg, Notification):
                if self._trace is not None:
                    self._trace.notification(msg.method, msg.params)
                inline = self._table.inline.get(msg.method)
                if msg.method == CANCEL_REQUEST:
                    self._on_cancel_request(msg.params)
                elif inline is not None:
                    try:
                        inline(msg.params)
                    except Exception:
                        log.exception("notification handler for %r failed", msg.method)
                else:
                    self._notes.append(msg)
                    if len(self._notes) == 1:
                        tg.start_soon(self._drain_notifications)
            elif isinstance(msg, Response | ErrorResponse):
                self._on_response(msg)
            elif isinstance(msg, Invalid):
                if self._trace is not None:
                    self._trace.invalid(msg.id, msg.code, msg.message, msg.answerable)
                if msg.answerable:
                    self._enqueue(encode_error(msg.id, msg.code, msg.message))
                else:
                    log.warning("ignored an invalid notification: %s", msg.message)

    # ------------------------------------------------------------------ inbound

    def _dispatch_job(self, req: Request, ctx: RequestContext, tg: anyio.abc.TaskGroup) -> None:
        """Run the request in a worker task: an idle one, or a new one.

        Starting a task costs tens of microseconds; waking a waiting worker costs a
        few. Each queued job wakes its own worker (or starts one), so two requests read
        together never queue behind each other.
        """
        self._jobs.append((req, ctx))
        if self._idle_workers:
            self._idle_workers.popleft().set()
        else:
            tg.start_soon(self._worker, name="acp-request-worker")

    async def _worker(self) -> None:
        jobs = self._jobs
        while True:
            while jobs:
                req, ctx = jobs.popleft()
                await self._run_request(req, ctx)
            if len(self._idle_workers) >= MAX_IDLE_WORKERS:
                return
            wake = anyio.Event() if self._loop is None else _Flag(self._loop)
            self._idle_workers.append(wake)
            try:
                await wake.wait()
            except BaseException:
                if not wake.is_set():  # cancelled while idle (shutdown)
                    self._idle_workers.remove(wake)
                raise

    async def _run_request(self, req: Request, ctx: RequestContext) -> None:
        outcome: tuple[bool, Any] | None = None
        try:
            # A request with a cancel hook (a claimed prompt turn) is cancelled through
            # it and answers for itself: it needs no scope of its own.
            if ctx.cancel_hook is not None:
                outcome = await self._outcome(req, ctx)
            else:
                with ctx.scope:
                    outcome = await self._outcome(req, ctx)
            if outcome is None:  # the scope was cancelled: $/cancel_request or shutdown
                outcome = (False, {"code": REQUEST_CANCELLED, "message": "Request cancelled"})
        finally:
            self._inflight.pop(_key(req.id), None)
            if not self._inflight and self._idle is not None:
                self._idle.set()
            if outcome is None:  # cancelled from outside (connection shutting down)
                outcome = (False, {"code": REQUEST_CANCELLED, "message": "Request cancelled"})
            # With follow-ups (e.g. the commands after session/new) the answer waits
            # for them, so both reach the client in one write, before it acts on either.
            self._answer(req.id, outcome, urgent=not ctx.after_response)
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
                self._kick()

    async def _outcome(self, req: Request, ctx: RequestContext) -> tuple[bool, Any]:
        """The handler's result, or the error it raised as its wire form."""
        try:
            return (True, await self._dispatcher.dispatch(req.method, req.params, ctx))
        except RequestError as exc:
            return (False, exc.to_wire())
        except ConnectionClosed:  # the client went away: no one reads this answer
            return (False, {"code": INTERNAL_ERROR, "message": "The connection closed"})
        except Exception:
            log.exception("handler for %r failed", req.method)
            return (False, {"code": INTERNAL_ERROR, "message": "Internal error"})

    def _answer(
        self, request_id: RequestId, outcome: tuple[bool, Any], *, urgent: bool = True
    ) -> None:
        """The one place a request's answer is written."""
        ok, value = outcome
        try:
            if ok:
                frame = encode_result(request_id, value)
            else:
                frame = encode_error(
                    request_id, value["code"], value["message"], value.get("data", MISSING)
                )
        except TypeError as exc:  # a value JSON cannot carry (say, a 2**64 error code)
            log.error("the answer to request %r cannot be encoded: %s", request_id, exc)
            frame = encode_error(request_id, INTERNAL_ERROR, "Internal error")
        self._enqueue(frame, urgent=urgent)

    async def _drain_notifications(self) -> None:
        # One task at a time works through the queue, so handlers see arrival order.
        while self._notes:
            await self._run_notification(self._notes[0])
            self._notes.popleft()

    async def _run_notification(self, note: Notification) -> None:
        fn = self._table.notifications.get(note.method)
        try:
            if fn is not None:
                await fn(note.params)
            elif self._table.fallback_notification is not None:
                await self._table.fallback_notification(note.method, note.params)
        except Exception:
            # Notifications are never answered; a failing handler is our bug: log it.
            log.exception("notification handler for %r failed", note.method)

    def _on_cancel_request(self, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return
        ctx = self._inflight.get(_key(request_id))
        if ctx is not None and not ctx.cancelled:
            ctx.cancel()
        # Unknown or finished: ignored; the normal response stands.

    # ------------------------------------------------------------------ outbound

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification. Waits only when the client reads too slowly."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        self._enqueue(encode_notification(method, params))
        self._since_yield += 1
        if self._since_yield >= YIELD_EVERY or self._outbox_size > HIGH_WATER:
            await self._pace()

    async def notify_json(self, method: str, params_json: bytes) -> None:
        """:meth:`notify` with params already encoded as JSON (spliced in as they are)."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        if len(params_json) > JOIN_LIMIT:
            # A large frame is queued as three pieces, written one after the other,
            # rather than copied whole into one frame.
            head, tail = notification_json_parts(method)
            self._enqueue(head)
            self._enqueue(params_json)
            self._enqueue(tail)
        else:
            self._enqueue(encode_notification_json(method, params_json))
        self._since_yield += 1
        if self._since_yield >= YIELD_EVERY or self._outbox_size > HIGH_WATER:
            await self._pace()

    async def call(self, method: str, params: Any, *, timeout: float | None = None) -> Any:
        """Send a request and wait for its response (no time limit unless given).

        Cancelling the caller sends ``$/cancel_request`` for it and drops any late
        reply. Raises :class:`RequestError` for an error response,
        :class:`CallTimeout` past ``timeout``, :class:`ConnectionClosed` if the
        connection ends first.
        """
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the connection is closed")
        waiter = _Waiter(self._loop)
        request_id = self._pending.allocate(method, waiter)
        self._enqueue(encode_request(request_id, method, params), urgent=True)
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
        if self._pending.pop(request_id) is not None and not self._closed:
            self._enqueue(
                encode_notification(CANCEL_REQUEST, {"requestId": request_id}), urgent=True
            )

    def _on_response(self, msg: Response | ErrorResponse) -> None:
        request_id = msg.id
        if isinstance(request_id, bool) or not isinstance(request_id, int):
            log.warning("dropped a response with an id we never used: %r", request_id)
            return
        entry = self._pending.pop(request_id)
        if entry is None:
            log.debug("dropped a late or unknown response for id %r", request_id)
            return
        _, waiter = entry
        if isinstance(msg, Response):
            waiter.result = msg.result
        else:
            waiter.error = RequestError.from_wire(msg.error)
        waiter.event.set()

    # ------------------------------------------------------------------ the outbox

    def _enqueue(self, frame: bytes, *, urgent: bool = False) -> None:
        """Queue ``frame`` behind everything queued before it.

        An urgent frame (a response or a request: something the peer waits on) is
        written at once, with everything queued before it, when the transport can
        take it without waiting; notifications are left for the writer, which
        coalesces them into few writes.
        """
        self._outbox.append(frame)
        self._outbox_size += len(frame)
        if urgent:
            self._kick()
        elif self._soon is None:
            self._wake.set()
        elif not self._flush_scheduled:
            # Written on the loop's next pass by a plain callback, not a task: by then a
            # turn that is ending has usually written this with its response already.
            self._flush_scheduled = True
            self._soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._outbox:
            self._kick()

    def _kick(self) -> None:
        """Write the outbox now if the transport takes it without waiting; else wake
        the writer."""
        if (
            self._outbox
            and self._outbox_size <= JOIN_LIMIT
            and self._try_send is not None
            and not self._writing
            and not self._writer_failed
        ):
            frames = self._outbox
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            try:
                sent = self._try_send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                sent = 0  # the writer's send meets the same error and reports it
            if sent == len(data):
                self._outbox = []
                self._outbox_size = 0
                if self._drained is not None:
                    self._set_drained()
                return
            rest = data[sent:] if sent else data
            self._outbox = [rest]
            self._outbox_size = len(rest)
        self._wake.set()

    def _set_drained(self) -> None:
        """Wake whoever waits for the outbox to be written (see ``_wait_drained``)."""
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    async def _wait_drained(self) -> None:
        if self._drained is None:
            self._drained = anyio.Event()
        await self._drained.wait()

    async def _pace(self) -> None:
        """Called by the senders once the outbox is past ``HIGH_WATER`` or every
        ``YIELD_EVERY`` frames: in between, sending is a plain append."""
        self._since_yield = 0
        if self._outbox_size > HIGH_WATER and not self._writer_failed:
            await self._wait_drained()
            return
        # A real checkpoint every few frames lets the reader (a session/cancel) and
        # the writer run.
        await anyio.lowlevel.checkpoint()

    async def _writer(self) -> None:
        while True:
            if not self._outbox:
                self._set_drained()
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            await self._flush_once()

    async def _flush_once(self) -> None:
        frames = self._outbox
        size = self._outbox_size
        self._outbox = []
        self._outbox_size = 0
        if self._writer_failed:
            return
        self._writing = True
        try:
            if len(frames) == 1:
                await self._transport.send(frames[0])
            elif size <= JOIN_LIMIT:
                await self._transport.send(b"".join(frames))
            else:  # large frames are not copied into one joined buffer
                for frame in frames:
                    await self._transport.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            # The client vanished. Keep running so handlers can unwind; drop output.
            log.warning("the client stopped reading (%s); output is dropped", exc)
            self._writer_failed = True
            self._set_drained()
        finally:
            self._writing = False

    async def flush(self) -> None:
        """Wait until everything enqueued so far has been written (not just taken)."""
        while (self._outbox or self._writing) and not self._writer_failed:
            self._wake.set()
            await self._wait_drained()

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        self._closed = True
        # Every waiter wakes: pending outbound calls fail with a named error.
        for _, method, waiter in self._pending.drain():
            waiter.error = ConnectionClosed(f"the connection closed before {method!r} was answered")
            waiter.event.set()
        # In-flight handlers get a moment to finish what the client asked before it
        # closed its end (a piped "initialize, session/new"), then are cancelled and
        # get a moment more to answer.
        for grace, cancel in ((FINISH_GRACE, False), (SHUTDOWN_GRACE, True)):
            if not self._inflight:
                break
            if cancel:
                for ctx in list(self._inflight.values()):
                    ctx.cancel()
            self._idle = anyio.Event()
            with anyio.move_on_after(grace):
                await self._idle.wait()
        with anyio.move_on_after(FLUSH_GRACE):
            await self.flush()
