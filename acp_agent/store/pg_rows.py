"""How the PostgreSQL store's values become SQL parameters and rows become records.

It owns the mapping between ``SessionRecord`` and the ``acp_sessions`` row, and the escaping
of NUL (which PostgreSQL text cannot hold) in every text the store keeps. It does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import orjson

from acp_agent.store.base import SessionRecord

__all__ = ["escape", "fields", "maybe", "to_record", "unescape"]

Row = tuple[Any, ...]


def to_record(row: Row) -> SessionRecord:
    sid, owner, cwd, dirs, title, mode_id, config, created_at, updated_at = row
    return SessionRecord(
        session_id=unescape(sid),
        cwd=unescape(cwd),
        owner=unescape(owner),
        additional_directories=tuple(unescape(d) for d in dirs),
        title=maybe(title, unescape),
        mode_id=maybe(mode_id, unescape),
        config=orjson.loads(config),
        created_at=created_at,
        updated_at=updated_at,
    )


def fields(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_id": escape(record.session_id),
        "owner": escape(record.owner),
        "cwd": escape(record.cwd),
        "dirs": [escape(d) for d in record.additional_directories],
        "title": maybe(record.title, escape),
        "mode_id": maybe(record.mode_id, escape),
        "config": orjson.dumps(dict(record.config)).decode(),
    }


_ESCAPED: Final = re.compile("\x01(.)", re.DOTALL)


def escape(text: str) -> str:
    """``text`` without NUL, which PostgreSQL text cannot hold (reversed by ``_unescape``)."""
    if "\x00" not in text and "\x01" not in text:
        return text
    return text.replace("\x01", "\x01\x01").replace("\x00", "\x01\x02")


def unescape(text: str) -> str:
    if "\x01" not in text:
        return text
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "\x02" else m.group(1), text)


def maybe(text: str | None, convert: Callable[[str], str]) -> str | None:
    return None if text is None else convert(text)
