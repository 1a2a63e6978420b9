"""The reference agent's contract (``reference-agent.md``), over a real subprocess and pipes.

Every test starts ``python -m acp_agent --store memory`` and scripts the client side
with :mod:`tests.helpers.wire_client`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wire_client import (
    AgentError,
    Message,
    ProcessClient,
    WireError,
    spawn,
    update_kind,
)

pytestmark = pytest.mark.anyio

COMMANDS = [
    "echo",
    "stream",
    "sleep",
    "think",
    "plan",
    "tools",
    "read",
    "write",
    "run",
    "fail",
    "notice",
    "compact",
    "help",
]
WITH_ARGUMENTS = set(COMMANDS) - {"help"}


async def open_session(
    client: ProcessClient, cwd: Path, capabilities: Message | None = None
) -> str:
    await client.initialize(capabilities)
    session_id, _, _ = await client.new_session(cwd)
    return session_id


async def test_initialize_and_session_setup(tmp_path: Path) -> None:
    async with spawn() as client:
        init = await client.initialize()
        assert init["agentCapabilities"]["promptCapabilities"] == {
            "image": True,
            "audio": True,
            "embeddedContext": True,
        }
        result, before = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert before == []
        assert result["modes"]["currentModeId"] == "ask"
        assert [m["id"] for m in result["modes"]["availableModes"]] == ["ask", "auto"]
        [option] = result["configOptions"]
        assert option["id"] == "mode" and option["category"] == "mode"
        assert option["type"] == "select" and option["currentValue"] == "ask"
        assert [o["value"] for o in option["options"]] == ["ask", "auto"]
        # The commands come right after the session/new response.
        message = await client.receive()
        assert update_kind(message) == "available_commands_update"
        advertised = message["params"]["update"]["availableCommands"]
        assert [c["name"] for c in advertised] == COMMANDS
        for command in advertised:
            assert command["description"]
            assert ("input" in command) == (command["name"] in WITH_ARGUMENTS)


async def check_output_commands(client: ProcessClient, sid: str, tmp_path: Path) -> None:

    turn = await client.prompt(sid, "/echo  hello é中文 😀  twice ")
    assert turn.stop_reason == "end_turn"
    assert turn.kinds() == ["agent_message_chunk"]
    assert turn.texts() == ["hello é中文 😀  twice "]

    turn = await client.prompt(sid, "/stream 5")
    assert turn.texts() == ["x" * 64] * 5 and turn.stop_reason == "end_turn"
    turn = await client.prompt(sid, "/stream 3 7")
    assert turn.texts() == ["x" * 7] * 3
    turn = await client.prompt(sid, "/stream 0")
    assert turn.updates == [] and turn.stop_reason == "end_turn"

    turn = await client.prompt(sid, "/think a private thought")
    assert turn.kinds() == ["agent_thought_chunk"]
    assert turn.texts("agent_thought_chunk") == ["a private thought"]

    turn = await client.prompt(sid, "/sleep 1")
    assert turn.texts() == ["slept 1"]


async def check_plan_and_tools(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    turn = await client.prompt(sid, "/plan 2")
    assert turn.kinds() == ["plan"] * 3
    first = turn.updates[0]["entries"]
    assert first == [
        {"content": "step 1", "priority": "medium", "status": "pending"},
        {"content": "step 2", "priority": "medium", "status": "pending"},
    ]
    statuses = [[e["status"] for e in u["entries"]] for u in turn.updates]
    assert statuses[1:] == [["completed", "pending"], ["completed", "completed"]]

    turn = await client.prompt(sid, "/tools 2")
    assert turn.stop_reason == "end_turn"
    assert turn.kinds() == ["tool_call", "tool_call_update", "tool_call_update"] * 2
    for i in (1, 2):
        call, started, done = turn.updates[3 * (i - 1) : 3 * i]
        assert call["title"] == f"tool {i}" and call["kind"] == "other"
        assert call["name"] == f"tool_{i}"
        assert call["status"] == "pending"
        assert started["status"] == "in_progress"
        assert done["status"] == "completed"
        assert done["content"] == [
            {"type": "content", "content": {"type": "text", "text": f"done {i}"}}
        ]
        assert call["toolCallId"] == started["toolCallId"] == done["toolCallId"]


async def check_help_and_plain_prompts(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    turn = await client.prompt(sid, "/help")
    [text] = turn.texts()
    for name in COMMANDS:
        assert f"/{name}" in text

    blocks = [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image", "mimeType": "image/png", "data": "aGVsbG8="},
        {
            "type": "resource",
            "resource": {"uri": "file:///a.txt", "text": "abc", "mimeType": "text/plain"},
        },
    ]
    turn = await client.prompt(sid, blocks)
    assert turn.stop_reason == "end_turn"
    [reply] = turn.texts()
    assert "what is in this picture?" in reply
    assert "no language model is configured" in reply.lower() and "/help" in reply
    assert "image/png" in reply and "file:///a.txt" in reply


async def check_read(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    content = "héllo\nworld\n"

    async def answer(request: Message) -> Any:
        assert request["method"] == "fs/read_text_file"
        assert request["params"]["path"] == str(tmp_path / "sub" / "f.txt")
        return {"content": content}

    client.on_request = answer
    turn = await client.prompt(sid, "/read sub/f.txt 3")
    assert turn.methods == ["fs/read_text_file"] * 3
    assert turn.texts() == [f"read {3 * len(content)} chars"]
    assert turn.stop_reason == "end_turn"

    turn = await client.prompt(sid, f"/read {tmp_path / 'sub' / 'f.txt'}")
    assert turn.texts() == [f"read {len(content)} chars"]


def permission_answer(option_id: str | None, writes: list[Message]) -> Any:
    async def answer(request: Message) -> Any:
        if request["method"] == "session/request_permission":
            offered = [(o["optionId"], o["kind"]) for o in request["params"]["options"]]
            assert offered == [("allow_once", "allow_once"), ("reject_once", "reject_once")]
            if option_id is None:
                return {"outcome": {"outcome": "cancelled"}}
            return {"outcome": {"outcome": "selected", "optionId": option_id}}
        if request["method"] == "fs/write_text_file":
            writes.append(request["params"])
            return {}
        raise WireError(-32601, request["method"])

    return answer


async def check_write_with_permission(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    writes: list[Message] = []
    target = str(tmp_path / "out.txt")

    client.on_request = permission_answer("allow_once", writes)
    turn = await client.prompt(sid, "/write out.txt some new  text")
    assert turn.stop_reason == "end_turn"
    assert turn.methods == ["session/request_permission", "fs/write_text_file"]
    assert writes == [{"sessionId": sid, "path": target, "content": "some new  text"}]
    call = turn.updates[0]
    assert call["sessionUpdate"] == "tool_call" and call["kind"] == "edit"
    assert call["content"][0]["type"] == "diff"
    assert call["content"][0]["path"] == target
    assert call["content"][0]["newText"] == "some new  text"
    assert turn.requests[0]["params"]["toolCall"]["toolCallId"] == call["toolCallId"]
    assert turn.updates[-1]["status"] == "completed"

    writes.clear()
    client.on_request = permission_answer("reject_once", writes)
    turn = await client.prompt(sid, "/write out.txt nope")
    assert turn.methods == ["session/request_permission"] and writes == []
    assert turn.updates[-1]["status"] == "failed"
    assert turn.stop_reason == "end_turn"

    client.on_request = permission_answer(None, writes)
    turn = await client.prompt(sid, "/write out.txt nope")
    assert turn.stop_reason == "cancelled" and writes == []


async def check_modes_stay_in_step(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    writes: list[Message] = []
    client.on_request = permission_answer("allow_once", writes)

    _, before = await client.call("session/set_mode", {"sessionId": sid, "modeId": "auto"})
    [update] = [m["params"]["update"] for m in before]
    assert update["sessionUpdate"] == "config_option_update"
    assert update["configOptions"][0]["currentValue"] == "auto"
    turn = await client.prompt(sid, "/write a.txt auto")
    assert turn.methods == ["fs/write_text_file"]
    assert turn.updates[-1]["status"] == "completed"

    result, before = await client.call(
        "session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "ask"}
    )
    assert result["configOptions"][0]["currentValue"] == "ask"
    [update] = [m["params"]["update"] for m in before]
    assert update == {"sessionUpdate": "current_mode_update", "currentModeId": "ask"}
    turn = await client.prompt(sid, "/write a.txt ask")
    assert turn.methods == ["session/request_permission", "fs/write_text_file"]


async def check_run(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    exit_code = 0

    async def terminal(request: Message) -> Any:
        params = request["params"]
        method = request["method"]
        if method == "terminal/create":
            assert params["command"] == "sh"
            assert params["args"] == ["-c", "echo hi && exit $X"]
            assert params["cwd"] == str(tmp_path)
            return {"terminalId": "t1"}
        assert params["terminalId"] == "t1"
        if method == "terminal/wait_for_exit":
            return {"exitCode": exit_code, "signal": None}
        if method == "terminal/output":
            return {"output": "hi\n", "truncated": False}
        if method == "terminal/release":
            return {}
        raise WireError(-32601, method)

    client.on_request = terminal
    for exit_code, final in ((0, "completed"), (3, "failed")):
        turn = await client.prompt(sid, "/run echo hi && exit $X")
        assert turn.stop_reason == "end_turn"
        assert turn.methods == [
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release",
        ]
        call, embedded, done = [u for u in turn.updates if "toolCallId" in u]
        assert call["kind"] == "execute" and call["sessionUpdate"] == "tool_call"
        assert embedded["content"] == [{"type": "terminal", "terminalId": "t1"}]
        assert done["status"] == final
        assert turn.texts() == [f"exit {exit_code}"]
        assert turn.updates[-1]["sessionUpdate"] == "agent_message_chunk"


async def test_capabilities_missing(tmp_path: Path) -> None:
    async with spawn() as client:
        sid = await open_session(client, tmp_path, capabilities={})
        for prompt, capability in (
            ("/read f.txt", "fs.readTextFile"),
            ("/write f.txt text", "fs.writeTextFile"),
            ("/run true", "terminal"),
        ):
            turn = await client.prompt(sid, prompt)
            assert turn.requests == [], prompt
            assert turn.kinds() == ["agent_message_chunk"], prompt
            assert capability in turn.texts()[0]
            assert turn.stop_reason == "end_turn"


MALFORMED = [
    ("/stream", "count"),
    ("/stream abc", "count"),
    ("/stream 3 -1", "size"),
    ("/sleep 1.5", "ms"),
    ("/plan", "n"),
    ("/tools x", "n"),
    ("/read", "path"),
    ("/read f.txt many", "times"),
    ("/read /etc/passwd", "path"),
    ("/write", "path"),
    ("/run", "command"),
    ("/fail oops", "code"),
    ("/unknown", "command"),
]


async def check_malformed_arguments(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    for prompt, argument in MALFORMED:
        turn = await client.prompt(sid, prompt)
        assert turn.error is not None, prompt
        assert turn.error["code"] == -32602
        assert turn.error["message"].startswith(f"{argument}:"), turn.error
        assert turn.requests == []
        # Nothing of the session is lost: the next prompt works.
        turn = await client.prompt(sid, "/echo still here")
        assert turn.texts() == ["still here"]


async def check_fail(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    turn = await client.prompt(sid, "/fail -32042 something went  wrong")
    assert turn.error is not None
    assert turn.error["code"] == -32042
    assert turn.error["message"] == "something went  wrong"
    turn = await client.prompt(sid, "/fail 7")
    assert turn.error is not None and turn.error["code"] == 7
    assert (await client.prompt(sid, "/echo ok")).texts() == ["ok"]


async def check_cancel_while_waiting(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    request_id = await client.start_prompt(sid, "/sleep 30000")
    turn = await client.cancel(sid, request_id)
    assert turn.stop_reason == "cancelled" and turn.updates == []

    # Waiting on the client: the fs request is left unanswered, then cancelled.
    request_id = await client.start_prompt(sid, "/read f.txt")
    read, _ = await client.expect(lambda m: m.get("method") == "fs/read_text_file")
    await client.notify("session/cancel", {"sessionId": sid})
    response, before = await client.expect(lambda m: m.get("id") == request_id)
    assert response["result"] == {"stopReason": "cancelled"}
    cancels = [m for m in before if m.get("method") == "$/cancel_request"]
    assert cancels == [
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": read["id"]}}
    ]
    assert (await client.prompt(sid, "/echo after")).texts() == ["after"]


async def check_stream_many_chunks(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    turn = await client.prompt(sid, "/stream 5000 16")
    assert len(turn.updates) == 5000
    assert all(u["content"]["text"] == "x" * 16 for u in turn.updates)


async def check_session_errors_do_not_leak(client: ProcessClient, sid: str, tmp_path: Path) -> None:
    with pytest.raises(AgentError) as info:
        await client.call("session/set_mode", {"sessionId": sid, "modeId": "nope"})
    assert info.value.code == -32602
    assert (await client.prompt(sid, "/echo fine")).texts() == ["fine"]


# ----------------------------------------------------------------------- the tests
# One agent process per test keeps the suite fast; each check opens no state the
# next one depends on (modes get their own session).


async def test_output_commands(tmp_path: Path) -> None:
    async with spawn() as client:
        sid = await open_session(client, tmp_path)
        await check_output_commands(client, sid, tmp_path)
        await check_plan_and_tools(client, sid, tmp_path)
        await check_help_and_plain_prompts(client, sid, tmp_path)
        await check_stream_many_chunks(client, sid, tmp_path)


async def test_client_requests(tmp_path: Path) -> None:
    async with spawn() as client:
        sid = await open_session(client, tmp_path)
        await check_read(client, sid, tmp_path)
        await check_write_with_permission(client, sid, tmp_path)
        await check_run(client, sid, tmp_path)
        other, _, _ = await client.new_session(tmp_path)
        await check_modes_stay_in_step(client, other, tmp_path)


async def test_errors(tmp_path: Path) -> None:
    async with spawn() as client:
        sid = await open_session(client, tmp_path)
        await check_malformed_arguments(client, sid, tmp_path)
        await check_fail(client, sid, tmp_path)
        await check_session_errors_do_not_leak(client, sid, tmp_path)


async def test_cancel(tmp_path: Path) -> None:
    async with spawn() as client:
        sid = await open_session(client, tmp_path)
        await check_cancel_while_waiting(client, sid, tmp_path)
