"""The agent -> client half of ACP, as a per-session handle that keeps the rules.

:class:`SessionClient` is what an agent uses to talk to the editor about one ACP
session: ``session/update`` helpers for every update variant (``notice`` and context
compactions included), tool calls whose status can only move forward,
``session/request_permission``, ``fs/*``, ``terminal/*`` (as a handle that always
releases its terminal) and ``elicitation/*``. Every call checks the client's
advertised capabilities first and raises :class:`~acp_agent.errors.CapabilityError`
without sending anything when the client lacks one. File paths (of ``fs/*``, and in a
tool call's ``locations`` and diff content) are made absolute against the session's
cwd and refused outside its root set unless the server allows it.

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
from typing import Any, Final, Protocol

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

#: the update kinds whose paths are made absolute (tool calls' locations and diffs)
TOOL_CALL_UPDATES: Final = frozenset({"tool_call", "tool_call_update"})


class Outbound(Protocol):
    """Sending to the client. Implemented by the connection."""

    async def call(self, method: str, params: JSON, *, timeout: float | None = None) -> Any: ...

    async def notify(self, method: str, params: JSON) -> None: ...

    async def notify_json(self, method: str, params_json: bytes) -> None: ...


class SessionClient:
    """Agent -> client calls for one ACP session, gated by the client's capabilities.

    An agent gets it as ``turn.client`` (:class:`acp_agent.agent.PromptTurn`). Every
    method that needs a client capability checks it first and raises
    :class:`~acp_agent.errors.CapabilityError` without sending anything when the
    client did not advertise it; ``capabilities`` says what it did advertise, so an
    agent can choose another way beforehand. A request the client answers with an
    error raises :class:`~acp_agent.errors.RequestError`; a client that went away
    raises :class:`~acp_agent.errors.ConnectionClosed` (let it propagate: the turn
    ends ``cancelled``). When the turn is cancelled, the awaiting call raises the
    event loop's cancellation exception.

    Attributes:
        session: the ACP session (its cwd, roots, mode, config values).
        capabilities: what the client advertised in ``initialize``.
        allow_outside_roots: whether paths outside the session's directories are
            allowed (the server's ``allow_outside_roots``; False by default).
    """

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
        """The ``sessionId`` every call names."""
        return self.session.session_id

    # -- session/update -------------------------------------------------------

    async def update(self, update: JSON) -> None:
        """Send one ``session/update``; record it into the open turn, if any.

        Inside a turn the update is encoded once: history keeps (and, if large, packs)
        the update's part of the params sent. A kind the client must have advertised
        (:data:`GATED_UPDATES`) raises :class:`CapabilityError` without sending; a
        ``notice`` is sent and not recorded (it is not part of the history). Paths in a
        ``tool_call`` or ``tool_call_update`` are made absolute first (see
        :meth:`tool_call`).
        """
        kind: str = update["sessionUpdate"]
        if kind in TOOL_CALL_UPDATES:
            self._absolute_paths(update)
        elif kind in GATED_UPDATES:
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

    def _absolute_paths(self, update: JSON) -> None:
        """Make the paths of a tool call's ``locations`` and diff items absolute, in place."""
        locations = update.get("locations")
        if locations:
            update["locations"] = [self._with_path(loc) for loc in locations]
        content = update.get("content")
        if content:
            update["content"] = [
                self._with_path(item)
                if isinstance(item, Mapping) and item.get("type") == "diff"
                else item
                for item in content
            ]

    def _with_path(self, item: Any) -> Any:
        path = item.get("path") if isinstance(item, Mapping) else None
        return {**item, "path": self._path(path)} if isinstance(path, str) else item

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
        """Stream a piece of the agent's answer (``agent_message_chunk``; await it).

        ``content`` is text or a content block; chunks with the same ``message_id``
        belong to one message.
        """
        return self.update(message_chunk("agent_message_chunk", content, message_id))

    def thought(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Stream a piece of the agent's reasoning (``agent_thought_chunk``; await it)."""
        return self.update(message_chunk("agent_thought_chunk", content, message_id))

    def user_message(
        self, content: str | Mapping[str, Any], message_id: str | None = None
    ) -> Awaitable[None]:
        """Send a piece of the user's message (``user_message_chunk``; await it)."""
        return self.update(message_chunk("user_message_chunk", content, message_id))

    async def plan(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Send the complete plan (each entry: content, priority, status)."""
        await self.update({"sessionUpdate": "plan", "entries": [dict(e) for e in entries]})

    async def available_commands(self, commands: Sequence[Mapping[str, Any]]) -> None:
        """Send ``available_commands_update`` (the library sends the agent's
        :meth:`~acp_agent.agent.Agent.commands` itself; call this when they change)."""
        await self.update(
            {"sessionUpdate": "available_commands_update", "availableCommands": list(commands)}
        )

    async def current_mode(self, mode_id: str) -> None:
        """Send ``current_mode_update`` (the agent switched modes by itself)."""
        await self.update({"sessionUpdate": "current_mode_update", "currentModeId": mode_id})

    async def config_options(self, options: Sequence[Mapping[str, Any]]) -> None:
        """Send ``config_option_update`` with the complete options, current values included."""
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
        """Send ``usage_update``: ``used`` of ``size`` context tokens, and optionally the
        session's cost so far as ``(amount, currency)``."""
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
        """Announce a tool call (a ``tool_call`` update) and return its handle.

        Args:
            title: what the person reads ("Read main.py").
            kind: the ACP tool kind (``read``, ``edit``, ``execute``, ``think``, ...).
            status: the first status, ``pending`` unless it already runs.
            content: content items (:func:`~acp_agent.content.text_content`,
                :func:`~acp_agent.content.diff_content`,
                :func:`~acp_agent.content.terminal_content`).
            locations: the files it touches, ``{"path": ..., "line": ...}``.
            raw_input: the tool's input as the agent received it.
            tool_call_id: an id of your own (default: a fresh one for the session).
            meta: ``_meta`` of the update.
            name: the tool's programmatic name (``title`` is for people).

        Paths in ``locations`` and in diff items are made absolute: a relative path is
        joined to the session's cwd, and a path outside the session's directories
        raises :class:`~acp_agent.errors.PathOutsideRoots` without sending anything.

        Returns:
            A :class:`ToolCall` whose status only moves forward (``start``,
            ``complete``, ``fail``, ``update``).
        """
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
        return ToolCall(self.update, call_id, status)

    # -- permission -----------------------------------------------------------

    async def request_permission(
        self,
        tool_call: ToolCall | Mapping[str, Any],
        options: Sequence[PermissionOption] = (ALLOW_ONCE, REJECT_ONCE),
    ) -> PermissionOutcome:
        """Ask the person whether a tool call may run (``session/request_permission``).

        Args:
            tool_call: the :class:`ToolCall` handle (announced before), or a
                ``tool_call_update``-shaped mapping (paths are made absolute as in
                :meth:`tool_call`).
            options: the choices offered, in order (default: allow once, reject).

        Returns:
            A :class:`PermissionOutcome`: ``outcome.allowed`` is True when the person
            chose an ``allow_*`` option; ``outcome.option`` is the option chosen;
            ``outcome.cancelled`` is True when the client answered ``cancelled``
            (the turn is being cancelled: return ``"cancelled"`` or let the pending
            cancellation land) or named no option offered. Never run the tool unless
            ``allowed``.
        """
        if isinstance(tool_call, ToolCall):
            update = tool_call.as_update()
        else:
            update = dict(tool_call)
            self._absolute_paths(update)
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
        """``path`` made absolute against the cwd; refused outside the session's roots."""
        resolved = self.session.resolve_path(path)
        if not self.allow_outside_roots and not self.session.within_roots(resolved):
            raise PathOutsideRoots(resolved, self.session.roots)
        return resolved

    async def read_text_file(
        self, path: str, *, line: int | None = None, limit: int | None = None
    ) -> str:
        """Read a text file through the client (``fs/read_text_file``): the editor's
        buffer, unsaved changes included. Needs ``fs.readTextFile``.

        Args:
            path: absolute, or relative to the session's cwd; it must lie inside the
                session's directories (else :class:`~acp_agent.errors.PathOutsideRoots`).
            line: the first line to read (1-based).
            limit: how many lines at most.

        Returns:
            The file's text (or the lines asked for).
        """
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
        """Write a text file through the client (``fs/write_text_file``), creating it if
        needed. Needs ``fs.writeTextFile``; ``path`` as in :meth:`read_text_file`. Ask
        first with :meth:`request_permission` when the person should decide."""
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
        """Run a command in a terminal on the client (``terminal/create``); use it as
        ``async with client.terminal("make", ["test"]) as term: ...``. Needs ``terminal``.

        Args:
            command: the program to run.
            args: its arguments.
            env: environment variables to set.
            cwd: its working directory (relative to the session's cwd; default the cwd).
            output_byte_limit: how many bytes of output the client keeps (the tail).

        Yields:
            A :class:`Terminal`: ``await term.wait_for_exit()`` returns a
            :class:`TerminalExit` (``exit_code``, ``signal``); ``await term.output()``
            a :class:`TerminalOutput` (``output``, ``truncated``, ``exit_status``);
            ``await term.kill()`` stops the command. On leaving the block the command
            is killed if it still runs and the terminal is released, however the block
            ends (error and cancellation included).
        """
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
        term = Terminal(self.outbound.call, self.session_id, terminal_id)
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
        """Ask the person to fill in a form (``elicitation/create``, mode ``form``).
        Needs ``elicitation.form``.

        Args:
            message: what the form is for.
            schema: a JSON Schema of the fields (flat object of primitive properties).
            tool_call_id: the tool call the question belongs to, if any.

        Returns:
            The client's result as a dict: ``{"action": "accept", "content": {...}}``,
            or ``{"action": "decline"}`` / ``{"action": "cancel"}``.
        """
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
        """Send the person to a URL (``elicitation/create``, mode ``url``): a sign-in page,
        say. Needs ``elicitation.url``. Call :meth:`complete_elicitation` with the same
        ``elicitation_id`` when what happened there is done.

        Returns:
            The client's result as a dict (``{"action": "accept"}`` when the person went).
        """
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
        """Tell the client a URL elicitation is done (``elicitation/complete``)."""
        if not self.capabilities.elicitation_url:
            raise CapabilityError("elicitation/complete", "elicitation.url")
        await self.outbound.notify("elicitation/complete", {"elicitationId": elicitation_id})
