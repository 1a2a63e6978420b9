"""The ``session/update`` half of the agent -> client calls, for one ACP session.

Owns :class:`SessionUpdates`, the base of :class:`acp_agent.client.SessionClient`: every
update variant (``notice`` and context compactions included), tool call announcements
whose status can only move forward, and the recording of every update sent while a turn
is open into that turn's history (``notice`` updates are live only, never recorded). Paths
in a tool call's ``locations`` and diff content are made absolute against the session's cwd
and refused outside its root set unless the server allows it; update kinds the client must
have advertised are refused without sending.

It does not know the requests that wait for the client's answer (permission, ``fs/*``,
``terminal/*``, ``elicitation/*``: :mod:`acp_agent.client`), nor the connection: it sends
through the small :class:`Outbound` interface, which
:class:`acp_agent.connection.AgentSession` implements.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Final, Protocol

import orjson

from .client_capabilities import GATED_UPDATES, ClientCapabilities, allows_update_kind
from .client_handles import ToolCall, ToolKind, ToolStatus, add_tool_call_fields
from .compaction import Compaction
from .content import message_chunk
from .errors import CapabilityError, IllegalTransition, PathOutsideRoots
from .history import BIG_EVENT
from .session import Session

__all__ = ["TOOL_CALL_UPDATES", "Outbound", "SessionUpdates"]

JSON = dict[str, Any]

#: the update kinds whose paths are made absolute (tool calls' locations and diffs)
TOOL_CALL_UPDATES: Final = frozenset({"tool_call", "tool_call_update"})


class Outbound(Protocol):
    """Sending to the client. Implemented by the connection."""

    async def call(self, method: str, params: JSON, *, timeout: float | None = None) -> Any: ...

    async def notify(self, method: str, params: JSON) -> None: ...

    async def notify_json(self, method: str, params_json: bytes) -> None: ...


class SessionUpdates:
    """``session/update`` for one ACP session (see the module docstring); the base of
    :class:`acp_agent.client.SessionClient`, which documents the attributes."""

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

    def _path(self, path: str) -> str:
        """``path`` made absolute against the cwd; refused outside the session's roots."""
        resolved = self.session.resolve_path(path)
        if not self.allow_outside_roots and not self.session.within_roots(resolved):
            raise PathOutsideRoots(resolved, self.session.roots)
        return resolved
