"""A plain agent of this library (every capability left at ``Agent``'s defaults), for the
tests of what ``--agent`` announces; and :class:`Capable`, one that takes more (images,
embedded resources, MCP servers over HTTP and SSE), served by ``gated_agent.py``, whose
module's import waits for the FIFO named by ``ACP_TEST_GATE``."""

from __future__ import annotations

from typing import ClassVar

from acp_agent.agent import Agent, PromptCapabilities, PromptTurn, StopReason


class Plain(Agent):
    name = "plain"

    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message(f"you said: {turn.text}")
        return "end_turn"


class Capable(Plain):
    name = "capable"
    prompt_capabilities: ClassVar[PromptCapabilities] = {"image": True, "embeddedContext": True}
    mcp_http: ClassVar[bool] = True
    mcp_sse: ClassVar[bool] = True


agent = Plain()
