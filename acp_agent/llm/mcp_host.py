"""MCP servers of ACP sessions, connected with the official ``mcp`` package.

Why a thread: an MCP connection (``stdio_client`` / the streamable HTTP client and
``ClientSession``) is a stack of async context managers with task groups inside, so
it must be entered and left by one task that lives as long as the connection. An
ACP session outlives every prompt turn, and the :class:`~acp_agent.agent.Agent`
interface gives an agent no task of its own that lives that long. So
:class:`McpHost` runs one small event loop (asyncio) in a daemon thread; each ACP
session gets one host task there, with one child task per server that enters the
connection, lists its tools and waits for the session to close. The ACP side talks
to it only through an anyio ``BlockingPortal``, from worker threads, so the agent's
own loop (asyncio or trio) never blocks and the ``mcp`` package always runs on
asyncio. A cancelled turn abandons its wait and cancels the call in the host.

This module owns: connecting (in parallel, bounded by a timeout), the tool table
offered to the model (``<server>__<tool>``, sanitised to the function-name alphabet),
calling a tool, describing failures in one line, and stopping every server (closing
its stdin, then terminating it, as the ``mcp`` package does) when the session closes.
The thread stops when its last session closes.

It imports ``mcp`` lazily: without it, every server is reported as not started,
with the name of the extra to install.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
import sys
import threading
from concurrent.futures import Future
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.from_thread

log = logging.getLogger("acp_agent.llm.mcp")

EXTRA_HINT: Final = "install the optional dependency with: pip install 'acp-agent[llm]'"
SEPARATOR: Final = "__"
CLOSE_BOUND: Final = 15.0

_NAME_RE: Final = re.compile(r"[^A-Za-z0-9_-]+")

JSON = dict[str, Any]


def mcp_available() -> bool:
    return importlib.util.find_spec("mcp") is not None


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
    """One server's connection; every field but ``spec`` is written in the host thread."""

    spec: JSON
    name: str
    session: Any = None
    tools: list[Any] = field(default_factory=list)
    error: str | None = None
    ready: anyio.Event | None = None
    scope: anyio.CancelScope | None = None


@dataclass(eq=False)
class McpSessionLink:
    """The agent's handle on one ACP session's MCP servers."""

    servers: list[_Server]
    #: set (in the host thread) once every server connected or failed
    ready: threading.Event = field(default_factory=threading.Event)
    tools: dict[str, McpTool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    future: Future[None] | None = None
    _stop: anyio.Event | None = None
    _by_function: dict[str, _Server] = field(default_factory=dict)

    def stop_event(self) -> anyio.Event:
        """The host-side stop signal (created and set only in the host thread)."""
        if self._stop is None:
            self._stop = anyio.Event()
        return self._stop

    def request_stop(self) -> None:
        self.stop_event().set()

    def _publish(self) -> None:
        """Build the tool table from the connected servers (host thread, then ``ready``)."""
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
                schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)
                self.tools[function] = McpTool(
                    function,
                    server.name,
                    name,
                    str(getattr(tool, "description", "") or ""),
                    dict(schema) if isinstance(schema, dict) else {},
                )
                self._by_function[function] = server
        self.ready.set()


# ------------------------------------------------------------------ host-thread side


async def _open(stack: AsyncExitStack, spec: JSON, cwd: str) -> tuple[Any, Any]:
    kind = spec.get("type")
    if kind == "http":
        from mcp.client import streamable_http

        headers = _env(spec.get("headers"))
        url = str(spec.get("url", ""))
        modern = getattr(streamable_http, "streamable_http_client", None)
        if modern is not None:
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            streams = await stack.enter_async_context(modern(url, http_client=http))
        else:  # mcp 1.x
            legacy = getattr(streamable_http, "streamablehttp_client")  # noqa: B009
            streams = await stack.enter_async_context(legacy(url, headers=headers))
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
    cursor = getattr(result, "next_cursor", None) or getattr(result, "nextCursor", None)
    pages = 1
    while cursor and pages < 50:
        from mcp import types

        result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        tools.extend(result.tools)
        cursor = getattr(result, "next_cursor", None) or getattr(result, "nextCursor", None)
        pages += 1
    return tools


async def _run_server(server: _Server, link: McpSessionLink, cwd: str) -> None:
    assert server.ready is not None
    try:
        with anyio.CancelScope() as scope:
            server.scope = scope
            async with AsyncExitStack() as stack:
                from mcp import ClientSession

                read, write = await _open(stack, server.spec, cwd)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                server.tools = await _list_tools(session)
                server.session = session
                server.ready.set()
                await link.stop_event().wait()
                server.session = None
    except Exception as exc:
        if server.error is None and not server.ready.is_set():
            server.error = describe(exc)
        log.warning("MCP server %r: %s", server.name, describe(exc))
    finally:
        server.session = None
        server.ready.set()


async def _host_session(link: McpSessionLink, cwd: str, timeout: float) -> None:
    async with anyio.create_task_group() as tg:
        for server in link.servers:
            server.ready = anyio.Event()
            tg.start_soon(_run_server, server, link, cwd)
        with anyio.move_on_after(timeout):
            for server in link.servers:
                await server.ready.wait()  # type: ignore[union-attr]
        for server in link.servers:
            if server.session is None and server.error is None:
                server.error = f"it did not start within {timeout:g} s"
                if server.scope is not None:
                    server.scope.cancel()
        for server in link.servers:
            await server.ready.wait()  # type: ignore[union-attr]
        link._publish()


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
    structured = getattr(result, "structured_content", None) or getattr(
        result, "structuredContent", None
    )
    if not parts and structured is not None:
        import orjson

        parts.append(orjson.dumps(structured).decode())
    is_error = bool(getattr(result, "is_error", None) or getattr(result, "isError", None))
    return "\n".join(parts) or "(no output)", is_error


async def _call(server: _Server, tool: str, args: JSON) -> tuple[str, bool]:
    session = server.session
    if session is None:
        raise RuntimeError(f"MCP server {server.name!r} is not connected")
    return _tool_result_text(await session.call_tool(tool, args))


# ------------------------------------------------------------------ agent side


class McpHost:
    """The thread hosting MCP connections for every ACP session of one agent."""

    def __init__(self, connect_timeout: float = 30.0) -> None:
        self.connect_timeout = connect_timeout
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._thread: threading.Thread | None = None
        self._links: set[McpSessionLink] = set()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _thread_main(self, started: threading.Event) -> None:
        async def main() -> None:
            async with anyio.from_thread.BlockingPortal() as portal:
                self._portal = portal
                started.set()
                await portal.sleep_until_stopped()

        try:
            anyio.run(main, backend="asyncio")
        except BaseException:  # pragma: no cover - the loop itself failed
            log.exception("the MCP host thread failed")
        finally:
            started.set()

    async def _ensure_thread(self) -> anyio.from_thread.BlockingPortal:
        if self._thread is None:
            started = threading.Event()
            thread = threading.Thread(
                target=self._thread_main, args=(started,), name="acp-agent-mcp", daemon=True
            )
            thread.start()
            self._thread = thread
            await anyio.to_thread.run_sync(started.wait)
        if self._portal is None:
            raise RuntimeError("the MCP host thread did not start")
        return self._portal

    async def open_session(self, specs: list[JSON], cwd: str) -> McpSessionLink:
        """Start connecting the servers; returns at once (see :meth:`wait_ready`)."""
        link = McpSessionLink(
            [_Server(dict(s), str(s.get("name") or f"server{i}")) for i, s in enumerate(specs)]
        )
        if not specs:
            link.ready.set()
            return link
        if not mcp_available():
            link.failures.extend(
                f"MCP server {s.name!r} could not be started: the 'mcp' package is not "
                f"installed; {EXTRA_HINT}"
                for s in link.servers
            )
            link.ready.set()
            return link
        portal = await self._ensure_thread()
        self._links.add(link)
        link.future = await anyio.to_thread.run_sync(
            portal.start_task_soon, _host_session, link, cwd, self.connect_timeout
        )
        return link

    async def wait_ready(self, link: McpSessionLink) -> None:
        """Wait (cancellably) until every server of ``link`` connected or failed."""
        if not link.ready.is_set():
            await anyio.to_thread.run_sync(link.ready.wait, abandon_on_cancel=True)

    async def call(self, link: McpSessionLink, function: str, args: JSON) -> tuple[str, bool]:
        """Call a tool; returns (text, is_error). Cancelling abandons and cancels the call."""
        server = link._by_function.get(function)
        tool = link.tools.get(function)
        if server is None or tool is None or self._portal is None:
            raise RuntimeError(f"no MCP tool named {function!r}")
        future: Future[tuple[str, bool]] = await anyio.to_thread.run_sync(
            self._portal.start_task_soon, _call, server, tool.tool, args
        )
        try:
            return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        finally:
            if not future.done():
                future.cancel()

    async def close_session(self, link: McpSessionLink) -> None:
        """Stop the session's servers (bounded, shielded); stop the thread after the last."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_BOUND):
            if link in self._links and self._portal is not None:
                await anyio.to_thread.run_sync(self._portal.call, link.request_stop)
                if link.future is not None:
                    await anyio.to_thread.run_sync(_wait_quietly, link.future)
            self._links.discard(link)
            if not self._links:
                await self.aclose()

    async def aclose(self) -> None:
        """Stop every session's servers and the thread."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_BOUND):
            for link in list(self._links):
                self._links.discard(link)
                if self._portal is not None:
                    await anyio.to_thread.run_sync(self._portal.call, link.request_stop)
                if link.future is not None:
                    await anyio.to_thread.run_sync(_wait_quietly, link.future)
            thread, portal = self._thread, self._portal
            self._thread = self._portal = None
            if portal is not None:
                with contextlib.suppress(RuntimeError):  # already stopped
                    await anyio.to_thread.run_sync(lambda: portal.call(portal.stop))
            if thread is not None:
                await anyio.to_thread.run_sync(thread.join, CLOSE_BOUND)


def _wait_quietly(future: Future[None]) -> None:
    try:
        future.result(timeout=CLOSE_BOUND)
    except BaseException as exc:
        log.debug("MCP session host ended with %s", describe(exc))
