"""Unstable ACP methods, served and advertised only when the server runs with
``unstable`` (``acp-agent-kit --unstable``): ``session/fork``, a new session holding a
copy of a stored session's history, and ``session/set_title``, the title kept in the
store and shown by ``session/list``. Both are as durable as the store. (The third
unstable feature, ``usage`` on prompt results, is added by :mod:`.turns`.)

It builds on the session lifecycle (a fork is restored like a loaded session) and does
not serve stable methods.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Final

import anyio
import orjson

from ..connection import RequestContext
from ..errors import InvalidParams, ResourceNotFound
from ..history import USER_KIND
from ..paths import check_absolute_dir
from ..store import JsonText, TurnWrite
from .base import JSON, params_object, require_session_id, utc_now
from .lifecycle import SessionLifecycle

#: what ``sessionCapabilities`` gains with ``unstable``
UNSTABLE_SESSION_CAPABILITIES: Final[JSON] = {"fork": {}, "title": {}}
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


def _not_found(session_id: str) -> ResourceNotFound:
    return ResourceNotFound(
        f"Session {session_id[:100]!r} not found", data={"sessionId": session_id[:200]}
    )


class UnstableMethods(SessionLifecycle):
    """``session/fork`` and ``session/set_title``."""

    async def _fork_session(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        self._require_auth()
        source_id = require_session_id(raw)
        if "cwd" not in raw:
            raise InvalidParams("cwd: Field required")
        check_absolute_dir(raw.get("cwd"), "cwd")
        source = await self.store.get(self.owner, source_id)
        if source is None:
            raise _not_found(source_id)
        await self._persister.sync()  # the source's last turn is in the store
        stored = await self.store.load_history(self.owner, source_id)
        fork_id = f"sess_{os.urandom(12).hex()}"
        now = utc_now()
        record = dataclasses.replace(
            source, session_id=fork_id, owner=self.owner, title=None, created_at=now, updated_at=now
        )
        await self.store.create(record)
        try:
            for turn in stored:
                if turn.stop_reason is None:
                    continue  # still running, or never ended: not part of the copy
                at = _prompt_length(turn.updates)
                await self.store.write_turn(
                    TurnWrite(
                        fork_id,
                        turn.turn_id,
                        begin=[*turn.updates[:at]],
                        updates=[*turn.updates[at:]],
                        end=turn.stop_reason,
                    )
                )
            session, _ = await self._restore({**raw, "sessionId": fork_id}, replay=False)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._persister.give_back_lease(fork_id)  # create took it
            raise
        # A new session to the client: nothing about it before this response.
        ctx.after_response.append(lambda: self._announce_commands(session))
        return self._setup_result(session, with_id=True)

    async def _set_title(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        session_id = require_session_id(raw)
        title = raw.get("title")
        if not isinstance(title, str):
            raise InvalidParams("title: a string is required")
        title = " ".join(title.split())[:MAX_TITLE]
        if not title:
            raise InvalidParams("title: empty")
        record = await self.store.get(self.owner, session_id)
        if record is None:
            raise _not_found(session_id)
        live = self.sessions.get(session_id)
        if live is not None:
            live.title = title  # later writes of the live session keep it
            await self.store.update(self._record(live))
        else:
            await self.store.update(dataclasses.replace(record, title=title))
        return {"title": title}
