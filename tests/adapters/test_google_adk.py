"""The Google ADK adapter apart from what both official SDK clients drive
(``test_sdk_clients.py``): nothing of ADK is imported until an agent is adapted, and the
registry finds the adapter for ADK's agents by their package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.wire_client import ROOT, child_env

pytest.importorskip("google.adk")


def test_importing_the_adapter_imports_no_framework() -> None:
    code = (
        "import sys, acp_agent.adapters, acp_agent.adapters.google_adk;"
        "print(sorted(m for m in sys.modules if m.startswith(('google', 'litellm'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_an_adk_agent_is_served_by_its_adapter_and_other_google_objects_are_not() -> None:
    from google.adk.agents import LlmAgent
    from google.genai import types

    from acp_agent.adapters import framework_of

    found = framework_of(LlmAgent(name="a", model="openai/fake"))
    assert found is not None and found.extra == "google-adk"
    assert framework_of(types.Part(text="x")) is None  # google.genai is not google.adk
