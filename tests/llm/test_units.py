"""Sans-IO pieces of the LLM agent: SSE decoding, chunk assembly, config, context rebuild."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from acp_agent.history import TurnLog
from acp_agent.llm.backend import parse_retry_after
from acp_agent.llm.config import ConfigError, add_arguments, config_from_args
from acp_agent.llm.context import META_KEY, build_messages
from acp_agent.llm.sse import SseDecoder
from acp_agent.llm.stream import ChunkAssembler, ReasoningDelta, StreamError, TextDelta

STREAM = (
    b": comment\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: other\ndata: line1\ndata: line2\n\n"
    b"data:nospace\r\rdata: [DONE]\n\n"
)


def _decode(pieces: list[bytes]) -> list[tuple[str, str]]:
    decoder = SseDecoder()
    out = []
    for piece in pieces:
        out.extend((e.event, e.data) for e in decoder.feed(piece))
    return out


def test_sse_whole_and_byte_by_byte_agree() -> None:
    expected = [
        ("message", '{"a": 1}'),
        ("other", "line1\nline2"),
        ("message", "nospace"),
        ("message", "[DONE]"),
    ]
    assert _decode([STREAM]) == expected
    assert _decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == expected


def test_sse_multibyte_split_and_unfinished_event() -> None:
    data = "data: café ✓\n\n".encode()
    decoder = SseDecoder()
    assert decoder.feed(data[:8]) == []
    assert [e.data for e in decoder.feed(data[8:])] == ["café ✓"]
    assert decoder.feed(b"data: half") == [] and decoder.pending


def test_assembler_builds_tool_calls_by_index() -> None:
    asm = ChunkAssembler()
    deltas = []
    for chunk in [
        {"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hi"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "b",
                                "function": {"name": "two", "arguments": '{"x"'},
                            },
                            {"index": 0, "id": "a", "function": {"name": "one", "arguments": "{}"}},
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 1, "function": {"arguments": ": 1}"}}]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]:
        deltas.extend(asm.feed(chunk))
    assert deltas == [ReasoningDelta("hm"), TextDelta("Hi")]
    result = asm.result()
    assert [(c.call_id, c.name, c.arguments) for c in result.tool_calls] == [
        ("a", "one", "{}"),
        ("b", "two", '{"x": 1}'),
    ]
    assert result.finish_reason == "tool_calls"
    assert result.usage is not None and result.usage.total_tokens == 5


def test_assembler_errors() -> None:
    with pytest.raises(StreamError) as info:
        ChunkAssembler().feed_data("{nope")
    assert info.value.reason == "malformed_chunk"
    asm = ChunkAssembler()
    asm.feed({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    with pytest.raises(StreamError) as info:
        asm.result()
    assert info.value.reason == "truncated_stream"
    with pytest.raises(StreamError):
        ChunkAssembler().feed({"error": {"message": "overloaded"}})


def test_retry_after() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_config_precedence_and_secret(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    key_file = tmp_path / "key"
    key_file.write_text("sk-file-secret\n")
    args = parser.parse_args(["--model", "m1", "--retries", "5", "--api-key-file", str(key_file)])
    env = {
        "ACP_AGENT_MODEL": "m2",
        "ACP_AGENT_RETRIES": "1",
        "ACP_AGENT_CONTEXT_WINDOW": "8000",
        "OPENAI_API_KEY": "sk-env-secret",
    }
    config = config_from_args(args, env)
    assert (config.model, config.retries, config.context_window) == ("m1", 5, 8000)
    assert config.api_key is not None and config.api_key.reveal() == "sk-file-secret"
    assert "secret" not in repr(config) and "secret" not in str(config.api_key)
    env_only = config_from_args(argparse.Namespace(), env)
    assert env_only.model == "m2" and env_only.api_key is not None
    assert env_only.api_key.reveal() == "sk-env-secret"
    with pytest.raises(ConfigError, match="no model"):
        config_from_args(argparse.Namespace(), {})
    with pytest.raises(ConfigError, match="retries"):
        config_from_args(argparse.Namespace(), {"ACP_AGENT_MODEL": "m", "ACP_AGENT_RETRIES": "x"})


def test_context_rebuilds_foreign_and_interrupted_history() -> None:
    turn = TurnLog(
        "t1",
        [
            {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}},
            {
                "sessionUpdate": "user_message_chunk",
                "content": {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
            },
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "ok"},
                "_meta": {META_KEY: {"notice": True}},
            },
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Sure"}},
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "c1",
                "title": "Read a.py",
                "rawInput": {"path": "a.py"},
            },
            {"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "ls"},
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c1",
                "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "print(1)"}}],
            },
        ],
        interrupted=True,
    )
    messages = build_messages("sys", [turn])
    assert messages[1] == {"role": "user", "content": "hi\n[a.py](file:///a.py)"}
    assistant = messages[2]
    assert assistant["content"] == "Sure"
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["Read_a_py", "ls"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"path":"a.py"}'
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "print(1)"}
    assert messages[4]["tool_call_id"] == "c2" and "did not finish" in messages[4]["content"]


def test_fake_model_calls_only_offered_tools() -> None:
    from acp_agent.llm.fake_script import Script

    body = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
    plain = Script().reply(body, None)
    assert not any("tool_calls" in str(e) for e in plain.events)
    assert "Hello from the fake model." in str(plain.events)
    tool = {"type": "function", "function": {"name": "list_files", "parameters": {}}}
    offered = Script().reply({**body, "tools": [tool]}, None)
    assert any("list_files" in str(e) for e in offered.events)
