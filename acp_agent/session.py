"""Per-ACP-session state: the prompt slot, the active turn, and turn-scoped history.

An ACP *session* is what ``session/new`` creates (a ``sessionId``); it is not the
per-connection :class:`acp_agent.connection.AgentSession`. This module owns:

* :class:`PromptSlot` — the one-active-prompt rule and the FIFO line of prompts
  waiting for it, as one transition table (``idle -> active -> idle``; ``closed`` is
  terminal), guarded by a compare-and-set on a plain attribute owned by the session
  (no ``contextvars``);
* :class:`Turn` — one running prompt turn: its cancel scope and its one
  authoritative end;
* :class:`History` / :class:`TurnLog` — the conversation as a stream that can only
  be mutated through turn-scoped operations, and :func:`sanitize` for streams
  loaded from storage (and only for those);
* :class:`Session` — the state above plus the session's cwd, roots, mode and
  config values.

It does not know JSON-RPC, transports or the store: persistence is reached through
the small :class:`TurnSink` interface the server layer supplies.
"""

from __future__ import annotations

import enum
import os
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio
import orjson

from .errors import IllegalTransition, InvalidParams
from .store import JsonText, PackedJson

JSON = dict[str, Any]

STOP_REASONS: Final = frozenset(
    {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
)


class SlotState(enum.Enum):
    IDLE = "idle"
    ACTIVE = "active"
    CLOSED = "closed"

    # Members are unique objects compared by identity: hash them so too (Enum's own hash is
    # a Python call, and the table below is looked up on every prompt).
    __hash__ = object.__hash__


class SlotEvent(enum.Enum):
    START = "start"  # a session/prompt wants the slot
    QUEUE = "queue"  # a session/prompt waits in line for it (busy policy queue)
    LEAVE = "leave"  # a waiting prompt leaves the line (it got the slot, or gave up)
    END = "end"  # the active turn finished (by any path)
    CANCEL = "cancel"  # session/cancel or $/cancel_request for the prompt
    CLOSE = "close"  # session/close, session/delete, shutdown

    __hash__ = object.__hash__  # as SlotState's


# The whole rule set. A missing (state, event) pair is an IllegalTransition.
# Events that find the slot in a state where they do nothing map to that state.
SLOT_TABLE: Final[Mapping[tuple[SlotState, SlotEvent], SlotState]] = {
    (SlotState.IDLE, SlotEvent.START): SlotState.ACTIVE,
    (SlotState.IDLE, SlotEvent.CANCEL): SlotState.IDLE,  # cancel with nothing running: no-op
    (SlotState.IDLE, SlotEvent.CLOSE): SlotState.CLOSED,
    # idle with a line: its first was woken and is about to start; others line up behind
    (SlotState.IDLE, SlotEvent.QUEUE): SlotState.IDLE,
    (SlotState.IDLE, SlotEvent.LEAVE): SlotState.IDLE,
    (SlotState.ACTIVE, SlotEvent.QUEUE): SlotState.ACTIVE,
    (SlotState.ACTIVE, SlotEvent.LEAVE): SlotState.ACTIVE,
    (SlotState.ACTIVE, SlotEvent.END): SlotState.IDLE,
    (SlotState.ACTIVE, SlotEvent.CANCEL): SlotState.IDLE,  # cancel clears the slot at once
    (SlotState.ACTIVE, SlotEvent.CLOSE): SlotState.CLOSED,
    (SlotState.CLOSED, SlotEvent.CANCEL): SlotState.CLOSED,
    (SlotState.CLOSED, SlotEvent.CLOSE): SlotState.CLOSED,
    (SlotState.CLOSED, SlotEvent.END): SlotState.CLOSED,  # a turn unwinding after close
    (SlotState.CLOSED, SlotEvent.LEAVE): SlotState.CLOSED,  # the line is sent away on close
    # (IDLE, END): a turn that already lost the slot must use end_if_current.
    # (ACTIVE, START): refused by try_start before the table is consulted.
    # (CLOSED, START): refused by try_start.
    # (CLOSED, QUEUE): refused by enqueue.
}


def next_state(state: SlotState, event: SlotEvent) -> SlotState:
    """Look up the table; raise :class:`IllegalTransition` for a pair it does not allow."""
    try:
        return SLOT_TABLE[(state, event)]
    except KeyError:
        raise IllegalTransition("prompt slot", state.value, event.value) from None


class PromptSlot:
    """Holds the session's active :class:`Turn`, or nothing, and the line of prompts
    waiting for it (busy policy queue), first come first served.

    Every change is a compare-and-set: ``try_start`` only succeeds on an empty slot,
    ``end_if_current`` only clears the slot if it still holds *that* turn. All of it
    runs on the event loop thread without awaiting, so each operation is atomic. A
    waiter stays first in line from its wake-up until it holds the slot, so a prompt
    read in between lines up behind it (the caller checks :attr:`waiting`).
    """

    __slots__ = ("_line", "_state", "_turn")

    def __init__(self) -> None:
        self._state = SlotState.IDLE
        self._turn: Turn | None = None
        self._line: deque[anyio.Event] | None = None  # made by the first waiter

    @property
    def waiting(self) -> bool:
        """Whether prompts wait in line (a new one must line up behind them)."""
        return bool(self._line)

    def enqueue(self) -> anyio.Event | None:
        """A place at the end of the line, set when it is first and may start; None
        when the slot is closed."""
        if self._state is SlotState.CLOSED:
            return None
        self._state = next_state(self._state, SlotEvent.QUEUE)
        waiter = anyio.Event()
        if self._line is None:
            self._line = deque()
        self._line.append(waiter)
        return waiter

    def leave(self, waiter: anyio.Event, *, pass_on: bool) -> None:
        """Leave the line: having the slot now (``pass_on`` False), or giving up, in
        which case a wake-up it had goes to the next in line."""
        line = self._line
        if not line or waiter not in line:
            return
        self._state = next_state(self._state, SlotEvent.LEAVE)
        was_first = line[0] is waiter
        line.remove(waiter)
        if pass_on and was_first and waiter.is_set():
            self.wake_next()

    def wake_next(self) -> None:
        """Tell the first in line that the slot may be free (it stays first until it
        holds the slot)."""
        if self._line:
            self._line[0].set()

    @property
    def state(self) -> SlotState:
        return self._state

    @property
    def turn(self) -> Turn | None:
        return self._turn

    def try_start(self, turn: Turn) -> bool:
        """Put ``turn`` in the slot if it is idle. False if busy or closed."""
        if self._state is not SlotState.IDLE:
            return False
        self._state = next_state(self._state, SlotEvent.START)
        self._turn = turn
        return True

    def end_if_current(self, turn: Turn) -> bool:
        """Release the slot if ``turn`` still holds it (compare-and-set)."""
        if self._turn is not turn:
            return False
        self._state = next_state(self._state, SlotEvent.END)
        self._turn = None
        return True

    def cancel(self) -> Turn | None:
        """Clear the slot; return the turn that was active (to be cancelled), if any."""
        turn = self._turn
        self._state = next_state(self._state, SlotEvent.CANCEL)
        self._turn = None
        return turn

    def close(self) -> Turn | None:
        """Close the slot for good, sending the line away (each waiter wakes to find
        it closed); return the turn that was active, if any."""
        turn = self._turn
        self._state = next_state(self._state, SlotEvent.CLOSE)
        self._turn = None
        line, self._line = self._line, None
        for waiter in line or ():
            waiter.set()
        return turn


class CancelReason(enum.Enum):
    SESSION_CANCEL = "session/cancel"
    CANCEL_REQUEST = "$/cancel_request"
    CLOSE = "session/close"
    SHUTDOWN = "shutdown"


class Turn:
    """One prompt turn. Its end is decided once, by :meth:`finish`.

    ``cancel()`` may come from any code path (``session/cancel``, ``session/close``,
    ``$/cancel_request``, shutdown); it marks the turn and cancels its scope. Whatever
    the agent's code then does — raise, return normally, or be interrupted between two
    updates — :meth:`finish` reports ``cancelled``.
    """

    __slots__ = ("_done", "_stop_reason", "cancel_reason", "finished", "scope", "turn_id")

    def __init__(self, turn_id: str, scope: anyio.CancelScope | None = None) -> None:
        self.turn_id = turn_id
        self.scope = scope if scope is not None else anyio.CancelScope()
        self.cancel_reason: CancelReason | None = None
        self._done: anyio.Event | None = None  # made for the first waiter, if any
        #: whether :meth:`finish` has run (set only by it; an attribute, read every turn)
        self.finished = False
        self._stop_reason: str | None = None

    @property
    def done(self) -> anyio.Event:
        """Set once :meth:`finish` has run."""
        if self._done is None:
            self._done = anyio.Event()
            if self.finished:
                self._done.set()
        return self._done

    @property
    def cancelled(self) -> bool:
        return self.cancel_reason is not None

    def cancel(self, reason: CancelReason) -> None:
        if self.finished:
            return
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.scope.cancel()

    def finish(self, stop_reason: str | None) -> str | None:
        """Fix the turn's outcome exactly once; a cancelled turn always says ``cancelled``.

        ``stop_reason`` is what the agent returned, or None when it raised. Returns the
        stop reason to answer with, or None when the turn ends with an error response.
        """
        if self.finished:
            raise IllegalTransition("turn", "finished", "finish")
        self.finished = True
        if self.cancelled:
            self._stop_reason = "cancelled"
        else:
            self._stop_reason = stop_reason
        if self._done is not None:
            self._done.set()
        return self._stop_reason

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason


# --------------------------------------------------------------------------- paths

_O_PATH: Final = getattr(os, "O_PATH", 0)  # Linux


def real_path(path: str) -> str:
    """``os.path.realpath(path)``, in a quarter of the time for a path that exists on Linux.

    The kernel resolves the path once (an ``O_PATH`` descriptor: no read permission
    needed, nothing is read) and names what it found. A path that does not exist (a file
    about to be written, or one only the editor's buffer holds) is its parent's real path
    and its name (see ``_real_missing``); any other failure falls back to
    ``os.path.realpath``.
    """
    if _O_PATH:
        try:
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return _real_missing(path)
        except OSError:
            return os.path.realpath(path)
        try:
            found = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # no /proc
            found = ""
        finally:
            os.close(fd)
        if found.startswith("/") and not found.endswith(" (deleted)"):
            return found
    return os.path.realpath(path)


def _real_missing(path: str) -> str:
    """``os.path.realpath`` of a path that does not exist, from its parent's real path.

    Only for a plain last name with nothing at all behind it, in a path without ``..``
    (``realpath`` resolves ``a/missing/../link`` lexically, then follows ``a/link``): a
    dangling symlink (which ``realpath`` follows), ``.``, or anything ``lstat`` cannot say,
    is left to ``os.path.realpath``.
    """
    head, name = os.path.split(path)
    if ".." in path or not head or name in ("", ".") or head == path:
        return os.path.realpath(path)
    try:
        os.lstat(path)
    except FileNotFoundError:
        return os.path.join(real_path(head), name)
    except OSError:
        pass
    return os.path.realpath(path)  # a dangling symlink, or not decided here


# --------------------------------------------------------------------------- history

USER_KIND: Final = "user_message_chunk"


class TurnSink(Protocol):
    """Where a turn's events go as they happen (the server connects it to the store).

    A large event (over ``BIG_EVENT`` bytes of JSON) comes as the :class:`PackedJson`
    history keeps, not as a dict or text, so that it is never held twice in full.
    """

    def turn_started(
        self, turn_id: str, prompt_updates: Sequence[JsonText | PackedJson]
    ) -> None: ...

    def turn_event(self, turn_id: str, update: JsonText | PackedJson) -> None: ...


CHUNK_EVENTS: Final = 256  # events per compressed history chunk
BIG_EVENT: Final = 64 * 1024  # bytes of JSON above which an event is compressed alone


class TurnLog:
    """One turn of history: the user's prompt chunks first, then every update sent.

    A long streamed turn holds hundreds of thousands of events, so they are kept as
    JSON text, and every ``CHUNK_EVENTS`` of them are joined and compressed (history is
    repetitive: a 100k-update turn keeps about a megabyte, not tens). ``events``
    decodes them on access.
    """

    __slots__ = ("_chunks", "_count", "_first", "_tail", "interrupted", "stop_reason", "turn_id")

    def __init__(
        self,
        turn_id: str,
        events: Iterable[JSON] = (),
        stop_reason: str | None = None,
        interrupted: bool = False,
    ) -> None:
        self.turn_id = turn_id
        self._chunks: list[bytes] = []  # zlib of newline-joined JSON texts
        self._tail: list[JsonText] = []
        self._count = 0
        self._first: str | None = None
        self.stop_reason = stop_reason
        self.interrupted = interrupted
        for event in events:
            self.append(event)

    @property
    def events(self) -> list[JSON]:
        """The turn's events, decoded (a fresh list each time)."""
        out: list[JSON] = []
        for chunk in self._chunks:
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
        if self._count == 0:
            kind = event.get("sessionUpdate")
            self._first = kind if isinstance(kind, str) else None
        self._count += 1
        if len(data) > BIG_EVENT:
            # a large event (a pasted file, a big tool output): compressed on its own,
            # straight from the encoded bytes (no text copy of it is made)
            self._seal()
            packed = PackedJson.pack(data)
            self._chunks.append(packed.data)
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


# --------------------------------------------------------------------------- session


def check_absolute_dir(value: object, what: str) -> str:
    """Validate one directory path from the client: a non-empty absolute string."""
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{what} must be a non-empty absolute path")
    if not os.path.isabs(value):
        raise InvalidParams(f"{what} must be an absolute path, got {value[:200]!r}")
    check_path_text(value, what)
    return os.path.normpath(value)


def check_path_text(path: str, what: str = "path") -> None:
    """Refuse a path no file system call can take (a NUL byte) as bad params."""
    if "\0" in path:
        raise InvalidParams(f"{what} must not contain a NUL character")


def check_additional_directories(value: object) -> tuple[str, ...]:
    """Validate ``additionalDirectories``: reject the request on any bad entry, drop nothing."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidParams("additionalDirectories must be an array of absolute paths")
    return tuple(
        check_absolute_dir(entry, f"additionalDirectories[{i}]") for i, entry in enumerate(value)
    )


@dataclass(eq=False)
class Session:
    """One ACP session (a ``sessionId``) live on a connection."""

    session_id: str
    cwd: str
    additional_directories: tuple[str, ...] = ()
    title: str | None = None
    mode_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    mcp_servers: list[Any] = field(default_factory=list)
    slot: PromptSlot = field(default_factory=PromptSlot)
    history: History = field(default_factory=History)
    #: free slot for the agent's own per-session state
    state: dict[str, Any] = field(default_factory=dict)
    #: the most recent turn (it may still be unwinding after a cancel)
    last_turn: Turn | None = None
    #: the turn whose history is open (or being made durable); the next turn waits for it
    history_turn: Turn | None = None
    _tool_ids: int = 0
    _resolved_roots: tuple[tuple[str, str], ...] | None = None
    _tool_prefix: str = field(default_factory=lambda: os.urandom(3).hex())

    @property
    def roots(self) -> tuple[str, ...]:
        return (self.cwd, *self.additional_directories)

    @property
    def closed(self) -> bool:
        return self.slot.state is SlotState.CLOSED

    @property
    def active_turn(self) -> Turn | None:
        return self.slot.turn

    def resolve_path(self, path: str) -> str:
        """An absolute path: relative ones resolve against the session's cwd."""
        check_path_text(path)
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(self.cwd, path))

    def within_roots(self, path: str) -> bool:
        """Whether ``path`` (symlinks resolved) lies inside one of the session's roots."""
        real = real_path(path)
        return any(real == base or real.startswith(prefix) for base, prefix in self._real_roots())

    def _real_roots(self) -> tuple[tuple[str, str], ...]:
        # cwd and the extra roots are fixed for a live session: resolve them once
        if self._resolved_roots is None:
            real = (os.path.realpath(root) for root in self.roots)
            self._resolved_roots = tuple((base, base.rstrip(os.sep) + os.sep) for base in real)
        return self._resolved_roots

    def new_tool_call_id(self) -> str:
        self._tool_ids += 1
        return f"call_{self._tool_prefix}_{self._tool_ids}"

    def new_compaction_id(self) -> str:
        self._tool_ids += 1
        return f"compaction_{self._tool_prefix}_{self._tool_ids}"
