"""The client end of an ACP connection, and the agent subprocess it talks to.

:class:`ClientConnection` is a thin async shell around the sans-IO
:class:`~acp_agent.jsonrpc.Peer` that the agent uses too (ids, correlation,
``$/cancel_request`` both ways, the exception -> error answer boundary) and any
:class:`~acp_agent.transport.Transport`. Unlike the agent-side
:class:`~acp_agent.connection.AgentSession`, it handles notifications *inline*, in
the order they arrive, before the next frame is read: a client must render
``session/update`` chunks in order, and before the ``session/prompt`` response that
follows them. Requests from the agent (permission, fs, terminals) each run in a task
so they can wait on the person without stopping the stream.

:class:`AgentProcess` launches an agent command with anyio, in its own process
group (so the person's Ctrl-C reaches the client only), exposes its pipes as a
transport and keeps the tail of its stderr.

It knows nothing of ACP methods: the client's behaviour is passed in as a
:class:`ClientHandlers`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import anyio
import anyio.abc

from acp_agent.connection import Reply
from acp_agent.errors import REQUEST_CANCELLED, ConnectionClosed, OversizedLine
from acp_agent.jsonrpc import (
    CancelRequested,
    Event,
    Incoming,
    Invalid,
    Notification,
    Peer,
    Request,
    encode_notification,
)
from acp_agent.transport import Transport

log = logging.getLogger("acp_agent.chat")

#: lines that are not JSON-RPC, before any that is, after which the program is not an agent
MAX_INVALID_FRAMES = 5


class ClientHandlers(Protocol):
    """What the client does with what the agent sends."""

    def notification(self, method: str, params: Any) -> None:
        """A notification, in arrival order. Must not block."""

    async def request(self, method: str, params: Any) -> Any:
        """A request from the agent; return the result or raise ``RequestError``."""


class ClientConnection:
    """One JSON-RPC connection to an agent. Construct, then run :meth:`serve` in a task."""

    def __init__(self, transport: Transport, handlers: ClientHandlers) -> None:
        self._transport = transport
        self._handlers = handlers
        self._peer: Peer[Reply, anyio.CancelScope] = Peer(lambda _: anyio.CancelScope())
        self._closed = False
        self._valid_frames = 0
        self._invalid_frames = 0
        #: why the connection was ended from this side (None: the agent ended it)
        self.close_reason: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    async def serve(self) -> None:
        """Read until the agent closes its stdout; then fail every pending call."""
        try:
            async with anyio.create_task_group() as tg:
                await self._receive_loop(tg)
                tg.cancel_scope.cancel()
        finally:
            self._closed = True
            self._peer.close(self.close_reason or "the agent closed the connection")

    async def _receive_loop(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                data = await self._transport.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            for event in self._peer.receive_data(data):
                self._on_event(event, tg)
            if not self._valid_frames and self._invalid_frames >= MAX_INVALID_FRAMES:
                self.close_reason = (
                    f"wrote {self._invalid_frames} lines that are not JSON-RPC before any "
                    "that is: it is not an ACP agent"
                )
                return

    def _on_event(self, event: Event[anyio.CancelScope], tg: anyio.abc.TaskGroup) -> None:
        if isinstance(event, (Invalid, OversizedLine)):
            self._invalid_frames += 1
            if self._invalid_frames > MAX_INVALID_FRAMES and not self._valid_frames:
                return  # the verdict comes; the warnings would only bury it
        else:
            self._valid_frames += 1
        if isinstance(event, Notification):
            try:
                self._handlers.notification(event.method, event.params)
            except Exception:
                log.exception("handling %r failed", event.method)
        elif isinstance(event, Incoming):
            tg.start_soon(self._run_request, event.request, event.context)
        elif isinstance(event, CancelRequested):
            event.context.cancel()
        elif isinstance(event, Invalid):
            log.warning("the agent sent an invalid frame: %s", event.message)
        elif isinstance(event, OversizedLine):
            log.warning("dropped an oversized line from the agent: %s", event)

    async def _run_request(self, request: Request, scope: anyio.CancelScope) -> None:
        outcome: tuple[bool, Any] | None = None
        try:
            with scope:
                try:
                    outcome = (True, await self._handlers.request(request.method, request.params))
                except Exception as exc:
                    outcome = Peer.outcome_of(exc, request.method)
        finally:
            if outcome is None:
                outcome = (False, {"code": REQUEST_CANCELLED, "message": "Request cancelled"})
            with anyio.CancelScope(shield=True):
                await self._send(self._peer.send_answer(request.id, outcome))

    async def _send(self, frame: bytes) -> None:
        try:
            await self._transport.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionClosed("the agent closed its input (it has exited)") from exc

    async def call(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; an error answer raises ``RequestError``."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the agent is gone")
        waiter = Reply()
        request_id, frame = self._peer.send_request(method, params, waiter)
        await self._send(frame)
        try:
            await waiter.settled.wait()
        except BaseException:
            cancel = self._peer.send_cancel(request_id)
            if cancel is not None and not self._closed:
                with anyio.CancelScope(shield=True):
                    await self._send(cancel)
            raise
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    async def notify(self, method: str, params: Any = None) -> None:
        if self._closed:
            raise ConnectionClosed(f"cannot send {method!r}: the agent is gone")
        await self._send(encode_notification(method, params))


# ----------------------------------------------------------------------- the subprocess


class ProcessTransport:
    """A :class:`~acp_agent.transport.Transport` over a child's stdout and stdin."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout

    async def receive(self) -> bytes:
        return await self._stdout.receive()

    async def send(self, data: bytes) -> None:
        await self._stdin.send(data)

    async def aclose(self) -> None:
        await self._stdin.aclose()


class AgentProcess:
    """An agent command running as a child process, with the tail of its stderr."""

    def __init__(self, process: anyio.abc.Process, command: Sequence[str]) -> None:
        self.process = process
        self.command = list(command)
        self.transport = ProcessTransport(process)
        self.stderr_lines: deque[str] = deque(maxlen=2000)
        self._partial = b""

    @classmethod
    async def start(
        cls, command: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> AgentProcess:
        try:
            process = await anyio.open_process(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,  # the person's Ctrl-C is for the client alone
            )
        except OSError as exc:
            raise ConnectionClosed(f"cannot start {command[0]!r}: {exc}") from exc
        return cls(process, command)

    async def collect_stderr(self) -> None:
        """Keep the agent's stderr lines (run as a task until the pipe closes)."""
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            self.stderr_lines.extend(x.decode("utf-8", "replace") for x in lines)
        if self._partial:
            self.stderr_lines.append(self._partial.decode("utf-8", "replace"))

    async def exit_code(self, wait: float = 1.0) -> int | None:
        """The agent's exit code, waiting up to ``wait`` seconds; None if it still runs."""
        with anyio.move_on_after(wait):
            await self.process.wait()
        return self.process.returncode

    async def stop(self, grace: float = 3.0) -> int | None:
        """Close the agent's stdin, wait ``grace`` seconds for it to exit, then kill its
        process group (what it started in its group goes too)."""
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await self.transport.aclose()
            with anyio.move_on_after(grace):
                await self.process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        return self.process.returncode
