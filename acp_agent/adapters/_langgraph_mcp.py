"""An ACP session's MCP servers as LangChain tools, and the middleware that hands them
to a ``create_agent`` (or ``create_deep_agent``) graph for the session's turns.

Owns:

* :func:`open_server`: one ACP ``McpServer`` connected with this project's own MCP host
  (:func:`acp_agent.llm.mcp_host.connect`, the ``mcp`` package's v2 client: stdio in the
  session's cwd with the given ``env``, streamable HTTP with the given ``headers``), its
  tools as LangChain ``StructuredTool`` objects named ``<server>_<tool>`` (the
  function-name alphabet), each calling the server from the task that runs it (an error
  result is the tool's error message: the model sees it, the call ends ``failed``);
  and :func:`ping`;
* :class:`SessionMcpMiddleware`: the running turn's tools (:func:`turn_tools`) added to
  each model request and executed by the graph's tool node (a name its own tools do not
  have), so the graph's own tools are kept and a compiled graph needs nothing rebuilt.

Holding the servers for the session (opened at ``session/new``/``load``, pinged and
restarted before a turn, stopped at ``session/close``) is
:mod:`acp_agent.adapters.mcp_servers`'s job; what the servers are given stays in memory.
This module imports LangChain and ``mcp``: :mod:`acp_agent.adapters.langgraph` imports it
only when a graph is served.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from ..held_servers import Held, server_name
from .langgraph import MIDDLEWARE_NAME
from .mcp_servers import answered
from .turns import current_turn

__all__ = ["McpServer", "SessionMcpMiddleware", "open_server", "ping", "turn_tools"]

#: what a tool name may not hold (the OpenAI function-name alphabet)
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]+")
#: the key of the running turn's MCP tools (name -> tool) in ``session.state``
TOOLS_KEY: Final = "adapters.langgraph.mcp_tools"


@dataclass(eq=False)
class McpServer:
    """One connected server: its ``ClientSession`` and its tools as LangChain tools."""

    session: Any
    tools: list[BaseTool]


@asynccontextmanager
async def open_server(spec: Mapping[str, Any], cwd: str) -> AsyncIterator[McpServer]:
    """The server ``spec`` connected, its tools listed; closed when the block ends."""
    from ..llm.mcp_host import connect

    name = server_name(spec, 0)
    async with connect(Held(dict(spec), name), cwd) as connection:
        prefix = _NOT_IN_NAMES.sub("_", name).strip("_") or "mcp"
        session = connection.session
        yield McpServer(session, [_as_tool(session, prefix, tool) for tool in connection.tools])


async def ping(server: McpServer) -> None:
    """Raise if ``server`` no longer answers."""
    await answered(server.session.send_ping())


def _as_tool(session: Any, prefix: str, tool: Any) -> BaseTool:
    from ..llm.mcp_host import tool_result_text

    remote = str(getattr(tool, "name", ""))
    schema = getattr(tool, "input_schema", None)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        schema = {"type": "object", "properties": {}}

    async def call(**args: Any) -> str:
        text, is_error = tool_result_text(await session.call_tool(remote, args))
        if is_error:
            raise ToolException(text)
        return text

    return StructuredTool(
        name=f"{prefix}_{_NOT_IN_NAMES.sub('_', remote)}"[:64],
        description=str(getattr(tool, "description", "") or f"{remote} (MCP server {prefix})"),
        args_schema=schema,
        coroutine=call,
        handle_tool_error=True,
        metadata={"mcp_server": prefix},
    )


def set_turn_tools(state: dict[str, Any], servers: Sequence[McpServer]) -> None:
    """Offer ``servers``' tools to the session's next turns (``state``: ``session.state``)."""
    tools = {tool.name: tool for server in servers for tool in server.tools}
    if tools:
        state[TOOLS_KEY] = tools
    else:
        state.pop(TOOLS_KEY, None)


def turn_tools() -> dict[str, BaseTool]:
    """The MCP tools of the session whose turn is running (none outside a turn)."""
    try:
        state = current_turn().session.state
    except LookupError:
        return {}
    tools: dict[str, BaseTool] = state.get(TOOLS_KEY) or {}
    return tools


class SessionMcpMiddleware(AgentMiddleware[Any, Any, Any]):
    """Adds the session's MCP tools to the model's tools, and runs them when it calls
    one (a name the graph's own tool node does not know). Its (empty) ``before_agent``
    step is a node named ``acp_session_mcp.before_agent``: how the adapter sees that a
    compiled graph takes the session's MCP servers."""

    @property
    def name(self) -> str:
        return MIDDLEWARE_NAME

    async def abefore_agent(self, state: Any, runtime: Any) -> None:
        return None

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        extra = turn_tools()
        if extra:
            own = {getattr(t, "name", None) for t in request.tools}
            added = [t for name, t in extra.items() if name not in own]
            request = request.override(tools=[*request.tools, *added])
        return await handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        if request.tool is None:
            tool = turn_tools().get(str(request.tool_call.get("name")))
            if tool is not None:
                request = request.override(tool=tool)
        return await handler(request)
