"""What the LangGraph adapter saves per turn: only what the turn changed in its thread, and
the saved turns, folded oldest first, restore the very checkpoint the turn left (its
values, versions, ids and pending writes) — after plain turns, a pending interrupt and its
answer, a cut turn, a removed message and a message edited in place. Sessions saved in the
earlier forms (each turn its whole thread: ``data/langgraph_main.json`` holds the values in
the checkpoint, ``data/langgraph_values.json`` beside it) restore and go on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from acp_agent.adapters._langgraph_memory import changes, fold
from acp_agent.adapters._langgraph_runtime import SessionCheckpointer

from .lg_memory_graph import CONFIG, cut, resume, say, turn

DATA = Path(__file__).parent / "data"


def restored(saved: list[Any]) -> SessionCheckpointer:
    saver = SessionCheckpointer()
    saver.restore_thread("t", fold(saved))
    return saver


def assert_restores(saved: list[Any], live: SessionCheckpointer) -> None:
    again = restored(saved)
    assert again.export_thread("t") == live.export_thread("t")
    assert again.get_tuple(CONFIG) == live.get_tuple(CONFIG)


def messages_saved(saved_turn: Any) -> Any:
    """How the turn saved the root namespace's ``messages`` (None: unchanged)."""
    values = dict(saved_turn["changed"].get("", {}).get("values", ()))
    return values.get("messages")


def contents(saver: SessionCheckpointer) -> list[str]:
    latest = saver.get_tuple(CONFIG)
    assert latest is not None
    return [str(m.content) for m in latest.checkpoint["channel_values"]["messages"]]


def test_restoring_the_saved_turns_gives_the_checkpoint_each_turn_left() -> None:
    saved: list[Any] = []
    for step, run in enumerate([say("hello"), say("again"), say("ask")]):
        live = turn(saved, run)
        assert_restores(saved, live)
        if step:  # the conversation grew: only its new entries were saved
            assert len(messages_saved(saved[-1])["append"]) == (2 if step == 1 else 1)
    assert live.get_tuple(CONFIG).pending_writes  # type: ignore[union-attr]  # the interrupt
    for run in [resume("yes"), cut("cut"), say("after"), say("remove"), say("edit")]:
        live = turn(saved, run)
        assert_restores(saved, live)
    # "hello" removed, then "echo hello" (the first message left) edited in place
    assert contents(live) == [
        *["edited", "again", "echo again", "ask", "told yes", "cut", "echo cut"],
        *["after", "echo after", "remove", "removed", "edit", "edited"],
    ]
    # tallied by every turn but the interrupted one and the cut one
    assert live.get_tuple(CONFIG).checkpoint["channel_values"]["answers"] == 6  # type: ignore[union-attr]
    # where the earlier list is no prefix of the new one, the whole list is saved
    assert [list(messages_saved(s)) for s in saved[-2:]] == [["entries"], ["entries"]]
    assert "append" in messages_saved(saved[-3])


def test_a_turn_that_changed_nothing_saves_nothing() -> None:
    saved: list[Any] = []
    turn(saved, say("hello"))
    turn(saved, lambda graph: None)
    assert saved[-1] == {"changed": {}}


@pytest.mark.parametrize("name", ["langgraph_main.json", "langgraph_values.json"])
def test_a_session_saved_in_an_earlier_form_restores_and_goes_on(name: str) -> None:
    saved: list[Any] = json.loads((DATA / name).read_text())
    assert contents(restored(saved)) == ["hello", "echo hello", "again", "echo again"]
    for run in [say("now"), say("later")]:
        live = turn(saved, run)
        assert_restores(saved, live)
    assert contents(live)[-4:] == ["now", "echo now", "later", "echo later"]
    assert "append" in messages_saved(saved[-1])


def test_a_namespace_the_thread_no_longer_has_is_dropped() -> None:
    root = {"id": "2", "checkpoint": ["msgpack", ""], "values": [["n", ["msgpack", "AQ=="]]]}
    sub = {"id": "1", "checkpoint": ["msgpack", ""], "values": []}
    saved: list[Any] = [{"": root, "sub:1": sub}]
    saved.append(changes(fold(saved), {"": root}))
    assert saved[-1] == {"changed": {}, "gone": ["sub:1"]}
    assert fold(saved) == {"": root}
