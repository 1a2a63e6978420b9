"""Unstable ACP methods, served and advertised only when the server runs with
``unstable`` (``acp-agent-kit --unstable``): ``session/fork``, a new session holding a
copy of a stored session's history, and ``session/set_title``, the title kept in the
store and shown by ``session/list``. Both are as durable as the store. (The other
unstable features, the capabilities and ``usage`` on prompt results, are
:mod:`.handshake`'s and :mod:`.turns`'s.)

It builds on the session lifecycle (a fork is restored like a loaded session) and does
not serve stable methods.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Final

import anyio
import orjson

from ..dispatch import RequestContext
from ..errors import InvalidParams
from ..history import USER_KIND
from ..persistence import Persister
from ..store import JsonText, SessionStore, TurnWrite
from .lifecycle import SessionLifecycle
from .live import OpenSessions
from .params import JSON, not_found, params_object, require_session_id, utc_now

#: the unstable methods this server serves (they are not in the v1 method table)
UNSTABLE_METHODS: Final = ("session/fork", "session/set_title")
MAX_TITLE: Final = 200


def _prompt_length(updates: tuple[JsonText, ...]) -> int:
    """How many of a stored turn's first items are its prompt (user message chunks)."""
    count = 0
    for item in updates:
        update = orjson.loads(item)
        if not isinstance(update, dict) or update.get("sessionUpdate") != USER_KIND:
            break
        count += 1
    return count


class UnstableMethods:
    """``session/fork`` and ``session/set_title``."""

    def __init__(
        self,
        store: SessionStore,
        persister: Persister,
        sessions: OpenSessions,
        lifecycle: SessionLifecycle,
    ) -> None:
        self._store, self._persister = store, persister
        self._open, self._lifecycle = sessions, lifecycle

    async def fork_session(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        self._lifecycle.check_setup(raw)  # the fork's cwd, roots and MCP servers
        source_id = require_session_id(raw)
        owner = self._open.owner
        source = await self._store.get(owner, source_id)
        if source is None:
            raise not_found(source_id)
        await self._persister.wait_written(source_id)  # the source's last turn is in the store
        stored = await self._store.load_history(owner, source_id)
        fork_id = f"sess_{os.urandom(12).hex()}"
        now = utc_now()
        record = dataclasses.replace(
            source, session_id=fork_id, owner=owner, title=None, created_at=now, updated_at=now
        )
        await self._store.create(record)
        try:
            for turn in stored:
                if turn.stop_reason is None:
                    continue  # still running, or never ended: not part of the copy
                at = _prompt_length(turn.updates)
                await self._store.write_turn(
                    TurnWrite(
                        fork_id,
                        turn.turn_id,
                        begin=[*turn.updates[:at]],
                        updates=[*turn.updates[at:]],
                        end=turn.stop_reason,
                    )
                )
            session = await self._lifecycle.restore({**raw, "sessionId": fork_id})
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._persister.give_back_lease(fork_id)  # create took it
            raise
        return self._lifecycle.new_result(session, ctx)

    async def set_title(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        session_id = require_session_id(raw)
        title = raw.get("title")
        if not isinstance(title, str):
            raise InvalidParams("title: a string is required")
        title = " ".join(title.split())[:MAX_TITLE]
        if not title:
            raise InvalidParams("title: empty")
        record = await self._store.get(self._open.owner, session_id)
        if record is None:
            raise not_found(session_id)
        live = self._open.get(session_id)
        if live is not None:
            live.title = title  # later writes of the live session keep it
            await self._store.update(self._open.record(live))
        else:
            await self._store.update(dataclasses.replace(record, title=title))
        return {"title": title}
