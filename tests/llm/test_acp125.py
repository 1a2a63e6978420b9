"""The language-model agent on ACP 1.25: context compaction (across processes), the model's
own tool-call ids, the model as a config option, and the API-key auth method."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from acp_agent.llm import LlmAgent, Secret
from acp_agent.llm.compact import SUMMARY_PROMPT
from acp_agent.llm.context import SUMMARY_HEADING
from acp_agent.llm.fake_server import SUMMARY_MARK, FakeModelServer, is_issued
from tests.helpers.wire_client import FULL_CAPS, Message, ProcessClient, spawn, update_kind

from .harness import RpcError, base_config, harness

pytestmark = pytest.mark.anyio

WINDOW = 2000
FILLER = " ".join(["padding"] * 100)  # about 200 tokens a prompt
CAPS_125: dict[str, Any] = {**FULL_CAPS, "session": {"compaction": {}}}


def _notes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("first line\nsecond line\n")


async def test_the_models_tool_call_ids_go_back_to_it(tmp_path: Path) -> None:
    _notes(tmp_path)
    async with harness(str(tmp_path)) as h:
        sid = await h.session()
        assert await h.client.prompt(sid, "fake:tool-loop notes.txt") == "end_turn"
        assert h.fake.script.id_errors == []
        last = h.fake.requests[-1]["messages"]
        sent_back = [c["id"] for m in last if m["role"] == "assistant" for c in m["tool_calls"]]
        assert sent_back == h.fake.script.issued and all(map(is_issued, sent_back))
        results = [m["tool_call_id"] for m in last if m["role"] == "tool"]
        assert results == sent_back
        names = [c.get("name") for c in h.client.tool_calls()]
        assert names == ["read_file", "edit_file", "run_command"]


async def test_the_model_is_a_config_option_listing_the_endpoints_models(tmp_path: Path) -> None:
    async with harness(str(tmp_path)) as h:
        result = await h.client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        [option] = result["configOptions"]
        assert option["category"] == "model" and option["currentValue"] == "fake"
        assert [o["value"] for o in option["options"]] == ["fake", "fake-large"]
        sid = result["sessionId"]
        await h.client.call(
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": "fake-large"},
        )
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert h.fake.requests[-1]["model"] == "fake-large"


async def test_a_hosted_endpoint_needs_a_key_that_logout_forgets(tmp_path: Path) -> None:
    agent = LlmAgent(base_config_remote())
    assert agent.needs_key and agent.requires_auth()
    assert [m["id"] for m in agent.auth_methods(None)] == ["api-key", "login"]  # type: ignore[arg-type]
    await agent.authenticate("api-key", {"api-key": "sk-given"})
    assert not agent.requires_auth() and agent.api_key is not None
    assert agent.api_key.reveal() == "sk-given" and agent.supports_logout()
    await agent.logout()
    assert agent.requires_auth() and agent.api_key is None


async def test_logout_forgets_the_key_and_authenticate_gives_one(tmp_path: Path) -> None:
    def keyed(fake: FakeModelServer) -> Any:
        return base_config(fake, api_key=Secret("sk-configured"))

    async with harness(str(tmp_path), config=keyed) as h:
        init = await h.client.initialize()
        assert init["agentCapabilities"]["auth"] == {"logout": {}}
        assert [m["id"] for m in init["authMethods"]] == ["api-key"]
        sid = await h.session()
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert h.fake.request_headers[-1]["authorization"] == "Bearer sk-configured"
        assert await h.client.call("logout", {}) == {}
        with pytest.raises(RpcError) as info:
            await h.session()
        assert info.value.code == -32000
        await h.client.call("authenticate", {"methodId": "api-key", "_meta": {"api-key": "sk-2"}})
        assert await h.client.prompt(await h.session(), "fake:cold") == "end_turn"
        assert h.fake.request_headers[-1]["authorization"] == "Bearer sk-2"


def base_config_remote() -> Any:
    from acp_agent.llm import LlmConfig

    return LlmConfig(model="m", base_url="https://api.openai.com/v1")


def test_the_summary_request_is_one_the_fake_endpoint_recognises() -> None:
    assert SUMMARY_PROMPT.startswith(SUMMARY_MARK)


# ----------------------------------------------------------------------- compaction


def agent_command(fake: FakeModelServer, db: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "acp_agent",
        "--store",
        str(db),
        "--model",
        "fake",
        "--base-url",
        fake.base_url,
        "--retries",
        "0",
    ]


@asynccontextmanager
async def agent_process(fake: FakeModelServer, db: Path) -> AsyncIterator[ProcessClient]:
    async with spawn(agent_command(fake, db)) as client:
        yield client


def compactions(updates: list[Message]) -> list[Message]:
    return [u for u in updates if u["sessionUpdate"].startswith("compaction")]


@pytest.mark.parametrize("caps", [CAPS_125, FULL_CAPS], ids=["announced", "unannounced"])
async def test_a_long_conversation_is_compacted_and_continues_after_load(
    tmp_path: Path, caps: dict[str, Any]
) -> None:
    db = tmp_path / "sessions.sqlite3"
    live: list[Message] = []
    async with FakeModelServer.running(context_window=WINDOW) as fake:
        async with agent_process(fake, db) as client:
            await client.initialize(caps)
            result, _ = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = result["sessionId"]
            for i in range(1, 8):
                turn = await client.prompt(sid, f"topic{i} fake:cold {FILLER}")
                assert turn.error is None, turn.response  # never over the window
                assert turn.texts()[-1] == "Hello from the fake model."
                live += turn.updates
        summaries = [r for r in fake.requests if r["messages"][0]["content"] == SUMMARY_PROMPT]
        assert summaries, "the conversation outgrew the window but was never compacted"
        announced = compactions(live)
        if caps is CAPS_125:
            assert announced[0]["status"] == "in_progress"
            assert announced[-1]["status"] == "completed"
            first = announced[0]["compactionId"]
            mine = [u for u in announced if u["compactionId"] == first]
            chunks = [u["content"]["text"] for u in mine[1:-1]]
            assert "".join(chunks).startswith("Summary of the earlier conversation: topic1 ")
        else:
            assert announced == []  # recorded, never sent to a client that cannot show it
        before_load = len(fake.requests)

        async with agent_process(fake, db) as client:
            await client.initialize(caps)
            load_id = await client.request(
                "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            )
            _, frames = await client.expect(lambda m: m.get("id") == load_id and "method" not in m)
            replayed = [m["params"]["update"] for m in frames if update_kind(m)]
            assert compactions(replayed) == announced
            turn = await client.prompt(sid, "topic9 fake:echo")
            assert turn.error is None and turn.stop_reason == "end_turn"
        continued = fake.requests[before_load]["messages"]
        system = continued[0]["content"]
        assert SUMMARY_HEADING in system and "Summary of the earlier conversation: topic1" in system
        users = [m["content"] for m in continued if m["role"] == "user"]
        assert not any(u.startswith("topic1 ") for u in users), "compacted turns were sent again"
        assert users[-1] == "topic9 fake:echo"
