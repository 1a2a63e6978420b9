"""The pydantic-ai agent both adapters serve in ``benchmarks/adapters.py`` and
``benchmarks/adapter_defects.py``: the fake model (ACP_FAKE_BASE_URL), a plain tool and one
that needs approval. Run as a module, it is served by pydantic-acp."""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

BASE_URL = os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1")
model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=BASE_URL, api_key="bench"))
agent = Agent(model, name="bench", instructions="You are a careful assistant.")


@agent.tool_plain
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@agent.tool_plain(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (pretends to)."""
    return f"deleted {path}"


if __name__ == "__main__":
    from pydantic_acp import run_acp  # the peer's venv only

    run_acp(agent=agent)
