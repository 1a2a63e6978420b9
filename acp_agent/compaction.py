"""Context compaction as the client sees it (ACP 1.25): one compaction's updates.

:class:`Compaction` is the handle :meth:`acp_agent.client.SessionClient.compaction`
returns: it announces a compaction (``compaction_update``, status ``in_progress``),
streams its summary (``compaction_summary_chunk``) and ends it once (``completed``,
``failed`` or ``cancelled``); the status moves only as :data:`COMPACTION_TRANSITIONS`
allows. :func:`compaction_summaries` reads a turn's events back into the summaries
they carried, which is what an agent continuing a compacted session needs.

It does not check capabilities, record history or know the connection: it sends
through the callable it is given (the session client's ``update``), which does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Literal

from .errors import IllegalTransition

JSON = dict[str, Any]

CompactionStatus = Literal["in_progress", "completed", "failed", "cancelled"]

#: Legal status moves of one compaction; the three ends are final.
COMPACTION_TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    "in_progress": frozenset({"completed", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}

UPDATE_KINDS: Final = frozenset({"compaction_update", "compaction_summary_chunk"})


class Compaction:
    """One announced compaction; its status only moves forward."""

    __slots__ = ("_send", "id", "status", "summary")

    def __init__(self, send: Callable[[JSON], Awaitable[None]], compaction_id: str) -> None:
        self._send = send
        self.id = compaction_id
        self.status: str = "in_progress"
        #: the text blocks sent as summary chunks so far
        self.summary: list[JSON] = []

    @property
    def finished(self) -> bool:
        return not COMPACTION_TRANSITIONS[self.status]

    async def begin(self, meta: Mapping[str, Any] | None = None) -> None:
        """The first ``compaction_update`` (``in_progress``): fixes its place in the timeline."""
        update: JSON = {
            "sessionUpdate": "compaction_update",
            "compactionId": self.id,
            "status": "in_progress",
        }
        if meta is not None:
            update["_meta"] = dict(meta)
        await self._send(update)

    async def chunk(self, content: str | Mapping[str, Any]) -> None:
        """Append one content block to the summary (a string is a text block)."""
        if self.finished:
            raise IllegalTransition(f"compaction {self.id}", self.status, "summary chunk")
        block = {"type": "text", "text": content} if isinstance(content, str) else dict(content)
        await self._send(
            {"sessionUpdate": "compaction_summary_chunk", "compactionId": self.id, "content": block}
        )
        self.summary.append(block)

    async def _end(self, status: CompactionStatus, fields: JSON) -> None:
        if status not in COMPACTION_TRANSITIONS[self.status]:
            raise IllegalTransition(f"compaction {self.id}", self.status, status)
        update: JSON = {
            "sessionUpdate": "compaction_update",
            "compactionId": self.id,
            "status": status,
            **fields,
        }
        await self._send(update)
        self.status = status

    async def complete(self) -> None:
        await self._end("completed", {})

    async def fail(self, error: str) -> None:
        await self._end("failed", {"error": error})

    async def cancel(self) -> None:
        await self._end("cancelled", {})


def compaction_summaries(events: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """``{compactionId: (status, summary text)}`` for the compactions in ``events``.

    Chunks append in order; a ``compaction_update`` carrying ``summary`` replaces it
    (``null`` or ``[]`` clears it), as the schema's patch rules say.
    """
    found: dict[str, tuple[str, list[str]]] = {}
    for event in events:
        kind = event.get("sessionUpdate")
        if kind not in UPDATE_KINDS:
            continue
        cid = str(event.get("compactionId"))
        status, parts = found.get(cid, ("in_progress", []))
        if kind == "compaction_summary_chunk":
            block = event.get("content")
            if isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        else:
            if isinstance(event.get("status"), str):
                status = event["status"]
            if "summary" in event:
                summary = event.get("summary") or []
                parts = [
                    str(b.get("text", ""))
                    for b in summary
                    if isinstance(b, Mapping) and b.get("type") == "text"
                ]
        found[cid] = (status, parts)
    return {cid: (status, "".join(parts)) for cid, (status, parts) in found.items()}
