"""A real coding agent: an OpenAI-compatible model, tools on the client's fs/terminal, MCP.

The CLI composes it with two calls::

    add_arguments(parser)          # the LLM flags (see ARG_NAMES for their dest names)
    agent = build_agent(args)      # raises ConfigError (a ValueError) with a one-line message

``build_agent`` reads these ``args`` attributes, each optional (missing or ``None``
falls back to the environment variable, then the default): ``model``, ``base_url``,
``api_key_file``, ``max_turn_requests``, ``request_timeout``, ``retries``,
``context_window``, ``max_tokens``, ``temperature``, ``system_prompt``,
``command_timeout``, ``model_headers``. The API key comes only from
``ACP_AGENT_API_KEY`` / ``OPENAI_API_KEY`` or a key file, never from a flag.

This package imports ``mcp`` only when a session lists MCP servers.
"""

from __future__ import annotations

import argparse

from .agent import LlmAgent
from .config import ARG_NAMES, ConfigError, LlmConfig, Secret, add_arguments, config_from_args
from .endpoint_check import endpoint_problem

__all__ = [
    "ARG_NAMES",
    "ConfigError",
    "LlmAgent",
    "LlmConfig",
    "Secret",
    "add_arguments",
    "build_agent",
    "config_from_args",
    "endpoint_problem",
]


def build_agent(args: argparse.Namespace) -> LlmAgent:
    """The LLM agent configured from parsed flags and the environment."""
    return LlmAgent(config_from_args(args))
