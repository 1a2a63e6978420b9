"""Prompt params: the plain-text fast path accepts only what the generated model accepts."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from acp_agent import Agent, PromptTurn
from acp_agent.agent import StopReason
from acp_agent.errors import InvalidParams
from acp_agent.protocol import PromptRequest, TextContentBlock
from acp_agent.protocol.wire import from_wire, plain_text_prompt
from tests.helpers.memclient import serving

NOT_AN_OBJECT = st.one_of(st.integers(), st.text(max_size=3), st.just([]), st.booleans())
VALID_META = st.one_of(st.none(), st.just({}), st.just({"k": [1]}))
VALID_BLOCK = st.fixed_dictionaries(
    {"type": st.just("text"), "text": st.text(max_size=8)},
    optional={"_meta": VALID_META, "extra": st.integers()},
)
VALID_PARAMS = st.fixed_dictionaries(
    {"sessionId": st.text(max_size=5), "prompt": st.lists(VALID_BLOCK, min_size=1, max_size=3)},
    optional={"_meta": VALID_META},
)
# One change to valid params, or none: each can make them invalid for the model, or not.
CHANGES: dict[str, Any] = {
    "none": None,
    "text not a string": ("block", "text", NOT_AN_OBJECT),
    "no text": ("block", "text", None),
    "another block type": ("block", "type", st.sampled_from(["image", "audio", "TEXT", 1])),
    "annotations": (
        "block",
        "annotations",
        st.one_of(st.just({"priority": 0.5}), st.just({"priority": "x"}), NOT_AN_OBJECT),
    ),
    "block _meta": ("block", "_meta", NOT_AN_OBJECT),
    "params _meta": ("params", "_meta", NOT_AN_OBJECT),
    "sessionId": ("params", "sessionId", st.one_of(st.none(), st.integers(), st.just([]))),
    "prompt not a list": ("params", "prompt", st.one_of(st.none(), st.just({}), st.text())),
    "block not an object": ("params", "prompt", st.lists(NOT_AN_OBJECT, min_size=1, max_size=2)),
}


@st.composite
def prompt_params(draw: st.DrawFn) -> dict[str, Any]:
    params: dict[str, Any] = draw(VALID_PARAMS)
    name = draw(st.sampled_from(sorted(CHANGES)))
    event(f"change: {name}")
    change = CHANGES[name]
    if change is not None:
        where, key, values = change
        target = params if where == "params" else draw(st.sampled_from(params["prompt"]))
        if values is None:
            del target[key]
        else:
            target[key] = draw(values)
    return params


def _model_accepts(params: dict[str, Any]) -> bool:
    try:
        from_wire(PromptRequest, params)
    except InvalidParams:
        return False
    return True


@settings(max_examples=1000)
@given(params=prompt_params())
def test_the_fast_path_accepts_only_what_the_model_accepts(params: dict[str, Any]) -> None:
    if plain_text_prompt(params):
        assert _model_accepts(params)
    event(f"fast path: {plain_text_prompt(params)}, model: {_model_accepts(params)}")


@pytest.mark.parametrize(
    "params",
    [
        {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]},
        {"sessionId": "s", "prompt": [], "_meta": {"a": 1}},
        {"sessionId": "s", "prompt": [{"type": "text", "text": "", "_meta": None, "x": 1}]},
    ],
)
def test_plain_text_prompts_take_the_fast_path(params: dict[str, Any]) -> None:
    assert plain_text_prompt(params)
    assert _model_accepts(params)


class Typed(Agent):
    """Reads the typed request, which a plain text prompt builds only on first use."""

    async def prompt(self, turn: PromptTurn) -> StopReason:
        first = turn.request.prompt[0]
        assert isinstance(first, TextContentBlock)
        await turn.client.message(f"{turn.request.session_id}:{first.text}")
        return "end_turn"


@pytest.mark.anyio
async def test_the_typed_request_is_built_on_demand() -> None:
    async with serving(Typed()) as (client, _server):
        await client.initialize()
        session = await client.new_session()
        for prompt in (
            [{"type": "text", "text": "plain"}],
            [{"type": "text", "text": "annotated", "annotations": {"priority": 1.0}}],
        ):
            with anyio.fail_after(10):
                resp, before = await client.call(
                    "session/prompt", {"sessionId": session, "prompt": prompt}
                )
            assert resp["result"] == {"stopReason": "end_turn"}
            texts = [
                m["params"]["update"]["content"]["text"]
                for m in before
                if m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            ]
            assert texts == [f"{session}:{prompt[0]['text']}"]


@pytest.mark.anyio
async def test_a_text_block_that_is_not_a_string_is_still_invalid_params() -> None:
    async with serving(Typed()) as (client, _server):
        await client.initialize()
        session = await client.new_session()
        resp, _ = await client.call(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": 5}]}
        )
        assert resp["error"]["code"] == -32602


@pytest.mark.anyio
async def test_the_models_are_built_in_the_background_once_the_client_is_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import acp_agent.server.models as models_module

    monkeypatch.setattr(models_module, "WARM_IDLE", 0)  # quiet means: one empty pass
    monkeypatch.setattr(models_module, "_models_built", False)  # as in a fresh process
    async with serving(Typed()) as (client, server):
        assert server.models.ready is None  # nothing built before initialize
        await client.initialize()
        with anyio.fail_after(30):
            while server.models.ready is None:
                await anyio.lowlevel.checkpoint()
            await server.models.ready.wait()


BURST = r"""
import sys
import anyio
import orjson
import acp_agent.server.models as models_module
from acp_agent.reference import ReferenceAgent
from acp_agent.server import AcpServer
from acp_agent.transport import memory_pair

models_module.WARM_IDLE = 3600  # this is about a burst, not about an idle client

async def main():
    ours, theirs = memory_pair()
    buffer = b""

    async def call(id, method, params):
        nonlocal buffer
        await ours.send(orjson.dumps({"jsonrpc": "2.0", "id": id, "method": method,
                                      "params": params}) + b"\n")
        while True:
            while b"\n" not in buffer:
                buffer += await ours.receive()
            line, buffer = buffer.split(b"\n", 1)
            message = orjson.loads(line)
            if message.get("id") == id and "method" not in message:
                return message["result"]

    async with anyio.create_task_group() as tg:
        tg.start_soon(AcpServer(ReferenceAgent()).serve, theirs)
        await call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session = (await call(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))["sessionId"]
        for n in range(3, 23):
            text = "/echo hi" if n % 2 else "plain words"
            prompt = [{"type": "text", "text": text, "_meta": {"n": n}}]
            result = await call(n, "session/prompt", {"sessionId": session, "prompt": prompt})
            assert result == {"stopReason": "end_turn"}, result
        loaded = [m for m in sys.modules if m == "pydantic" or m.startswith("pydantic.")]
        assert not loaded, loaded[:3]
        await ours.send_eof()

anyio.run(main)
"""


def test_a_burst_of_text_prompts_never_loads_pydantic() -> None:
    import subprocess
    import sys

    from tests.helpers.wire_client import ROOT, child_env

    subprocess.run([sys.executable, "-c", BURST], check=True, cwd=ROOT, env=child_env(), timeout=60)
