"""What the conformance harness records and is configured with: frames, violations, errors.

Owns the plain data the harness (``harness.py``), its answers to the agent (``answers.py``)
and the checks share; no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FULL_CAPS: dict[str, Any] = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "auth": {"terminal": True},
    "elicitation": {"form": {}, "url": {}},
    "session": {"configOptions": {"boolean": {}}},
}
STDERR_TAIL = 20_000
STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
TRANSCRIPT_LINE_MAX = 4_000


class AgentGone(Exception):
    """The agent closed its stdout (exited) while we were waiting for something."""


class WaitTimeout(Exception):
    """Nothing matching arrived in time."""


@dataclass
class Msg:
    """One JSON-RPC message the agent wrote."""

    index: int
    t: float
    obj: dict[str, Any]
    kind: str  # request | notification | response
    after_eof: bool = False

    @property
    def method(self) -> str | None:
        m = self.obj.get("method")
        return m if isinstance(m, str) else None

    @property
    def params(self) -> Any:
        return self.obj.get("params")

    def session_id(self) -> Any:
        p = self.params
        return p.get("sessionId") if isinstance(p, dict) else None

    def update(self) -> dict[str, Any]:
        p = self.params
        u = p.get("update") if isinstance(p, dict) else None
        return u if isinstance(u, dict) else {}


@dataclass
class Violation:
    t: float
    code: str  # requirement id the problem belongs to
    detail: str
    frame: int | None = None  # transcript index


@dataclass
class ClientConfig:
    """How the client answers the agent's requests."""

    capabilities: dict[str, Any] | None = field(default_factory=lambda: dict(FULL_CAPS))
    # first | allow | reject | cancelled | hold (the check answers by itself)
    permission: str = "first"
    terminal: str = "real"  # real | refuse
    elicitation: str = "decline"


def same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class CallError(Exception):
    def __init__(self, method: str, error: Any) -> None:
        super().__init__(f"{method} failed: {json.dumps(error)[:300]}")
        self.error = error


def id_key(rid: Any) -> tuple[str, Any]:
    return (type(rid).__name__, rid if isinstance(rid, (int, str)) else repr(rid))


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text)} chars]"


def schema_code(kind: str, obj: dict[str, Any]) -> str:
    if kind == "response":
        return "R-RPC-3"
    if obj.get("method") == "session/update":
        return "R-TURN-3"
    return "R-EXT-4"
