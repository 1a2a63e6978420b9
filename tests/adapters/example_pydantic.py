"""A small pydantic-ai agent for the adapter tests and conformance: one plain tool, one
that needs approval, on the fake endpoint whose URL is in ACP_FAKE_BASE_URL."""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from acp_agent.adapters.pydantic_ai import editor_toolset

BASE_URL = os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1")
model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=BASE_URL, api_key="test-key"))
agent = Agent(model, instructions="You are a careful assistant.", toolsets=[editor_toolset()])


@agent.tool_plain(metadata={"acp_kind": "think"})
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@agent.tool_plain(requires_approval=True, metadata={"acp_kind": "delete", "acp_path": "path"})
def delete_file(path: str) -> str:
    """Delete a file (pretends to)."""
    return f"deleted {path}"
