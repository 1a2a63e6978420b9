"""Any bytes in: protocol errors out, and the connection still answers the next request."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from tests.helpers.memclient import serving


class Echo(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message(turn.text)
        return "end_turn"


FRAGMENTS = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b'"jsonrpc":"2.0"',
        b'"id":',
        b'"method":"session/prompt"',
        b'"params":',
        b"null",
        b"42",
        b"\r",
        b"\n",
        b"\xff",
        b",",
        b'"_x"',
    ]
)
GARBAGE = st.one_of(
    st.binary(max_size=200),
    st.lists(FRAGMENTS, max_size=30).map(b"".join),
)


async def _run(garbage: bytes) -> None:
    async with serving(Echo()) as (client, _server):
        await client.send_raw(garbage + b"\n")
        marker = "after-garbage"
        await client.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": {}}, id=marker
        )
        with anyio.fail_after(5):
            while True:
                msg = await client.recv()
                assert msg.get("jsonrpc") == "2.0"
                if msg.get("id") == marker and "method" not in msg:
                    assert msg["result"]["protocolVersion"] == 1
                    break
                # anything else must be an error answer to the garbage
                assert "error" in msg, msg
                assert isinstance(msg["error"]["code"], int)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=GARBAGE)
def test_any_bytes_then_a_valid_request(backend: str, garbage: bytes) -> None:
    anyio.run(_run, garbage, backend=backend)
