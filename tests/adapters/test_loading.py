"""The shared adapter layer without any framework: turn state, the loader, the registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from acp_agent.adapters import LoadError, load
from acp_agent.client import ClientCapabilities, replayable
from acp_agent.history import STATE_KIND, History, TurnLog, sanitize
from acp_agent.reference import ReferenceAgent


def test_saved_state_is_kept_per_turn_and_never_replayed() -> None:
    history = History()
    first = history.start_turn("t1", [{"type": "text", "text": "hi"}])
    first.record({"sessionUpdate": STATE_KIND, "state": {"n": 1}})
    first.record({"sessionUpdate": STATE_KIND, "state": {"n": 2}})  # the last one wins
    first.commit("end_turn")
    history.start_turn("t2", [{"type": "text", "text": "again"}]).commit("end_turn")
    assert history.states() == [{"n": 2}]
    # as a store gives it back: rebuilt from the events, repaired, the state is there
    loaded = sanitize([TurnLog(t.turn_id, t.events, t.stop_reason) for t in history.turns])
    assert [t.state for t in loaded] == [{"n": 2}, None]
    caps = ClientCapabilities({"session": {"notices": {}, "compaction": {}}})
    assert [e for e in loaded[0].events if not replayable(caps, e)] == [
        {"sessionUpdate": STATE_KIND, "state": {"n": 1}},
        {"sessionUpdate": STATE_KIND, "state": {"n": 2}},
    ]


def test_load_serves_our_agents_by_object_or_class() -> None:
    assert isinstance(load("acp_agent.reference:ReferenceAgent"), ReferenceAgent)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_such_module_here:agent", "cannot find module 'no_such_module_here'"),
        ("os:no_such_name", "module 'os' has no attribute 'no_such_name'"),
        ("os:path", "module object is not an agent"),
        ("justamodule", "expected module:object"),
    ],
)
def test_load_refuses_in_one_line(spec: str, says: str) -> None:
    with pytest.raises(LoadError) as caught:
        load(spec)
    assert str(caught.value).startswith(f"--agent {spec}: ")
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_command_says_one_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "notagent.py").write_text("thing = 42\n")
    done = subprocess.run(
        [sys.executable, "-m", "acp_agent", "--agent", "notagent:thing"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "acp-agent-kit: --agent notagent:thing: int object is not an agent (expected an "
        "acp_agent Agent, a pydantic-ai Agent, a LangGraph graph, an OpenAI Agents SDK Agent, "
        "a Google ADK agent, a LlamaIndex agent workflow or a Strands agent)"
    ]


def test_importing_the_adapters_imports_no_framework() -> None:
    code = (
        "import sys, acp_agent.adapters, acp_agent.adapters.pydantic_ai, "
        "acp_agent.adapters.turns, acp_agent.adapters.editor; "
        "print([m for m in ('pydantic_ai', 'openai', 'langgraph', 'agents') if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
