"""The MCP servers a client gives in ``session/new`` / ``session/load``, held open for an
adapted agent.

Owns :class:`SessionServers`: each server of ``session.mcp_servers`` is opened with the
framework's own MCP client (an *opener* the adapter gives: an async context manager that
yields the framework's server object, connected), once per session, and held open for the
session's life. Opening starts when the session is created or loaded (:meth:`start`),
while the client sets up; the first prompt waits for it (:meth:`ready`). An MCP client
is a stack of async context managers with task groups inside, so the task that enters it
must leave it: each server gets a task of its own, in a task group that
:meth:`SessionServers.running` opens and the adapter holds open in its
:meth:`~acp_agent.agent.Agent.lifespan` (the connection's life). The task opens the
server, waits for its stop signal, and closes it.

Before every turn each held server is pinged (bounded); one that died, or whose task
ended, is opened again. A server that cannot be opened within the connect timeout fails
the turn with :class:`McpServerFailed`, which names it. ``close`` (on ``session/close``)
and the lifespan's end stop the servers: shielded, bounded, the stragglers cancelled.

What the servers are given (``env``, ``headers``) stays in memory: nothing here writes.
It does not know any framework, nor what the framework does with the server objects.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import anyio

from ..agent import Agent
from ..errors import InternalError
from ..session import Session

if TYPE_CHECKING:
    import anyio.abc

__all__ = [
    "McpServerFailed",
    "ServersAgent",
    "SessionServers",
    "answered",
    "server_env",
    "server_name",
]

log = logging.getLogger("acp_agent.adapters.mcp")

T = TypeVar("T")
Opener = Callable[[Mapping[str, Any], str], AbstractAsyncContextManager[T]]

#: the key of a session's held servers in ``session.state`` (a session with servers only)
STATE_KEY: Final = "adapters.mcp"
#: how long a held server may take to answer the ping before a turn
PING_BOUND: Final = 5.0
#: how long stopping servers may take before the stragglers are cancelled
CLOSE_BOUND: Final = 10.0
#: how long cancelled stragglers get to unwind
CANCEL_BOUND: Final = 5.0


class McpServerFailed(InternalError):
    """An MCP server of the session could not be started: the turn fails with its name."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(
            f"MCP server {name!r} could not be started: {reason}",
            data={"server": name, "reason": reason},
        )


def describe(exc: BaseException) -> str:
    """One line for a failure: the first leaf of an exception group, its type and text.
    (Not :func:`acp_agent.llm.mcp_host.describe`: importing the LLM agent's package
    would make every adapter's start-up slower.)"""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def server_name(spec: Mapping[str, Any], index: int) -> str:
    name = spec.get("name")
    return name if isinstance(name, str) and name else f"server{index}"


def server_env(items: Any) -> dict[str, str]:
    """ACP's ``[{"name": ..., "value": ...}]`` (``env``, ``headers``) as a dict."""
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            out[item["name"]] = str(item.get("value", ""))
    return out


async def answered(request: Awaitable[object]) -> None:
    """Await an MCP request (a ping): an error answer is an answer too (a server may not
    know ``ping``); a closed connection, a timeout or a transport failure raises."""
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    try:
        await request
    except MCPError as exc:
        if exc.error.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
            raise


@dataclass(eq=False)
class _Held(Generic[T]):
    """One server of one session, owned by one task (:meth:`SessionServers._hold`)."""

    spec: Mapping[str, Any]
    name: str
    #: the framework's server object while it is open
    value: T | None = None
    error: str | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    #: the owner task's scope: a connect deadline, then cancelled only to force a stop
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


@dataclass(eq=False)
class _Group:
    """One open :meth:`SessionServers.running`: its task group and the servers it holds."""

    tg: anyio.abc.TaskGroup
    held: set[_Held[Any]] = field(default_factory=set)


class SessionServers(Generic[T]):
    """The held MCP servers of every session of one agent (see the module docstring).

    ``opener(spec, cwd)`` opens one server of ACP's ``McpServer`` shape; ``ping(value)``
    raises if an open server no longer answers.
    """

    def __init__(
        self,
        opener: Opener[T],
        ping: Callable[[T], Awaitable[object]],
        *,
        connect_timeout: float = 30.0,
    ) -> None:
        self._opener = opener
        self._ping = ping
        self.connect_timeout = connect_timeout
        self._groups: list[_Group] = []  # every running block, in the order they began
        self._current: contextvars.ContextVar[_Group | None] = contextvars.ContextVar(
            f"acp_agent_adapters_mcp_{id(self):x}", default=None
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Own the server tasks for the block (the connection); stop them all at its end."""
        async with anyio.create_task_group() as tg:
            group = _Group(tg)
            token = self._current.set(group)
            self._groups.append(group)
            try:
                yield
            finally:
                self._groups.remove(group)
                with contextlib.suppress(ValueError):  # left in another context
                    self._current.reset(token)
                await _stop(list(group.held))
                tg.cancel_scope.cancel()

    def _group(self) -> _Group | None:
        """The running block of this context; else the only one (a request served by a
        task started outside it, as under ``--agent``, which loads the agent later)."""
        group = self._current.get()
        if group is None and len(self._groups) == 1:
            return self._groups[0]
        return group

    def start(self, session: Session) -> None:
        """Start opening the session's servers (``session/new``, ``session/load``);
        returns at once. Without the lifespan, :meth:`ready` reports it."""
        group = self._group()
        if session.mcp_servers and group is not None:
            self._held(session, group)

    async def ready(self, session: Session) -> list[T]:
        """The session's servers, open (those that died started again); waits for
        those still opening. Raises :class:`McpServerFailed` for one that cannot start."""
        if not session.mcp_servers:
            return []
        group = self._group()
        if group is None:
            raise InternalError("MCP servers need the agent's lifespan (serve it with AcpServer)")
        held = self._held(session, group)
        for i, one in enumerate(held):
            if one.ready.is_set() and not await self._alive(one):
                await _stop([one])
                held[i] = one = _Held(one.spec, one.name)
                self._start(group, one, session.cwd)
        for one in held:
            await one.ready.wait()
        for i, one in enumerate(held):
            if one.value is None:
                held[i] = _Held(one.spec, one.name)  # tried again at the next turn
                raise McpServerFailed(one.name, one.error or "it stopped")
        return [one.value for one in held if one.value is not None]

    async def close(self, session: Session) -> None:
        """Stop the session's servers (``session/close``): shielded, bounded."""
        held: list[_Held[T]] | None = session.state.pop(STATE_KEY, None)
        if held:
            await _stop(held)

    def _held(self, session: Session, group: _Group) -> list[_Held[T]]:
        """The session's servers, their tasks started the first time."""
        held: list[_Held[T]] | None = session.state.get(STATE_KEY)
        if held is None:
            held = [_Held(spec, server_name(spec, i)) for i, spec in enumerate(session.mcp_servers)]
            session.state[STATE_KEY] = held
            for one in held:
                self._start(group, one, session.cwd)
        return held

    def _start(self, group: _Group, one: _Held[T], cwd: str) -> None:
        group.held.add(one)
        group.tg.start_soon(self._hold, group, one, cwd, name=f"mcp:{one.name}")

    async def _alive(self, one: _Held[T]) -> bool:
        if one.value is None or one.done.is_set():
            return False
        with anyio.move_on_after(PING_BOUND):
            try:
                await self._ping(one.value)
            except Exception as exc:
                log.warning("MCP server %r stopped answering: %s", one.name, describe(exc))
                return False
            return True
        return False

    async def _hold(self, group: _Group, one: _Held[T], cwd: str) -> None:
        """The owner task: open, wait for ``stop``, close. Raises nothing but
        cancellation (a failure must not end the lifespan's task group)."""
        timeout = self.connect_timeout
        try:
            with one.scope:
                one.scope.deadline = anyio.current_time() + timeout
                async with self._opener(one.spec, cwd) as value:
                    one.value = value
                    one.scope.deadline = math.inf
                    one.ready.set()
                    await one.stop.wait()
            if one.scope.cancelled_caught and not one.ready.is_set():
                one.error = (
                    "the session closed before it started"
                    if one.stop.is_set()
                    else f"it did not start within {timeout:g} s"
                )
        except Exception as exc:
            if not one.ready.is_set():
                one.error = describe(exc)
            log.warning("MCP server %r: %s", one.name, describe(exc))
        finally:
            one.value = None
            one.ready.set()
            one.done.set()
            group.held.discard(one)


async def _stop(held: list[_Held[Any]]) -> None:
    """Ask each owner task to close its server; cancel those still connecting or too slow."""
    with anyio.CancelScope(shield=True):
        for one in held:
            one.stop.set()
            if not one.ready.is_set():
                one.scope.cancel()  # still connecting: nothing to close gracefully
        with anyio.move_on_after(CLOSE_BOUND):
            for one in held:
                await one.done.wait()
        late = [one for one in held if not one.done.is_set()]
        for one in late:
            log.warning("MCP server %r did not stop in %g s; cancelling it", one.name, CLOSE_BOUND)
            one.scope.cancel()
        with anyio.move_on_after(CANCEL_BOUND):
            for one in late:
                await one.done.wait()


class ServersAgent(Agent):
    """An adapter's base: the sessions' MCP servers held by ``self.mcp`` for the
    connection (its lifespan), opened at ``session/new`` and ``load``, closed with the
    session. The adapter sets ``mcp`` and asks :meth:`SessionServers.ready` each turn."""

    mcp: SessionServers[Any]

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with super().lifespan(), self.mcp.running():
            yield

    async def new_session(self, session: Session) -> None:
        self.mcp.start(session)

    async def load_session(self, session: Session) -> None:
        self.mcp.start(session)

    async def close_session(self, session: Session) -> None:
        await self.mcp.close(session)
