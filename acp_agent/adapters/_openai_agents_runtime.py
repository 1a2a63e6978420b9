"""The OpenAI Agents SDK side of its adapter: the part that imports the framework.

Owns :class:`ToolStarts`, run hooks that tell the adapter when a function tool really
starts running (after any approval), by the model's tool call id,
:func:`editor_tools`, the client's editor as function tools, and :func:`open_server` /
:func:`ping`: an ACP session's MCP server as the SDK's own ``MCPServerStdio``,
``MCPServerStreamableHttp`` or ``MCPServerSse``, connected while the context is open
(holding it for the session is :mod:`acp_agent.adapters.mcp_servers`'s job). Only
:mod:`acp_agent.adapters.openai_agents` imports this module, when an agent is adapted
(not in its first turn), so that importing the adapter does not import the SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from agents import FunctionTool, RunHooks, function_tool
from agents.mcp import MCPServer, MCPServerSse, MCPServerStdio, MCPServerStreamableHttp
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext

from .mcp_servers import answered, server_env, server_name

__all__ = ["ToolStarts", "editor_tools", "open_server", "ping"]


class ToolStarts(RunHooks[Any]):
    def __init__(self, started: Callable[[str], Awaitable[None]]) -> None:
        self._started = started

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Any) -> None:
        tool_call_id = getattr(context, "tool_call_id", None)
        if isinstance(tool_call_id, str):
            await self._started(tool_call_id)


def editor_tools(*, approve_writes: bool, approve_commands: bool) -> list[FunctionTool]:
    """The client's editor (:mod:`acp_agent.adapters.editor`) as function tools, each
    enabled only when the client's capabilities allow it."""
    from . import editor
    from .turns import KIND_KEY, PATH_KEY, current_turn

    def offered(name: str) -> Callable[[RunContextWrapper[Any], Any], bool]:
        def enabled(context: RunContextWrapper[Any], agent: Any) -> bool:
            try:
                return name in editor.available(current_turn().client)
            except LookupError:
                return False

        return enabled

    async def read_file(path: str, line: int | None = None, limit: int | None = None) -> str:
        """Read a text file of the project (as the editor has it, unsaved changes included).

        Args:
            path: the file, absolute or relative to the project folder
            line: the first line to read (1-based)
            limit: how many lines to read at most
        """
        try:
            return await editor.read_file(current_turn(), path, line, limit)
        except editor.EditorError as exc:
            return f"Error: {exc}"

    async def write_file(path: str, content: str) -> str:
        """Write a text file of the project (created if it does not exist).

        Args:
            path: the file, absolute or relative to the project folder
            content: the whole new content of the file
        """
        try:
            return await editor.write_file(current_turn(), path, content)
        except editor.EditorError as exc:
            return f"Error: {exc}"

    async def run_command(context: ToolContext[Any], command: str) -> str:
        """Run a shell command in the project folder; returns its exit status and output.

        Args:
            command: the command line, run with sh -c
        """
        try:
            turn = current_turn()
            return await editor.run_command(turn, command, tool_call_id=context.tool_call_id)
        except editor.EditorError as exc:
            return f"Error: {exc}"

    tools = [
        function_tool(read_file, is_enabled=offered(editor.READ)),
        function_tool(write_file, is_enabled=offered(editor.WRITE), needs_approval=approve_writes),
        function_tool(run_command, is_enabled=offered(editor.RUN), needs_approval=approve_commands),
    ]
    for made, kind, path in zip(
        tools, ("read", "edit", "execute"), ("path", "path", None), strict=True
    ):
        # the SDK's tools carry no metadata: the adapter reads this attribute
        made.acp_metadata = {KIND_KEY: kind, PATH_KEY: path} if path else {KIND_KEY: kind}  # type: ignore[attr-defined]
    return tools


@asynccontextmanager
async def open_server(spec: Mapping[str, Any], cwd: str) -> AsyncIterator[MCPServer]:
    """The ACP ``McpServer`` ``spec`` as the SDK's MCP server, connected for the block
    (its tools listed once: ``cache_tools_list``)."""
    name = server_name(spec, 0)
    kind = spec.get("type")
    server: MCPServer
    if kind == "http":
        url, headers = str(spec.get("url", "")), server_env(spec.get("headers"))
        server = MCPServerStreamableHttp(
            {"url": url, "headers": headers}, name=name, cache_tools_list=True
        )
    elif kind == "sse":
        url, headers = str(spec.get("url", "")), server_env(spec.get("headers"))
        server = MCPServerSse({"url": url, "headers": headers}, name=name, cache_tools_list=True)
    elif kind is None:
        params: Any = {
            "command": str(spec.get("command")),
            "args": [str(a) for a in spec.get("args") or []],
            "cwd": cwd,
        }
        env = server_env(spec.get("env"))
        if env:
            params["env"] = env
        server = MCPServerStdio(params, name=name, cache_tools_list=True)
    else:
        raise ValueError(f"unsupported MCP transport {kind!r}")
    async with server:
        yield server


async def ping(server: MCPServer) -> None:
    """Raise if ``server`` (made by :func:`open_server`) no longer answers."""
    session = getattr(server, "session", None)
    if session is None:
        raise RuntimeError(f"MCP server {server.name!r} is not connected")
    await answered(session.send_ping())
