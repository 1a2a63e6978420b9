"""One turn of a graph served by :class:`~acp_agent.adapters.langgraph.LangGraphAgent`:
its stream read into ACP updates (text, thoughts, tool calls, plans, usage), its
interrupts answered with the client's permission, its end and its failures. It does not
know sessions, the checkpointer or MCP servers: the agent owns them."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Final

from ..agent import StopReason
from ..errors import InternalError
from .openai_based import locations, prompt_text
from .turns import (
    PATH_KEY,
    PLAN_KEY,
    AdapterTurn,
    declared_kind,
    plan_entries,
)

if TYPE_CHECKING:
    from .langgraph import LangGraphAgent

JSON = dict[str, Any]

INTERRUPT_KEY: Final = "__interrupt__"
DECLINED: Final = "The user declined to run this tool."


class GraphRun:
    """One prompt turn: runs the graph (and resumes it after each interrupt)."""

    def __init__(self, agent: LangGraphAgent, adapter: AdapterTurn, graph: Any) -> None:
        from ._langgraph_runtime import ToolStarts

        self.agent = agent
        self.adapter = adapter
        self.graph = graph
        self.client = adapter.client
        configurable: JSON = {"thread_id": adapter.session.session_id}
        model = agent.chosen_model(adapter.session)
        if model is not None:
            configurable["model"] = model
        self.config: JSON = {
            "configurable": configurable,
            "callbacks": [ToolStarts(adapter.calls.start)],
        }
        #: (message id, chunk index) -> tool call id, for streamed tool call chunks
        self.chunk_calls: dict[tuple[str, int], str] = {}
        #: tool calls of the model's latest complete message, in order
        self.last_calls: list[JSON] = []
        #: LangGraph task id -> the tool call ids it runs; interrupt id -> tool call ids
        self.task_calls: dict[str, list[str]] = {}
        self.interrupt_calls: dict[str, list[str]] = {}
        self.names: dict[str, str] = {}
        #: ids of messages already translated in full (a node's output after its stream)
        self.done_messages: set[str] = set()
        #: tool calls the person rejected: they did not run, whatever their result says
        self.declined: set[str] = set()

    # -- the turn ---------------------------------------------------------------------

    async def run(self) -> StopReason:
        from langgraph.errors import GraphRecursionError
        from langgraph.types import Command

        request: Any = await self.first_input()
        while True:
            try:
                interrupts = await self.stream(request)
            except GraphRecursionError:
                return "max_turn_requests"
            except Exception as exc:
                raise await self.failed(exc) from None
            if not interrupts:
                return "end_turn"
            answers: JSON = {}
            for interrupt in interrupts:
                answer = await self.answer(interrupt)
                if answer is None:
                    return "cancelled"
                answers[interrupt.id] = answer
            request = Command(resume=answers)

    async def failed(self, exc: Exception) -> Exception:
        """What a failed run raises: a model failure named (the answer that was no
        answer taken out of the thread, so that it is not saved as the model's reply)."""
        from langchain_core.messages import RemoveMessage

        from ._langgraph_runtime import AnswerFailed, stream_failure

        if isinstance(exc, AnswerFailed):
            # in the thread if its node's writes were committed before the stream closed
            with contextlib.suppress(ValueError):
                update = {"messages": [RemoveMessage(id=exc.message_id)]}
                await self.graph.aupdate_state(self.config, update)
            return exc.error
        return stream_failure(exc) or exc

    async def first_input(self) -> JSON:
        """The prompt as the graph's input, after results for calls a cut turn left open."""
        from ._langgraph_runtime import cancelled_result, user_message

        state = await self.graph.aget_state(self.config)
        values = getattr(state, "values", None)
        messages = values.get("messages") if isinstance(values, Mapping) else None
        repairs = [cancelled_result(call) for call in unanswered(messages or [])]
        return {"messages": [*repairs, user_message(prompt_text(self.adapter.turn.blocks))]}

    async def stream(self, request: Any) -> list[Any]:
        """Run the graph on ``request``; the interrupts it stopped at (none: it ended).

        They are the root namespace's ``__interrupt__`` updates (a subgraph's reach it
        too), so no state is read back after the run."""
        interrupts: dict[str, Any] = {}
        parts = self.graph.astream(
            request,
            self.config,
            stream_mode=["messages", "updates", "tasks"],
            version="v2",
            subgraphs=True,
        )
        # closed on every way out (a cancel too), so that the graph's tasks end with it
        async with aclosing(parts):
            async for part in parts:
                kind, data = part["type"], part["data"]
                if kind == "messages":
                    await self.on_message(data[0])
                elif kind == "updates":
                    if not part["ns"]:
                        for interrupt in data.get(INTERRUPT_KEY) or ():
                            interrupts.setdefault(str(interrupt.id), interrupt)
                    await self.on_updates(data)
                elif kind == "tasks":
                    self.on_task(data)
        return list(interrupts.values())

    # -- stream parts -------------------------------------------------------------------

    async def on_message(self, message: Any) -> None:
        message_type = getattr(message, "type", None)
        if message_type == "tool":
            await self.on_tool_result(message)
            return
        if message_type not in ("AIMessageChunk", "ai"):
            return
        message_id = str(getattr(message, "id", None) or "")
        if message_id in self.done_messages:
            return
        for block in getattr(message, "content_blocks", None) or ():
            block_type = block.get("type")
            if block_type == "text" and block.get("text"):
                await self.client.message(str(block["text"]))
            elif block_type == "reasoning" and block.get("reasoning"):
                await self.client.thought(str(block["reasoning"]))
        for chunk in getattr(message, "tool_call_chunks", None) or ():
            await self.on_call_chunk(message_id, chunk)
        if message_type == "ai":
            await self.on_complete(message)
        await self.count_usage(getattr(message, "usage_metadata", None))

    async def on_call_chunk(self, message_id: str, chunk: Mapping[str, Any]) -> None:
        key = (message_id, int(chunk.get("index") or 0))
        if key in self.chunk_calls or not chunk.get("id") or not chunk.get("name"):
            return
        call_id, name = str(chunk["id"]), str(chunk["name"])
        self.chunk_calls[key] = call_id
        await self.announce(call_id, name)

    async def announce(
        self, call_id: str, name: str, raw_input: Any = None, *, model_call: bool = True
    ) -> None:
        """Announce a call (``model_call``: ``call_id`` is the model's own)."""
        self.names[call_id] = name
        kind = declared_kind(self.agent.metadata.get(name))
        await self.adapter.calls.announce(
            call_id,
            name,
            kind=kind,
            raw_input=raw_input,
            locations=self.locations(name, raw_input),
            model_call=model_call,
        )

    def locations(self, name: str, args: Any) -> list[dict[str, str]] | None:
        path = (self.agent.metadata.get(name) or {}).get(PATH_KEY)
        return locations(self.adapter.session, args, path)

    async def on_complete(self, message: Any) -> None:
        """A model message in full (a node's output): its tool calls' final arguments."""
        calls = [dict(c) for c in getattr(message, "tool_calls", None) or ()]
        if calls:
            self.last_calls = calls
        message_id = str(getattr(message, "id", None) or "")
        if message_id in self.done_messages:
            return  # the same message again, from a later node (middleware)
        if message_id:
            self.done_messages.add(message_id)
        from ._langgraph_runtime import AnswerFailed, answer_failure

        failure = answer_failure(message)
        if failure is not None:
            raise AnswerFailed(failure, message_id)
        for call in calls:
            call_id, name = str(call.get("id")), str(call.get("name"))
            if (self.agent.metadata.get(name) or {}).get(PLAN_KEY):
                await self.send_plan(call.get("args"))
            known = self.adapter.calls.get(call_id)
            if known is None:
                await self.announce(call_id, name, call.get("args"))
            elif known.status == "pending":
                args = call.get("args")
                await known.update(raw_input=args, locations=self.locations(name, args))

    async def on_tool_result(self, message: Any) -> None:
        call_id = str(getattr(message, "tool_call_id", ""))
        failed = getattr(message, "status", "success") == "error" or call_id in self.declined
        await self.adapter.calls.finish(call_id, message_text(message), failed=failed)

    async def on_updates(self, data: Mapping[str, Any]) -> None:
        for node, update in data.items():
            if node == INTERRUPT_KEY or not isinstance(update, Mapping):
                continue
            messages = update.get("messages")
            for message in messages if isinstance(messages, list) else [messages]:
                message_type = getattr(message, "type", None)
                if message_type == "ai":
                    await self.on_complete(message)
                elif message_type == "tool":
                    await self.on_tool_result(message)
            todos = update.get("todos")
            if isinstance(todos, list):
                await self.send_plan({"entries": todos})

    async def send_plan(self, args: Any) -> None:
        entries = plan_entries(args) if isinstance(args, Mapping) else None
        if entries is not None:
            await self.client.plan(entries)

    def on_task(self, data: Mapping[str, Any]) -> None:
        task_id = str(data.get("id"))
        if "input" in data:
            found = call_ids_in(data.get("input"))
            if found:
                self.task_calls[task_id] = found
        for interrupt in data.get("interrupts") or ():
            interrupt_id = interrupt.get("id") if isinstance(interrupt, Mapping) else None
            if interrupt_id is not None and task_id in self.task_calls:
                self.interrupt_calls[str(interrupt_id)] = self.task_calls[task_id]

    async def count_usage(self, usage: Any) -> None:
        if not isinstance(usage, Mapping) or not usage.get("total_tokens"):
            return
        self.adapter.add_usage(
            int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        )
        if self.agent.context_window is not None:
            await self.client.usage(int(usage["total_tokens"]), self.agent.context_window)

    # -- interrupts ---------------------------------------------------------------------

    async def answer(self, interrupt: Any) -> Any:
        """The resume value for one interrupt, or None if the person dismissed it."""
        value = interrupt.value
        if isinstance(value, Mapping) and isinstance(value.get("action_requests"), list):
            return await self.answer_batch(value)
        if isinstance(value, Mapping) and value.get("type") == "tool_approval":
            allowed = configs_of(value)
            return await self.decide(str(value.get("tool_call_id")), str(value["name"]), allowed)
        calls = self.interrupt_calls.get(str(interrupt.id)) or []
        call_id = calls[0] if calls else None
        if call_id is None or self.adapter.calls.get(call_id) is None:
            call_id = f"interrupt-{interrupt.id}"
            await self.announce(call_id, interrupt_title(value), value, model_call=False)
        # the tool asked itself and answers for itself: it runs, whatever was decided
        return await self.decide(
            call_id, self.names.get(call_id, ""), ("approve", "reject"), in_tool=True
        )

    async def answer_batch(self, value: Mapping[str, Any]) -> JSON | None:
        """The human-in-the-loop middleware's batched request: one permission per action,
        on the model's call it stands for (matched in order by name and arguments)."""
        configs = {c.get("action_name"): c for c in value.get("review_configs") or ()}
        unmatched = list(self.last_calls)
        decisions: list[JSON] = []
        for action in value["action_requests"]:
            call = next(
                (
                    c
                    for c in unmatched
                    if (c["name"], c["args"]) == (action["name"], action["args"])
                ),
                None,
            )
            if call is None:
                call_id = f"action-{len(decisions)}-{action['name']}"
                await self.announce(
                    call_id, str(action["name"]), action.get("args"), model_call=False
                )
            else:
                unmatched.remove(call)
                call_id = str(call["id"])
            allowed = configs_of(configs.get(action["name"]) or {})
            decision = await self.decide(call_id, str(action["name"]), allowed)
            if decision is None:
                return None
            decisions.append(decision)
        return {"decisions": decisions}

    async def decide(
        self, call_id: str, tool: str, allowed: Sequence[str], *, in_tool: bool = False
    ) -> JSON | None:
        """The decision for one call, from what the person chose among the options that
        ``allowed`` (the middleware's ``allowed_decisions``) lets us keep: allow where
        ``approve`` is allowed, reject where ``reject`` or ``respond`` is. ``edit`` is
        never sent: nobody edited anything (the model would be told a reviewer did)."""
        can_approve = "approve" in allowed
        if not can_approve and "reject" not in allowed and "respond" not in allowed:
            raise InternalError(
                f"the tool {tool!r} may only be edited before it runs (allowed_decisions "
                f"{list(allowed)}), which an ACP permission request cannot ask"
            )
        call = self.adapter.calls.get(call_id)
        if call is None:
            await self.announce(call_id, tool)
            call = self.adapter.calls.get(call_id)
        assert call is not None
        decision = await self.adapter.approvals.ask(self.client, call, tool, allow=can_approve)
        if decision == "dismissed":
            return None
        if decision == "allow":
            return {"type": "approve"}
        if not in_tool:  # the middleware answers the model for the call: it did not run
            self.declined.add(call_id)
        if "reject" in allowed:
            return {"type": "reject"}
        return {"type": "respond", "message": DECLINED}


def unanswered(messages: Sequence[Any]) -> list[JSON]:
    """The tool calls of ``messages`` that no tool message answers."""
    answered = {
        getattr(m, "tool_call_id", None) for m in messages if getattr(m, "type", "") == "tool"
    }
    return [
        dict(call)
        for m in messages
        if getattr(m, "type", "") == "ai"
        for call in getattr(m, "tool_calls", None) or ()
        if call.get("id") not in answered
    ]


def call_ids_in(value: Any, depth: int = 0) -> list[str]:
    """The tool call ids a task's input carries (a ``Send`` of one call, or a list)."""
    if depth > 3:
        return []
    if isinstance(value, Mapping):
        if value.get("type") == "tool_call" and isinstance(value.get("id"), str):
            return [value["id"]]
        inner = value.get("tool_call")
        return call_ids_in(inner, depth + 1) if inner is not None else []
    if isinstance(value, (list, tuple)):
        return [i for item in value for i in call_ids_in(item, depth + 1)]
    return []


def configs_of(config: Mapping[str, Any]) -> tuple[str, ...]:
    allowed = config.get("allowed_decisions")
    return tuple(allowed) if isinstance(allowed, list) else ("approve", "reject")


def interrupt_title(value: Any) -> str:
    if isinstance(value, Mapping):
        for key in ("description", "question", "message", "name"):
            if isinstance(value.get(key), str):
                return str(value[key])[:200]
    return (value if isinstance(value, str) else "Approval needed")[:200]


def message_text(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    return str(content)
