"""The prompt slot as a transition table, its compare-and-set operations, and Turn.finish.

Turn holds an anyio CancelScope and Event, so the tests that build one run on an event loop.
"""

from __future__ import annotations

import itertools

import anyio
import pytest

from acp_agent.errors import IllegalTransition
from acp_agent.history import STOP_REASONS
from acp_agent.prompt_slot import (
    SLOT_TABLE,
    CancelReason,
    PromptSlot,
    SlotEvent,
    SlotState,
    Turn,
    next_state,
)

ALL_PAIRS = list(itertools.product(SlotState, SlotEvent))


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=lambda v: v.value)
def test_every_pair_follows_the_table(state: SlotState, event: SlotEvent) -> None:
    expected = SLOT_TABLE.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            next_state(state, event)
        assert info.value.state == state.value
        assert info.value.event == event.value
    else:
        assert next_state(state, event) is expected


def test_table_mentions_only_known_states_and_events() -> None:
    for (state, event), target in SLOT_TABLE.items():
        assert isinstance(state, SlotState)
        assert isinstance(event, SlotEvent)
        assert isinstance(target, SlotState)


def test_closed_is_terminal() -> None:
    for event in SlotEvent:
        target = SLOT_TABLE.get((SlotState.CLOSED, event))
        assert target in (None, SlotState.CLOSED)


def test_the_refused_pairs_are_the_documented_ones() -> None:
    missing = {pair for pair in ALL_PAIRS if pair not in SLOT_TABLE}
    assert missing == {
        (SlotState.IDLE, SlotEvent.END),
        (SlotState.IDLE, SlotEvent.TIMEOUT),
        (SlotState.CLOSED, SlotEvent.TIMEOUT),
        (SlotState.ACTIVE, SlotEvent.START),
        (SlotState.CLOSED, SlotEvent.START),
        (SlotState.CLOSED, SlotEvent.QUEUE),
    }


# --------------------------------------------------------------------------- PromptSlot


@pytest.mark.anyio
async def test_try_start_on_idle_takes_the_slot() -> None:
    slot = PromptSlot()
    turn = Turn("t1")
    assert slot.try_start(turn) is True
    assert slot.state is SlotState.ACTIVE
    assert slot.turn is turn


@pytest.mark.anyio
async def test_try_start_on_busy_returns_false_and_keeps_the_holder() -> None:
    slot = PromptSlot()
    first, second = Turn("t1"), Turn("t2")
    assert slot.try_start(first)
    assert slot.try_start(second) is False
    assert slot.turn is first
    assert slot.state is SlotState.ACTIVE


@pytest.mark.anyio
async def test_try_start_on_closed_returns_false() -> None:
    slot = PromptSlot()
    assert slot.close() is None
    assert slot.try_start(Turn("t1")) is False
    assert slot.state is SlotState.CLOSED
    assert slot.turn is None


@pytest.mark.anyio
async def test_end_if_current_releases_only_its_own_turn() -> None:
    slot = PromptSlot()
    turn = Turn("t1")
    slot.try_start(turn)
    assert slot.end_if_current(turn) is True
    assert slot.state is SlotState.IDLE
    assert slot.turn is None


@pytest.mark.anyio
async def test_end_if_current_with_a_stale_turn_leaves_the_slot() -> None:
    slot = PromptSlot()
    stale, current = Turn("old"), Turn("new")
    slot.try_start(stale)
    assert slot.cancel() is stale  # the stale turn lost the slot
    assert slot.try_start(current)
    assert slot.end_if_current(stale) is False
    assert slot.state is SlotState.ACTIVE
    assert slot.turn is current


@pytest.mark.anyio
async def test_end_if_current_on_idle_slot_with_stale_turn() -> None:
    slot = PromptSlot()
    stale = Turn("old")
    slot.try_start(stale)
    slot.cancel()
    assert slot.end_if_current(stale) is False
    assert slot.state is SlotState.IDLE


@pytest.mark.anyio
async def test_cancel_returns_the_turn_and_clears() -> None:
    slot = PromptSlot()
    turn = Turn("t1")
    slot.try_start(turn)
    assert slot.cancel() is turn
    assert slot.state is SlotState.IDLE
    assert slot.turn is None
    # and a new turn can start at once
    assert slot.try_start(Turn("t2"))


@pytest.mark.anyio
async def test_cancel_with_nothing_running_is_a_noop() -> None:
    slot = PromptSlot()
    assert slot.cancel() is None
    assert slot.state is SlotState.IDLE


@pytest.mark.anyio
async def test_close_returns_the_active_turn_and_is_final() -> None:
    slot = PromptSlot()
    turn = Turn("t1")
    slot.try_start(turn)
    assert slot.close() is turn
    assert slot.state is SlotState.CLOSED
    assert slot.cancel() is None
    assert slot.close() is None
    assert slot.state is SlotState.CLOSED


@pytest.mark.anyio
@pytest.mark.parametrize("ending", ["end", "timeout"])
async def test_a_turn_unwinding_after_close_does_not_reopen(ending: str) -> None:
    slot = PromptSlot()
    turn = Turn("t1")
    slot.try_start(turn)
    slot.close()
    ends = slot.end_if_current if ending == "end" else slot.time_out
    assert ends(turn) is False
    assert slot.state is SlotState.CLOSED


# --------------------------------------------------------------------------- Turn


@pytest.mark.anyio
async def test_finish_exactly_once() -> None:
    turn = Turn("t1")
    assert turn.finish("end_turn") == "end_turn"
    assert turn.finished
    assert turn.done.is_set()
    with pytest.raises(IllegalTransition):
        turn.finish("end_turn")
    assert turn.stop_reason == "end_turn"


@pytest.mark.anyio
async def test_finish_with_none_means_error_response() -> None:
    turn = Turn("t1")
    assert turn.finish(None) is None
    assert turn.stop_reason is None


@pytest.mark.anyio
@pytest.mark.parametrize("reason", [*sorted(STOP_REASONS), None])
@pytest.mark.parametrize(
    "why", [r for r in CancelReason if r is not CancelReason.TIMEOUT], ids=lambda r: r.name
)
async def test_a_cancelled_turn_always_finishes_cancelled(
    reason: str | None, why: CancelReason
) -> None:
    turn = Turn("t1")
    turn.cancel(why)
    assert turn.cancelled
    assert turn.scope.cancel_called
    assert turn.finish(reason) == "cancelled"
    assert turn.stop_reason == "cancelled"


@pytest.mark.anyio
async def test_first_cancel_reason_wins() -> None:
    turn = Turn("t1")
    turn.cancel(CancelReason.SESSION_CANCEL)
    turn.cancel(CancelReason.CLOSE)
    assert turn.cancel_reason is CancelReason.SESSION_CANCEL


@pytest.mark.anyio
async def test_cancel_after_finish_changes_nothing() -> None:
    turn = Turn("t1")
    turn.finish("end_turn")
    turn.cancel(CancelReason.SESSION_CANCEL)
    assert not turn.cancelled
    assert turn.stop_reason == "end_turn"
    assert not turn.scope.cancel_called


@pytest.mark.anyio
async def test_turn_done_is_set_by_finish_whether_asked_for_before_or_after() -> None:
    early = Turn("early")
    waiter = early.done  # someone waits before the end
    assert not waiter.is_set()
    early.finish("end_turn")
    assert waiter.is_set() and early.done is waiter
    late = Turn("late")
    late.finish(None)
    assert late.done.is_set()  # asked for only after the end
    await late.done.wait()


# --------------------------------------------------------------------------- the line


@pytest.mark.anyio
async def test_the_line_is_first_come_first_served_and_its_first_keeps_its_place() -> None:
    slot = PromptSlot()
    running = Turn("running")
    assert slot.try_start(running)
    first, second = slot.enqueue(), slot.enqueue()
    assert first is not None and second is not None and slot.waiting
    assert slot.end_if_current(running)
    slot.wake_next()
    assert first.is_set() and not second.is_set()
    # woken but not yet started: the slot is idle, yet the line still holds it
    assert slot.state is SlotState.IDLE and slot.waiting
    late = slot.enqueue()
    assert late is not None and not late.is_set()
    slot.leave(first, pass_on=False)  # it takes the slot now
    assert slot.try_start(Turn("first"))
    assert not second.is_set()


@pytest.mark.anyio
async def test_a_woken_waiter_that_gives_up_passes_its_turn_on() -> None:
    slot = PromptSlot()
    first, second = slot.enqueue(), slot.enqueue()
    assert first is not None and second is not None
    slot.wake_next()
    slot.leave(first, pass_on=True)
    assert second.is_set()


@pytest.mark.anyio
async def test_a_waiter_that_gives_up_unwoken_wakes_nobody() -> None:
    slot = PromptSlot()
    assert slot.try_start(Turn("t"))
    first, second = slot.enqueue(), slot.enqueue()
    assert first is not None and second is not None
    slot.leave(first, pass_on=True)
    assert not second.is_set()
    assert slot.state is SlotState.ACTIVE


@pytest.mark.anyio
async def test_close_sends_the_line_away_and_refuses_new_places() -> None:
    slot = PromptSlot()
    turn = Turn("t")
    assert slot.try_start(turn)
    waiters = [slot.enqueue(), slot.enqueue()]
    assert slot.close() is turn
    assert all(w is not None and w.is_set() for w in waiters)
    assert not slot.waiting
    assert slot.enqueue() is None
    assert slot.try_start(Turn("after")) is False


# --------------------------------------------------------------------------- time limit, shutdown


@pytest.mark.anyio
async def test_time_out_releases_only_its_own_turn() -> None:
    slot = PromptSlot()
    turn, other = Turn("t1"), Turn("t2")
    assert slot.try_start(turn)
    assert slot.time_out(other) is False
    assert slot.time_out(turn) is True
    assert slot.state is SlotState.IDLE and slot.turn is None
    assert slot.try_start(other)
    assert slot.time_out(turn) is False  # it no longer holds the slot: nothing changes
    assert slot.turn is other


@pytest.mark.anyio
@pytest.mark.parametrize("busy", [False, True])
async def test_shutdown_closes_the_slot_and_sends_the_line_away(busy: bool) -> None:
    slot = PromptSlot()
    turn = Turn("t")
    if busy:
        assert slot.try_start(turn)
    waiter = slot.enqueue()
    assert slot.close(SlotEvent.SHUTDOWN) is (turn if busy else None)
    assert slot.state is SlotState.CLOSED
    assert waiter is not None and waiter.is_set()
    assert slot.close(SlotEvent.SHUTDOWN) is None
    assert slot.try_start(Turn("after")) is False


@pytest.mark.anyio
@pytest.mark.parametrize(
    "event", [e for e in SlotEvent if e not in (SlotEvent.CLOSE, SlotEvent.SHUTDOWN)]
)
async def test_close_takes_only_closing_events(event: SlotEvent) -> None:
    slot = PromptSlot()
    with pytest.raises(ValueError):
        slot.close(event)
    assert slot.state is SlotState.IDLE


@pytest.mark.anyio
async def test_a_turn_past_its_deadline_expires_and_answers_an_error() -> None:
    turn = Turn("t")
    assert turn.expire() is False  # no time limit
    turn.scope.deadline = anyio.current_time() - 1
    assert turn.expire() is True
    assert turn.timed_out and not turn.cancelled
    turn.cancel(CancelReason.SESSION_CANCEL)  # too late: the time limit came first
    assert turn.cancel_reason is CancelReason.TIMEOUT
    assert turn.finish("end_turn") is None


@pytest.mark.anyio
async def test_a_cancel_past_the_deadline_is_a_timeout() -> None:
    turn = Turn("t")
    turn.scope.deadline = anyio.current_time() - 1
    turn.cancel(CancelReason.SESSION_CANCEL)
    assert turn.timed_out
    assert turn.finish(None) is None


@pytest.mark.anyio
async def test_a_cancel_before_the_deadline_wins_over_it() -> None:
    turn = Turn("t")
    turn.scope.deadline = anyio.current_time() + 3600
    turn.cancel(CancelReason.SESSION_CANCEL)
    turn.scope.deadline = anyio.current_time() - 1  # the limit passes while it unwinds
    assert turn.expire() is False
    assert turn.cancelled
    assert turn.finish(None) == "cancelled"
