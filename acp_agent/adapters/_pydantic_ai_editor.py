"""The client's editor as pydantic-ai tools: :func:`editor_toolset`.

Owns the three tools (``read_file``, ``write_file``, ``run_command``) as one
``FunctionToolset``, each offered only when the client advertised its capability, and
what each declares for the adapter (kind, path argument, approval). The operations
themselves are :mod:`acp_agent.adapters.editor`'s. It imports pydantic-ai only when a
toolset is made; :mod:`acp_agent.adapters.pydantic_ai` re-exports the function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import editor
from .turns import PATH_KEY

if TYPE_CHECKING:
    from pydantic_ai.toolsets import FunctionToolset

__all__ = ["editor_toolset"]


def editor_toolset(
    *, approve_writes: bool = True, approve_commands: bool = True
) -> FunctionToolset[Any]:
    """The client's editor as pydantic-ai tools: ``read_file``, ``write_file`` and
    ``run_command`` (``sh -c`` in a client terminal). Each is offered only when the
    client advertised its capability; paths stay inside the session's roots. Writing
    and running ask the person first unless told not to."""
    from pydantic_ai import RunContext
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import FunctionToolset

    from .turns import current_turn

    async def offered(ctx: RunContext[Any], tool_def: ToolDefinition) -> ToolDefinition | None:
        try:
            turn = current_turn()
        except LookupError:
            return None
        return tool_def if tool_def.name in editor.available(turn.client) else None

    toolset: FunctionToolset[Any] = FunctionToolset()

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
            raise ModelRetry(str(exc)) from None

    async def write_file(path: str, content: str) -> str:
        """Write a text file of the project (created if it does not exist).

        Args:
            path: the file, absolute or relative to the project folder
            content: the whole new content of the file
        """
        try:
            return await editor.write_file(current_turn(), path, content)
        except editor.EditorError as exc:
            raise ModelRetry(str(exc)) from None

    async def run_command(ctx: RunContext[Any], command: str) -> str:
        """Run a shell command in the project folder; returns its exit status and output.

        Args:
            command: the command line, run with sh -c
        """
        try:
            return await editor.run_command(current_turn(), command, tool_call_id=ctx.tool_call_id)
        except editor.EditorError as exc:
            raise ModelRetry(str(exc)) from None

    # annotations are text here (postponed): give pydantic-ai the class it looks for
    run_command.__annotations__["ctx"] = RunContext[Any]
    toolset.add_function(
        read_file, prepare=offered, metadata={"acp_kind": "read", PATH_KEY: "path"}
    )
    toolset.add_function(
        write_file,
        prepare=offered,
        requires_approval=approve_writes,
        metadata={"acp_kind": "edit", PATH_KEY: "path"},
    )
    toolset.add_function(
        run_command,
        prepare=offered,
        requires_approval=approve_commands,
        metadata={"acp_kind": "execute"},
    )
    return toolset
