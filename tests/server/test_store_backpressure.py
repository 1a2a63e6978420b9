"""A turn that streams faster than its store writes waits for the store: what waits to be
written stays bounded, and nothing is lost."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from acp_agent.persistence import BEHIND_BYTES
from acp_agent.store import DEFAULT_OWNER
from tests.helpers.memclient import serving
from tests.helpers.stalled_store import StalledStore

pytestmark = pytest.mark.anyio

CHUNKS = 20_000
TEXT = "x" * 200


class Streamer(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        for i in range(CHUNKS):
            await turn.client.message(f"{i:06d}{TEXT}")
        return "end_turn"


@pytest.mark.parametrize("cancel", [False, True], ids=["left alone", "cancelled"])
async def test_a_stream_waits_for_a_stalled_store_and_loses_nothing(cancel: bool) -> None:
    store = StalledStore()
    async with serving(Streamer(), store=store) as (client, _server):
        await client.initialize()
        session = await client.new_session()
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}
        request = await client.request("session/prompt", prompt)
        chunks: list[str] = []
        answer: dict[str, Any] = {}

        async def read() -> None:
            while True:
                message = await client.recv()
                if message.get("id") == request:
                    answer.update(message)
                    return
                chunks.append(message["params"]["update"]["content"]["text"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            try:
                await anyio.wait_all_tasks_blocked()
                # the store has written nothing: the turn waits after about BEHIND_BYTES
                assert 0 < len(chunks) * len(TEXT) < 2 * BEHIND_BYTES
                if cancel:  # a cancel ends the wait; what was sent stays in the store
                    await client.notify("session/cancel", {"sessionId": session})
                    await anyio.wait_all_tasks_blocked()
            finally:
                store.go.set()
        sent = CHUNKS if not cancel else len(chunks)
        stop = "cancelled" if cancel else "end_turn"
        assert answer["result"] == {"stopReason": stop}
        assert chunks == [f"{i:06d}{TEXT}" for i in range(sent)]
        [turn] = await store.load_history(DEFAULT_OWNER, session)
        assert turn.stop_reason == stop
        assert [orjson.loads(u)["content"]["text"] for u in turn.updates[1:]] == chunks
