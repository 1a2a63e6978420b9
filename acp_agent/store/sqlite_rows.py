"""How a turn's items are laid out in the SQLite store's ``updates`` table.

A turn's items are rows of ``updates``, in order of their ids. The items of one write that
follow each other share one TEXT row, one item per line: an item is JSON text, which the
server writes without raw newlines, so a streaming turn costs a row per write, not a row
per update. A large item (packed, see ``packed``) is a BLOB row of its own, zlib of its text
or the text itself; so is an item that has a raw newline (zlib of its text). A BLOB that
starts with ``{`` is text (an item is a JSON object); any other BLOB is zlib.

It owns writing a write's items and reading them back, and one turn write's statements
(:func:`write_turn_rows`); transactions are ``sqlite``'s, the tables ``sqlite_schema``'s.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Sequence
from typing import Final

from acp_agent.store.base import JsonText, TurnWrite, check_turn_write, session_not_found
from acp_agent.store.packed import PackedJson

__all__ = ["insert_items", "items_of", "rowid", "write_turn_rows"]

PIECE: Final = 1 << 20  # bytes per write of a large item into its BLOB
_INSERT: Final = "INSERT INTO updates (turn, body) VALUES (?, ?)"


def insert_items(
    conn: sqlite3.Connection, turn: int, items: Sequence[JsonText | PackedJson]
) -> None:
    """Append ``items`` to turn ``turn``: runs of plain items as lines of one row."""
    lines: list[str] = []
    for item in items:
        if isinstance(item, str) and "\n" not in item:
            lines.append(item)
            continue
        _insert_lines(conn, turn, lines)
        lines = []
        if isinstance(item, PackedJson):
            _insert_packed(conn, turn, item)
        else:
            conn.execute(_INSERT, (turn, zlib.compress(item.encode())))
    _insert_lines(conn, turn, lines)


def items_of(body: str | bytes) -> list[str]:
    """The items of one row, as their JSON text."""
    if isinstance(body, str):
        return body.split("\n")
    return [body.decode() if body[:1] == b"{" else zlib.decompress(body).decode()]


def rowid(cursor: sqlite3.Cursor) -> int:
    """The id of the row an ``INSERT`` just made."""
    if cursor.lastrowid is None:  # not after a successful INSERT
        raise sqlite3.DatabaseError("no row id after an insert")
    return cursor.lastrowid


def _insert_lines(conn: sqlite3.Connection, turn: int, lines: Sequence[str]) -> None:
    if lines:
        conn.execute(_INSERT, (turn, "\n".join(lines)))


def _insert_packed(conn: sqlite3.Connection, turn: int, item: PackedJson) -> None:
    """A large item in a BLOB, written in pieces so that SQLite makes no copy of the whole."""
    blobopen = getattr(conn, "blobopen", None)  # Python 3.11+
    if item.compressed or blobopen is None:
        conn.execute(_INSERT, (turn, item.data))
        return
    cursor = conn.execute(
        "INSERT INTO updates (turn, body) VALUES (?, zeroblob(?))", (turn, len(item.data))
    )
    with blobopen("updates", "body", rowid(cursor)) as blob:
        view = memoryview(item.data)
        for start in range(0, len(view), PIECE):
            blob.write(view[start : start + PIECE])


def write_turn_rows(conn: sqlite3.Connection, write: TurnWrite, now: str) -> None:
    """One turn write's statements (inside the batch's transaction)."""
    session_id = write.session_id
    if not conn.execute(
        "UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id)
    ).rowcount:
        raise session_not_found(session_id)
    row = conn.execute(
        "SELECT id, stop_reason FROM turns WHERE session_id = ? AND turn_id = ?",
        (session_id, write.turn_id),
    ).fetchone()
    check_turn_write(write, exists=row is not None, stop_reason=None if row is None else row[1])
    if row is None:
        turn = rowid(
            conn.execute(
                "INSERT INTO turns (session_id, turn_id, stop_reason) VALUES (?, ?, ?)",
                (session_id, write.turn_id, write.end),
            )
        )
    else:
        turn = row[0]
        if write.end is not None:
            conn.execute("UPDATE turns SET stop_reason = ? WHERE id = ?", (write.end, turn))
    insert_items(conn, turn, [*(write.begin or ()), *write.updates])
