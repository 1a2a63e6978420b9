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

This module owns the requests that wait for the client's answer (permission, ``fs/*``,
``terminal/*``, ``elicitation/*``). Its parts live beside it and are re-exported here:
:mod:`acp_agent.client_updates` (``session/update`` and its recording, the base class),
:mod:`acp_agent.client_capabilities` (what the client advertised, :func:`replayable`),
:mod:`acp_agent.content` (content and chunk builders) and :mod:`acp_agent.client_handles`
(tool call, permission and terminal handles).

It does not know the connection: it sends through the small :class:`Outbound`
interface, which :class:`acp_agent.connection.AgentSession` implements.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio

from .client_capabilities import GATED_UPDATES, ClientCapabilities, replayable
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
)
from .client_updates import Outbound, SessionUpdates
from .content import as_block, diff_content, terminal_content, text_block, text_content
from .errors import CapabilityError, RequestError

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


class SessionClient(SessionUpdates):
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

    __slots__ = ()

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
