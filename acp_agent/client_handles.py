"""The handles an agent holds for client-side things: tool calls, permission, terminals.

Owns :class:`ToolCall` (its status only moves forward, :data:`TOOL_TRANSITIONS`) and the
wire names of a tool call's optional fields (:func:`add_tool_call_fields`), the
permission option and outcome values, and :class:`Terminal` with its exit and output
values.

It does not create them or check capabilities: :class:`acp_agent.client.SessionClient`
does, and gives each handle the one callable it sends through (a tool call its
``update``, a terminal its ``call``), so this module does not import the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from .errors import IllegalTransition

JSON = dict[str, Any]
#: sends one ``session/update`` (:meth:`acp_agent.client.SessionClient.update`)
SendUpdate = Callable[[JSON], Awaitable[None]]
#: sends one request to the client and returns its result (the connection's ``call``)
CallClient = Callable[[str, JSON], Awaitable[Any]]

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
    """A tool call announced to the client; its status only moves forward.

    Made by :meth:`acp_agent.client.SessionClient.tool_call`. ``pending`` may move to
    ``in_progress``, ``completed`` or ``failed``; ``in_progress`` to ``completed`` or
    ``failed``; the two ends are final (:data:`TOOL_TRANSITIONS`). A move the table
    refuses raises :class:`~acp_agent.errors.IllegalTransition` and sends nothing.

    Attributes:
        id: the ``toolCallId`` the client knows it by.
        status: the last status sent.
    """

    __slots__ = ("_send", "id", "status")

    def __init__(self, send: SendUpdate, tool_call_id: str, status: str) -> None:
        self._send = send
        self.id = tool_call_id
        self.status = status

    @property
    def finished(self) -> bool:
        """True once the call is ``completed`` or ``failed``."""
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
        """Send a ``tool_call_update`` carrying only the fields given.

        Paths in ``locations`` and in diff ``content`` are made absolute against the
        session's cwd (see :meth:`acp_agent.client.SessionClient.tool_call`).

        Raises:
            IllegalTransition: ``status`` may not follow the current one.
            PathOutsideRoots: a path lies outside the session's directories.
        """
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
        await self._send(update)
        if status is not None:
            self.status = status

    async def start(self) -> None:
        """Move to ``in_progress``."""
        await self.update(status="in_progress")

    async def complete(self, content: Sequence[JSON] | None = None, raw_output: Any = None) -> None:
        """Move to ``completed``, with the tool's output as ``content`` items
        (:func:`~acp_agent.content.text_content`, :func:`~acp_agent.content.diff_content`,
        :func:`~acp_agent.content.terminal_content`) and/or ``raw_output``."""
        await self.update(status="completed", content=content, raw_output=raw_output)

    async def fail(self, content: Sequence[JSON] | None = None, raw_output: Any = None) -> None:
        """Move to ``failed``; ``content`` usually says why."""
        await self.update(status="failed", content=content, raw_output=raw_output)

    def as_update(self) -> JSON:
        """The reference to this call that ``session/request_permission`` sends."""
        return {"toolCallId": self.id}


# ------------------------------------------------------------------ permission


@dataclass(frozen=True, slots=True)
class PermissionOption:
    """One choice offered in ``session/request_permission``.

    Attributes:
        option_id: the id the client answers with.
        name: what the person reads.
        kind: ``allow_once``, ``allow_always``, ``reject_once`` or ``reject_always``.
    """

    option_id: str
    name: str
    kind: PermissionKind

    def to_wire(self) -> JSON:
        """The option as ACP spells it."""
        return {"optionId": self.option_id, "name": self.name, "kind": self.kind}


ALLOW_ONCE: Final = PermissionOption("allow_once", "Allow once", "allow_once")
REJECT_ONCE: Final = PermissionOption("reject_once", "Reject", "reject_once")


@dataclass(frozen=True, slots=True)
class PermissionOutcome:
    """The client's answer to :meth:`~acp_agent.client.SessionClient.request_permission`.

    Attributes:
        cancelled: True when the client answered ``cancelled`` (the turn is being
            cancelled) or named no option that was offered; ``option`` is then None.
        option: the option the person chose.
    """

    cancelled: bool
    option: PermissionOption | None = None

    @property
    def allowed(self) -> bool:
        """True when the chosen option is an ``allow_*`` kind."""
        return self.option is not None and self.option.kind.startswith("allow")


# ------------------------------------------------------------------ terminals


@dataclass(frozen=True, slots=True)
class TerminalExit:
    """How a terminal's command ended.

    Attributes:
        exit_code: the exit code, or None when a signal ended it.
        signal: the signal's name (``"SIGKILL"``), or None.
    """

    exit_code: int | None
    signal: str | None

    @classmethod
    def from_wire(cls, data: Any) -> TerminalExit:
        """Read an ``exitStatus`` object (anything missing or mistyped is None)."""
        data = data if isinstance(data, Mapping) else {}
        code = data.get("exitCode")
        sig = data.get("signal")
        return cls(code if isinstance(code, int) else None, sig if isinstance(sig, str) else None)


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    """What :meth:`Terminal.output` returns.

    Attributes:
        output: the output captured so far (the client may keep only its tail).
        truncated: True when the client dropped the beginning to respect the byte limit.
        exit_status: how the command ended, or None while it still runs.
    """

    output: str
    truncated: bool
    exit_status: TerminalExit | None


class Terminal:
    """A terminal running a command on the client.

    Get one from :meth:`acp_agent.client.SessionClient.terminal`, which kills it if it
    still runs and releases it on every way out (normal, error, cancellation). Embed it
    in a tool call with :func:`~acp_agent.content.terminal_content` (``terminal.id``)
    so the person sees its output live.

    Attributes:
        id: the ``terminalId`` the client gave it.
        released: True once ``terminal/release`` was sent.
    """

    __slots__ = ("_call", "_session_id", "id", "released")

    def __init__(self, call: CallClient, session_id: str, terminal_id: str) -> None:
        self._call = call
        self._session_id = session_id
        self.id = terminal_id
        self.released = False

    def _params(self) -> JSON:
        return {"sessionId": self._session_id, "terminalId": self.id}

    async def wait_for_exit(self) -> TerminalExit:
        """Wait until the command exits (``terminal/wait_for_exit``); return how it ended."""
        result = await self._call("terminal/wait_for_exit", self._params())
        return TerminalExit.from_wire(result)

    async def output(self) -> TerminalOutput:
        """The output so far, and the exit status if it has ended (``terminal/output``)."""
        result = await self._call("terminal/output", self._params())
        data = result if isinstance(result, Mapping) else {}
        status = data.get("exitStatus")
        return TerminalOutput(
            output=str(data.get("output", "")),
            truncated=bool(data.get("truncated", False)),
            exit_status=TerminalExit.from_wire(status) if status is not None else None,
        )

    async def kill(self) -> None:
        """Kill the command (``terminal/kill``); the terminal stays readable until released
        (after which there is nothing to kill: nothing is sent)."""
        if self.released:
            return
        await self._call("terminal/kill", self._params())

    async def release(self) -> None:
        """Kill the command if it runs and free the terminal (``terminal/release``); once."""
        if self.released:
            return
        self.released = True
        await self._call("terminal/release", self._params())
