"""The MCP servers a client gives in ``session/new`` / ``session/load``, held open for an
adapted agent.

Owns :class:`SessionServers`: each server of ``session.mcp_servers`` is opened with the
framework's own MCP client (an *opener* the adapter gives: an async context manager that
yields the framework's server object, connected), once per session, and held open for the
session's life. Opening starts when the session is created or loaded (:meth:`start`),
while the client sets up; the first prompt waits for it (:meth:`ready`). Each server's
owner task, in the task group the adapter's :meth:`~acp_agent.agent.Agent.lifespan` holds
open, is :mod:`acp_agent.held_servers`'s (the lifecycle shared with the LLM agent).

Before every turn each held server is pinged (bounded); one that died, or whose task
ended, is opened again. A server that cannot be opened within the connect timeout fails
the turn with :class:`McpServerFailed`, which names it. ``close`` (on ``session/close``)
and the lifespan's end stop the servers: shielded, bounded, the stragglers cancelled.

What the servers are given (``env``, ``headers``) stays in memory: nothing here writes.
It does not know any framework, nor what the framework does with the server objects.
:class:`ServersAgent`, the base of the adapters that hold servers, also runs the repair of
:mod:`acp_agent.adapters.unfinished` at ``load``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TypeVar

import anyio

from ..agent import Agent
from ..errors import InternalError
from ..held_servers import Group, Held, HeldServers, describe, server_env, server_name
from ..session import Session
from .unfinished import UnfinishedTurn, remember_unfinished

__all__ = [
    "McpServerFailed",
    "ServersAgent",
    "SessionServers",
    "answered",
    "installed",
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


def installed(package: str) -> bool:
    """Whether an MCP client ``package`` is installed (nothing is imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # hidden or half-installed
        return False


class McpServerFailed(InternalError):
    """An MCP server of the session could not be started: the turn fails with its name."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(
            f"MCP server {name!r} could not be started: {reason}",
            data={"server": name, "reason": reason},
        )


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


class SessionServers(HeldServers[T]):
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
        super().__init__(connect_timeout, log)
        self._opener = opener
        self._ping = ping

    def start(self, session: Session) -> None:
        """Start opening the session's servers (``session/new``, ``session/load``);
        returns at once. Without the lifespan, :meth:`ready` reports it."""
        group = self.group()
        if session.mcp_servers and group is not None:
            self._held(session, group)

    async def ready(self, session: Session) -> list[T]:
        """The session's servers, open (those that died started again); waits for
        those still opening. Raises :class:`McpServerFailed` for one that cannot start."""
        if not session.mcp_servers:
            return []
        group = self.group()
        if group is None:
            raise InternalError("MCP servers need the agent's lifespan (serve it with AcpServer)")
        held = self._held(session, group)
        for i, one in enumerate(held):
            if one.ready.is_set() and not await self._alive(one):
                await self.stop([one])
                held[i] = one = Held(one.spec, one.name)
                self._open(group, one, session.cwd)
        for one in held:
            await one.ready.wait()
        for i, one in enumerate(held):
            if one.value is None:
                held[i] = Held(one.spec, one.name)  # tried again at the next turn
                raise McpServerFailed(one.name, one.error or "it stopped")
        return [one.value for one in held if one.value is not None]

    async def close(self, session: Session) -> None:
        """Stop the session's servers (``session/close``): shielded, bounded."""
        held: list[Held[T]] | None = session.state.pop(STATE_KEY, None)
        if held:
            await self.stop(held)

    def _held(self, session: Session, group: Group) -> list[Held[T]]:
        """The session's servers, their tasks started the first time."""
        held: list[Held[T]] | None = session.state.get(STATE_KEY)
        if held is None:
            held = [Held(spec, server_name(spec, i)) for i, spec in enumerate(session.mcp_servers)]
            session.state[STATE_KEY] = held
            for one in held:
                self._open(group, one, session.cwd)
        return held

    def _open(self, group: Group, one: Held[T], cwd: str) -> None:
        self.hold(group, one, functools.partial(self._opener, one.spec, cwd))

    async def _alive(self, one: Held[T]) -> bool:
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


class ServersAgent(Agent):
    """An adapter's base: the sessions' MCP servers held by ``self.mcp`` for the
    connection (its lifespan), opened at ``session/new`` and ``load``, closed with the
    session. The adapter sets ``mcp`` and asks :meth:`SessionServers.ready` each turn.

    At ``load`` it also tells the model the turns that ended with nothing saved: the
    adapter implements :meth:`unfinished_memory` (:mod:`acp_agent.adapters.unfinished`)."""

    mcp: SessionServers[Any]

    def unfinished_memory(self, turn: UnfinishedTurn, before: Sequence[Any]) -> Any:
        """The memory entry, in this adapter's saved format for one turn, that tells the
        model ``turn`` (``before``: the memory of the turns before it, oldest first)."""
        raise NotImplementedError(f"{type(self).__name__} does not tell unfinished turns")

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with super().lifespan(), self.mcp.running():
            yield

    async def new_session(self, session: Session) -> None:
        self.mcp.start(session)

    async def load_session(self, session: Session) -> None:
        self.mcp.start(session)
        remember_unfinished(session, self.unfinished_memory)

    async def close_session(self, session: Session) -> None:
        await self.mcp.close(session)
