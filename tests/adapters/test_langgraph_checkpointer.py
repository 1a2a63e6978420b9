"""The LangGraph adapter's checkpointer on its own: a thread exported and restored in a
fresh checkpointer goes on as if it had never left, one saved in the earlier form (the
checkpoint holding its channel values) too, and a step serializes only the channels it
changed."""

from __future__ import annotations

import base64
import operator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from acp_agent.adapters._langgraph_runtime import SessionCheckpointer

from .lg_memory_graph import in_line

CONFIG: Any = {"configurable": {"thread_id": "t"}}


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    steps: int


def graph() -> Any:
    """``say`` adds to ``log``; ``count`` only changes ``steps``."""

    def say(state: State) -> State:
        return {"log": [f"said {len(state.get('log', []))}"]}

    def count(state: State) -> State:
        return {"steps": state.get("steps", 0) + 1}

    return in_line(State, say, count)


def on(saver: SessionCheckpointer) -> Any:
    return graph().copy(update={"checkpointer": saver})


class Counting(JsonPlusSerializer):
    """Counts the strings serialized (a list is serialized entry by entry)."""

    def __init__(self) -> None:
        super().__init__()
        self.strings = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, str):
            self.strings += 1
        return super().dumps_typed(obj)


def test_a_restored_thread_goes_on_where_it_was() -> None:
    first = SessionCheckpointer()
    on(first).invoke({"log": ["hello"]}, CONFIG)
    saved = first.export_thread("t")
    again = SessionCheckpointer()
    again.restore_thread("t", saved)
    values = on(again).invoke({"log": ["again"]}, CONFIG)
    assert values == {"log": ["hello", "said 1", "again", "said 3"], "steps": 2}
    assert on(again).get_state(CONFIG).next == ()


def test_a_thread_saved_with_its_values_in_the_checkpoint_is_restored() -> None:
    saver = SessionCheckpointer()
    on(saver).invoke({"log": ["hello"]}, CONFIG)
    latest = saver.get_tuple(CONFIG)
    assert latest is not None
    kind, data = saver.serde.dumps_typed(latest.checkpoint)  # values and all, as before
    earlier = saver.export_thread("t")[""]
    earlier["checkpoint"] = [kind, base64.b64encode(data).decode("ascii")]
    del earlier["values"]
    again = SessionCheckpointer()
    again.restore_thread("t", {"": earlier})
    values = on(again).invoke({"log": ["again"]}, CONFIG)
    assert values == {"log": ["hello", "said 1", "again", "said 3"], "steps": 2}


def test_a_step_serializes_only_the_channels_it_changed() -> None:
    saver = SessionCheckpointer()
    serde = Counting()
    saver.serde = serde
    config = saver.put(
        CONFIG,
        checkpoint({"log": ["hello"], "steps": 0}, {"log": "1", "steps": "1"}),
        {},
        {"log": "1", "steps": "1"},
    )
    assert serde.strings == 1
    config = saver.put(
        config,
        checkpoint({"log": ["hello"], "steps": 1}, {"log": "1", "steps": "2"}),
        {},
        {"steps": "2"},
    )
    assert serde.strings == 1  # the log did not change: it is not serialized again
    latest = saver.get_tuple(config)
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {"log": ["hello"], "steps": 1}
    restored = SessionCheckpointer()
    restored.restore_thread("t", saver.export_thread("t"))
    again = restored.get_tuple(config)
    assert again is not None
    assert again.checkpoint == latest.checkpoint


def checkpoint(values: dict[str, Any], versions: dict[str, str]) -> Any:
    made = empty_checkpoint()
    made["channel_values"] = values
    made["channel_versions"] = versions
    return made
