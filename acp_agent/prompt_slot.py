"""The prompt slot and the prompt turn: who may run a prompt now, and how a turn ends.

Owns :class:`PromptSlot` — the one-active-prompt rule and the FIFO line of prompts
waiting for it, as one transition table (``idle -> active -> idle``; ``closed`` is
terminal) whose events are start, queue, leave, end, cancel, timeout, close and shutdown,
guarded by a compare-and-set on a plain attribute owned by the session (no
``contextvars``) — and :class:`Turn`, one running prompt turn: its cancel scope, its time
limit (the scope's deadline) and its one authoritative end, which says what ended it
first: ``cancelled`` for a cancel, a close or a shutdown, an error for the time limit.

It does not own what a turn says (history, :mod:`acp_agent.history`), the session's
other state (:mod:`acp_agent.session`), JSON-RPC or transports.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Final

import anyio

from .errors import IllegalTransition


class SlotState(enum.Enum):
    IDLE = "idle"
    ACTIVE = "active"
    CLOSED = "closed"


class SlotEvent(enum.Enum):
    START = "start"  # a session/prompt wants the slot
    QUEUE = "queue"  # a session/prompt waits in line for it (busy policy queue)
    LEAVE = "leave"  # a waiting prompt leaves the line (it got the slot, or gave up)
    END = "end"  # the active turn finished (by any path)
    CANCEL = "cancel"  # session/cancel or $/cancel_request for the prompt
    TIMEOUT = "timeout"  # the active turn ran past its time limit
    CLOSE = "close"  # session/close, session/delete
    SHUTDOWN = "shutdown"  # the connection ends (end of input, a signal, a dropped client)


# The whole rule set, state by state: event -> next state. A missing (state, event) pair
# is an IllegalTransition. Events that find the slot in a state where they do nothing map
# to that state: a cancel with nothing running; in an idle slot with a line, a queue or a
# leave (its first was woken and is about to start; others line up behind); after a
# close, an end (a turn unwinding) or a leave (the line is sent away). A cancel or a
# timeout clears an active slot at once.
_S, _E = SlotState, SlotEvent
_RULES: Final = {
    _S.IDLE: {
        _E.START: _S.ACTIVE,
        _E.CANCEL: _S.IDLE,
        _E.QUEUE: _S.IDLE,
        _E.LEAVE: _S.IDLE,
        _E.CLOSE: _S.CLOSED,
        _E.SHUTDOWN: _S.CLOSED,
    },
    _S.ACTIVE: {
        _E.QUEUE: _S.ACTIVE,
        _E.LEAVE: _S.ACTIVE,
        _E.END: _S.IDLE,
        _E.CANCEL: _S.IDLE,
        _E.TIMEOUT: _S.IDLE,
        _E.CLOSE: _S.CLOSED,
        _E.SHUTDOWN: _S.CLOSED,
    },
    _S.CLOSED: {
        _E.CANCEL: _S.CLOSED,
        _E.CLOSE: _S.CLOSED,
        _E.SHUTDOWN: _S.CLOSED,
        _E.END: _S.CLOSED,
        _E.LEAVE: _S.CLOSED,
    },
    # Left out on purpose: (IDLE, END), (IDLE, TIMEOUT), (CLOSED, TIMEOUT): a turn that
    # no longer holds the slot ends or times out through end_if_current / time_out, which
    # leave it alone. (ACTIVE, START), (CLOSED, START): refused by try_start before the
    # table is consulted. (CLOSED, QUEUE): refused by enqueue.
}
SLOT_TABLE: Final[Mapping[tuple[SlotState, SlotEvent], SlotState]] = {
    (state, event): after for state, row in _RULES.items() for event, after in row.items()
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
        # made when a first prompt lines up: most sessions never have a line
        self._line: list[anyio.Event] | None = None

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
            self._line = []
        self._line.append(waiter)
        return waiter

    def leave(self, waiter: anyio.Event, *, pass_on: bool) -> None:
        """Leave the line: having the slot now (``pass_on`` False), or giving up, in
        which case a wake-up it had goes to the next in line."""
        line = self._line
        if line is None or waiter not in line:
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

    def time_out(self, turn: Turn) -> bool:
        """Release the slot because ``turn`` ran out of time, if it still holds it
        (compare-and-set): the next prompt may start while it unwinds."""
        if self._turn is not turn:
            return False
        self._state = next_state(self._state, SlotEvent.TIMEOUT)
        self._turn = None
        return True

    def close(self, event: SlotEvent = SlotEvent.CLOSE) -> Turn | None:
        """Close the slot for good (``CLOSE`` or ``SHUTDOWN``), sending the line away
        (each waiter wakes to find it closed); return the turn that was active, if any."""
        if event not in (SlotEvent.CLOSE, SlotEvent.SHUTDOWN):
            raise ValueError(f"not a closing event: {event}")
        turn = self._turn
        self._state = next_state(self._state, event)
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
    TIMEOUT = "timeout"  # the turn's time limit: answered as an error, not ``cancelled``


class Turn:
    """One prompt turn. Its end is decided once, by :meth:`finish`.

    ``cancel()`` may come from any code path (``session/cancel``, ``session/close``,
    ``$/cancel_request``, shutdown, the time limit); the first reason is kept, and it
    cancels the turn's scope. Whatever the agent's code then does — raise, return
    normally, or be interrupted between two updates — :meth:`finish` reports
    ``cancelled``, or, when the time limit came first, None (an error answer).
    """

    __slots__ = (
        "_done",
        "_finished",
        "_saving",
        "_stop_reason",
        "cancel_reason",
        "scope",
        "turn_id",
    )

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.scope = anyio.CancelScope()
        self.cancel_reason: CancelReason | None = None
        self._finished = False
        self._done: anyio.Event | None = None  # made only for someone who waits
        self._stop_reason: str | None = None
        self._saving: anyio.CancelScope | None = None

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def done(self) -> anyio.Event:
        """Set once :meth:`finish` has run."""
        if self._done is None:
            self._done = anyio.Event()
            if self._finished:
                self._done.set()
        return self._done

    @property
    def cancelled(self) -> bool:
        """Cancelled by a request, a close or a shutdown (answered ``cancelled``)."""
        reason = self.cancel_reason
        return reason is not None and reason is not CancelReason.TIMEOUT

    @property
    def timed_out(self) -> bool:
        """Ended by its time limit before anything cancelled it (answered as an error)."""
        return self.cancel_reason is CancelReason.TIMEOUT

    def cancel(self, reason: CancelReason) -> None:
        """Cancel the turn; the first reason is kept (the time limit, if it has passed)."""
        if self.finished:
            return
        if self.cancel_reason is None:
            self.cancel_reason = CancelReason.TIMEOUT if self._past_deadline() else reason
        self.scope.cancel()
        if self._saving is not None:
            self._saving.cancel()

    def saving(self, *, shield: bool) -> anyio.CancelScope:
        """The scope of the wait for the turn's last write, after the agent ran: a cancel
        of the turn from now on cancels it (``shield``: nothing else does)."""
        self._saving = anyio.CancelScope(shield=shield)
        return self._saving

    def expire(self) -> bool:
        """Whether the turn timed out: its scope's deadline (its time limit) has passed,
        and nothing cancelled it before; if so it is marked so, once."""
        if self.cancel_reason is None and not self.finished and self._past_deadline():
            self.cancel_reason = CancelReason.TIMEOUT
        return self.cancel_reason is CancelReason.TIMEOUT

    def _past_deadline(self) -> bool:
        deadline = self.scope.deadline
        return deadline != math.inf and anyio.current_time() >= deadline

    def finish(self, stop_reason: str | None) -> str | None:
        """Fix the turn's outcome exactly once; a cancelled turn always says ``cancelled``.

        ``stop_reason`` is what the agent returned, or None when it raised. Returns the
        stop reason to answer with, or None when the turn ends with an error response.
        """
        if self.finished:
            raise IllegalTransition("turn", "finished", "finish")
        if self.cancelled:
            self._stop_reason = "cancelled"
        elif self.timed_out:
            self._stop_reason = None
        else:
            self._stop_reason = stop_reason
        self._finished = True
        if self._done is not None:
            self._done.set()
        return self._stop_reason

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason
