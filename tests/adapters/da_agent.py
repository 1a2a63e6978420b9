"""A Deep Agents agent for the adapters' tests, on the fake endpoint named by
``ACP_FAKE_BASE_URL``: ``create_deep_agent`` with one plain tool (``add``), one that needs
approval (``run_command``, through ``interrupt_on``), a todo list (langchain's
``TodoListMiddleware``: Deep Agents 0.7 adds none), files through the client's editor
(``editor_backend``), the session's MCP servers (``session_mcp``) and a subagent
(``helper``). ``served`` is it with Deep Agents' tool kinds declared."""

from __future__ import annotations

from deepagents import create_deep_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.tools import tool

from acp_agent.adapters.deep_agents import editor_backend, serve
from acp_agent.adapters.langgraph import editor_tools, session_mcp
from tests.adapters import lg_agent
from tests.adapters.lg_agent import model


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


run_command.metadata = {"acp_kind": "execute"}

agent = create_deep_agent(
    model,
    [add, run_command],
    system_prompt="You are a test agent.",
    middleware=[TodoListMiddleware(), session_mcp()],
    subagents=[
        {
            "name": "helper",
            "description": "Answers one question.",
            "system_prompt": "You help.",
            "model": model,
            "tools": [add],
        }
    ],
    backend=editor_backend(),
    interrupt_on={"run_command": {"allowed_decisions": ["approve", "reject"]}},
)
served = serve(agent)


# -- for conformance: the reference agent's commands, with lg_agent's tools; the editor's
# read_file / write_file (the ``path`` the fake model's commands give; writes asking first)
# take the place of Deep Agents' own (``file_path``), as a tool the user gives does
conformance = serve(
    create_deep_agent(
        model,
        [
            lg_agent.add,
            lg_agent.update_plan,
            lg_agent.notify,
            lg_agent.compact_context,
            *editor_tools(),
        ],
        backend=editor_backend(),
        middleware=[session_mcp()],
    ),
    commands=lg_agent.served.slash_commands,
)
