"""The OpenAI Agents SDK side of its adapter: the part that imports the framework.

Owns :class:`ToolStarts`, run hooks that tell the adapter when a function tool really
starts running (after any approval), by the model's tool call id, and
:func:`editor_tools`, the client's editor as function tools. Only
:mod:`acp_agent.adapters.openai_agents` imports this module, when an agent is first
served, so that importing the adapter does not import the SDK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunHooks, function_tool
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext

__all__ = ["ToolStarts", "editor_tools"]


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
