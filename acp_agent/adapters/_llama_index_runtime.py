"""The LlamaIndex side of :mod:`acp_agent.adapters.llama_index`: imported only once a
LlamaIndex agent is adapted or one of its tools made (it imports ``llama_index.core``).

Owns the approval of a tool as LlamaIndex's human-in-the-loop events
(:class:`ApprovalRequest`, an ``InputRequiredEvent``; :class:`ApprovalResponse`, a
``HumanResponseEvent``; :func:`request_approval` and the :func:`needs_approval` wrapper),
:func:`editor_tools` (the client's editor as ``FunctionTool`` s), and the chat history a
turn saves (:func:`dumped`, :func:`loaded`, :func:`closed`).

It does not know ACP: what a turn sends is :mod:`acp_agent.adapters.llama_index`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

# LiteLLM fetches its model price list from the network on import unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from llama_index.core.llms import ChatMessage
from llama_index.core.tools import BaseTool, FunctionTool, ToolOutput, adapt_to_async_tool
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent

from . import editor
from .turns import KIND_KEY, PATH_KEY

JSON = dict[str, Any]

__all__ = [
    "ApprovalRequest",
    "ApprovalResponse",
    "ApprovalTool",
    "closed",
    "current_tool_id",
    "dumped",
    "editor_tools",
    "loaded",
    "needs_approval",
    "request_approval",
]

#: the output of a tool call the person rejected
REJECTED: Final = "The person rejected this tool call; it did not run."
#: the attribute of a tool holding what ``metadata`` declares in other frameworks
METADATA_ATTR: Final = "acp_metadata"


class ApprovalRequest(InputRequiredEvent):
    """A tool call waits for the person's approval (written to the event stream)."""

    tool_name: str
    tool_kwargs: dict[str, Any]
    #: the model's id of the call, when the workflow's step says it
    tool_id: str | None = None


class ApprovalResponse(HumanResponseEvent):
    """The answer to an :class:`ApprovalRequest` (sent into the workflow)."""

    tool_name: str
    tool_kwargs: dict[str, Any]
    tool_id: str | None = None
    approved: bool


def current_tool_id() -> str | None:
    """The model's id of the tool call being run by the current step, if it is one
    (the step's event is the agent workflow's ``ToolCall``)."""
    try:
        from workflows.runtime.types.results import StepWorkerStateContextVar
    except ImportError:  # a workflows release without it: matched by name and arguments
        return None
    try:
        event = StepWorkerStateContextVar.get().event
    except LookupError:
        return None
    tool_id = getattr(event, "tool_id", None)
    return tool_id if isinstance(tool_id, str) else None


async def request_approval(ctx: Context, tool_name: str, tool_kwargs: Mapping[str, Any]) -> bool:
    """Wait for the person to approve the call of ``tool_name`` with ``tool_kwargs``
    (from inside a tool taking ``ctx: Context``). The step is replayed when the answer
    comes, as every ``wait_for_event`` is: call it before the tool does anything."""
    tool_id = current_tool_id()
    kwargs = dict(tool_kwargs)
    requirements: JSON = (
        {"tool_id": tool_id} if tool_id else {"tool_name": tool_name, "tool_kwargs": kwargs}
    )
    answer = await ctx.wait_for_event(
        ApprovalResponse,
        waiter_event=ApprovalRequest(
            prefix=f"Allow {tool_name}?", tool_name=tool_name, tool_kwargs=kwargs, tool_id=tool_id
        ),
        requirements=requirements,
        timeout=None,
    )
    return bool(answer.approved)


class ApprovalTool(FunctionTool):
    """A tool that asks the person (:func:`request_approval`) before each call runs;
    rejected, the call's output is an error saying so."""

    def __init__(self, inner: BaseTool) -> None:
        async def gated(ctx: Context, **kwargs: Any) -> Any:  # pragma: no cover - not called
            raise NotImplementedError

        super().__init__(async_fn=gated, metadata=inner.metadata)
        # (the annotation is text here: postponed) the workflow passes its Context
        self.requires_context, self.ctx_param_name = True, "ctx"
        self.inner = inner
        declared = getattr(inner, METADATA_ATTR, None)
        if isinstance(declared, Mapping):
            setattr(self, METADATA_ATTR, dict(declared))

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        ctx = kwargs.pop("ctx")
        name = self.metadata.get_name()
        if not await request_approval(ctx, name, kwargs):
            return ToolOutput(
                content=REJECTED,
                tool_name=name,
                raw_input={"args": args, "kwargs": kwargs},
                raw_output=REJECTED,
                is_error=True,
            )
        inner = self.inner
        if isinstance(inner, FunctionTool) and inner.requires_context and inner.ctx_param_name:
            kwargs[inner.ctx_param_name] = ctx
        output: ToolOutput = await adapt_to_async_tool(inner).acall(*args, **kwargs)
        return output


def needs_approval(tool: BaseTool | Callable[..., Any]) -> ApprovalTool:
    """``tool`` (a LlamaIndex tool or a function) asking the person before each call."""
    inner = tool if isinstance(tool, BaseTool) else FunctionTool.from_defaults(tool)
    return ApprovalTool(inner)


def declare(tool: BaseTool, metadata: Mapping[str, Any]) -> BaseTool:
    """Give ``tool`` what ``metadata`` declares in other frameworks (kind, path, plan)."""
    setattr(tool, METADATA_ATTR, dict(metadata))
    return tool


def editor_tools(*, approve_writes: bool, approve_commands: bool) -> list[BaseTool]:
    """The client's editor (:mod:`acp_agent.adapters.editor`) as LlamaIndex tools."""
    from .turns import current_turn

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

    async def run_command(command: str) -> str:
        """Run a shell command in the project folder; returns its exit status and output.

        Args:
            command: the command line, run with sh -c
        """
        try:
            turn = current_turn()
            return await editor.run_command(turn, command, tool_call_id=current_tool_id())
        except editor.EditorError as exc:
            return f"Error: {exc}"

    reader = declare(FunctionTool.from_defaults(read_file), {KIND_KEY: "read", PATH_KEY: "path"})
    writer = declare(FunctionTool.from_defaults(write_file), {KIND_KEY: "edit", PATH_KEY: "path"})
    runner = declare(FunctionTool.from_defaults(run_command), {KIND_KEY: "execute"})
    return [
        reader,
        needs_approval(writer) if approve_writes else writer,
        needs_approval(runner) if approve_commands else runner,
    ]


def dumped(messages: Sequence[ChatMessage]) -> list[JSON]:
    return [m.model_dump(mode="json") for m in messages]


def loaded(memory: Sequence[Any]) -> list[ChatMessage]:
    """The chat history the saved turns hold, oldest first."""
    history: list[ChatMessage] = []
    for saved_turn in memory:
        messages = saved_turn.get("messages") if isinstance(saved_turn, Mapping) else None
        for raw in messages if isinstance(messages, list) else ():
            history.append(ChatMessage.model_validate(raw))
    return history


def closed(messages: list[ChatMessage], output: str) -> list[ChatMessage]:
    """``messages`` with a tool message of ``output`` after every tool call no tool
    message answers (a cut turn's), so that the model's history stays valid."""
    answered = {m.additional_kwargs.get("tool_call_id") for m in messages if m.role.value == "tool"}
    out: list[ChatMessage] = []
    for message in messages:
        out.append(message)
        for call in message.additional_kwargs.get("tool_calls") or ():
            call_id = call.get("id") if isinstance(call, Mapping) else getattr(call, "id", None)
            if call_id and call_id not in answered:
                out.append(
                    ChatMessage(
                        role="tool", content=output, additional_kwargs={"tool_call_id": call_id}
                    )
                )
    return out
