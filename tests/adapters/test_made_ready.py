"""What an adapter does when it is made, so that its first turn does not (under
``--agent`` it is made in the import thread, before the waiting requests run). Each
check runs in a fresh interpreter: in this one, earlier tests have done it already."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.wire_client import ROOT, child_env

# a fresh interpreter imports the framework: seconds on a busy machine
pytestmark = pytest.mark.timeout(120)


def fresh(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_pydantic_ai_adapter_builds_the_history_schema() -> None:
    pytest.importorskip("pydantic_ai")
    code = (
        "from pydantic_ai import Agent, ModelMessagesTypeAdapter as history\n"
        "from pydantic_ai.models.test import TestModel\n"
        "from acp_agent.adapters.pydantic_ai import PydanticAIAgent\n"
        "agent = Agent(TestModel())\n"
        "print(history.pydantic_complete)\n"
        "PydanticAIAgent(agent)\n"
        "print(history.pydantic_complete)\n"
    )
    assert fresh(code) == ["False", "True"]


def test_the_agents_sdk_adapter_imports_its_sdk_side() -> None:
    pytest.importorskip("agents")
    code = (
        "import sys\n"
        "from agents import Agent\n"
        "from acp_agent.adapters.openai_agents import OpenAIAgentsAgent\n"
        "side = 'acp_agent.adapters._openai_agents_runtime'\n"
        "print(side in sys.modules)\n"
        "OpenAIAgentsAgent(Agent(name='plain'))\n"
        "print(side in sys.modules)\n"
    )
    assert fresh(code) == ["False", "True"]
