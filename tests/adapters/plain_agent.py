"""A plain agent of this library (every capability left at ``Agent``'s defaults), for the
tests of what ``--agent`` announces; and ``gated``, whose module's import waits for the
FIFO named by ``ACP_TEST_GATE`` (see ``gated_agent.py``)."""

from __future__ import annotations

from acp_agent.agent import Agent, PromptTurn, StopReason


class Plain(Agent):
    name = "plain"

    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message(f"you said: {turn.text}")
        return "end_turn"


agent = Plain()
