"""The generated models against golden wire fixtures and the official ACP v1 schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from acp_agent.errors import INVALID_PARAMS, InvalidParams
from acp_agent.protocol import _generated as g
from acp_agent.protocol.methods import (
    AGENT_METHODS,
    CLIENT_METHODS,
    METHODS,
    PROTOCOL_METHODS,
    params_model,
    result_model,
)
from acp_agent.protocol.wire import from_wire, to_wire

from .conftest import FIXTURES, REPO

FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def validator_for(schema: dict[str, Any], name: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{name}"}
    )


def part_of(fixture: dict[str, Any]) -> Any:
    return fixture["message"][fixture["part"]]


def test_there_are_fixtures() -> None:
    assert len(FIXTURE_FILES) >= 50


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_round_trips(path: Path, official_schema: dict[str, Any]) -> None:
    fixture = load(path)
    message = fixture["message"]
    # the whole JSON-RPC message is valid ACP v1
    Draft202012Validator(official_schema).validate(message)
    wire = part_of(fixture)
    official = validator_for(official_schema, fixture["model"])
    official.validate(wire)
    model = from_wire(getattr(g, fixture["model"]), wire)
    dumped = to_wire(model)
    assert dumped == wire
    official.validate(dumped)


def covered() -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for path in FIXTURE_FILES:
        fixture = load(path)
        message = fixture["message"]
        seen.setdefault(fixture["part"], set()).add(fixture["model"])
        if "method" in message:
            seen.setdefault("methods", set()).add(message["method"])
            params = message.get("params") or {}
            update = params.get("update") if isinstance(params, dict) else None
            if update:
                seen.setdefault("updates", set()).add(update["sessionUpdate"])
            for block in params.get("prompt", []) if isinstance(params, dict) else []:
                seen.setdefault("blocks", set()).add(block["type"])
            if update and update.get("content"):
                items = update["content"]
                for item in items if isinstance(items, list) else []:
                    seen.setdefault("tool_content", set()).add(item["type"])
    return seen


def test_fixtures_cover_every_message_kind(official_meta: dict[str, Any]) -> None:
    seen = covered()
    all_methods = {
        *official_meta["agentMethods"].values(),
        *official_meta["clientMethods"].values(),
        *official_meta["protocolMethods"].values(),
    }
    assert seen["methods"] == all_methods
    for spec in METHODS.values():
        assert spec.params in seen["params"], spec.name
        if spec.result is not None:
            assert spec.result in seen["result"], spec.name
    assert "Error" in seen["error"]
    assert seen["updates"] == {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    }
    assert seen["blocks"] == {"text", "image", "audio", "resource_link", "resource"}
    assert seen["tool_content"] == {"content", "diff", "terminal"}


def test_methods_table_matches_meta(official_meta: dict[str, Any]) -> None:
    assert set(official_meta["agentMethods"].values()) == AGENT_METHODS
    assert set(official_meta["clientMethods"].values()) == CLIENT_METHODS
    assert set(official_meta["protocolMethods"].values()) == PROTOCOL_METHODS
    assert set(METHODS) == AGENT_METHODS | CLIENT_METHODS | PROTOCOL_METHODS
    for name, spec in METHODS.items():
        assert spec.name == name
        assert params_model(spec).__name__ == spec.params
        result = result_model(spec)
        assert (result is None) == (spec.kind == "notification")
        if result is not None:
            assert result.__name__ == spec.result


def test_method_table_examples() -> None:
    prompt = METHODS["session/prompt"]
    assert (prompt.direction, prompt.kind, prompt.params, prompt.result) == (
        "client->agent",
        "request",
        "PromptRequest",
        "PromptResponse",
    )
    cancel = METHODS["session/cancel"]
    assert (cancel.kind, cancel.params, cancel.result) == (
        "notification",
        "CancelNotification",
        None,
    )
    assert METHODS["session/update"].params == "SessionNotification"
    assert METHODS["session/update"].direction == "agent->client"
    assert METHODS["$/cancel_request"].direction == "both"


def test_unknown_fields_are_accepted_and_dropped() -> None:
    wire = {
        "sessionId": "s",
        "prompt": [{"type": "text", "text": "hi", "fromTheFuture": 1}],
        "someNewField": {"x": 1},
    }
    model = from_wire(g.PromptRequest, wire)
    assert to_wire(model) == {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}


def test_meta_round_trips_untouched() -> None:
    meta = {"vendor.example/trace": {"id": "abc", "spans": [1, 2.5, None, True]}, "x": "y"}
    wire = {"sessionId": "s", "_meta": meta}
    model = from_wire(g.CancelNotification, wire)
    assert model.field_meta == meta
    assert to_wire(model) == wire


def test_defaults_follow_the_schema() -> None:
    init = from_wire(g.InitializeRequest, {"protocolVersion": 1})
    assert init.client_capabilities.fs.read_text_file is False
    assert init.client_capabilities.terminal is False
    assert to_wire(init) == {"protocolVersion": 1}
    response = g.InitializeResponse(protocol_version=1)
    assert response.auth_methods == []
    assert response.agent_capabilities.load_session is False


def test_constructed_variants_always_carry_their_tag(official_schema: dict[str, Any]) -> None:
    note = g.SessionNotification(
        session_id="s",
        update=g.AgentMessageChunkSessionUpdate(content=g.TextContentBlock(text="hello")),
    )
    wire = to_wire(note)
    assert wire == {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hello"},
        },
    }
    validator_for(official_schema, "SessionNotification").validate(wire)


def test_protocol_version_is_a_uint16() -> None:
    with pytest.raises(InvalidParams):
        from_wire(g.InitializeRequest, {"protocolVersion": 70000})
    with pytest.raises(InvalidParams):
        from_wire(g.InitializeRequest, {"protocolVersion": -1})


def test_invalid_params_names_the_missing_field() -> None:
    with pytest.raises(InvalidParams) as info:
        from_wire(g.NewSessionRequest, {"mcpServers": []})
    err = info.value
    assert err.code == INVALID_PARAMS
    assert err.message == "invalid params: cwd: Field required"
    assert err.data == [{"field": "cwd", "message": "Field required"}]
    assert "\n" not in err.message


def test_invalid_params_never_echoes_large_input() -> None:
    huge = "A" * 10_000
    with pytest.raises(InvalidParams) as info:
        from_wire(g.NewSessionRequest, {"cwd": ["x", huge], "mcpServers": huge})
    assert huge[:100] not in info.value.message
    assert huge[:100] not in json.dumps(info.value.data)
    assert len(info.value.message) < 400
    assert info.value.message.startswith("invalid params: cwd: ")


def test_invalid_params_for_a_nested_field() -> None:
    with pytest.raises(InvalidParams) as info:
        from_wire(
            g.NewSessionRequest,
            {"cwd": "/", "mcpServers": [{"name": "x", "command": 5, "args": [], "env": []}]},
        )
    fields = [item["field"] for item in info.value.data]
    assert any(f.startswith("mcpServers.0") and f.endswith("command") for f in fields)


def test_importing_the_package_does_not_import_pydantic() -> None:
    code = (
        "import sys\n"
        "import acp_agent.protocol, acp_agent.protocol.methods\n"
        "assert not any(m == 'pydantic' or m.startswith('pydantic.') for m in sys.modules)\n"
        "assert 'acp_agent.protocol._generated' not in sys.modules\n"
        "acp_agent.protocol.PromptRequest\n"
        "assert 'acp_agent.protocol._generated' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_lazy_reexport_is_the_generated_object() -> None:
    import acp_agent.protocol as protocol

    assert protocol.SessionUpdate is g.SessionUpdate
    assert protocol.PromptRequest is g.PromptRequest
    assert set(protocol.__all__) <= set(dir(protocol))
    with pytest.raises(AttributeError):
        _ = protocol.NoSuchModel


def test_every_public_name_is_exported() -> None:
    import acp_agent.protocol as protocol

    assert set(protocol.__all__) == set(g.__all__)
