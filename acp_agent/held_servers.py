"""The lifecycle of held MCP servers: one owner task per server, for a connection's life.

Owns :class:`HeldServers` (the base of the adapters' :class:`~acp_agent.adapters.
mcp_servers.SessionServers` and the LLM agent's :class:`~acp_agent.llm.mcp_host.McpHost`)
and :class:`Held`, one server. An MCP client is a stack of async context managers with
task groups inside, so the task that enters it must leave it: each server gets an owner
task that opens it (an *opener* the caller gives) within the connect timeout, marks it
ready, waits for its stop signal and closes it. The tasks run in one task group that
:meth:`HeldServers.running` opens around a connection (an agent's lifespan); a context
variable names the calling connection's block, so an agent served on several connections
at once starts a session's servers in that session's connection. :meth:`HeldServers.stop`
stops servers shielded and bounded, the stragglers cancelled; the block's end stops every
server it still holds. The rest reaches an owner task only through the ``ready``, ``stop``
and ``done`` events and its cancel scope.

It does not know which client opens a server (the ``mcp`` package or a framework's; it
imports none), nor ACP sessions, pings or tools: the subclasses keep those. Besides, the
two readings of ACP's ``McpServer`` shape both callers share: :func:`server_name` and
:func:`server_env`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import anyio

if TYPE_CHECKING:
    import anyio.abc

__all__ = [
    "CANCEL_BOUND",
    "CLOSE_BOUND",
    "Group",
    "Held",
    "HeldServers",
    "describe",
    "server_env",
    "server_name",
]

T = TypeVar("T")

#: how long stopping servers may take before the stragglers are cancelled
CLOSE_BOUND: Final = 10.0
#: how long cancelled stragglers get to unwind (the ``mcp`` stdio shutdown is shielded)
CANCEL_BOUND: Final = 5.0


def describe(exc: BaseException) -> str:
    """One line for a failure: the first leaf of an exception group, its type and text."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def server_name(spec: Mapping[str, Any], index: int) -> str:
    """A server's ``name``, or ``server<index>`` for one without."""
    name = spec.get("name")
    return name if isinstance(name, str) and name else f"server{index}"


def server_env(items: Any) -> dict[str, str]:
    """ACP's ``[{"name": ..., "value": ...}]`` (``env``, ``headers``) as a dict."""
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            out[item["name"]] = str(item.get("value", ""))
    return out


@dataclass(eq=False)
class Held(Generic[T]):
    """One server, owned by one task (:meth:`HeldServers.hold`)."""

    spec: Mapping[str, Any]
    name: str
    #: what the opener yielded, while the server is open and not stopping
    value: T | None = None
    error: str | None = None
    #: a detail the opener noted for a failure's line (an HTTP status)
    note: str | None = None
    #: open or failed
    ready: anyio.Event = field(default_factory=anyio.Event)
    #: asked to close
    stop: anyio.Event = field(default_factory=anyio.Event)
    #: the owner task has ended: the server is closed
    done: anyio.Event = field(default_factory=anyio.Event)
    #: the owner task's scope: a connect deadline, then cancelled only to force a stop
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


@dataclass(eq=False)
class Group:
    """One open :meth:`HeldServers.running`: its task group and the servers it holds."""

    tg: anyio.abc.TaskGroup
    held: set[Held[Any]] = field(default_factory=set)
    closing: bool = False


class HeldServers(Generic[T]):
    """Owner tasks of held servers, in the task group of the caller's connection.

    Use :meth:`running` around the connection; :meth:`group` gives the caller's block,
    :meth:`hold` starts an owner task in it, :meth:`stop` stops servers.
    """

    def __init__(self, connect_timeout: float, log: logging.Logger) -> None:
        self.connect_timeout = connect_timeout
        self._log = log
        self._groups: list[Group] = []  # every running block, in the order they began
        self._current: contextvars.ContextVar[Group | None] = contextvars.ContextVar(
            f"acp_agent_held_servers_{id(self):x}", default=None
        )
        #: owner tasks started and not yet ended (for leak checks)
        self.server_tasks = 0

    @property
    def serving(self) -> bool:
        """True while some :meth:`running` block is open."""
        return bool(self._groups)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Own the server tasks for the block (the connection); stop them all at its end."""
        async with anyio.create_task_group() as tg:
            group = Group(tg)
            token = self._current.set(group)
            self._groups.append(group)
            try:
                yield
            finally:
                group.closing = True
                self._groups.remove(group)
                with contextlib.suppress(ValueError):  # left in another context
                    self._current.reset(token)
                await self.stop(list(group.held))
                tg.cancel_scope.cancel()

    def group(self) -> Group | None:
        """The running block of this context; else the only one (a request served by a
        task started outside it, as under ``--agent``, which loads the agent later).
        None outside every block and while the block closes."""
        group = self._current.get()
        if group is None and len(self._groups) == 1:
            group = self._groups[0]
        if group is None or group.closing:
            return None
        return group

    def hold(
        self,
        group: Group,
        one: Held[T],
        opener: Callable[[], AbstractAsyncContextManager[T]],
        settled: Callable[[], object] | None = None,
    ) -> None:
        """Start the owner task of ``one`` in ``group``; returns at once. ``settled`` is
        called once the server is open, and again when its task ends."""
        group.held.add(one)
        group.tg.start_soon(self._own, group, one, opener, settled, name=f"mcp:{one.name}")

    async def _own(
        self,
        group: Group,
        one: Held[T],
        opener: Callable[[], AbstractAsyncContextManager[T]],
        settled: Callable[[], object] | None,
    ) -> None:
        """The owner task: open, wait for ``stop``, close. Raises nothing but
        cancellation (a failure must not end the connection's task group)."""
        self.server_tasks += 1
        timeout = self.connect_timeout
        try:
            with one.scope:
                one.scope.deadline = anyio.current_time() + timeout
                async with opener() as value:
                    one.value = value
                    one.scope.deadline = math.inf
                    one.ready.set()
                    if settled is not None:
                        settled()
                    await one.stop.wait()
                    one.value = None
            if one.scope.cancelled_caught and not one.ready.is_set():
                one.error = (
                    "the session closed before it started"
                    if one.stop.is_set()
                    else f"it did not start within {timeout:g} s"
                )
        except Exception as exc:
            if not one.ready.is_set():
                one.error = describe(exc) + (f" ({one.note})" if one.note else "")
            self._log.warning("MCP server %r: %s", one.name, describe(exc))
        finally:
            one.value = None
            one.ready.set()
            if settled is not None:
                settled()
            one.done.set()
            group.held.discard(one)
            self.server_tasks -= 1

    async def stop(self, held: Iterable[Held[Any]]) -> None:
        """Ask each owner task to close its server and wait for it (shielded, bounded);
        cancel those still connecting or too slow."""
        held = list(held)
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
                self._log.warning(
                    "MCP server %r did not stop within %g s; cancelling it", one.name, CLOSE_BOUND
                )
                one.scope.cancel()
            with anyio.move_on_after(CANCEL_BOUND):
                for one in late:
                    await one.done.wait()

    async def stop_all(self) -> None:
        """Stop every server of every running block now (their ends do it anyway)."""
        await self.stop([one for group in self._groups for one in group.held])
