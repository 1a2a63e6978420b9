"""acp-agent: the agent side of the Agent Client Protocol (ACP v1) for Python.

Write an agent by subclassing :class:`Agent` and serve it with :func:`run_agent`::

    from acp_agent import Agent, PromptTurn, run_agent

    class Hello(Agent):
        name = "hello"

        async def prompt(self, turn: PromptTurn) -> str:
            await turn.client.message(f"you said: {turn.text}")
            return "end_turn"

    run_agent(Hello())

The exceptions an agent may catch are exported too: :class:`CapabilityError` (the
client lacks a capability a call needs), :class:`RequestError` (the client answered a
request with an error), :class:`PathOutsideRoots`, :class:`ConnectionClosed`, ...
Test an agent with :mod:`acp_agent.testing`.

Names are loaded lazily so that ``import acp_agent`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Agent": "acp_agent.agent",
    "PromptTurn": "acp_agent.agent",
    "StopReason": "acp_agent.agent",
    "Command": "acp_agent.agent",
    "Mode": "acp_agent.agent",
    "ConfigOption": "acp_agent.agent",
    "Session": "acp_agent.session",
    "SessionClient": "acp_agent.client",
    "ClientCapabilities": "acp_agent.client",
    "ToolCall": "acp_agent.client",
    "Terminal": "acp_agent.client",
    "TerminalExit": "acp_agent.client",
    "TerminalOutput": "acp_agent.client",
    "InitializeParams": "acp_agent.agent",
    "PermissionOption": "acp_agent.client",
    "PermissionOutcome": "acp_agent.client",
    "ALLOW_ONCE": "acp_agent.client",
    "REJECT_ONCE": "acp_agent.client",
    "text_content": "acp_agent.client",
    "diff_content": "acp_agent.client",
    "terminal_content": "acp_agent.client",
    "AcpServer": "acp_agent.server",
    "ServerOptions": "acp_agent.options",
    "serve": "acp_agent.server",
    "AgentSession": "acp_agent.connection",
    "run_agent": "acp_agent.runner",
    "serve_stdio": "acp_agent.runner",
    "memory_pair": "acp_agent.transport",
    "StdioTransport": "acp_agent.transport",
    "open_store": "acp_agent.store",
    "MemorySessionStore": "acp_agent.store",
    "SqliteSessionStore": "acp_agent.store",
    "AcpError": "acp_agent.errors",
    "CapabilityError": "acp_agent.errors",
    "IllegalTransition": "acp_agent.errors",
    "PathOutsideRoots": "acp_agent.errors",
    "RequestError": "acp_agent.errors",
    "InvalidParams": "acp_agent.errors",
    "InternalError": "acp_agent.errors",
    "MethodNotFound": "acp_agent.errors",
    "AuthRequired": "acp_agent.errors",
    "ResourceNotFound": "acp_agent.errors",
    "ConnectionClosed": "acp_agent.errors",
    "CallTimeout": "acp_agent.errors",
}

__all__ = [
    "ALLOW_ONCE",
    "REJECT_ONCE",
    "AcpError",
    "AcpServer",
    "Agent",
    "AgentSession",
    "AuthRequired",
    "CallTimeout",
    "CapabilityError",
    "ClientCapabilities",
    "Command",
    "ConfigOption",
    "ConnectionClosed",
    "IllegalTransition",
    "InitializeParams",
    "InternalError",
    "InvalidParams",
    "MemorySessionStore",
    "MethodNotFound",
    "Mode",
    "PathOutsideRoots",
    "PermissionOption",
    "PermissionOutcome",
    "PromptTurn",
    "RequestError",
    "ResourceNotFound",
    "ServerOptions",
    "Session",
    "SessionClient",
    "SqliteSessionStore",
    "StdioTransport",
    "StopReason",
    "Terminal",
    "TerminalExit",
    "TerminalOutput",
    "ToolCall",
    "__version__",
    "diff_content",
    "memory_pair",
    "open_store",
    "run_agent",
    "serve",
    "serve_stdio",
    "terminal_content",
    "text_content",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acp_agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .agent import (
        Agent,
        Command,
        ConfigOption,
        InitializeParams,
        Mode,
        PromptTurn,
        StopReason,
    )
    from .client import (
        ALLOW_ONCE,
        REJECT_ONCE,
        ClientCapabilities,
        PermissionOption,
        PermissionOutcome,
        SessionClient,
        Terminal,
        TerminalExit,
        TerminalOutput,
        ToolCall,
        diff_content,
        terminal_content,
        text_content,
    )
    from .connection import AgentSession
    from .errors import (
        AcpError,
        AuthRequired,
        CallTimeout,
        CapabilityError,
        ConnectionClosed,
        IllegalTransition,
        InternalError,
        InvalidParams,
        MethodNotFound,
        PathOutsideRoots,
        RequestError,
        ResourceNotFound,
    )
    from .options import ServerOptions
    from .runner import run_agent, serve_stdio
    from .server import AcpServer, serve
    from .session import Session
    from .store import MemorySessionStore, SqliteSessionStore, open_store
    from .transport import StdioTransport, memory_pair
