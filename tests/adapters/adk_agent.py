"""Google ADK agents for its adapter's tests, on the fake endpoint named by
``ACP_FAKE_BASE_URL`` through ADK's LiteLLM model (Chat Completions).

``served`` has one plain tool (``read_file``) and one that needs confirmation
(``run_command``); ``chooser`` offers two models; ``editing`` reads files through the
client's editor (``read_text``, which waits on ``fs/read_text_file``) beside ``run_command``.
"""

from __future__ import annotations

import os

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.tools import FunctionTool

from acp_agent.adapters import editor
from acp_agent.adapters.google_adk import GoogleAdkAgent
from acp_agent.adapters.turns import current_turn


def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


async def read_text(path: str) -> str:
    """Read a file of the project as the editor has it."""
    return await editor.read_file(current_turn(), path)


def model(name: str) -> LiteLlm:
    return LiteLlm(
        model=f"openai/{name}",
        api_base=os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key="sk-test",
        num_retries=0,
    )


agent = LlmAgent(
    name="helper",
    instruction="Be brief.",
    model=model("fake"),
    tools=[read_file, FunctionTool(run_command, require_confirmation=True)],
)
served = GoogleAdkAgent(
    agent,
    tool_metadata={
        "read_file": {"acp_kind": "read", "acp_path": "path"},
        "run_command": {"acp_kind": "execute"},
    },
)
chooser = GoogleAdkAgent(agent, models=[model("fake"), model("fake-large")])
editing = GoogleAdkAgent(
    LlmAgent(
        name="editor",
        instruction="Be brief.",
        model=model("fake"),
        tools=[read_text, FunctionTool(run_command, require_confirmation=True)],
    ),
    tool_metadata={"read_text": {"acp_kind": "read", "acp_path": "path"}},
)
