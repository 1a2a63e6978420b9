"""The Strands Agents side of :mod:`acp_agent.adapters.strands`: imported only once a
Strands agent is adapted (it imports ``strands``).

Owns what the adapter fits onto the agent once (:func:`fitted`: the tool-start
middleware, the approval hook of the tools declared as needing it, no printing callback
handler), the editor's tools as Strands tools (:func:`editor_tools`), and one session's
memory on the agent (:class:`Memory`: its messages, state and conversation manager state
restored before a turn and what the turn changed read back after it).

It does not know ACP: what a turn sends is :mod:`acp_agent.adapters.strands`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

import orjson
from strands import ToolContext, tool
from strands.agent.state import AgentState
from strands.handlers.callback_handler import PrintingCallbackHandler, null_callback_handler
from strands.hooks import BeforeToolCallEvent
from strands.middleware.stages import ExecuteToolStage

from . import editor
from .strands import APPROVE_KEY
from .turns import KIND_KEY, PATH_KEY, current_turn

JSON = dict[str, Any]

#: the attribute of a tool object holding its ACP metadata (kind, path, approval)
METADATA_ATTR: Final = "acp_metadata"
#: the name of the interrupt the adapter's approval hook raises
APPROVAL: Final = "acp_approval"
#: the result a rejected call gets (the model is told)
REJECTED: Final = "The user rejected this tool call; it did not run."


def fitted(agent: Any, approve: Callable[[str], bool]) -> None:
    """Fit ``agent`` for serving: tool calls report their start, the tools ``approve``
    names ask first (a ``BeforeToolCallEvent`` interrupt), nothing is printed."""
    if isinstance(agent.callback_handler, PrintingCallbackHandler):
        agent.callback_handler = null_callback_handler

    async def started(context: Any) -> Any:
        try:
            turn = current_turn()
        except LookupError:
            return context
        await turn.calls.start(str(context.tool_use.get("toolUseId")))
        return context

    def ask(event: BeforeToolCallEvent) -> None:
        name = str(event.tool_use.get("name"))
        if event.cancel_tool or not approve(name):
            return
        if event.interrupt(APPROVAL, reason={"tool": name}) is not True:
            event.cancel_tool = REJECTED

    agent.add_middleware(ExecuteToolStage.Input, started)
    agent.add_hook(ask, BeforeToolCallEvent)


def tool_metadata(agent: Any) -> dict[str, Mapping[str, Any]]:
    """The ACP metadata the agent's tool objects carry, by tool name."""
    out: dict[str, Mapping[str, Any]] = {}
    for name, made in agent.tool_registry.registry.items():
        metadata = getattr(made, METADATA_ATTR, None)
        if isinstance(metadata, Mapping):
            out[str(name)] = metadata
    return out


def editor_tools(*, approve_writes: bool, approve_commands: bool) -> list[Any]:
    """The client's editor (:mod:`acp_agent.adapters.editor`) as Strands tools."""

    @tool
    async def read_file(path: str, line: int | None = None, limit: int | None = None) -> str:
        """Read a text file of the project (as the editor has it, unsaved changes included).

        Args:
            path: the file, absolute or relative to the project folder
            line: the first line to read (1-based)
            limit: how many lines to read at most
        """
        try:
            return await editor.read_file(current_turn(), path, line, limit)
        except (editor.EditorError, LookupError) as exc:
            return f"Error: {exc}"

    @tool
    async def write_file(path: str, content: str) -> str:
        """Write a text file of the project (created if it does not exist).

        Args:
            path: the file, absolute or relative to the project folder
            content: the whole new content of the file
        """
        try:
            return await editor.write_file(current_turn(), path, content)
        except (editor.EditorError, LookupError) as exc:
            return f"Error: {exc}"

    @tool(context=True)
    async def run_command(command: str, tool_context: ToolContext) -> str:
        """Run a shell command in the project folder; returns its exit status and output.

        Args:
            command: the command line, run with sh -c
        """
        call_id = str(tool_context.tool_use.get("toolUseId"))
        try:
            return await editor.run_command(current_turn(), command, tool_call_id=call_id)
        except (editor.EditorError, LookupError) as exc:
            return f"Error: {exc}"

    tools = [read_file, write_file, run_command]
    declared = (
        {KIND_KEY: "read", PATH_KEY: "path"},
        {KIND_KEY: "edit", PATH_KEY: "path", APPROVE_KEY: approve_writes},
        {KIND_KEY: "execute", APPROVE_KEY: approve_commands},
    )
    for made, metadata in zip(tools, declared, strict=True):
        setattr(made, METADATA_ATTR, metadata)
    return tools


def _plain(value: Any) -> Any:
    """JSON round trip: what is kept is exactly what will be stored and restored."""
    return orjson.loads(orjson.dumps(value, default=str))


class Memory:
    """One session's memory on the (shared) agent, for one turn."""

    def __init__(self, agent: Any, initial: Mapping[str, Any]) -> None:
        self.agent = agent
        self.initial = initial
        self.before: list[JSON] = []

    @staticmethod
    def initial_of(agent: Any) -> JSON:
        """What a new session starts from: the agent's messages, state and conversation
        manager state as it was adapted."""
        return {
            "messages": _plain(agent.messages),
            "state": _plain(agent.state.get()),
            "manager": _plain(agent.conversation_manager.get_state()),
        }

    def restore(self, saved: Sequence[Any], not_run: str) -> None:
        """Put the session's memory (the turns' saved memory, oldest first) on the agent,
        with a result for each call a cut turn left without one."""
        messages: list[JSON] = list(self.initial["messages"])
        state, manager = self.initial["state"], self.initial["manager"]
        for turn in saved:
            if not isinstance(turn, Mapping):
                continue
            if isinstance(turn.get("replace"), list):
                messages = list(turn["replace"])
            elif isinstance(turn.get("messages"), list):
                messages.extend(turn["messages"])
            state = turn.get("state", state)
            manager = turn.get("manager", manager)
        self.agent.messages = _plain(messages)
        self.agent.state = AgentState(_plain(state))
        self.agent.conversation_manager.restore_from_session(_plain(manager))
        self.agent._interrupt_state.deactivate()  # a dismissed approval's is dropped
        left = unanswered(self.agent.messages)
        if left:
            self.agent.messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "toolResult": {
                                "toolUseId": i,
                                "status": "error",
                                "content": [{"text": not_run}],
                            }
                        }
                        for i in left
                    ],
                }
            )
        self.before = _plain(self.agent.messages)

    def drop_from(self, index: int) -> None:
        """Forget the messages from ``index`` on (a failed answer)."""
        del self.agent.messages[index:]

    def turn_memory(self) -> JSON:
        """What the turn changed: the messages it added (all of them if it removed any),
        the agent's state and its conversation manager's."""
        now = _plain(self.agent.messages)
        memory: JSON = (
            {"messages": now[len(self.before) :]}
            if now[: len(self.before)] == self.before
            else {"replace": now}
        )
        memory["state"] = _plain(self.agent.state.get())
        memory["manager"] = _plain(self.agent.conversation_manager.get_state())
        self.before = now
        return memory


def unanswered(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of the tool uses of the last assistant message no later tool result answers."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "assistant":
            continue
        asked = [
            str(block["toolUse"]["toolUseId"])
            for block in messages[i].get("content") or ()
            if isinstance(block, Mapping) and "toolUse" in block
        ]
        answered = {
            str(block["toolResult"]["toolUseId"])
            for later in messages[i + 1 :]
            for block in later.get("content") or ()
            if isinstance(block, Mapping) and "toolResult" in block
        }
        return [t for t in asked if t not in answered]
    return []


async def closing(events: AsyncIterator[Any]) -> None:
    """Close a Strands event stream (its cleanup releases the agent)."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
