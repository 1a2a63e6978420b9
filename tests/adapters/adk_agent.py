"""Google ADK agents for its adapter's tests, on the fake endpoint named by
``ACP_FAKE_BASE_URL`` through ADK's LiteLLM model (Chat Completions).

``served`` has one plain tool (``read_file``) and one that needs confirmation
(``run_command``); ``chooser`` offers two models.
"""

from __future__ import annotations

import os

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.tools import FunctionTool

from acp_agent.adapters.google_adk import GoogleAdkAgent


def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


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
