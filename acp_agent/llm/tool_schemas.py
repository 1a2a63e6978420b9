"""The JSON schemas of the built-in tools: what the model is told it may call.

Owns each tool's name, description and parameters, in the chat-completions ``function``
format. How each tool runs on ACP is :mod:`acp_agent.llm.tools`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

JSON = dict[str, Any]


def _function(name: str, description: str, properties: JSON, required: Sequence[str]) -> JSON:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(required),
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "file path, relative to the working dir or absolute"}

BUILTIN_SCHEMAS: Final[tuple[JSON, ...]] = (
    _function(
        "read_file",
        "Read a text file. Optionally start at a 1-based line and read a number of lines.",
        {
            "path": _PATH,
            "offset": {"type": "integer", "description": "1-based first line"},
            "limit": {"type": "integer", "description": "number of lines"},
        },
        ["path"],
    ),
    _function(
        "write_file",
        "Create or overwrite a text file with the given content (the user approves it).",
        {"path": _PATH, "content": {"type": "string"}},
        ["path", "content"],
    ),
    _function(
        "edit_file",
        "Replace an exact, unique snippet of a file with new text (the user approves it).",
        {
            "path": _PATH,
            "old_string": {"type": "string", "description": "exact text to replace"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean", "description": "replace every occurrence"},
        },
        ["path", "old_string", "new_string"],
    ),
    _function(
        "run_command",
        "Run a shell command in the working directory (the user approves it). "
        "Returns its exit code and output.",
        {
            "command": {"type": "string"},
            "cwd": {"type": "string", "description": "directory to run in (default: cwd)"},
            "timeout": {"type": "number", "description": "seconds before it is killed"},
        },
        ["command"],
    ),
    _function(
        "list_files",
        "List the files and directories under a directory (directories end with /).",
        {
            "path": {"type": "string", "description": "directory (default: the working directory)"},
            "recursive": {"type": "boolean"},
        },
        [],
    ),
    _function(
        "search_files",
        "Search file contents with a regular expression; returns path:line: text matches.",
        {
            "pattern": {"type": "string", "description": "Python regular expression"},
            "path": {"type": "string", "description": "directory or file (default: cwd)"},
            "glob": {"type": "string", "description": "only files matching this glob, e.g. *.py"},
        },
        ["pattern"],
    ),
)
