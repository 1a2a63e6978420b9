"""Session lifecycle: ``session/new``, ``load`` (with exact replay of what the client
may be sent), ``resume``, ``list``, ``close`` and ``delete``, and shutting a live
session down. Updates for a session never precede the response that created it, and
nothing follows a ``session/load`` response.

It does not run prompt turns (:mod:`.turns`) or change modes and config
(:mod:`.modes`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import orjson

from ..agent import Agent
from ..client import replayable
from ..dispatch import RequestContext
from ..errors import InvalidParams, SessionLeased
from ..history import STOP_REASONS, History, TurnLog, sanitize
from ..paths import check_absolute_dir, check_additional_directories
from ..persistence import Persister
from ..prompt_slot import CancelReason, SlotEvent
from ..session import Session
from ..store import SessionStore
from .handshake import Handshake
from .live import OpenSessions
from .modes import ModesAndConfig
from .owners import SessionOwners
from .params import (
    CLOSE_GRACE,
    JSON,
    check_mcp_servers,
    log,
    not_found,
    params_object,
    require_session_id,
    utc_now,
)

#: starts a task in the server's task group (prompts held for a restored session)
StartSoon = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


class SessionLifecycle:
    """Create, restore, list, close and delete ACP sessions."""

    def __init__(
        self,
        agent: Agent,
        store: SessionStore,
        persister: Persister,
        open_sessions: OpenSessions,
        handshake: Handshake,
        modes: ModesAndConfig,
        owners: SessionOwners,
        run_held: Callable[[Session], Coroutine[Any, Any, None]],
        start_soon: StartSoon,
    ) -> None:
        self._agent, self._store, self._persister = agent, store, persister
        self._open, self._handshake, self._modes = open_sessions, handshake, modes
        #: which connection of the process has each session open (shared by ``serve``)
        self._owners = owners
        #: the held prompts of a restored session, started after the answer
        self._run_held, self._start_soon = run_held, start_soon

    def check_setup(self, raw: JSON) -> tuple[str, tuple[str, ...], list[Any]]:
        """The cwd, extra roots and MCP servers of a request that opens a session."""
        self._handshake.require_auth()
        if "cwd" not in raw:
            raise InvalidParams("cwd: Field required")
        cwd = check_absolute_dir(raw.get("cwd"), "cwd")
        extra = check_additional_directories(raw.get("additionalDirectories"))
        return cwd, extra, check_mcp_servers(raw, self._agent)

    async def new_session(self, params: Any, ctx: RequestContext) -> JSON:
        cwd, extra, servers = self.check_setup(params_object(params))
        session_id = f"sess_{os.urandom(12).hex()}"
        session = Session(
            session_id,
            cwd,
            extra,
            mcp_servers=servers,
            history=History(sink=self._persister.sink_for(session_id)),
        )
        self._modes.init_state(session)
        now = utc_now()
        record = dataclasses.replace(self._open.record(session), created_at=now, updated_at=now)
        await self._store.create(record)
        self._attach(session)
        try:
            await self._agent.new_session(session)
        except BaseException:
            self._open.detach(session_id)
            with anyio.CancelScope(shield=True):
                await self._persister.give_back_lease(session_id)  # create took it
            raise
        log.info("session %s created (cwd %s)", session_id, cwd)
        return self.new_result(session, ctx)

    def new_result(self, session: Session, ctx: RequestContext) -> JSON:
        """The answer to a request that made a new session (``new``, ``fork``)."""
        # Nothing about the session may reach the client before this response.
        ctx.after_response.append(lambda: self._open.announce_commands(self._agent, session))
        return self._modes.setup_result(session, with_id=True)

    def _attach(self, session: Session) -> None:
        self._open.attach(session)
        self._owners.claim(session.session_id, self)

    async def restore(self, raw: JSON) -> Session:
        """Open a stored session on this connection (``load``, ``resume``, ``fork``)."""
        cwd, extra, servers = self.check_setup(raw)
        session_id = require_session_id(raw)
        owner = self._open.owner
        record = await self._store.get(owner, session_id)
        if record is None:
            raise not_found(session_id)
        # Shared stores: refused here if another host serves the session (before the live
        # copy, if any, gives its lease back, so this host keeps it throughout).
        await self._persister.take_lease(session_id)
        try:
            other = self._owners.claim(session_id, self)
            if other is not None:  # open on another connection: it closes its copy first
                await other.give_up(session_id)
            live = self._open.get(session_id)
            if live is not None:
                await self.shutdown_session(live, CancelReason.CLOSE)
            await self._persister.wait_written(session_id)
            stored = await self._store.load_history(owner, session_id)
        except BaseException:
            self._owners.release(session_id, self)
            with anyio.CancelScope(shield=True):
                await self._persister.give_back_lease(session_id)
            raise
        turns = sanitize(
            TurnLog(
                t.turn_id,
                [orjson.loads(u) for u in t.updates],
                t.stop_reason if t.stop_reason in STOP_REASONS else None,
                interrupted=t.stop_reason not in STOP_REASONS,
            )
            for t in stored
        )
        session = Session(
            session_id,
            cwd,
            extra,
            title=record.title,
            mode_id=record.mode_id,
            config=dict(record.config),
            mcp_servers=servers,
            history=History(turns, sink=self._persister.sink_for(session_id)),
        )
        self._modes.init_state(session)
        if cwd != record.cwd or extra != record.additional_directories:
            await self._store.update(self._open.record(session))
        if self._owners.holder(session_id) not in (None, self):
            raise SessionLeased.taken_over(session_id)  # another connection's load won
        self._attach(session)
        await self._agent.load_session(session)
        return session

    async def load_session(self, params: Any, ctx: RequestContext) -> JSON:
        session = await self.restore(params_object(params))
        conn = self._open.connection
        caps = self._handshake.capabilities
        turns = list(session.history.turns)
        for turn in turns:
            for event in turn.events:
                if not replayable(caps, event):
                    continue  # kept for a client that may see it (a compaction)
                await conn.notify(
                    "session/update", {"sessionId": session.session_id, "update": event}
                )
        await self._after_restore(session)
        log.info(
            "session %s loaded (cwd %s): %d turns replayed",
            session.session_id,
            session.cwd,
            len(turns),
        )
        return self._modes.setup_result(session, with_id=False)

    async def resume_session(self, params: Any, ctx: RequestContext) -> JSON:
        session = await self.restore(params_object(params))
        await self._after_restore(session)
        log.info("session %s resumed (cwd %s)", session.session_id, session.cwd)
        return self._modes.setup_result(session, with_id=False)

    async def _after_restore(self, session: Session) -> None:
        # Extras go before the response: nothing for the session may follow it.
        await self._open.announce_commands(self._agent, session)
        if session.mode_id is not None and self._agent.modes(session):
            await self._open.client(session).current_mode(session.mode_id)
        if self._persister.holds_prompts:
            # Prompts left waiting by a host that died or lost the session run after
            # the response, as turns of this host (--busy-policy queue, shared stores).
            self._start_soon(lambda: self._run_held(session))

    async def list_sessions(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        cwd = raw.get("cwd")
        cursor = raw.get("cursor")
        if cwd is not None:
            cwd = check_absolute_dir(cwd, "cwd")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParams("cursor must be a string")
        records, next_cursor = await self._store.list(self._open.owner, cwd=cwd, cursor=cursor)
        sessions: list[JSON] = []
        for r in records:
            item: JSON = {"sessionId": r.session_id, "cwd": r.cwd}
            if r.additional_directories:
                item["additionalDirectories"] = list(r.additional_directories)
            if r.title is not None:
                item["title"] = r.title
            if r.updated_at:
                item["updatedAt"] = r.updated_at
            sessions.append(item)
        result: JSON = {"sessions": sessions}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def give_up(self, session_id: str) -> None:
        """Another connection of this process takes the session over: close it here."""
        live = self._open.get(session_id)
        if live is not None:
            await self.shutdown_session(live, CancelReason.CLOSE)
            log.info("session %s taken over by another connection", session_id)

    async def shutdown_session(self, session: Session, reason: CancelReason) -> None:
        """Cancel any running turn, wait for it to unwind, and drop the live session."""
        turn = session.slot.close(
            SlotEvent.SHUTDOWN if reason is CancelReason.SHUTDOWN else SlotEvent.CLOSE
        )
        if turn is not None:
            turn.cancel(reason)
        last = session.last_turn
        if last is not None and not last.finished:
            with anyio.move_on_after(CLOSE_GRACE):
                await last.done.wait()
        self._open.detach(session.session_id)
        self._owners.release(session.session_id, self)
        try:
            await self._agent.close_session(session)
        except Exception:
            log.exception("agent.close_session failed for %s", session.session_id)
        with anyio.CancelScope(shield=True):
            await self._persister.give_back_lease(session.session_id)

    async def close_session(self, params: Any, ctx: RequestContext) -> JSON:
        session_id = require_session_id(params_object(params))
        session = self._open.get(session_id)
        if session is None:
            if await self._store.get(self._open.owner, session_id) is None:
                raise not_found(session_id)
            return {}
        await self.shutdown_session(session, CancelReason.CLOSE)
        log.info("session %s closed", session_id)
        return {}

    async def delete_session(self, params: Any, ctx: RequestContext) -> JSON:
        session_id = require_session_id(params_object(params))
        session = self._open.get(session_id)
        if session is not None:
            await self.shutdown_session(session, CancelReason.CLOSE)
        await self._persister.wait_written(session_id)
        await self._store.delete(self._open.owner, session_id)  # unknown ids succeed silently
        log.info("session %s deleted", session_id)
        return {}

    async def shutdown(self) -> None:
        """Close every session of the connection (it ended) as a shutdown."""
        for session in list(self._open.sessions.values()):
            await self.shutdown_session(session, CancelReason.SHUTDOWN)
