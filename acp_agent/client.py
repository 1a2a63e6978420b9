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

Its parts live beside it and are re-exported here: :mod:`acp_agent.client_capabilities`
(what the client advertised, :func:`replayable`), :mod:`acp_agent.content` (content and
chunk builders) and :mod:`acp_agent.client_handles` (tool call, permission and terminal
handles).

It does not know the connection: it sends through the small :class:`Outbound`
interface, which :class:`acp_agent.connection.AgentSession` implements.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Protocol

import anyio
import orjson

from .client_capabilities import (
    GATED_UPDATES,
    ClientCapabilities,
    allows_update_kind,
    replayable,
)
from .client_handles import (
    ALLOW_ONCE,
    REJECT_ONCE,
    TOOL_TRANSITIONS,
    PermissionKind,
    PermissionOption,
    PermissionOutcome,
    Terminal,
    TerminalExit,
    TerminalOutput,
    ToolCall,
    ToolKind,
    ToolStatus,
    add_tool_call_fields,
)
from .compaction import Compaction
from .content import (
    as_block,
    diff_content,
    message_chunk,
    terminal_content,
    text_block,
    text_content,
)
from .errors import CapabilityError, IllegalTransition, PathOutsideRoots, RequestError
from .history import BIG_EVENT
from .session import Session

__all__ = [
    "ALLOW_ONCE",
    "GATED_UPDATES",
    "REJECT_ONCE",
    "TOOL_TRANSITIONS",
    "ClientCapabilities",
    "Outbound",
    "PermissionKind",
    "PermissionOption",
    "PermissionOutcome",
    "SessionClient",
    "Terminal",
    "TerminalExit",
    "TerminalOutput",
    "ToolCall",
    "ToolKind",
    "ToolStatus",
    "as_block",
    "diff_content",
    "replayable",
    "terminal_content",
    "text_block",
    "text_content",
]

JSON = dict[str, Any]


class Outbound(Protocol):
    """Sending to the client. Implemented by the connection."""

    async def call(self, method: str, params: JSON, *, timeout: float | None = None) -> Any: ...

    async def notify(self, method: str, params: JSON) -> None: ...

    async def notify_json(self, method: str, params_json: bytes) -> None: ...


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
            if not allows_update_kind(self.capabilities, kind):
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
        if current.behind():
            await current.catch_up()

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
        return self.update(message_chunk("agent_message_chunk", content, message_id))

    def thought(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Send an ``agent_thought_chunk`` (await it)."""
        return self.update(message_chunk("agent_thought_chunk", content, message_id))

    def user_message(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Send a ``user_message_chunk`` (await it)."""
        return self.update(message_chunk("user_message_chunk", content, message_id))

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
        add_tool_call_fields(update, content, locations, raw_input, None, meta)
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
