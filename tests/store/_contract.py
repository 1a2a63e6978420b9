"""Helpers shared by the SessionStore contract tests; no tests here."""

from __future__ import annotations

from typing import Any

import orjson

from acp_agent.store import DEFAULT_OWNER, SessionStore

ME = DEFAULT_OWNER


def chunk(text: str, kind: str = "agent_message_chunk") -> str:
    return orjson.dumps({"sessionUpdate": kind, "content": {"type": "text", "text": text}}).decode()


def user(text: str) -> str:
    return chunk(text, "user_message_chunk")


async def ids(store: SessionStore, owner: str = ME, **kwargs: Any) -> list[str]:
    page, _ = await store.list(owner, **kwargs)
    return [r.session_id for r in page]
