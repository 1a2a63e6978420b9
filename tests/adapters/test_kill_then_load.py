"""After a kill, the model is told what the replay shows, under every adapter and the
built-in LLM agent.

An agent process is killed (SIGKILL) in three sessions at once: one whose tool waits on
the client (``fs/read_text_file``), one whose call waits on a permission request, one
whose answer is streaming (the fake endpoint's ``slow``). The first two follow a turn
that ended, the streamed one is its session's first turn, so the repair is tried on a
memory with turns and on an empty one. A new process on the same SQLite file loads each
session: the replay shows the killed turn's prompt, its partial text and its calls
``failed``, and the next model request holds the same: the prompt, the partial text as
the assistant's, and each call answered "interrupted"; loaded once more after a turn that
saved its memory, the killed turn is told once.

Each agent is two processes (the killed one, the loading one) shared by its cases; what
was sent reaches the store before the kill (``session/fork`` answers once its source's
writes are written), so no test waits on a clock.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import Message, ProcessClient, is_response, spawn

from .serving import SLOW, conversation_is_valid, new_session, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

BUILTIN = "the built-in LLM agent"


@dataclass(frozen=True)
class Subject:
    spec: str
    #: the package the agent needs (skipped without it)
    package: str
    #: ``fake:call`` words of a tool that waits on ``fs/read_text_file``
    reads: str
    #: ``fake:call`` words of a tool that asks permission before it runs
    asks: str


SUBJECTS = {
    "pydantic-ai": Subject(
        "tests.adapters.example_pydantic:agent",
        "pydantic_ai",
        "read_file path=notes.txt",
        "delete_file path=notes.txt",
    ),
    "langgraph": Subject(
        "tests.adapters.lg_agent:served",
        "langgraph",
        "read_file path=notes.txt",
        "run_command command=ls",
    ),
    "deep-agents": Subject(
        "tests.adapters.da_agent:served",
        "deepagents",
        "read_file file_path=/notes.txt",
        "run_command command=ls",
    ),
    "openai-agents": Subject(
        "tests.adapters.oa_agent:conformance",
        "agents",
        "read_file path=notes.txt",
        "run_command command=ls",
    ),
    "google-adk": Subject(
        "tests.adapters.adk_agent:editing",
        "google.adk",
        "read_text path=notes.txt",
        "run_command command=ls",
    ),
    "builtin": Subject(BUILTIN, "acp_agent", "read_file path=notes.txt", "run_command command=ls"),
}

CASES = ("tool", "approval", "stream")


@dataclass
class Killed:
    """What the killed process was doing, and the process that loads its sessions."""

    fake: FakeModelServer
    loader: ProcessClient
    cwd: Path
    sessions: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    #: what the killed process sent of each killed turn
    sent: dict[str, list[Message]] = field(default_factory=dict)


@asynccontextmanager
async def started(
    subject: Subject, fake: FakeModelServer, store: str, *extra: str
) -> AsyncIterator[ProcessClient]:
    if subject.spec != BUILTIN:
        async with served(subject.spec, fake, store, *extra) as client:
            yield client
        return
    command = [sys.executable, "-m", "acp_agent", "--store", store, *extra]
    async with spawn([*command, "--model", "fake", "--base-url", fake.base_url]) as client:
        await client.initialize()
        yield client


def the_prompt(subject: Subject, case: str) -> str:
    if case == "stream":
        return "fake:slow tell me"
    return f"fake:call {subject.reads if case == 'tool' else subject.asks}"


def reached(case: str, session_id: str) -> Callable[[Message], bool]:
    """The frame that shows the turn where it is to be killed."""

    def check(message: Message) -> bool:
        params = message.get("params") or {}
        if params.get("sessionId") != session_id:
            return False
        method = message.get("method")
        if case == "tool":
            return method == "fs/read_text_file"
        if case == "approval":
            return method == "session/request_permission"
        return method == "session/update" and (
            params["update"]["sessionUpdate"] == "agent_message_chunk"
        )

    return check


def updates_of(frames: list[Message], session_id: str) -> list[Message]:
    return [
        f["params"]["update"]
        for f in frames
        if f.get("method") == "session/update" and f["params"]["sessionId"] == session_id
    ]


@pytest.fixture(scope="module", params=sorted(SUBJECTS))
async def killed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Killed]:
    subject = SUBJECTS[str(request.param)]
    pytest.importorskip(subject.package)
    where = tmp_path_factory.mktemp(f"killed-{request.param}")
    store = str(where / "sessions.db")
    async with FakeModelServer.running() as fake:
        async with started(subject, fake, store, "--unstable") as victim:
            state = Killed(fake, victim, where)
            for case in CASES:
                sid = await new_session(victim, where)
                if case != "stream":
                    ended = await victim.prompt(sid, "fake:cold", timeout=SLOW)
                    assert ended.stop_reason == "end_turn", ended.response
                prompt = the_prompt(subject, case)
                await victim.start_prompt(sid, prompt)
                match, skipped = await victim.expect(reached(case, sid), timeout=SLOW)
                state.sessions[case], state.prompts[case] = sid, prompt
                state.sent[case] = updates_of([*skipped, match], sid)
            for sid in state.sessions.values():
                # answered once what the session sent so far is in the store
                params = {"sessionId": sid, "cwd": str(where), "mcpServers": []}
                await victim.call("session/fork", params)
            victim.process.send_signal(signal.SIGKILL)
            await victim.process.wait()
        async with started(subject, fake, store) as loader:
            state.loader = loader
            yield state


async def load(client: ProcessClient, session_id: str, cwd: Path) -> list[Message]:
    """``session/load``: the updates it replayed."""
    params = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
    request_id = await client.request("session/load", params)
    answer, frames = await client.expect(lambda m: is_response(m, request_id), timeout=SLOW)
    assert "result" in answer, answer
    return updates_of(frames, session_id)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def said(case: str) -> str:
    """The partial text the killed turn streamed before the kill."""
    return "Working on it" if case == "stream" else "Calling "


@pytest.mark.parametrize("case", CASES)
async def test_the_model_is_told_what_the_replay_of_a_killed_turn_shows(
    killed: Killed, case: str
) -> None:
    client, fake, sid = killed.loader, killed.fake, killed.sessions[case]
    prompt = killed.prompts[case]
    replay = await load(client, sid, killed.cwd)
    starts = [
        i
        for i, u in enumerate(replay)
        if u["sessionUpdate"] == "user_message_chunk" and u["content"].get("text") == prompt
    ]
    assert starts, replay
    turn = replay[starts[-1] + 1 :]
    # the replay shows what the killed process sent, its open calls closed failed
    sent = [u for u in killed.sent[case] if u["sessionUpdate"] != "available_commands_update"]
    assert turn[: len(sent)] == sent
    shown = "".join(
        u["content"]["text"] for u in turn if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert said(case) in shown, turn
    called = {u["toolCallId"] for u in turn if u["sessionUpdate"] == "tool_call"}
    assert len(called) == (0 if case == "stream" else 1), turn
    for call_id in called:
        status = [u["status"] for u in turn if u.get("toolCallId") == call_id and "status" in u]
        assert status[-1] == "failed", turn

    before = len(fake.requests)
    after = await client.prompt(sid, "fake:echo what now", timeout=SLOW)
    assert after.stop_reason == "end_turn", after.response
    messages = fake.requests[before]["messages"]
    # the model is told the same: the prompt, the partial text, each call interrupted
    told = [(m["role"], text_of(m.get("content"))) for m in messages]
    asked = [i for i, (role, text) in enumerate(told) if role == "user" and prompt in text]
    assert asked, told
    answered = [
        i
        for i, (role, text) in enumerate(told)
        if role == "assistant" and i > asked[-1] and said(case) in text
    ]
    assert answered, told
    assert told[-1][0] == "user" and "fake:echo what now" in told[-1][1], told
    results = [m for m in messages[answered[0] :] if m["role"] == "tool"]
    assert len(results) == len(called), told
    assert all("interrupted" in text_of(m.get("content")) for m in results), results
    assert conversation_is_valid(messages), messages

    # loaded again after a turn that saved its memory: told once, not twice
    await load(client, sid, killed.cwd)
    before = len(fake.requests)
    again = await client.prompt(sid, "fake:echo and now", timeout=SLOW)
    assert again.stop_reason == "end_turn", again.response
    messages = fake.requests[before]["messages"]
    users = [text_of(m.get("content")) for m in messages if m["role"] == "user"]
    assert sum(prompt in u for u in users) == 1, users
    assert sum("fake:echo what now" in u for u in users) == 1, users
    assert conversation_is_valid(messages), messages
