"""The agent -> client half of ACP, as a per-session handle that keeps the rules.

:class:`SessionClient` is what an agent uses to talk to the editor about one ACP
session: ``session/update`` helpers for every update variant (``notice`` and context
compactions included), tool calls whose status can only move forward,
``session/request_permission``, ``fs/*``, ``terminal/*`` (as a handle that always
releases its terminal) and ``elicitation/*``. Every call checks the client's
advertised capabilities first and raises :class:`~acp_agent.errors.CapabilityError`
without sending anything when the client lacks one. File paths are made absolute
against the session's cwd and refused outside its root set unless the agent allows it.

Every update sent while a turn is open is recorded into that turn's history, so a
session can be replayed exactly; ``notice`` updates are live only and never recorded.
:func:`replayable` says which recorded updates a (possibly different) client may be
sent again on ``session/load``.

It does not know the connection: it sends through the small :class:`Outbound`
interface, which :class:`acp_agent.connection.AgentSession` implements.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import anyio
import orjson

from .compaction import Compaction
from .errors import CapabilityError, IllegalTransition, PathOutsideRoots, RequestError
from .history import BIG_EVENT
from .session import Session

JSON = dict[str, Any]

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
PermissionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class Outbound(Protocol):
    """Sending to the client. Implemented by the connection."""

    async def call(self, method: str, params: JSON, *, timeout: float | None = None) -> Any: ...

    async def notify(self, method: str, params: JSON) -> None: ...

    async def notify_json(self, method: str, params_json: bytes) -> None: ...


class ClientCapabilities:
    """What the client advertised in ``initialize``, read with the schema's exact encodings.

    Anything missing is unsupported. Booleans must be ``true``; object markers must be
    present and non-null (``{}`` counts).
    """

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None = None) -> None:
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def _obj(self, *path: str) -> Mapping[str, Any] | None:
        node: Any = self.raw
        for key in path:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node if isinstance(node, Mapping) else None

    def _flag(self, *path: str) -> bool:
        parent = self._obj(*path[:-1]) if len(path) > 1 else self.raw
        return parent is not None and parent.get(path[-1]) is True

    @property
    def read_text_file(self) -> bool:
        return self._flag("fs", "readTextFile")

    @property
    def write_text_file(self) -> bool:
        return self._flag("fs", "writeTextFile")

    @property
    def terminal(self) -> bool:
        return self._flag("terminal")

    @property
    def auth_terminal(self) -> bool:
        """``auth.terminal``, or the legacy ``_meta["terminal-auth"]`` clients still send."""
        return self._flag("auth", "terminal") or self._flag("_meta", "terminal-auth")

    @property
    def notices(self) -> bool:
        return self._obj("session", "notices") is not None

    @property
    def compaction(self) -> bool:
        return self._obj("session", "compaction") is not None

    @property
    def elicitation_form(self) -> bool:
        return self._obj("elicitation", "form") is not None

    @property
    def elicitation_url(self) -> bool:
        return self._obj("elicitation", "url") is not None

    @property
    def boolean_config_options(self) -> bool:
        return self._obj("session", "configOptions", "boolean") is not None


# update kinds a client must have advertised (by the capability that names them)
GATED_UPDATES: Final[Mapping[str, str]] = {
    "notice": "session.notices",
    "compaction_update": "session.compaction",
    "compaction_summary_chunk": "session.compaction",
}


def _allows(capabilities: ClientCapabilities, kind: str) -> bool:
    return capabilities.notices if kind == "notice" else capabilities.compaction


def replayable(capabilities: ClientCapabilities, update: Mapping[str, Any]) -> bool:
    """Whether a recorded ``update`` may be sent to this client on ``session/load``."""
    kind = update.get("sessionUpdate")
    return kind not in GATED_UPDATES or _allows(capabilities, str(kind))


# ------------------------------------------------------------------ content helpers


def text_block(text: str) -> JSON:
    return {"type": "text", "text": text}


def as_block(content: str | Mapping[str, Any]) -> JSON:
    return text_block(content) if isinstance(content, str) else dict(content)


def _chunk(kind: str, content: str | Mapping[str, Any], message_id: str | None) -> JSON:
    """A message chunk update. (The senders return ``update``'s coroutine rather than
    await it in one of their own: one coroutine a chunk, not two.)"""
    # as_block, inlined for text (every streamed chunk)
    block = {"type": "text", "text": content} if type(content) is str else as_block(content)
    update: JSON = {"sessionUpdate": kind, "content": block}
    if message_id is not None:
        update["messageId"] = message_id
    return update


def text_content(text: str) -> JSON:
    """A tool-call content item holding plain text."""
    return {"type": "content", "content": text_block(text)}


def diff_content(path: str, new_text: str, old_text: str | None = None) -> JSON:
    item: JSON = {"type": "diff", "path": path, "newText": new_text}
    if old_text is not None:
        item["oldText"] = old_text
    return item


def terminal_content(terminal_id: str) -> JSON:
    return {"type": "terminal", "terminalId": terminal_id}


# ------------------------------------------------------------------ tool calls

# Legal tool-call status moves (v1 has no "cancelled" status).
TOOL_TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    "pending": frozenset({"pending", "in_progress", "completed", "failed"}),
    "in_progress": frozenset({"in_progress", "completed", "failed"}),
    "completed": frozenset(),
    "failed": frozenset(),
}


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


# ------------------------------------------------------------------ the handle


class SessionClient:
    """Agent -> client calls for one ACP session, gated by the client's capabilities."""

    __slots__ = ("_update_at", "allow_outside_roots", "capabilities", "outbound", "session")

    def __init__(
        self,
        session: Session,
        outbound: Outbound,
        capabilities: ClientCapabilities,
        *,
        allow_outside_roots: bool = False,
    ) -> None:
        self.session = session
        self.outbound = outbound
        self.capabilities = capabilities
        self.allow_outside_roots = allow_outside_roots
        # where the update starts in the params' JSON: {"sessionId":"...","update":{...}}
        self._update_at = len(b'{"sessionId":' + orjson.dumps(session.session_id) + b',"update":')

    @property
    def session_id(self) -> str:
        return self.session.session_id

    # -- session/update -------------------------------------------------------

    async def update(self, update: JSON) -> None:
        """Send one ``session/update``; record it into the open turn, if any.

        Inside a turn the update is encoded once: history keeps (and, if large, packs)
        the update's part of the params sent. A kind the client must have advertised
        (:data:`GATED_UPDATES`) raises :class:`CapabilityError` without sending; a
        ``notice`` is sent and not recorded (it is not part of the history).
        """
        kind: str = update["sessionUpdate"]
        if kind in GATED_UPDATES:
            if not _allows(self.capabilities, kind):
                raise CapabilityError("session/update", GATED_UPDATES[kind])
            if kind == "notice":
                await self.outbound.notify(
                    "session/update", {"sessionId": self.session.session_id, "update": update}
                )
                return
        current = self.session.history.current
        if current is None:
            await self.outbound.notify(
                "session/update", {"sessionId": self.session.session_id, "update": update}
            )
            return
        # One encoding of the params; history keeps the update's part of it (a view when
        # large, so that no second copy of a big update is made).
        params = orjson.dumps({"sessionId": self.session.session_id, "update": update})
        at = self._update_at
        current.record(
            update, memoryview(params)[at:-1] if len(params) > BIG_EVENT else params[at:-1]
        )
        await self.outbound.notify_json("session/update", params)

    def record(self, update: JSON) -> None:
        """Keep ``update`` in the open turn's history without sending it.

        For what a session must remember but this client cannot be shown (a compaction
        for a client without ``session.compaction``): it replays on ``session/load``
        only to clients that may see it (:func:`replayable`).
        """
        current = self.session.history.current
        if current is None:
            raise IllegalTransition("session history", "no open turn", "record")
        current.record(update)

    def message(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Send an ``agent_message_chunk`` (await it)."""
        return self.update(_chunk("agent_message_chunk", content, message_id))

    def thought(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Send an ``agent_thought_chunk`` (await it)."""
        return self.update(_chunk("agent_thought_chunk", content, message_id))

    def user_message(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Send a ``user_message_chunk`` (await it)."""
        return self.update(_chunk("user_message_chunk", content, message_id))

    async def plan(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Send the complete plan (each entry: content, priority, status)."""
        await self.update({"sessionUpdate": "plan", "entries": [dict(e) for e in entries]})

    async def available_commands(self, commands: Sequence[Mapping[str, Any]]) -> None:
        await self.update(
            {"sessionUpdate": "available_commands_update", "availableCommands": list(commands)}
        )

    async def current_mode(self, mode_id: str) -> None:
        await self.update({"sessionUpdate": "current_mode_update", "currentModeId": mode_id})

    async def config_options(self, options: Sequence[Mapping[str, Any]]) -> None:
        await self.update({"sessionUpdate": "config_option_update", "configOptions": list(options)})

    async def session_info(self, **fields: Any) -> None:
        """``session_info_update`` with only the given fields (``title``, ``updated_at``)."""
        update: JSON = {"sessionUpdate": "session_info_update"}
        if "title" in fields:
            update["title"] = fields["title"]
        if "updated_at" in fields:
            update["updatedAt"] = fields["updated_at"]
        await self.update(update)

    async def usage(self, used: int, size: int, cost: tuple[float, str] | None = None) -> None:
        update: JSON = {"sessionUpdate": "usage_update", "used": used, "size": size}
        if cost is not None:
            update["cost"] = {"amount": cost[0], "currency": cost[1]}
        await self.update(update)

    async def notice(
        self,
        severity: str,
        title: str,
        *,
        description: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """A live ``notice`` for the person (``info``, ``warning``, ``error``); never
        recorded, so never replayed. Needs ``session.notices``."""
        if not title:
            raise ValueError("a notice needs a non-empty title")
        update: JSON = {"sessionUpdate": "notice", "severity": severity, "title": title}
        if description is not None:
            update["description"] = description
        if meta is not None:
            update["_meta"] = dict(meta)
        await self.update(update)

    async def compaction(
        self, compaction_id: str | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> Compaction:
        """Announce a context compaction (``in_progress``) and return its handle, whose
        summary chunks and end are recorded and replayed. Needs ``session.compaction``."""
        if not self.capabilities.compaction:
            raise CapabilityError("session/update", "session.compaction")
        handle = Compaction(self.update, compaction_id or self.session.new_compaction_id())
        await handle.begin(meta)
        return handle

    async def tool_call(
        self,
        title: str,
        *,
        kind: ToolKind = "other",
        status: ToolStatus = "pending",
        content: Sequence[JSON] | None = None,
        locations: Sequence[JSON] | None = None,
        raw_input: Any = None,
        tool_call_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> ToolCall:
        """Announce a tool call; returns its handle. ``name`` is the tool's programmatic
        name (``title`` is for people)."""
        call_id = tool_call_id or self.session.new_tool_call_id()
        update: JSON = {
            "sessionUpdate": "tool_call",
            "toolCallId": call_id,
            "title": title,
            "kind": kind,
            "status": status,
        }
        if name is not None:
            update["name"] = name
        if content is not None:
            update["content"] = list(content)
        if locations is not None:
            update["locations"] = list(locations)
        if raw_input is not None:
            update["rawInput"] = raw_input
        if meta is not None:
            update["_meta"] = dict(meta)
        await self.update(update)
        return ToolCall(self, call_id, status)

    # -- permission -----------------------------------------------------------

    async def request_permission(
        self,
        tool_call: ToolCall | Mapping[str, Any],
        options: Sequence[PermissionOption] = (ALLOW_ONCE, REJECT_ONCE),
    ) -> PermissionOutcome:
        """Ask the person. A ``cancelled`` answer means the turn is being cancelled."""
        update = tool_call.as_update() if isinstance(tool_call, ToolCall) else dict(tool_call)
        result = await self.outbound.call(
            "session/request_permission",
            {
                "sessionId": self.session_id,
                "toolCall": update,
                "options": [o.to_wire() for o in options],
            },
        )
        outcome = result.get("outcome") if isinstance(result, Mapping) else None
        if isinstance(outcome, Mapping) and outcome.get("outcome") == "selected":
            chosen = outcome.get("optionId")
            for option in options:
                if option.option_id == chosen:
                    return PermissionOutcome(False, option)
        # "cancelled", an unknown option id, or any other shape: do not run the tool.
        return PermissionOutcome(True)

    # -- fs ---------------------------------------------------------------------

    def _path(self, path: str) -> str:
        resolved = self.session.resolve_path(path)
        if not self.allow_outside_roots and not self.session.within_roots(resolved):
            raise PathOutsideRoots(resolved, self.session.roots)
        return resolved

    async def read_text_file(
        self, path: str, *, line: int | None = None, limit: int | None = None
    ) -> str:
        if not self.capabilities.read_text_file:
            raise CapabilityError("fs/read_text_file", "fs.readTextFile")
        params: JSON = {"sessionId": self.session_id, "path": self._path(path)}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        result = await self.outbound.call("fs/read_text_file", params)
        if not isinstance(result, Mapping) or not isinstance(result.get("content"), str):
            raise RequestError("the client's fs/read_text_file answer has no content")
        return str(result["content"])

    async def write_text_file(self, path: str, content: str) -> None:
        if not self.capabilities.write_text_file:
            raise CapabilityError("fs/write_text_file", "fs.writeTextFile")
        await self.outbound.call(
            "fs/write_text_file",
            {"sessionId": self.session_id, "path": self._path(path), "content": content},
        )

    # -- terminals ----------------------------------------------------------------

    @asynccontextmanager
    async def terminal(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> AsyncIterator[Terminal]:
        """Create a terminal; it is killed if still running and always released on exit."""
        if not self.capabilities.terminal:
            raise CapabilityError("terminal/create", "terminal")
        params: JSON = {"sessionId": self.session_id, "command": command}
        if args:
            params["args"] = list(args)
        if env:
            params["env"] = [{"name": k, "value": v} for k, v in env.items()]
        params["cwd"] = self.session.resolve_path(cwd) if cwd else self.session.cwd
        if output_byte_limit is not None:
            params["outputByteLimit"] = output_byte_limit
        result = await self.outbound.call("terminal/create", params)
        terminal_id = result.get("terminalId") if isinstance(result, Mapping) else None
        if not isinstance(terminal_id, str):
            raise RequestError("the client's terminal/create answer has no terminalId")
        term = Terminal(self, terminal_id)
        finished = False
        try:
            yield term
            finished = True
        finally:
            # Release on every way out. Shielded and time-bounded so that a cancelled
            # turn still tells the client, without hanging on a vanished one.
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                if not finished:
                    with suppress(Exception):
                        await term.kill()
                with suppress(Exception):
                    await term.release()

    # -- elicitation ----------------------------------------------------------

    async def elicit_form(
        self, message: str, schema: Mapping[str, Any], *, tool_call_id: str | None = None
    ) -> JSON:
        if not self.capabilities.elicitation_form:
            raise CapabilityError("elicitation/create", "elicitation.form")
        params: JSON = {
            "sessionId": self.session_id,
            "mode": "form",
            "message": message,
            "requestedSchema": dict(schema),
        }
        if tool_call_id is not None:
            params["toolCallId"] = tool_call_id
        result = await self.outbound.call("elicitation/create", params)
        return dict(result) if isinstance(result, Mapping) else {}

    async def elicit_url(
        self, message: str, url: str, elicitation_id: str, *, tool_call_id: str | None = None
    ) -> JSON:
        if not self.capabilities.elicitation_url:
            raise CapabilityError("elicitation/create", "elicitation.url")
        params: JSON = {
            "sessionId": self.session_id,
            "mode": "url",
            "message": message,
            "url": url,
            "elicitationId": elicitation_id,
        }
        if tool_call_id is not None:
            params["toolCallId"] = tool_call_id
        result = await self.outbound.call("elicitation/create", params)
        return dict(result) if isinstance(result, Mapping) else {}

    async def complete_elicitation(self, elicitation_id: str) -> None:
        if not self.capabilities.elicitation_url:
            raise CapabilityError("elicitation/complete", "elicitation.url")
        await self.outbound.notify("elicitation/complete", {"elicitationId": elicitation_id})
