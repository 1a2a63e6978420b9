"""Building ACP content: text blocks, message chunks and tool-call content items.

Owns the small pure functions that shape the JSON of content blocks, of
``*_message_chunk`` updates and of tool-call ``content`` items (text, diff, terminal).

It does not send anything or check capabilities (:mod:`acp_agent.client`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]


def text_block(text: str) -> JSON:
    """A text content block: ``{"type": "text", "text": text}``."""
    return {"type": "text", "text": text}


def as_block(content: str | Mapping[str, Any]) -> JSON:
    """``content`` as a content block: a string becomes a text block, a mapping is copied."""
    return text_block(content) if isinstance(content, str) else dict(content)


def message_chunk(kind: str, content: str | Mapping[str, Any], message_id: str | None) -> JSON:
    """A message chunk update. (The senders return ``update``'s coroutine rather than
    await it in one of their own: one coroutine a chunk, not two.)"""
    # as_block, inlined for text (every streamed chunk)
    block = {"type": "text", "text": content} if type(content) is str else as_block(content)
    update: JSON = {"sessionUpdate": kind, "content": block}
    if message_id is not None:
        update["messageId"] = message_id
    return update


def text_content(text: str) -> JSON:
    """A tool-call content item holding plain text."""
    return {"type": "content", "content": text_block(text)}


def diff_content(path: str, new_text: str, old_text: str | None = None) -> JSON:
    """A tool-call content item showing a file edit: ``path`` now holds ``new_text``
    (``old_text`` is what it held; None for a new file). A relative ``path`` is made
    absolute against the session's cwd when the tool call is sent."""
    item: JSON = {"type": "diff", "path": path, "newText": new_text}
    if old_text is not None:
        item["oldText"] = old_text
    return item


def terminal_content(terminal_id: str) -> JSON:
    """A tool-call content item embedding a terminal (``terminal.id``): the client shows
    its output live."""
    return {"type": "terminal", "terminalId": terminal_id}
