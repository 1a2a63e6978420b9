"""Session lifecycle: ``session/new``, ``load`` (with exact replay of what the client
may be sent), ``resume``, ``list``, ``close`` and ``delete``, and shutting a live
session down.

It does not run prompt turns (:mod:`.turns`) or change modes and config
(:mod:`.modes`).
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import orjson

from ..client import replayable
from ..connection import RequestContext
from ..errors import InvalidParams, ResourceNotFound, SessionLeased
from ..history import STOP_REASONS, History, TurnLog, sanitize
from ..paths import check_absolute_dir, check_additional_directories
from ..prompt_slot import CancelReason, SlotEvent
from ..session import Session
from ..store import SessionRecord
from .base import (
    CLOSE_GRACE,
    JSON,
    ServerBase,
    check_mcp_servers,
    log,
    params_object,
    require_session_id,
    utc_now,
)


async def _soon(tg: anyio.abc.TaskGroup, fn: Any, *args: Any) -> None:
    tg.start_soon(fn, *args)


class SessionLifecycle(ServerBase):
    """Create, restore, list, close and delete ACP sessions."""

    async def _new_session(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        self._require_auth()
        if "cwd" not in raw:
            raise InvalidParams("cwd: Field required")
        cwd = check_absolute_dir(raw.get("cwd"), "cwd")
        extra = check_additional_directories(raw.get("additionalDirectories"))
        servers = check_mcp_servers(raw, self.agent)
        session_id = f"sess_{os.urandom(12).hex()}"
        session = Session(
            session_id,
            cwd,
            extra,
            mcp_servers=servers,
            history=History(sink=self._persister.sink_for(session_id)),
        )
        self._init_state(session)
        now = utc_now()
        await self.store.create(
            SessionRecord(
                session_id=session_id,
                cwd=cwd,
                owner=self.owner,
                additional_directories=extra,
                created_at=now,
                updated_at=now,
                mode_id=session.mode_id,
                config=dict(session.config),
            )
        )
        self._attach(session)
        try:
            await self.agent.new_session(session)
        except BaseException:
            self.sessions.pop(session_id, None)
            self.clients.pop(session_id, None)
            with anyio.CancelScope(shield=True):
                await self._persister.give_back_lease(session_id)  # create took it
            raise
        # Nothing about the session may reach the client before this response.
        ctx.after_response.append(lambda: self._announce_commands(session))
        log.info("session %s created (cwd %s)", session_id, cwd)
        return self._setup_result(session, with_id=True)

    async def _restore(self, raw: JSON, *, replay: bool) -> tuple[Session, list[TurnLog]]:
        self._require_auth()
        session_id = require_session_id(raw)
        if "cwd" not in raw:
            raise InvalidParams("cwd: Field required")
        cwd = check_absolute_dir(raw.get("cwd"), "cwd")
        extra = check_additional_directories(raw.get("additionalDirectories"))
        servers = check_mcp_servers(raw, self.agent)
        record = await self.store.get(self.owner, session_id)
        if record is None:
            raise ResourceNotFound(
                f"Session {session_id[:100]!r} not found", data={"sessionId": session_id[:200]}
            )
        # Shared stores: refused here if another host serves the session (before the live
        # copy, if any, gives its lease back, so this host keeps it throughout).
        await self._persister.take_lease(session_id)
        try:
            other = self._owners.claim(session_id, self)
            if other is not None:  # open on another connection: it closes its copy first
                await other.give_up(session_id)
            live = self.sessions.get(session_id)
            if live is not None:
                await self._shutdown_session(live, CancelReason.CLOSE)
            await self._persister.sync()
            stored = await self.store.load_history(self.owner, session_id)
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
        self._init_state(session)
        if cwd != record.cwd or extra != record.additional_directories:
            await self.store.update(self._record(session))
        if self._owners.holder(session_id) not in (None, self):
            raise SessionLeased.taken_over(session_id)  # another connection's load won
        self._attach(session)
        await self.agent.load_session(session)
        return session, turns if replay else []

    async def _load_session(self, params: Any, ctx: RequestContext) -> JSON:
        session, turns = await self._restore(params_object(params), replay=True)
        conn = self.connection
        caps = self.capabilities
        for turn in turns:
            for event in turn.events:
                if not replayable(caps, event):
                    continue  # kept for a client that may see it (a compaction)
                await conn.notify(
                    "session/update", {"sessionId": session.session_id, "update": event}
                )
        await self._after_restore(session, ctx)
        log.info(
            "session %s loaded (cwd %s): %d turns replayed",
            session.session_id,
            session.cwd,
            len(turns),
        )
        return self._setup_result(session, with_id=False)

    async def _resume_session(self, params: Any, ctx: RequestContext) -> JSON:
        session, _ = await self._restore(params_object(params), replay=False)
        await self._after_restore(session, ctx)
        log.info("session %s resumed (cwd %s)", session.session_id, session.cwd)
        return self._setup_result(session, with_id=False)

    async def _after_restore(self, session: Session, ctx: RequestContext) -> None:
        # Extras go before the response: nothing for the session may follow it.
        await self._announce_commands(session)
        if session.mode_id is not None and self.agent.modes(session):
            await self._client(session).current_mode(session.mode_id)
        if self._persister.holds_prompts and self._tg is not None:
            # Prompts left waiting by a host that died or lost the session run after
            # the response, as turns of this host (--busy-policy queue, shared stores).
            tg = self._tg
            ctx.after_response.append(lambda: _soon(tg, self._run_held_prompts, session))

    async def _list_sessions(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        cwd = raw.get("cwd")
        cursor = raw.get("cursor")
        if cwd is not None:
            cwd = check_absolute_dir(cwd, "cwd")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParams("cursor must be a string")
        records, next_cursor = await self.store.list(self.owner, cwd=cwd, cursor=cursor)
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
        live = self.sessions.get(session_id)
        if live is not None:
            await self._shutdown_session(live, CancelReason.CLOSE)
            log.info("session %s taken over by another connection", session_id)

    async def _shutdown_session(self, session: Session, reason: CancelReason) -> None:
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
        self.sessions.pop(session.session_id, None)
        self.clients.pop(session.session_id, None)
        self._owners.release(session.session_id, self)
        try:
            await self.agent.close_session(session)
        except Exception:
            log.exception("agent.close_session failed for %s", session.session_id)
        with anyio.CancelScope(shield=True):
            await self._persister.give_back_lease(session.session_id)

    async def _close_session(self, params: Any, ctx: RequestContext) -> JSON:
        session_id = require_session_id(params_object(params))
        session = self.sessions.get(session_id)
        if session is None:
            if await self.store.get(self.owner, session_id) is None:
                raise ResourceNotFound(
                    f"Session {session_id[:100]!r} not found", data={"sessionId": session_id[:200]}
                )
            return {}
        await self._shutdown_session(session, CancelReason.CLOSE)
        log.info("session %s closed", session_id)
        return {}

    async def _delete_session(self, params: Any, ctx: RequestContext) -> JSON:
        session_id = require_session_id(params_object(params))
        session = self.sessions.get(session_id)
        if session is not None:
            await self._shutdown_session(session, CancelReason.CLOSE)
        await self._persister.sync()
        await self.store.delete(self.owner, session_id)  # unknown ids succeed silently
        log.info("session %s deleted", session_id)
        return {}
