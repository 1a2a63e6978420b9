"""The handles an agent holds for client-side things: tool calls, permission, terminals.

Owns :class:`ToolCall` (its status only moves forward, :data:`TOOL_TRANSITIONS`) and the
wire names of a tool call's optional fields (:func:`add_tool_call_fields`), the
permission option and outcome values, and :class:`Terminal` with its exit and output
values.

It does not create them or check capabilities: :class:`acp_agent.client.SessionClient`
does, and sends what they ask through itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from .errors import IllegalTransition

if TYPE_CHECKING:
    from .client import SessionClient

JSON = dict[str, Any]

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
PermissionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


# Legal tool-call status moves (v1 has no "cancelled" status).
TOOL_TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    "pending": frozenset({"pending", "in_progress", "completed", "failed"}),
    "in_progress": frozenset({"in_progress", "completed", "failed"}),
    "completed": frozenset(),
    "failed": frozenset(),
}


def add_tool_call_fields(
    update: JSON,
    content: Sequence[JSON] | None,
    locations: Sequence[JSON] | None,
    raw_input: Any,
    raw_output: Any,
    meta: Mapping[str, Any] | None,
) -> None:
    """Put the given (not None) optional fields of a ``tool_call`` or ``tool_call_update``
    into ``update``, under their wire names."""
    if content is not None:
        update["content"] = list(content)
    if locations is not None:
        update["locations"] = list(locations)
    if raw_input is not None:
        update["rawInput"] = raw_input
    if raw_output is not None:
        update["rawOutput"] = raw_output
    if meta is not None:
        update["_meta"] = dict(meta)


class ToolCall:
    """A tool call announced to the client. Its status only moves forward."""

    __slots__ = ("_client", "id", "status")

    def __init__(self, client: SessionClient, tool_call_id: str, status: str) -> None:
        self._client = client
        self.id = tool_call_id
        self.status = status

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed")

    def _check(self, status: str | None) -> None:
        if status is not None and status not in TOOL_TRANSITIONS[self.status]:
            raise IllegalTransition(f"tool call {self.id}", self.status, status)

    async def update(
        self,
        *,
        status: ToolStatus | None = None,
        title: str | None = None,
        kind: ToolKind | None = None,
        content: Sequence[JSON] | None = None,
        locations: Sequence[JSON] | None = None,
        raw_input: Any = None,
        raw_output: Any = None,
        meta: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        """Send a ``tool_call_update`` with only the given fields."""
        self._check(status)
        update: JSON = {"sessionUpdate": "tool_call_update", "toolCallId": self.id}
        if status is not None:
            update["status"] = status
        if title is not None:
            update["title"] = title
        if name is not None:
            update["name"] = name
        if kind is not None:
            update["kind"] = kind
        add_tool_call_fields(update, content, locations, raw_input, raw_output, meta)
        await self._client.update(update)
        if status is not None:
            self.status = status

    async def start(self) -> None:
        await self.update(status="in_progress")

    async def complete(self, content: Sequence[JSON] | None = None, raw_output: Any = None) -> None:
        await self.update(status="completed", content=content, raw_output=raw_output)

    async def fail(self, content: Sequence[JSON] | None = None, raw_output: Any = None) -> None:
        await self.update(status="failed", content=content, raw_output=raw_output)

    def as_update(self) -> JSON:
        return {"toolCallId": self.id}


# ------------------------------------------------------------------ permission


@dataclass(frozen=True, slots=True)
class PermissionOption:
    option_id: str
    name: str
    kind: PermissionKind

    def to_wire(self) -> JSON:
        return {"optionId": self.option_id, "name": self.name, "kind": self.kind}


ALLOW_ONCE: Final = PermissionOption("allow_once", "Allow once", "allow_once")
REJECT_ONCE: Final = PermissionOption("reject_once", "Reject", "reject_once")


@dataclass(frozen=True, slots=True)
class PermissionOutcome:
    """The client's answer: an option it selected, or ``cancelled``."""

    cancelled: bool
    option: PermissionOption | None = None

    @property
    def allowed(self) -> bool:
        return self.option is not None and self.option.kind.startswith("allow")


# ------------------------------------------------------------------ terminals


@dataclass(frozen=True, slots=True)
class TerminalExit:
    exit_code: int | None
    signal: str | None

    @classmethod
    def from_wire(cls, data: Any) -> TerminalExit:
        data = data if isinstance(data, Mapping) else {}
        code = data.get("exitCode")
        sig = data.get("signal")
        return cls(code if isinstance(code, int) else None, sig if isinstance(sig, str) else None)


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    output: str
    truncated: bool
    exit_status: TerminalExit | None


class Terminal:
    """A terminal created on the client. Use it through :meth:`SessionClient.terminal`,
    which releases it on every way out (normal, error, cancellation)."""

    __slots__ = ("_client", "id", "released")

    def __init__(self, client: SessionClient, terminal_id: str) -> None:
        self._client = client
        self.id = terminal_id
        self.released = False

    def _params(self) -> JSON:
        return {"sessionId": self._client.session_id, "terminalId": self.id}

    async def wait_for_exit(self) -> TerminalExit:
        result = await self._client.outbound.call("terminal/wait_for_exit", self._params())
        return TerminalExit.from_wire(result)

    async def output(self) -> TerminalOutput:
        result = await self._client.outbound.call("terminal/output", self._params())
        data = result if isinstance(result, Mapping) else {}
        status = data.get("exitStatus")
        return TerminalOutput(
            output=str(data.get("output", "")),
            truncated=bool(data.get("truncated", False)),
            exit_status=TerminalExit.from_wire(status) if status is not None else None,
        )

    async def kill(self) -> None:
        await self._client.outbound.call("terminal/kill", self._params())

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        await self._client.outbound.call("terminal/release", self._params())
