"""The OpenAI Agents SDK side of its adapter: the part that imports the framework.

Owns :class:`ToolStarts`, run hooks that tell the adapter when a function tool really
starts running (after any approval), by the model's tool call id. Only
:mod:`acp_agent.adapters.openai_agents` imports this module, when an agent is first
served, so that importing the adapter does not import the SDK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents import RunHooks
from agents.run_context import RunContextWrapper

__all__ = ["ToolStarts"]


class ToolStarts(RunHooks[Any]):
    def __init__(self, started: Callable[[str], Awaitable[None]]) -> None:
        self._started = started

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Any) -> None:
        tool_call_id = getattr(context, "tool_call_id", None)
        if isinstance(tool_call_id, str):
            await self._started(tool_call_id)
