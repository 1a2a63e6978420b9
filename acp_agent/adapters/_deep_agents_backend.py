"""A Deep Agents backend over the ACP client's ``fs/*`` (see
:mod:`acp_agent.adapters.deep_agents`, which documents it).

Owns :class:`EditorBackend`: Deep Agents' ``StateBackend`` (the graph's virtual
filesystem) with its async ``read``, ``write`` and ``edit`` sent to the editor of the turn
being served (:func:`~acp_agent.adapters.turns.current_turn`) when its client offers
``fs.readTextFile`` / ``fs.writeTextFile``; outside a turn, or without the capability, the
virtual filesystem answers. It imports ``deepagents``.
"""

from __future__ import annotations

import os
from typing import cast

from deepagents.backends.protocol import EditResult, FileData, ReadResult, WriteResult
from deepagents.backends.state import StateBackend

from . import editor
from .turns import AdapterTurn, current_turn

__all__ = ["EditorBackend"]


def _turn(capability: str) -> AdapterTurn | None:
    """The turn being served, if its client offers ``capability`` (an editor operation)."""
    try:
        turn = current_turn()
    except LookupError:
        return None
    return turn if capability in editor.available(turn.client) else None


def _text(content: str) -> FileData:
    return cast(FileData, {"content": content, "encoding": "utf-8"})


def _editor_path(turn: AdapterTurn, path: str) -> str:
    """A Deep Agents path (rooted at ``/``) as a path in the session's folders."""
    session = turn.session
    if os.path.isabs(path) and session.within_roots(path):
        return path
    return os.path.join(session.cwd, path.lstrip("/"))


class EditorBackend(StateBackend):
    """Reads, writes and edits through the client's editor when it offers them."""

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        turn = _turn(editor.READ)
        if turn is None:
            return await super().aread(file_path, offset, limit)
        if limit <= 0:
            return ReadResult(file_data=_text(""), no_lines_requested=True)
        path = _editor_path(turn, file_path)
        try:
            text = await editor.read_file(turn, path, line=max(offset, 0) + 1, limit=limit)
        except editor.EditorError as exc:
            return ReadResult(error=str(exc))
        lines = len(text.splitlines())
        if not lines:
            return ReadResult(file_data=_text(text))
        start = max(offset, 0) + 1
        return ReadResult(
            file_data=_text(text),
            start_line=start,
            end_line=start + lines - 1,
        )

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        turn = _turn(editor.WRITE)
        if turn is None:
            return await super().awrite(file_path, content)
        path = _editor_path(turn, file_path)
        try:
            await editor.write_file(turn, path, content)
        except editor.EditorError as exc:
            return WriteResult(error=str(exc))
        return WriteResult(path=file_path)

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        turn = _turn(editor.WRITE)
        if turn is None or editor.READ not in editor.available(turn.client):
            return await super().aedit(file_path, old_string, new_string, replace_all)
        path = _editor_path(turn, file_path)
        try:
            text = await editor.read_file(turn, path)
        except editor.EditorError as exc:
            return EditResult(error=str(exc))
        found = text.count(old_string) if old_string else 0
        if found == 0:
            return EditResult(error=f"the text to replace is not in {file_path}")
        if found > 1 and not replace_all:
            return EditResult(
                error=f"the text to replace occurs {found} times in {file_path}: "
                "give more context, or replace_all"
            )
        edited = text.replace(old_string, new_string, -1 if replace_all else 1)
        try:
            await editor.write_file(turn, path, edited)
        except editor.EditorError as exc:
            return EditResult(error=str(exc))
        return EditResult(path=file_path, occurrences=found if replace_all else 1)
