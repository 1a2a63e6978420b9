"""The two tools every benchmark agent has, as plain functions: ``read_file`` (plain) and
``run_command`` (needs approval). Each framework's agent module wraps them its own way."""

from __future__ import annotations

import os

BASE_URL = os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1")
INSTRUCTIONS = "Be brief."


def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"
