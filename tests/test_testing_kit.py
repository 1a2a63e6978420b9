"""acp_agent.testing as an agent author uses it: the README's Shouty and its ten-line
test (run by pytest, as an author runs it), agents in memory and as subprocesses,
and what the kit makes of an agent's mistakes (a prompt returning None or raising,
relative and outside tool-call paths)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent import (
    Agent,
    InternalError,
    InvalidParams,
    MemorySessionStore,
    PromptTurn,
    StopReason,
    diff_content,
)
from acp_agent.testing import AgentClient, connect

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def readme_block(marker: str) -> str:
    """The README's python block that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"one README python block with {marker!r}, found {len(found)}"
    return found[0]


SHOUTY = readme_block("class Shouty")
SHOUTY_TEST = readme_block("async def test_shouty")


def shouty_module() -> Any:
    module = types.ModuleType("shouty")
    exec(compile(SHOUTY, "README.md#shouty", "exec"), module.__dict__)
    return module


def write_agent(directory: Path, source: str, name: str = "agent.py") -> list[str]:
    path = directory / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return [sys.executable, str(path)]


MEMORY_STORE = {"ACP_AGENT_DB": "memory"}


# -- the README ---------------------------------------------------------------------


def test_the_readme_test_passes_under_pytest_with_the_installed_plugin(tmp_path: Path) -> None:
    (tmp_path / "shouty.py").write_text(SHOUTY, encoding="utf-8")
    (tmp_path / "test_shouty.py").write_text(SHOUTY_TEST, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shouty.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **MEMORY_STORE},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b[12] passed", done.stdout), done.stdout  # one per anyio backend


async def test_shouty_in_memory_and_as_a_subprocess_answer_alike(tmp_path: Path) -> None:
    command = write_agent(tmp_path, SHOUTY, "shouty.py")
    turns = []
    for agent in (shouty_module().Shouty(), command):
        async with connect(agent, env=MEMORY_STORE) as client:
            assert client.agent_info["agentInfo"]["name"] == "shouty"
            session = await client.new_session()
            assert [c["name"] for c in session.commands] == ["shout"]
            turns.append(await session.prompt("/shout hi there"))
    for turn in turns:
        assert (turn.stop_reason, turn.text) == ("end_turn", "HI THERE")
        assert turn.kinds() == [
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "tool_call_update",
        ]
        (call,) = turn.tool_calls.values()
        assert (call["title"], call["kind"], call["status"]) == ("shouting", "think", "completed")


# -- an agent's mistakes --------------------------------------------------------------


class Silent(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message("thinking...")
        return None  # type: ignore[return-value]  # the bug under test


class Raising(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        raise ValueError("the model said no")


class Wordy(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        return "done"  # type: ignore[return-value]  # not a StopReason


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (Silent(), "Silent.prompt returned None; expected a StopReason (cancelled, end_turn, "),
        (Wordy(), "Wordy.prompt returned 'done'; expected a StopReason"),
        (Raising(), "Raising.prompt raised ValueError (the traceback is in the agent's log"),
    ],
)
async def test_a_prompt_that_returns_no_stop_reason_or_raises_is_named(
    agent: Agent, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "acp_agent")
    async with connect(agent) as client:
        session = await client.new_session()
        with pytest.raises(InternalError) as caught:
            await session.prompt("hello")
        assert caught.value.message.startswith(message), caught.value.message
        assert "the model said no" not in caught.value.message  # only in the log
    logged = [r for r in caplog.records if r.name == "acp_agent.agent"]
    assert len(logged) == 1 and type(agent).__name__ + ".prompt" in logged[0].getMessage()
    assert (logged[0].exc_info is not None) is isinstance(agent, Raising)


async def test_a_spawned_agents_traceback_is_on_its_stderr(tmp_path: Path) -> None:
    command = write_agent(
        tmp_path,
        """
        from acp_agent import Agent, run_agent

        class Broken(Agent):
            async def prompt(self, turn):
                return {}["missing"]

        raise SystemExit(run_agent(Broken()))
        """,
    )
    async with connect(command, env=MEMORY_STORE) as client:
        session = await client.new_session()
        with pytest.raises(InternalError, match=r"^Broken.prompt raised KeyError \(the traceback"):
            await session.prompt("hello")
    assert "Traceback" in client.stderr and 'return {}["missing"]' in client.stderr
    assert "KeyError: 'missing'" in client.stderr


class Locating(Agent):
    """Announces a tool call on the path the prompt names."""

    async def prompt(self, turn: PromptTurn) -> StopReason:
        path = turn.text
        call = await turn.client.tool_call(
            f"edit {path}",
            kind="edit",
            locations=[{"path": path}],
            content=[diff_content(path, "x")],
        )
        await call.complete()
        return "end_turn"


async def test_relative_tool_call_paths_reach_the_client_absolute(tmp_path: Path) -> None:
    async with connect(Locating(), cwd=tmp_path) as client:
        session = await client.new_session()
        turn = await session.prompt("src/app.py")
        with pytest.raises(InvalidParams, match="outside the session roots"):
            await session.prompt("../elsewhere.py")
    (call,) = turn.tool_calls.values()
    assert call["locations"] == [{"path": str(tmp_path / "src" / "app.py")}]
    assert call["content"][0]["path"] == str(tmp_path / "src" / "app.py")
    # the refused call never reached the client
    assert len([u for u in session.updates if u["sessionUpdate"] == "tool_call"]) == 1


# -- what the client serves -----------------------------------------------------------


class Editor(Agent):
    """Asks before it writes ``notes.txt`` in capitals; runs a terminal if told to."""

    async def prompt(self, turn: PromptTurn) -> StopReason:
        client = turn.client
        if turn.text == "run":
            async with client.terminal("sh", ["-c", "echo from the terminal"]) as term:
                exit_status = await term.wait_for_exit()
                output = await term.output()
            await client.message(f"{exit_status.exit_code}: {output.output.strip()}")
            return "end_turn"
        text = await client.read_text_file("notes.txt")
        call = await client.tool_call("capitalise", kind="edit")
        outcome = await client.request_permission(call)
        if not outcome.allowed:
            await call.fail()
            return "end_turn"
        await client.write_text_file("notes.txt", text.upper())
        await call.complete()
        return "end_turn"


@pytest.mark.parametrize(
    ("permission", "written"), [("allow_once", "HELLO"), ("reject_once", "hello")]
)
async def test_files_from_a_dict_and_permission_answers(permission: str, written: str) -> None:
    async with connect(Editor(), files={"notes.txt": "hello"}, permission=permission) as client:
        session = await client.new_session()
        turn = await session.prompt("go")
    assert client.files == {f"{client.cwd}/notes.txt": written}
    assert turn.methods()[:2] == ["fs/read_text_file", "session/request_permission"]
    (call,) = turn.tool_calls.values()
    assert call["status"] == ("completed" if permission == "allow_once" else "failed")


async def test_files_on_disk_and_terminals(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("on disk", encoding="utf-8")
    async with connect(Editor(), cwd=tmp_path, terminals=True) as client:
        session = await client.new_session()
        await session.prompt("go")
        turn = await session.prompt("run")
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "ON DISK"
    assert turn.text == "0: from the terminal"
    assert turn.methods()[0] == "terminal/create" and turn.methods()[-1] == "terminal/release"


async def test_without_terminals_the_capability_is_not_advertised() -> None:
    async with connect(Editor()) as client:
        session = await client.new_session()
        with pytest.raises(InternalError, match="CapabilityError"):
            await session.prompt("run")


# -- cancel and load ---------------------------------------------------------------------


class Waiting(Agent):
    async def prompt(self, turn: PromptTurn) -> StopReason:
        await turn.client.message(f"waiting on {turn.text}")
        await anyio.sleep_forever()
        raise AssertionError("not reached")


async def test_cancel_ends_the_turn_cancelled_and_load_replays_it() -> None:
    store = MemorySessionStore()
    async with connect(Waiting(), store=store) as client:
        session = await client.new_session()
        pending = await session.start_prompt("nothing")
        await session.cancel()
        turn = await pending.result()
        assert turn.stop_reason == "cancelled"
    async with connect(Waiting(), store=store) as other:
        loaded = await other.load_session(session.id)
    assert [u["sessionUpdate"] for u in loaded.replay][:1] == ["user_message_chunk"]
    assert loaded.replay[1:] == turn.updates


async def test_an_agent_that_never_answers_fails_the_test_in_time() -> None:
    async with connect(Waiting(), timeout=0.5) as client:
        session = await client.new_session()
        with pytest.raises(TimeoutError):
            await session.prompt("forever")
        assert isinstance(client, AgentClient)


# -- what an author reads -------------------------------------------------------------


def test_the_exceptions_an_author_catches_are_exported() -> None:
    import acp_agent
    from acp_agent import errors

    for name in ("CapabilityError", "RequestError", "PathOutsideRoots", "ConnectionClosed"):
        assert getattr(acp_agent, name) is getattr(errors, name)
        assert name in acp_agent.__all__


def test_every_public_call_of_the_session_client_and_its_handles_is_documented() -> None:
    import inspect

    from acp_agent.client import SessionClient, Terminal, ToolCall

    undocumented = [
        f"{cls.__name__}.{name}"
        for cls in (SessionClient, ToolCall, Terminal)
        for name, member in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(member) or isinstance(member, property))
        and not inspect.getdoc(member)
    ]
    assert undocumented == []
    # what the calls return is said where an author looks
    for method in ("request_permission", "terminal", "read_text_file", "tool_call"):
        doc = getattr(SessionClient, method).__doc__ or ""
        assert "Returns:" in doc or "Yields:" in doc, method
