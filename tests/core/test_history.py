"""Turn-scoped history: the invariants of History/TurnHandle and the repair done by sanitize."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_agent.errors import IllegalTransition
from acp_agent.history import (
    BIG_EVENT,
    STOP_REASONS,
    USER_KIND,
    History,
    TurnHandle,
    TurnLog,
    sanitize,
)
from acp_agent.store import PackedJson

JSON = dict[str, Any]


def user(text: str = "hi") -> JSON:
    return {"sessionUpdate": USER_KIND, "content": {"type": "text", "text": text}}


def agent(text: str = "ok") -> JSON:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def tool(tool_id: str, status: str = "pending") -> JSON:
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": tool_id,
        "title": tool_id,
        "kind": "other",
        "status": status,
    }


def tool_update(tool_id: str, status: str | None = None) -> JSON:
    update: JSON = {"sessionUpdate": "tool_call_update", "toolCallId": tool_id}
    if status is not None:
        update["status"] = status
    return update


def view(turn: TurnLog) -> tuple[Any, ...]:
    return (turn.turn_id, turn.events, turn.stop_reason, turn.interrupted)


class RecordingSink:
    def __init__(self) -> None:
        self.started: list[tuple[str, list[JSON]]] = []
        self.events: list[tuple[str, JSON]] = []

    def turn_started(self, turn_id: str, prompt_updates: Sequence[Any]) -> None:
        # small updates come as the JSON text history keeps, large ones packed
        self.started.append(
            (turn_id, [orjson.loads(u) if isinstance(u, str) else u for u in prompt_updates])
        )

    def turn_event(self, turn_id: str, update: Any) -> None:
        # the update may come pre-encoded as JSON text
        self.events.append(
            (turn_id, orjson.loads(str(update)) if isinstance(update, str) else update)
        )

    def behind(self) -> bool:
        return False

    async def catch_up(self) -> None:
        pass


# --------------------------------------------------------------------------- History


def test_start_turn_puts_the_prompt_first() -> None:
    history = History()
    handle = history.start_turn(
        "t1", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    )
    handle.record(agent())
    assert [e["sessionUpdate"] for e in history.events()] == [
        USER_KIND,
        USER_KIND,
        "agent_message_chunk",
    ]
    assert history.events()[0]["content"] == {"type": "text", "text": "a"}


def test_an_empty_prompt_still_starts_with_a_user_chunk() -> None:
    history = History()
    history.start_turn("t1", [])
    assert history.events() == [user("")]


def test_start_turn_while_open_raises() -> None:
    history = History()
    history.start_turn("t1", [{"type": "text", "text": "a"}])
    with pytest.raises(IllegalTransition):
        history.start_turn("t2", [{"type": "text", "text": "b"}])
    assert len(history.turns) == 1


def test_record_after_commit_raises() -> None:
    history = History()
    handle = history.start_turn("t1", [])
    handle.commit("end_turn")
    assert handle.committed
    with pytest.raises(IllegalTransition):
        handle.record(agent())
    assert history.current is None


def test_commit_twice_raises() -> None:
    history = History()
    handle = history.start_turn("t1", [])
    handle.commit("end_turn")
    with pytest.raises(IllegalTransition):
        handle.commit("end_turn")


@pytest.mark.parametrize("bad", ["error", "aborted", "", "END_TURN"])
def test_commit_with_an_invalid_stop_reason_raises(bad: str) -> None:
    history = History()
    handle = history.start_turn("t1", [])
    with pytest.raises(ValueError):
        handle.commit(bad)
    # the turn is still open and can be committed properly
    assert history.current is handle
    handle.commit("end_turn")
    assert history.turns[0].stop_reason == "end_turn"


def test_abandon_closes_without_stop_reason_and_is_idempotent() -> None:
    history = History()
    handle = history.start_turn("t1", [])
    handle.abandon()
    handle.abandon()
    assert history.current is None
    assert history.turns[0].interrupted
    assert history.turns[0].stop_reason is None
    with pytest.raises(IllegalTransition):
        handle.record(agent())
    history.start_turn("t2", [])


def test_the_sink_sees_every_event_in_order() -> None:
    sink = RecordingSink()
    history = History(sink=sink)
    handle = history.start_turn("t1", [{"type": "text", "text": "q"}])
    handle.record(agent("a"))
    handle.record(agent("b"))
    handle.commit("end_turn")
    assert sink.started == [("t1", [user("q")])]
    assert sink.events == [("t1", agent("a")), ("t1", agent("b"))]


def test_large_events_reach_the_sink_packed() -> None:
    sink = RecordingSink()
    history = History(sink=sink)
    text = "q" * BIG_EVENT
    handle = history.start_turn(
        "t1", [{"type": "text", "text": text}, {"type": "text", "text": "s"}]
    )
    big = agent("a" * BIG_EVENT)
    encoded = b'{"update":' + orjson.dumps(big) + b"}"
    kept = handle.record(big, memoryview(encoded)[10:-1])
    small = handle.record(agent("b"), orjson.dumps(agent("b")))
    handle.commit("end_turn")
    [(_, [first, second])] = sink.started
    assert isinstance(first, PackedJson) and first.load() == user(text)
    assert second == user("s")
    assert isinstance(kept, PackedJson) and kept.load() == big
    assert small == orjson.dumps(agent("b")).decode()
    assert [event for _, event in sink.events] == [kept, agent("b")]
    assert history.events() == [user(text), user("s"), big, agent("b")]


# --------------------------------------------------------------------------- properties

OP = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 3)),
    st.tuples(st.just("record"), st.sampled_from(["agent_message_chunk", "plan", "tool_call"])),
    st.tuples(st.just("record_stale"), st.just(None)),
    st.tuples(st.just("commit"), st.sampled_from([*sorted(STOP_REASONS), "error", "bogus"])),
    st.tuples(st.just("abandon"), st.just(None)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(OP, max_size=40))
def test_history_invariants_hold_under_any_operation_sequence(ops: list[tuple[str, Any]]) -> None:
    sink = RecordingSink()
    history = History(sink=sink)
    handles: list[TurnHandle] = []
    open_handle: TurnHandle | None = None
    expected_events: list[JSON] = []
    for n, (op, arg) in enumerate(ops):
        if op == "start":
            prompt = [{"type": "text", "text": f"p{n}.{i}"} for i in range(arg)]
            if open_handle is not None:
                with pytest.raises(IllegalTransition):
                    history.start_turn(f"t{n}", prompt)
            else:
                open_handle = history.start_turn(f"t{n}", prompt)
                handles.append(open_handle)
                expected_events.extend([user(b["text"]) for b in prompt] if prompt else [user("")])
        elif op == "record":
            event = {"sessionUpdate": arg, "n": n}
            if open_handle is None:
                # nothing to record through: no event can exist outside a turn
                for h in handles:
                    with pytest.raises(IllegalTransition):
                        h.record(event)
            else:
                open_handle.record(event)
                expected_events.append(event)
        elif op == "record_stale":
            for h in handles:
                if h is not open_handle:
                    with pytest.raises(IllegalTransition):
                        h.record({"sessionUpdate": "agent_message_chunk", "n": n})
        elif op == "commit":
            target = open_handle if open_handle is not None else (handles[-1] if handles else None)
            if target is None:
                continue
            if arg not in STOP_REASONS:
                with pytest.raises(ValueError):
                    target.commit(arg)
            elif target is not open_handle:
                with pytest.raises(IllegalTransition):
                    target.commit(arg)
            else:
                target.commit(arg)
                open_handle = None
        elif op == "abandon":
            if open_handle is not None:
                open_handle.abandon()
                open_handle = None
            elif handles:
                handles[-1].abandon()  # a no-op on a closed turn

        # invariants after every step
        events = history.events()
        assert events == expected_events
        if events:
            assert events[0]["sessionUpdate"] == USER_KIND
        for turn in history.turns:
            assert turn.events and turn.events[0]["sessionUpdate"] == USER_KIND
        assert sum(1 for t in history.turns if t.open) == (0 if open_handle is None else 1)
        assert history.current is open_handle
        sunk = [e for _, ups in sink.started for e in ups]
        assert len(sunk) + len(sink.events) == len(events)


# --------------------------------------------------------------------------- sanitize


def test_sanitize_drops_an_empty_turn() -> None:
    turns = [TurnLog("t1", [], None, True), TurnLog("t2", [user(), agent()], "end_turn")]
    clean = sanitize(turns)
    assert [t.turn_id for t in clean] == ["t2"]


def test_sanitize_drops_a_turn_not_starting_with_a_user_chunk() -> None:
    turns = [
        TurnLog("t1", [agent("orphan"), user()], "end_turn"),
        TurnLog("t2", [user("q"), agent("a")], "end_turn"),
    ]
    clean = sanitize(turns)
    assert [t.turn_id for t in clean] == ["t2"]
    assert clean[0].events == [user("q"), agent("a")]


def test_sanitize_drops_an_orphan_tool_call_update() -> None:
    turns = [
        TurnLog(
            "t1",
            [user(), tool_update("ghost", "completed"), tool("c1"), tool_update("c1", "completed")],
            "end_turn",
        )
    ]
    clean = sanitize(turns)
    assert clean[0].events == [user(), tool("c1"), tool_update("c1", "completed")]


def test_sanitize_keeps_updates_for_a_tool_announced_in_an_earlier_turn() -> None:
    turns = [
        TurnLog("t1", [user(), tool("c1", "in_progress")], "end_turn"),
        TurnLog("t2", [user(), tool_update("c1", "completed")], "end_turn"),
    ]
    clean = sanitize(turns)
    assert clean[1].events == [user(), tool_update("c1", "completed")]


def test_sanitize_forgets_tools_of_a_dropped_turn() -> None:
    turns = [
        TurnLog("t1", [agent(), tool("c1")], "end_turn"),  # dropped: no user chunk first
        TurnLog("t2", [user(), tool_update("c1", "completed")], "end_turn"),
    ]
    clean = sanitize(turns)
    assert clean[0].events == [user()]


@pytest.mark.parametrize("interrupted", [True, False])
def test_sanitize_fails_unfinished_tool_calls_of_an_interrupted_turn(interrupted: bool) -> None:
    events = [
        user(),
        tool("pending1"),
        tool("running", "in_progress"),
        tool("done", "pending"),
        tool_update("done", "completed"),
        tool("broke", "in_progress"),
        tool_update("broke", "failed"),
        tool("started"),
        tool_update("started", "in_progress"),
        tool_update("started"),  # no status: stays in_progress
    ]
    # interrupted flag set, or simply no stop reason stored
    turn = TurnLog("t1", list(events), None, interrupted)
    clean = sanitize([turn])
    assert clean[0].interrupted
    assert clean[0].events[: len(events)] == events
    added = clean[0].events[len(events) :]
    assert added == [
        tool_update("pending1", "failed"),
        tool_update("running", "failed"),
        tool_update("started", "failed"),
    ]


def test_sanitize_leaves_a_finished_turn_alone() -> None:
    events = [user(), tool("c1"), agent()]
    clean = sanitize([TurnLog("t1", list(events), "end_turn")])
    assert clean[0].events == events
    assert not clean[0].interrupted
    assert clean[0].stop_reason == "end_turn"


EVENT = st.one_of(
    st.builds(user, st.sampled_from(["a", "b"])),
    st.builds(agent, st.sampled_from(["x", "y"])),
    st.builds(
        tool, st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["pending", "in_progress"])
    ),
    st.builds(
        tool_update,
        st.sampled_from(["c1", "c2", "c3", "zz"]),
        st.sampled_from([None, "in_progress", "completed", "failed"]),
    ),
)
TURN = st.builds(
    TurnLog,
    st.text("abc", min_size=1, max_size=3),
    st.lists(EVENT, max_size=8),
    st.sampled_from([None, "end_turn", "cancelled"]),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(TURN, max_size=6))
def test_sanitize_output_is_a_valid_replay_and_a_fixed_point(turns: list[TurnLog]) -> None:
    clean = sanitize(turns)
    announced: set[str] = set()
    for turn in clean:
        assert turn.events and turn.events[0]["sessionUpdate"] == USER_KIND
        status: dict[str, str] = {}  # tools announced in this turn -> last status
        for event in turn.events:
            kind = event["sessionUpdate"]
            if kind == "tool_call":
                announced.add(event["toolCallId"])
                status[event["toolCallId"]] = event["status"]
            elif kind == "tool_call_update":
                assert event["toolCallId"] in announced
                if "status" in event and event["toolCallId"] in status:
                    status[event["toolCallId"]] = event["status"]
        if turn.interrupted:
            assert all(s in ("completed", "failed") for s in status.values())
    assert [view(t) for t in sanitize(clean)] == [view(t) for t in clean]


def test_sanitize_ends_a_compaction_an_interrupted_turn_left_in_progress() -> None:
    begun = {"sessionUpdate": "compaction_update", "compactionId": "k1", "status": "in_progress"}
    chunk = {
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": "k1",
        "content": {"type": "text", "text": "so far"},
    }
    done = {"sessionUpdate": "compaction_update", "compactionId": "k2", "status": "completed"}
    clean = sanitize([TurnLog("t1", [user(), begun, chunk, done], None, True)])
    assert clean[0].events == [
        user(),
        begun,
        chunk,
        done,
        {"sessionUpdate": "compaction_update", "compactionId": "k1", "status": "cancelled"},
    ]
    finished = sanitize([TurnLog("t1", [user(), begun, chunk], "end_turn")])
    assert finished[0].events == [user(), begun, chunk]
