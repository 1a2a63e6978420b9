"""A session's conversation history: turn-scoped, compressed, repaired on load.

Owns :class:`History` / :class:`TurnLog` / :class:`TurnHandle` — the conversation as
a stream that can only be mutated through turn-scoped operations, kept as compressed
JSON text — the :class:`TurnSink` interface through which events reach persistence,
and :func:`sanitize` for streams loaded from storage (and only for those).

It does not own the prompt slot or how a turn is cancelled (:mod:`acp_agent.prompt_slot`),
the store itself, or JSON-RPC.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

import orjson

from .errors import IllegalTransition
from .store import JsonText, PackedJson

JSON = dict[str, Any]

STOP_REASONS: Final = frozenset(
    {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
)

#: what the store records as the end of a turn answered with an error (not a stop
#: reason: on load such a turn is an interrupted one)
FAILED_TURN: Final = "error"

USER_KIND: Final = "user_message_chunk"
#: the history event holding the state an agent saved in a turn (never sent or replayed)
STATE_KIND: Final = "_acp_agent_state"


class TurnSink(Protocol):
    """Where a turn's events go as they happen (the server connects it to the store).

    A large event (over ``BIG_EVENT`` bytes of JSON) comes as the :class:`PackedJson`
    history keeps, not as a dict or text, so that it is never held twice in full.
    """

    def turn_started(
        self, turn_id: str, prompt_updates: Sequence[JsonText | PackedJson]
    ) -> None: ...

    def turn_event(self, turn_id: str, update: JsonText | PackedJson) -> None: ...

    def behind(self) -> bool:
        """Whether so much waits for the store that a turn should ``catch_up``."""
        ...

    async def catch_up(self) -> None:
        """Return once the store is no longer ``behind``."""
        ...


CHUNK_EVENTS: Final = 256  # events per compressed history chunk
BIG_EVENT: Final = 64 * 1024  # bytes of JSON above which an event is packed alone


class TurnLog:
    """One turn of history: the user's prompt chunks first, then every update sent.

    A long streamed turn holds hundreds of thousands of events, so they are kept as
    JSON text, and every ``CHUNK_EVENTS`` of them are joined and compressed (history is
    repetitive: a 100k-update turn keeps about a megabyte, not tens). ``events``
    decodes them on access.
    """

    __slots__ = (
        "_chunks",
        "_count",
        "_first",
        "_tail",
        "interrupted",
        "state",
        "stop_reason",
        "turn_id",
    )

    def __init__(
        self,
        turn_id: str,
        events: Iterable[JSON] = (),
        stop_reason: str | None = None,
        interrupted: bool = False,
    ) -> None:
        self.turn_id = turn_id
        self._chunks: list[bytes | PackedJson] = []  # zlib of newline-joined texts, or one big
        self._tail: list[JsonText] = []
        self._count = 0
        self._first: str | None = None
        self.stop_reason = stop_reason
        self.interrupted = interrupted
        #: the last state the agent saved in this turn (a ``STATE_KIND`` event), or None
        self.state: Any = None
        for event in events:
            self.append(event)

    @property
    def events(self) -> list[JSON]:
        """The turn's events, decoded (a fresh list each time)."""
        out: list[JSON] = []
        for chunk in self._chunks:
            if isinstance(chunk, PackedJson):
                out.append(chunk.load())
            else:
                out.extend(orjson.loads(line) for line in zlib.decompress(chunk).split(b"\n"))
        out.extend(orjson.loads(raw) for raw in self._tail)
        return out

    def __len__(self) -> int:
        return self._count

    def append(
        self, event: JSON, encoded: bytes | memoryview | None = None
    ) -> JsonText | PackedJson:
        """Add ``event``; ``encoded`` is its JSON (UTF-8) when the caller has it already.

        Returns the JSON text kept, or for a large event the :class:`PackedJson` kept.
        """
        data = orjson.dumps(event) if encoded is None else encoded
        kind = event.get("sessionUpdate")
        if self._count == 0:
            self._first = kind if isinstance(kind, str) else None
        elif kind == STATE_KIND:
            self.state = event.get("state")
        self._count += 1
        if len(data) > BIG_EVENT:
            # a large event (a pasted file, a big tool output): packed on its own,
            # straight from the encoded bytes (no text copy of it is made)
            self._seal()
            packed = PackedJson.pack(data)
            self._chunks.append(packed)
            return packed
        # text, not bytes: orjson's bytes keep a 4 KiB buffer each
        raw = data.decode() if isinstance(data, bytes) else bytes(data).decode()
        self._tail.append(raw)
        if len(self._tail) >= CHUNK_EVENTS:
            self._seal()
        return raw

    def _seal(self) -> None:
        if self._tail:
            self._chunks.append(zlib.compress("\n".join(self._tail).encode(), 1))
            self._tail = []

    def first_kind(self) -> str | None:
        return self._first

    def __repr__(self) -> str:
        return f"TurnLog({self.turn_id!r}, {self._count} events, {self.stop_reason!r})"

    @property
    def open(self) -> bool:
        return self.stop_reason is None and not self.interrupted


class TurnHandle:
    """The short-lived handle through which one turn's events enter history.

    Events are buffered in the turn's log as they are sent; :meth:`commit` closes the
    turn with its stop reason. After commit the handle refuses further events.
    """

    __slots__ = ("_history", "_log", "_sink")

    def __init__(self, history: History, log: TurnLog, sink: TurnSink | None) -> None:
        self._history = history
        self._log = log
        self._sink = sink

    @property
    def turn_id(self) -> str:
        return self._log.turn_id

    @property
    def committed(self) -> bool:
        return not self._log.open

    def record(
        self, update: JSON, encoded: bytes | memoryview | None = None
    ) -> JsonText | PackedJson:
        """Add ``update`` to the turn (``encoded``: its JSON, if the caller has it).

        Returns what history keeps of it: its JSON text, or packed if large.
        """
        if not self._log.open:
            raise IllegalTransition("turn history", "committed", "record")
        raw = self._log.append(update, encoded)
        if self._sink is not None:
            self._sink.turn_event(self._log.turn_id, raw)
        return raw

    def behind(self) -> bool:
        """Whether the store is far behind the turn's events (see :meth:`catch_up`)."""
        return self._sink is not None and self._sink.behind()

    async def catch_up(self) -> None:
        """Wait until the store is no longer far behind: a turn that sends faster than
        its store writes waits here, rather than have its events queue without bound."""
        if self._sink is not None:
            await self._sink.catch_up()

    def commit(self, stop_reason: str) -> None:
        if stop_reason not in STOP_REASONS:
            raise ValueError(f"not a v1 stop reason: {stop_reason!r}")
        if not self._log.open:
            raise IllegalTransition("turn history", "committed", "commit")
        self._log.stop_reason = stop_reason
        self._history._closed(self)

    def abandon(self) -> None:
        """End the turn without a stop reason (it ended with an error response)."""
        if self._log.open:
            self._log.interrupted = True
            self._history._closed(self)


def prompt_to_updates(prompt: Iterable[JSON]) -> list[JSON]:
    """The user's prompt blocks as ``user_message_chunk`` updates (one per block)."""
    updates = [{"sessionUpdate": USER_KIND, "content": block} for block in prompt]
    if not updates:
        updates.append({"sessionUpdate": USER_KIND, "content": {"type": "text", "text": ""}})
    return updates


class History:
    """A session's conversation, only mutable through turns.

    Invariants: every turn starts with at least one user chunk; no event lives outside
    a turn; at most one turn is open at a time (a second ``start_turn`` while one is
    open is an :class:`IllegalTransition`: the prompt slot prevents it upstream).
    """

    __slots__ = ("_open", "_sink", "turns")

    def __init__(self, turns: Iterable[TurnLog] = (), sink: TurnSink | None = None) -> None:
        self.turns: list[TurnLog] = list(turns)
        self._open: TurnHandle | None = None
        self._sink = sink

    def start_turn(self, turn_id: str, prompt: Iterable[JSON]) -> TurnHandle:
        if self._open is not None:
            raise IllegalTransition("history", "turn open", "start_turn")
        updates = prompt_to_updates(prompt)
        log = TurnLog(turn_id)
        kept = [log.append(update) for update in updates]
        self.turns.append(log)
        handle = TurnHandle(self, log, self._sink)
        self._open = handle
        if self._sink is not None:
            # as history keeps them: JSON text, or packed when large (never encoded twice)
            self._sink.turn_started(turn_id, kept)
        return handle

    def _closed(self, handle: TurnHandle) -> None:
        if self._open is handle:
            self._open = None

    @property
    def current(self) -> TurnHandle | None:
        return self._open

    def states(self) -> list[Any]:
        """The state each turn saved (``PromptTurn.save_state``), oldest first; turns
        that saved none are left out."""
        return [turn.state for turn in self.turns if turn.state is not None]

    def events(self) -> list[JSON]:
        """Every event of every turn, in order (what ``session/load`` replays)."""
        return [event for turn in self.turns for event in turn.events]


_UNFINISHED: Final = frozenset({"pending", "in_progress"})


def sanitize(turns: Iterable[TurnLog]) -> list[TurnLog]:
    """Repair a history loaded from storage; never used on live history.

    * a turn with no events (nothing was stored after it began) is dropped;
    * a turn whose first event is not a user chunk gets none added, it is dropped
      (a stream never starts with an assistant event);
    * a ``tool_call_update`` for an id never announced in the same session is dropped;
    * in an interrupted turn, tool calls left ``pending``/``in_progress`` get a final
      ``tool_call_update`` with status ``failed``, and compactions left ``in_progress`` a
      ``compaction_update`` ``cancelled``, so a replay shows them finished.
    """
    clean: list[TurnLog] = []
    known: set[str] = set()
    for turn in turns:
        if turn.first_kind() != USER_KIND:
            continue
        events: list[JSON] = []
        status: dict[str, str] = {}
        compactions: dict[str, str] = {}
        for event in turn.events:
            kind = event.get("sessionUpdate")
            if kind in ("compaction_update", "compaction_summary_chunk"):
                cid = str(event.get("compactionId"))
                compactions[cid] = str(event.get("status", compactions.get(cid, "in_progress")))
            elif kind == "tool_call":
                tool_id = str(event.get("toolCallId"))
                known.add(tool_id)
                status[tool_id] = str(event.get("status", "pending"))
            elif kind == "tool_call_update":
                tool_id = str(event.get("toolCallId"))
                if tool_id not in known:
                    continue
                if "status" in event:
                    status[tool_id] = str(event["status"])
            events.append(event)
        interrupted = turn.interrupted or turn.stop_reason is None
        if interrupted:
            for tool_id, state in status.items():
                if state in _UNFINISHED:
                    events.append(
                        {
                            "sessionUpdate": "tool_call_update",
                            "toolCallId": tool_id,
                            "status": "failed",
                        }
                    )
            for cid, state in compactions.items():
                if state == "in_progress":
                    events.append(
                        {
                            "sessionUpdate": "compaction_update",
                            "compactionId": cid,
                            "status": "cancelled",
                        }
                    )
        clean.append(TurnLog(turn.turn_id, events, turn.stop_reason, interrupted))
    return clean
