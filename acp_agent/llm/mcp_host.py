"""MCP servers of ACP sessions, connected with the official ``mcp`` package.

Owns :class:`McpHost`: it connects each server of a session (``stdio_client`` or
``streamable_http_client``, then ``ClientSession``), lists its tools, and offers them to
the model as ``<server>__<tool>`` (sanitised to the function-name alphabet). Each server
is held by an owner task of :mod:`acp_agent.held_servers` (the lifecycle shared with the
adapters): a task of the connection's :meth:`~acp_agent.llm.agent.LlmAgent.lifespan`,
started when the session is created or loaded, in parallel, each bounded by the connect
timeout; the first prompt turn waits for them. Nothing runs in another thread or event
loop: it all runs on the connection's own loop, asyncio or trio (the ``mcp`` client is
anyio-based; its stdio and streamable HTTP transports both work on trio).

Tool calls are the one use of a server outside its owner task, by design: a
``ClientSession`` may be used by any task of its loop (only entering and leaving it is
tied to the owner), so a prompt turn calls ``call_tool`` itself and cancelling the turn
cancels the call. A server that fails is described in one line (with the HTTP status an
HTTP server answered). When the session closes, or at the latest when the lifespan ends,
every server is stopped: stdio servers get their stdin closed, then are terminated (the
``mcp`` package's own shutdown); HTTP sessions are ended with a ``DELETE``.

It imports ``mcp`` lazily: without it, every server is reported as not started,
with the name of the extra to install. It does not know ACP sessions (the agent keeps
a session's :class:`McpSessionLink`) nor the adapters' framework clients.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from ..held_servers import Held, HeldServers, describe, server_env, server_name

__all__ = [
    "McpHost",
    "McpSessionLink",
    "McpTool",
    "connect",
    "describe",
    "mcp_available",
    "tool_result_text",
]

log = logging.getLogger("acp_agent.llm.mcp")

EXTRA_HINT: Final = "install the optional dependency with: pip install 'acp-agent-kit[llm]'"
SEPARATOR: Final = "__"

_NAME_RE: Final = re.compile(r"[^A-Za-z0-9_-]+")

JSON = dict[str, Any]


def mcp_available() -> bool:
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # hidden or half-installed
        return False


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
class _Connection:
    """One connected server: its ``ClientSession`` and the tools it listed."""

    session: Any
    tools: list[Any]


@dataclass(eq=False)
class McpSessionLink:
    """The agent's handle on one ACP session's MCP servers."""

    servers: list[Held[_Connection]]
    #: set once every server connected or failed (then ``tools`` and ``failures`` hold)
    ready: anyio.Event = field(default_factory=anyio.Event)
    tools: dict[str, McpTool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    _by_function: dict[str, Held[_Connection]] = field(default_factory=dict)

    def _settled(self) -> None:
        """A server connected or failed: publish the tools after the last one."""
        if not self.ready.is_set() and all(s.ready.is_set() for s in self.servers):
            self._publish()

    def _publish(self) -> None:
        used: set[str] = set()
        for server in self.servers:
            if server.error is not None or server.value is None:
                self.failures.append(
                    f"MCP server {server.name!r} could not be started: {server.error or 'unknown'}"
                )
                continue
            prefix = _NAME_RE.sub("_", server.name).strip("_") or "mcp"
            for tool in server.value.tools:
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


# ------------------------------------------------------------------ one server's connection


@asynccontextmanager
async def connect(server: Held[Any], cwd: str) -> AsyncIterator[_Connection]:
    """Open the server, initialize the session and list its tools; close it on exit
    (the LangGraph adapter's MCP servers are connected this way too)."""
    async with AsyncExitStack() as stack:
        from mcp import ClientSession

        read, write = await _open(stack, server, cwd)
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield _Connection(session, await _list_tools(session))


async def _open(stack: AsyncExitStack, server: Held[Any], cwd: str) -> tuple[Any, Any]:
    spec = server.spec
    kind = spec.get("type")
    if kind == "http":
        from mcp.client import streamable_http

        headers = server_env(spec.get("headers"))
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
                server.note = f"HTTP {response.status_code}"

        http.event_hooks = {**http.event_hooks, "response": [note_status]}
        streams = await stack.enter_async_context(modern(url, http_client=http))
        return streams[0], streams[1]
    if kind is not None:
        raise ValueError(f"unsupported MCP transport {kind!r}")
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=str(spec.get("command")),
        args=[str(a) for a in spec.get("args") or []],
        env=server_env(spec.get("env")) or None,
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


def tool_result_text(result: Any) -> tuple[str, bool]:
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


class McpHost(HeldServers[_Connection]):
    """Runs the MCP connections of every ACP session of one agent, one task per server.

    Use :meth:`running` around the connection (``LlmAgent.lifespan`` does); then
    :meth:`open_session` / :meth:`wait_ready` / :meth:`call` / :meth:`close_session`.
    """

    def __init__(self, connect_timeout: float = 30.0) -> None:
        super().__init__(connect_timeout, log)

    async def open_session(self, specs: list[JSON], cwd: str) -> McpSessionLink:
        """Start connecting the servers; returns at once (see :meth:`wait_ready`)."""
        link = McpSessionLink([Held(dict(s), server_name(s, i)) for i, s in enumerate(specs)])
        group = self.group()
        reason: str | None = None
        if not specs:
            pass
        elif not mcp_available():
            reason = f"the 'mcp' package is not installed; {EXTRA_HINT}"
        elif group is None:
            reason = "the agent's lifespan is not running (serve it with AcpServer.serve)"
            log.error("MCP servers requested outside LlmAgent.lifespan()")
        if group is None or reason is not None or not specs:
            link.failures.extend(
                f"MCP server {s.name!r} could not be started: {reason}" for s in link.servers
            )
            for server in link.servers:  # never started: already stopped
                server.ready.set()
                server.done.set()
            link.ready.set()
            return link
        for server in link.servers:
            self.hold(group, server, functools.partial(connect, server, cwd), link._settled)
        return link

    async def wait_ready(self, link: McpSessionLink) -> None:
        """Wait (cancellably) until every server of ``link`` connected or failed."""
        await link.ready.wait()

    async def call(self, link: McpSessionLink, function: str, args: JSON) -> tuple[str, bool]:
        """Call a tool from the calling task; returns (text, is_error)."""
        server = link._by_function.get(function)
        tool = link.tools.get(function)
        if server is None or tool is None:
            raise RuntimeError(f"no MCP tool named {function!r}")
        connection = server.value
        if connection is None:
            raise RuntimeError(f"MCP server {server.name!r} is not connected")
        return tool_result_text(await connection.session.call_tool(tool.tool, args))

    async def close_session(self, link: McpSessionLink) -> None:
        """Stop the session's servers and wait until they have stopped (shielded, bounded)."""
        await self.stop(link.servers)

    async def aclose(self) -> None:
        """Stop every session's servers now (the lifespan's end does it anyway)."""
        await self.stop_all()
