"""What ends a turn first is what it answers: a time limit before a cancel is an error,
a cancel before the time limit is ``cancelled``, whichever code path notices first."""

from __future__ import annotations

import anyio
import pytest

from acp_agent.agent import PromptTurn
from acp_agent.errors import TURN_TIMEOUT
from tests.core._support import ScriptAgent, checked, prompt_params

pytestmark = pytest.mark.anyio


class Unwinding:
    """A turn that, once cancelled (by anything), unwinds shielded until ``release``."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.unwinding = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, turn: PromptTurn) -> str:
        if turn.text != "slow":
            return "end_turn"
        try:
            self.entered.set()
            await anyio.Event().wait()
        finally:
            with anyio.CancelScope(shield=True):
                self.unwinding.set()
                await self.release.wait()
        return "end_turn"


async def test_a_timeout_is_what_a_turn_ends_with_when_it_came_before_a_cancel() -> None:
    agent = Unwinding()
    async with checked(ScriptAgent(agent), turn_timeout=0.01) as (client, server):
        sid = await client.new_session()
        prompt = await client.request("session/prompt", prompt_params(sid, "slow"))
        await agent.unwinding.wait()  # the time limit fired
        assert server.sessions[sid].slot.turn is not None  # released as it ends
        await client.notify("session/cancel", {"sessionId": sid})
        await anyio.wait_all_tasks_blocked()
        agent.release.set()
        resp, _ = await client.until_response(prompt)
        assert resp["error"]["code"] == TURN_TIMEOUT
        assert server.sessions[sid].slot.turn is None


async def test_a_cancel_is_what_a_turn_ends_with_when_it_came_before_the_timeout() -> None:
    agent = Unwinding()
    async with checked(ScriptAgent(agent), turn_timeout=3600) as (client, server):
        sid = await client.new_session()
        prompt = await client.request("session/prompt", prompt_params(sid, "slow"))
        await agent.entered.wait()
        await client.notify("session/cancel", {"sessionId": sid})
        await agent.unwinding.wait()
        turn = server.sessions[sid].last_turn
        assert turn is not None
        turn.scope.deadline = anyio.current_time() - 1  # the limit passes while it unwinds
        agent.release.set()
        resp, _ = await client.until_response(prompt)
        assert resp["result"] == {"stopReason": "cancelled"}
