"""A small LangGraph graph for the tests of what the LangGraph adapter saves per turn
(``test_langgraph_memory.py``), and the turn those tests run: as the adapter does, on a
fresh checkpointer restored from the folded saved turns, saving what the turn changed.

The graph answers the last human message: ``remove`` removes the first message, ``edit``
rewrites the first message in place, ``ask`` interrupts for an answer; anything else is
echoed. ``tally`` then counts the answers (a second step, where a turn can be cut).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from acp_agent.adapters._langgraph_memory import changes, fold
from acp_agent.adapters._langgraph_runtime import SessionCheckpointer

CONFIG: Any = {"configurable": {"thread_id": "t"}}


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    answers: int


def reply(state: State) -> State:
    messages = state["messages"]
    said = str(messages[-1].content)
    if said == "remove":
        return {"messages": [RemoveMessage(id=str(messages[0].id)), AIMessage("removed")]}
    if said == "edit":
        return {"messages": [HumanMessage("edited", id=messages[0].id), AIMessage("edited")]}
    if said == "ask":
        answer = interrupt({"question": "go on?"})
        return {"messages": [AIMessage(f"told {answer}")]}
    return {"messages": [AIMessage(f"echo {said}")]}


def tally(state: State) -> State:
    return {"answers": state.get("answers", 0) + 1}


def in_line(state: type[Any], *nodes: Callable[[Any], Any]) -> Any:
    """A graph of ``state`` running ``nodes`` one after the other, once each (compiled
    without a checkpointer)."""
    builder = StateGraph(state)
    previous = START
    for node in nodes:
        builder.add_node(node.__name__, node)
        builder.add_edge(previous, node.__name__)
        previous = node.__name__
    builder.add_edge(previous, END)
    return builder.compile()


def graph(saver: SessionCheckpointer) -> Any:
    return in_line(State, reply, tally).copy(update={"checkpointer": saver})


def turn(saved: list[Any], run: Callable[[Any], object]) -> SessionCheckpointer:
    """One turn as the adapter runs it: ``run(graph)`` on the thread the ``saved`` turns
    fold into; what it changed is appended to ``saved`` (through JSON, as stored). The
    checkpointer is returned live, as the turn left it."""
    saver = SessionCheckpointer()
    base = fold(saved)
    saver.restore_thread("t", base)
    run(graph(saver))
    saved.append(json.loads(json.dumps(changes(base, saver.export_thread("t")))))
    return saver


def say(text: str) -> Callable[[Any], object]:
    return lambda g: g.invoke({"messages": [HumanMessage(text)]}, CONFIG)


def resume(answer: str) -> Callable[[Any], object]:
    from langgraph.types import Command

    return lambda g: g.invoke(Command(resume=answer), CONFIG)


def cut(text: str) -> Callable[[Any], object]:
    """The turn stopped after its first step (as a cancel stops the stream)."""

    def run(g: Any) -> None:
        parts = g.stream({"messages": [HumanMessage(text)]}, CONFIG)
        next(parts)
        parts.close()

    return run
