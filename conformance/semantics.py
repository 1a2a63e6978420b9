"""Rules on the agent's frames that the JSON Schema cannot express.

It owns the checks that need more than one frame or a value's meaning: a prompt's stop
reason is a v1 one, tool call paths are absolute, a ``tool_call_update`` follows its
``tool_call``. It returns problems; recording them as violations is the harness's.
"""

from __future__ import annotations

import os
from typing import Any

from .frames import STOP_REASONS

__all__ = ["frame_problems"]


def frame_problems(
    obj: dict[str, Any], kind: str, answered: str | None, tool_ids: dict[str, set[str]]
) -> list[tuple[str, str]]:
    """(rule, detail) for each problem of ``obj``; ``tool_ids`` (the tool call ids seen so
    far, by session) is updated with the ones it announces."""
    problems: list[tuple[str, str]] = []
    if kind == "response" and answered == "session/prompt" and isinstance(obj.get("result"), dict):
        sr = obj["result"].get("stopReason")
        if sr not in STOP_REASONS:
            problems.append(("R-TURN-2", f"stopReason {sr!r} is not a v1 stop reason"))
    if obj.get("method") != "session/update" or not isinstance(obj.get("params"), dict):
        return problems
    sid = obj["params"].get("sessionId")
    u = obj["params"].get("update")
    if not isinstance(u, dict):
        return problems
    for loc in u.get("locations") or []:
        if isinstance(loc, dict) and not os.path.isabs(str(loc.get("path", ""))):
            problems.append(
                ("R-TOOL-8", f"tool call location path {loc.get('path')!r} not absolute")
            )
    for c in u.get("content") or []:
        if (
            isinstance(c, dict)
            and c.get("type") == "diff"
            and not os.path.isabs(str(c.get("path")))
        ):
            problems.append(("R-TOOL-8", f"diff path {c.get('path')!r} is not absolute"))
    known = tool_ids.setdefault(repr(sid), set())
    if u.get("sessionUpdate") == "tool_call":
        known.add(repr(u.get("toolCallId")))
    elif u.get("sessionUpdate") == "tool_call_update" and repr(u.get("toolCallId")) not in known:
        problems.append(
            ("R-TOOL-9", f"tool_call_update for unannounced id {u.get('toolCallId')!r}")
        )
    return problems
