"""An ACP session's MCP server as pydantic-ai's own MCP toolset.

Owns :func:`open_toolset`: one ACP ``McpServer`` (stdio, ``http`` for streamable HTTP,
``sse``) as a pydantic-ai ``MCPToolset`` on the fastmcp transport of that kind (stdio in
the session's cwd, with the given ``env``; HTTP with the given ``headers``), its tools
prefixed with the server's name (``calc_add``; letters, digits, ``_`` and ``-`` only:
pydantic-ai's way to keep two servers' tools apart), entered (connected) for as long as
the context is; and :func:`ping`.
Holding it for the session is :mod:`acp_agent.adapters.mcp_servers`'s job.

pydantic-ai's MCP client is fastmcp (the ``mcp`` extra of ``pydantic-ai-slim``); this
module imports it only when a server is opened.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from .mcp_servers import answered, server_env, server_name

if TYPE_CHECKING:
    from pydantic_ai.toolsets import AbstractToolset

__all__ = ["mcp_client_installed", "open_toolset", "ping"]

#: what a tool name may not hold (the OpenAI function-name alphabet)
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]+")
#: how long fastmcp waits for the server's ``initialize`` answer (a stdio server starts first)
INIT_TIMEOUT: Final = 30.0


def mcp_client_installed() -> bool:
    """Whether pydantic-ai's MCP client (fastmcp) is installed (nothing is imported)."""
    try:
        return importlib.util.find_spec("fastmcp") is not None
    except (ImportError, ValueError):
        return False


@asynccontextmanager
async def open_toolset(spec: Mapping[str, Any], cwd: str) -> AsyncIterator[AbstractToolset[Any]]:
    """The server ``spec`` as a connected toolset, closed when the block ends."""
    try:
        from fastmcp.client.transports import SSETransport, StdioTransport, StreamableHttpTransport
        from pydantic_ai.mcp import MCPToolset
    except ImportError:
        raise RuntimeError(
            "pydantic-ai's MCP client is not installed: pip install 'acp-agent-kit[pydantic-ai]'"
        ) from None
    kind = spec.get("type")
    transport: Any
    if kind == "http":
        transport = StreamableHttpTransport(
            str(spec.get("url", "")), headers=server_env(spec.get("headers"))
        )
    elif kind == "sse":
        transport = SSETransport(str(spec.get("url", "")), headers=server_env(spec.get("headers")))
    elif kind is None:
        transport = StdioTransport(
            str(spec.get("command")),
            [str(a) for a in spec.get("args") or []],
            env=server_env(spec.get("env")) or None,
            cwd=cwd,
            keep_alive=False,
        )
    else:
        raise ValueError(f"unsupported MCP transport {kind!r}")
    toolset: MCPToolset[Any] = MCPToolset(transport, init_timeout=INIT_TIMEOUT)
    async with toolset:
        yield toolset.prefixed(_NOT_IN_NAMES.sub("_", server_name(spec, 0)).strip("_") or "mcp")


async def ping(toolset: AbstractToolset[Any]) -> None:
    """Raise if the server behind ``toolset`` (made by :func:`open_toolset`) does not answer."""
    from pydantic_ai.mcp import MCPToolset

    wrapped = getattr(toolset, "wrapped", toolset)
    if isinstance(wrapped, MCPToolset):
        await answered(wrapped.client.ping())
