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
from acp_agent.protocol.wire import from_wire
from acp_agent.server import _plain_text_prompt
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
    if _plain_text_prompt(params):
        assert _model_accepts(params)
    event(f"fast path: {_plain_text_prompt(params)}, model: {_model_accepts(params)}")


@pytest.mark.parametrize(
    "params",
    [
        {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]},
        {"sessionId": "s", "prompt": [], "_meta": {"a": 1}},
        {"sessionId": "s", "prompt": [{"type": "text", "text": "", "_meta": None, "x": 1}]},
    ],
)
def test_plain_text_prompts_take_the_fast_path(params: dict[str, Any]) -> None:
    assert _plain_text_prompt(params)
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
    import acp_agent.server as server_module

    monkeypatch.setattr(server_module, "WARM_IDLE", 0)  # quiet means: one empty pass
    async with serving(Typed()) as (client, server):
        assert server._models_ready is None  # nothing built before initialize
        await client.initialize()
        with anyio.fail_after(30):
            while server._models_ready is None:
                await anyio.lowlevel.checkpoint()
            await server._models_ready.wait()
