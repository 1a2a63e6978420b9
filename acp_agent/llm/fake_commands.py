"""The fake model's answers to the reference agent's slash commands, for adapted agents.

An agent built with a framework (:mod:`acp_agent.adapters`) that advertises the reference
agent's commands passes their text to its model; on the fake endpoint, this module
answers them the way a model with the matching tools would: ``/tools N`` (N calls of
``add``), ``/write PATH TEXT`` (``write_file``), ``/read PATH`` (``read_file``), ``/run
COMMAND`` (``run_command``), ``/plan N`` (``update_plan`` with N entries), ``/notice
SEVERITY TITLE`` (``notify``), ``/compact N`` (``compact_context`` with N summary parts),
``/echo TEXT`` and ``/stream N SIZE`` (text). After the tool results it reports the last
one. It knows nothing of HTTP: :mod:`acp_agent.llm.fake_script` asks it first.
"""

from __future__ import annotations

from typing import Final

from .fake_script import JSON, Reply, text_events, tool_events

COMMANDS: Final = ("tools", "write", "read", "run", "plan", "notice", "compact", "echo", "stream")


def _number(words: list[str], default: int) -> int:
    return int(words[0]) if words and words[0].isdigit() else default


def _call(words: list[str], rest: str) -> list[tuple[str, JSON]] | None:
    """The tool calls a command asks for (None: it is text only)."""
    name = words[0][1:]
    args = words[1:]
    if name == "tools":
        return [("add", {"a": i, "b": 1}) for i in range(_number(args, 1))]
    if name == "write" and args:
        parts = rest.split(None, 2)
        return [("write_file", {"path": args[0], "content": parts[2] if len(parts) > 2 else ""})]
    if name == "read" and args:
        return [("read_file", {"path": args[0]})]
    if name == "run" and args:
        return [("run_command", {"command": rest.split(None, 1)[1]})]
    if name == "plan":
        steps = [f"step {i + 1}" for i in range(_number(args, 3))]
        return [("update_plan", {"entries": [{"content": s, "status": "pending"} for s in steps]})]
    if name == "notice" and len(args) > 1:
        return [("notify", {"severity": args[0], "title": " ".join(args[1:])})]
    if name == "compact":
        return [("compact_context", {"parts": _number(args, 1)})]
    return None


def command_reply(text: str, results: list[str]) -> Reply | None:
    """The reply to a slash command in ``text`` (None: not one of :data:`COMMANDS`)."""
    words = text.split()
    if not words or not words[0].startswith("/") or words[0][1:] not in COMMANDS:
        return None
    if words[0] == "/echo":
        return Reply(events=text_events(text.split(None, 1)[1] if len(words) > 1 else ""))
    if words[0] == "/stream":
        count = _number(words[1:], 3)
        return Reply(events=text_events("".join(f"chunk {i} " for i in range(count)), count))
    if results:
        return Reply(events=text_events(f"Done: {results[-1].strip()[:200]}"))
    calls = _call(words, text)
    if calls is None:
        return Reply(events=text_events(f"Usage: {words[0]} needs arguments."))
    return Reply(events=tool_events(calls))
