"""MCP servers of ACP sessions, connected with the official ``mcp`` package.

Who owns what. An MCP connection (``stdio_client`` or ``streamable_http_client``,
then ``ClientSession``) is a stack of async context managers with task groups inside,
so one task must enter it and the same task must leave it. Each server therefore
gets a task of its own that opens the connection, lists the tools, waits for its
stop signal and closes the connection again. These tasks run in one task group that
:meth:`McpHost.running` opens and :class:`~acp_agent.llm.agent.LlmAgent` holds open
in its :meth:`~acp_agent.agent.Agent.lifespan`, i.e. for the life of the ACP
connection, around every session. Nothing runs in another thread or event loop: it
all runs on the connection's own loop, asyncio or trio (the ``mcp`` client is
anyio-based; its stdio and streamable HTTP transports both work on trio).

The rest of the agent reaches a server task only through events and its cancel
scope: ``ready`` (connected or failed), ``stop`` (close now, gracefully) and
``done`` (the task ended); a connect deadline sits on the task's cancel scope and is
lifted once the server is up. Tool calls are the one exception, by design: a
``ClientSession`` may be used by any task of its loop (only entering and leaving it
is tied to the owner), so a prompt turn calls ``call_tool`` itself and cancelling
the turn cancels the call.

Servers start connecting when the session is created or loaded, in parallel, each
bounded by the connect timeout; the first prompt turn waits for them. The tool table
offered to the model names tools ``<server>__<tool>`` (sanitised to the
function-name alphabet). A server that fails is described in one line. When the
session closes, or at the latest when the lifespan ends, every server is stopped:
stdio servers get their stdin closed, then are terminated (the ``mcp`` package's
own shutdown); HTTP sessions are ended with a ``DELETE``. Stopping is shielded and
bounded; a server that does not stop in time is cancelled.

The lifespan's task group is found through a context variable set by
:meth:`McpHost.running`, so an agent served on several connections at once starts a
session's servers in that session's connection.

It imports ``mcp`` lazily: without it, every server is reported as not started,
with the name of the extra to install.
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import math
import re
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc

log = logging.getLogger("acp_agent.llm.mcp")

EXTRA_HINT: Final = "install the optional dependency with: pip install 'acp-agent-kit[llm]'"
SEPARATOR: Final = "__"
#: how long stopping a set of servers may take before the stragglers are cancelled
CLOSE_BOUND: Final = 10.0
#: how long cancelled stragglers get to unwind (the stdio shutdown is shielded)
CANCEL_BOUND: Final = 5.0

_NAME_RE: Final = re.compile(r"[^A-Za-z0-9_-]+")

JSON = dict[str, Any]


def mcp_available() -> bool:
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # hidden or half-installed
        return False


def describe(exc: BaseException) -> str:
    """One line for a connection or call failure (the first leaf of an exception group)."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _env(items: Any) -> dict[str, str]:
    env: dict[str, str] = {}
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                env[item["name"]] = str(item.get("value", ""))
    return env


@dataclass
class McpTool:
    """One MCP tool as offered to the model."""

    function: str
    server: str
    tool: str
    description: str
    schema: JSON

    def openai_schema(self) -> JSON:
        parameters = self.schema if isinstance(self.schema, dict) else {}
        if parameters.get("type") != "object":
            parameters = {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {
                "name": self.function,
                "description": (self.description or f"{self.tool} (MCP server {self.server})")[
                    :1024
                ],
                "parameters": parameters,
            },
        }


@dataclass(eq=False)
class _Server:
    """One server's connection, owned by one task (:meth:`McpHost._run_server`)."""

    spec: JSON
    name: str
    #: the open ``ClientSession`` while connected, else None
    session: Any = None
    tools: list[Any] = field(default_factory=list)
    error: str | None = None
    #: the last HTTP error status the server answered (HTTP transport only)
    http_status: int | None = None
    #: connected or failed (the tool table can be built)
    ready: anyio.Event = field(default_factory=anyio.Event)
    #: asked to close (set by the session side)
    stop: anyio.Event = field(default_factory=anyio.Event)
    #: the owner task has ended and the connection is closed
    done: anyio.Event = field(default_factory=anyio.Event)
    #: the owner task's scope: a connect deadline, then cancelled only to force a stop
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


@dataclass(eq=False)
class McpSessionLink:
    """The agent's handle on one ACP session's MCP servers."""

    servers: list[_Server]
    #: set once every server connected or failed (then ``tools`` and ``failures`` hold)
    ready: anyio.Event = field(default_factory=anyio.Event)
    tools: dict[str, McpTool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    _by_function: dict[str, _Server] = field(default_factory=dict)

    def _settle(self, server: _Server) -> None:
        """Mark ``server`` connected or failed; publish the tools after the last one."""
        if server.ready.is_set():
            return
        server.ready.set()
        if all(s.ready.is_set() for s in self.servers):
            self._publish()

    def _publish(self) -> None:
        used: set[str] = set()
        for server in self.servers:
            if server.error is not None or server.session is None:
                self.failures.append(
                    f"MCP server {server.name!r} could not be started: {server.error or 'unknown'}"
                )
                continue
            prefix = _NAME_RE.sub("_", server.name).strip("_") or "mcp"
            for tool in server.tools:
                name = str(getattr(tool, "name", ""))
                base = f"{prefix}{SEPARATOR}{_NAME_RE.sub('_', name)}"[:64]
                function, n = base, 1
                while function in used:
                    n += 1
                    function = f"{base[:60]}_{n}"
                used.add(function)
                schema = getattr(tool, "input_schema", None)
                self.tools[function] = McpTool(
                    function,
                    server.name,
                    name,
                    str(getattr(tool, "description", "") or ""),
                    dict(schema) if isinstance(schema, dict) else {},
                )
                self._by_function[function] = server
        self.ready.set()


@dataclass(eq=False)
class _Lifespan:
    """One open :meth:`McpHost.running`: its task group and the sessions started in it."""

    tg: anyio.abc.TaskGroup
    links: set[McpSessionLink] = field(default_factory=set)
    closing: bool = False


# ------------------------------------------------------------------ one server's task


async def _open(stack: AsyncExitStack, server: _Server, cwd: str) -> tuple[Any, Any]:
    spec = server.spec
    kind = spec.get("type")
    if kind == "http":
        from mcp.client import streamable_http

        headers = _env(spec.get("headers"))
        url = str(spec.get("url", ""))
        modern = getattr(streamable_http, "streamable_http_client", None)
        if modern is None:  # mcp 1.x
            legacy = getattr(streamable_http, "streamablehttp_client")  # noqa: B009
            streams = await stack.enter_async_context(legacy(url, headers=headers))
            return streams[0], streams[1]
        # The mcp package's own client factory (its default timeouts: a long read
        # timeout for server streams); the transport takes headers only this way.
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = await stack.enter_async_context(create_mcp_http_client(headers=headers))

        async def note_status(response: Any) -> None:
            # The transport turns an HTTP error into a bare "error response"; keep
            # the status for the one-line failure (401/403 are the usual ones).
            if response.status_code >= 400:
                server.http_status = response.status_code

        http.event_hooks = {**http.event_hooks, "response": [note_status]}
        streams = await stack.enter_async_context(modern(url, http_client=http))
        return streams[0], streams[1]
    if kind is not None:
        raise ValueError(f"unsupported MCP transport {kind!r}")
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=str(spec.get("command")),
        args=[str(a) for a in spec.get("args") or []],
        env=_env(spec.get("env")) or None,
        cwd=cwd,
    )
    streams = await stack.enter_async_context(stdio_client(params, errlog=sys.stderr))
    return streams[0], streams[1]


async def _list_tools(session: Any) -> list[Any]:
    tools: list[Any] = []
    result = await session.list_tools()
    tools.extend(result.tools)
    cursor = getattr(result, "next_cursor", None)
    pages = 1
    while cursor and pages < 50:
        from mcp import types

        result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        tools.extend(result.tools)
        cursor = getattr(result, "next_cursor", None)
        pages += 1
    return tools


def _tool_result_text(result: Any) -> tuple[str, bool]:
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            uri = getattr(resource, "uri", "")
            parts.append(str(text) if text is not None else f"[resource {uri}]")
        elif kind is not None:
            parts.append(f"[{kind} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        import orjson

        parts.append(orjson.dumps(structured).decode())
    is_error = bool(getattr(result, "is_error", None))
    return "\n".join(parts) or "(no output)", is_error


# ------------------------------------------------------------------ the host


class McpHost:
    """Runs the MCP connections of every ACP session of one agent, one task per server.

    Use :meth:`running` around the connection (``LlmAgent.lifespan`` does); then
    :meth:`open_session` / :meth:`wait_ready` / :meth:`call` / :meth:`close_session`.
    """

    def __init__(self, connect_timeout: float = 30.0) -> None:
        self.connect_timeout = connect_timeout
        self._current: contextvars.ContextVar[_Lifespan | None] = contextvars.ContextVar(
            f"acp_agent_mcp_host_{id(self):x}", default=None
        )
        self._lifespans: list[_Lifespan] = []
        #: server tasks started and not yet ended (for leak checks)
        self.server_tasks = 0

    @property
    def serving(self) -> bool:
        """True while some :meth:`running` block is open."""
        return bool(self._lifespans)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Own the server tasks for the duration of the block; stop them all on exit."""
        async with anyio.create_task_group() as tg:
            lifespan = _Lifespan(tg)
            self._lifespans.append(lifespan)
            token = self._current.set(lifespan)
            try:
                yield
            finally:
                lifespan.closing = True
                try:
                    self._current.reset(token)
                except ValueError:  # pragma: no cover - left in another context
                    self._current.set(None)
                with anyio.CancelScope(shield=True):
                    servers = [s for link in lifespan.links for s in link.servers]
                    lifespan.links.clear()
                    await _stop(servers)
                self._lifespans.remove(lifespan)
                tg.cancel_scope.cancel()

    def _lifespan(self) -> _Lifespan | None:
        lifespan = self._current.get()
        if lifespan is None and len(self._lifespans) == 1:
            lifespan = self._lifespans[0]  # called from a task started outside the block
        if lifespan is None or lifespan.closing:
            return None
        return lifespan

    async def open_session(self, specs: list[JSON], cwd: str) -> McpSessionLink:
        """Start connecting the servers; returns at once (see :meth:`wait_ready`)."""
        link = McpSessionLink(
            [_Server(dict(s), str(s.get("name") or f"server{i}")) for i, s in enumerate(specs)]
        )
        lifespan = self._lifespan()
        reason: str | None = None
        if not specs:
            pass
        elif not mcp_available():
            reason = f"the 'mcp' package is not installed; {EXTRA_HINT}"
        elif lifespan is None:
            reason = "the agent's lifespan is not running (serve it with AcpServer.serve)"
            log.error("MCP servers requested outside LlmAgent.lifespan()")
        if not specs or reason is not None:
            link.failures.extend(
                f"MCP server {s.name!r} could not be started: {reason}" for s in link.servers
            )
            for server in link.servers:  # never started: already stopped
                server.ready.set()
                server.done.set()
            link.ready.set()
            return link
        assert lifespan is not None
        lifespan.links.add(link)
        for server in link.servers:
            lifespan.tg.start_soon(self._run_server, link, server, cwd, name=f"mcp:{server.name}")
        return link

    async def _run_server(self, link: McpSessionLink, server: _Server, cwd: str) -> None:
        """The owner task: open, list tools, wait for ``stop``, close. Never raises
        anything but cancellation (a failure must not end the lifespan's task group)."""
        self.server_tasks += 1
        timeout = self.connect_timeout
        try:
            with server.scope:
                server.scope.deadline = anyio.current_time() + timeout
                async with AsyncExitStack() as stack:
                    from mcp import ClientSession

                    read, write = await _open(stack, server, cwd)
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()
                    server.tools = await _list_tools(session)
                    server.session = session
                    server.scope.deadline = math.inf
                    link._settle(server)
                    await server.stop.wait()
                    server.session = None
            if server.scope.cancelled_caught and server.session is None and server.error is None:
                if server.stop.is_set():
                    server.error = "the session closed before it started"
                else:
                    server.error = f"it did not start within {timeout:g} s"
        except Exception as exc:
            if server.error is None and not server.ready.is_set():
                server.error = describe(exc)
                if server.http_status is not None:
                    server.error += f" (HTTP {server.http_status})"
            log.warning("MCP server %r: %s", server.name, describe(exc))
        finally:
            server.session = None
            link._settle(server)
            server.done.set()
            self.server_tasks -= 1

    async def wait_ready(self, link: McpSessionLink) -> None:
        """Wait (cancellably) until every server of ``link`` connected or failed."""
        await link.ready.wait()

    async def call(self, link: McpSessionLink, function: str, args: JSON) -> tuple[str, bool]:
        """Call a tool from the calling task; returns (text, is_error)."""
        server = link._by_function.get(function)
        tool = link.tools.get(function)
        if server is None or tool is None:
            raise RuntimeError(f"no MCP tool named {function!r}")
        session = server.session
        if session is None:
            raise RuntimeError(f"MCP server {server.name!r} is not connected")
        return _tool_result_text(await session.call_tool(tool.tool, args))

    async def close_session(self, link: McpSessionLink) -> None:
        """Stop the session's servers and wait until they have stopped (shielded, bounded)."""
        with anyio.CancelScope(shield=True):
            for lifespan in self._lifespans:
                lifespan.links.discard(link)
            await _stop(link.servers)

    async def aclose(self) -> None:
        """Stop every session's servers now (the lifespan's end does it anyway)."""
        with anyio.CancelScope(shield=True):
            for lifespan in self._lifespans:
                servers = [s for link in lifespan.links for s in link.servers]
                lifespan.links.clear()
                await _stop(servers)


async def _stop(servers: list[_Server]) -> None:
    """Ask each server task to close; cancel the ones still connecting or too slow."""
    for server in servers:
        server.stop.set()
        if not server.ready.is_set():
            server.scope.cancel()  # still connecting: nothing to close gracefully
    with anyio.move_on_after(CLOSE_BOUND):
        for server in servers:
            await server.done.wait()
    late = [s for s in servers if not s.done.is_set()]
    for server in late:
        log.warning(
            "MCP server %r did not stop within %g s; cancelling it", server.name, CLOSE_BOUND
        )
        server.scope.cancel()
    with anyio.move_on_after(CANCEL_BOUND):
        for server in late:
            await server.done.wait()
