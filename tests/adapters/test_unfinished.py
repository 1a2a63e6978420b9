"""What the model is told of a loaded turn that ended with nothing saved
(``acp_agent.adapters.unfinished``), and where the adapters' ``saved`` puts it: on turn
records as ``session/load`` gives them (after ``sanitize``), no framework needed."""

from __future__ import annotations

from typing import Any

from acp_agent.adapters.turns import saved
from acp_agent.adapters.unfinished import (
    INTERRUPTED,
    ToldCall,
    ToldResponse,
    UnfinishedTurn,
    call_meta,
    remember_unfinished,
    unfinished_turn,
)
from acp_agent.history import STATE_KIND, History, TurnLog, sanitize
from acp_agent.session import Session

JSON = dict[str, Any]


def user(text: str) -> JSON:
    return {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}


def said(text: str, message_id: str | None = None) -> JSON:
    chunk: JSON = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": text},
    }
    if message_id is not None:
        chunk["messageId"] = message_id
    return chunk


def call(acp_id: str, name: str, model_id: str | None) -> JSON:
    update: JSON = {
        "sessionUpdate": "tool_call",
        "toolCallId": acp_id,
        "title": name,
        "name": name,
        "kind": "other",
        "status": "pending",
    }
    if model_id is not None:
        update["_meta"] = call_meta(model_id)
    return update


def update(acp_id: str, **fields: Any) -> JSON:
    return {"sessionUpdate": "tool_call_update", "toolCallId": acp_id, **fields}


def state(memory: Any) -> JSON:
    return {"sessionUpdate": STATE_KIND, "state": {"memory": memory, "approvals": {}}}


def killed(turn_id: str, events: list[JSON]) -> TurnLog:
    (loaded,) = sanitize([TurnLog(turn_id, events, None, interrupted=True)])
    return loaded


def test_a_killed_turn_is_told_as_the_replay_shows_it() -> None:
    turn = killed(
        "t1",
        [
            user("read a and b"),
            said("Reading ", "m1"),
            said("a.", "m1"),
            call("c1", "read_file", "model-1"),
            update("c1", status="in_progress", rawInput={"path": "a"}),
            update("c1", status="completed", rawOutput={"output": "A!"}),
            said("Now b.", "m2"),
            call("c2", "read_file", "model-2"),
            update("c2", status="in_progress", rawInput={"path": "b"}),
            call("c3", "Approval needed", None),  # not a call the model made
            said("never sent", "m3"),
        ],
    )
    told = unfinished_turn(turn)
    assert told == UnfinishedTurn(
        "t1",
        ({"type": "text", "text": "read a and b"},),
        (
            ToldResponse(
                "Reading a.", (ToldCall("model-1", "read_file", {"path": "a"}, "A!", False),)
            ),
            ToldResponse(
                "Now b.", (ToldCall("model-2", "read_file", {"path": "b"}, INTERRUPTED, True),)
            ),
            ToldResponse("never sent"),
        ),
    )


def test_a_call_closed_failed_with_its_reason_keeps_it() -> None:
    turn = killed(
        "t1",
        [
            user("go"),
            call("c1", "delete", "m-1"),
            update(
                "c1",
                status="failed",
                content=[{"type": "content", "content": {"type": "text", "text": "no such file"}}],
            ),
        ],
    )
    told = unfinished_turn(turn)
    assert told is not None
    assert told.responses == (
        ToldResponse("", (ToldCall("m-1", "delete", {}, "no such file", True),)),
    )


def test_a_turn_that_ended_or_saved_its_memory_is_not_told() -> None:
    ended = TurnLog("t1", [user("hi"), said("hello")], "end_turn")
    cut = TurnLog("t2", [user("hi"), said("hel"), state(["kept"])], None, interrupted=True)
    assert unfinished_turn(ended) is None
    assert unfinished_turn(cut) is None


def test_the_told_memory_takes_the_turns_place_in_what_was_saved() -> None:
    turns = sanitize(
        [
            TurnLog("t1", [user("one"), said("1"), state("first")], "end_turn"),
            TurnLog("t2", [user("two"), said("tw")], None, interrupted=True),
            TurnLog("t3", [user("three"), said("3"), state("third")], "end_turn"),
        ]
    )
    session = Session("s", "/tmp", history=History(turns))
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def memory(turn: UnfinishedTurn, before: Any) -> Any:
        seen.append((turn.turn_id, tuple(before)))
        return f"told {turn.responses[0].text}"

    remember_unfinished(session, memory)
    assert seen == [("t2", ("first",))]
    assert saved(session)[0] == ["first", "told tw", "third"]
