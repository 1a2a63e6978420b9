"""Serve a compiled LangGraph graph (a LangChain ``create_agent`` result too) over ACP.

Owns :class:`LangGraphAgent` and the translation of one graph run into ACP updates:

* ``stream_mode=["messages", "updates", "tasks"]`` (``version="v2"``, subgraphs
  included): text and reasoning content blocks become message and thought chunks as the
  model streams them; a tool call is announced ``pending`` from its first streamed chunk
  (with the tool's ``name`` and the kind its ``metadata["acp_kind"]`` declares), goes
  ``in_progress`` when the tool really starts (a callback, so an approval asked before it
  runs sees it still ``pending``) and ``completed``/``failed`` from its ``ToolMessage``,
  whose text is the call's content; a ``todos`` state update (langchain's
  ``write_todos``) becomes a plan; token usage is counted from the messages' usage;
* interrupts: the human-in-the-loop middleware's requests (batched and per call) and an
  ``interrupt()`` raised inside a tool become ``session/request_permission`` on that
  tool call's own id, resumed with the middleware's decisions (``approve``/``reject``),
  or ``{"type": "approve" | "reject"}`` for a plain ``interrupt()``; a dismissed request
  ends the turn ``cancelled``;
* memory: the graph runs on a checkpointer of this module's own
  (:class:`~acp_agent.adapters._langgraph_runtime.SessionCheckpointer`) whatever it was
  compiled with, one thread per ACP session, folded from the session's saved turns when
  a turn starts (in this process or after ``session/load`` in another), what the turn
  changed in it saved with the turn's end (:mod:`~acp_agent.adapters._langgraph_memory`)
  and the thread dropped from memory after it; a tool call a cancelled turn left
  without a result gets one before the next prompt, so the model's history stays valid;
* MCP: the servers a client gives in ``session/new``/``load``, connected with this
  project's own MCP host (:mod:`~acp_agent.adapters._langgraph_mcp`) and held for the
  session (:mod:`~acp_agent.adapters.mcp_servers`), reach a graph made with
  :func:`session_mcp` among its middleware as LangChain tools, beside its own.

LangGraph runs on asyncio only. Nothing of LangGraph or LangChain is imported until a
graph is first served.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ..agent import Command, ConfigOption, PromptTurn, StopReason
from ..errors import InternalError
from ..session import Session
from ._langgraph_memory import changes, fold
from .mcp_servers import ServersAgent, SessionServers, installed
from .openai_based import locations, prompt_text, require_asyncio, serve_turn
from .turns import (
    PATH_KEY,
    PLAN_KEY,
    AdapterTurn,
    declared_kind,
    model_option,
    plan_entries,
    saved,
)

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ._langgraph_mcp import McpServer
    from ._langgraph_runtime import SessionCheckpointer

JSON = dict[str, Any]

log = logging.getLogger("acp_agent.adapters.langgraph")

__all__ = ["LangGraphAgent", "adapt", "editor_tools", "session_mcp"]

#: the node-update key under which LangGraph reports the run's interrupts
INTERRUPT_KEY: Final = "__interrupt__"
#: the name of :func:`session_mcp`'s middleware (a graph with it has a node so prefixed)
MIDDLEWARE_NAME: Final = "acp_session_mcp"
#: the tool's result, sent as a ``respond`` decision, where a call may not be rejected
DECLINED: Final = "The user declined to run this tool."


def editor_tools(*, approve_writes: bool = True, approve_commands: bool = True) -> list[Any]:
    """The client's editor as LangChain tools for ``create_agent``: ``read_file``,
    ``write_file`` and ``run_command`` (``sh -c`` in a client terminal, shown in the tool
    call). Paths stay inside the session's roots; a tool the client's capabilities do not
    allow tells the model so. Writing and running ask the person first (an ``interrupt()``)
    unless told not to."""
    from ._langgraph_runtime import editor_tools as made

    return list(made(approve_writes=approve_writes, approve_commands=approve_commands))


def session_mcp() -> Any:
    """The middleware (for ``create_agent(..., middleware=[...])`` or
    ``create_deep_agent``) that gives the graph the MCP servers' tools of the session
    its turn belongs to: offered to the model beside the graph's own tools, and run by
    its tool node. Outside a turn served by :class:`LangGraphAgent` it adds nothing."""
    from ._langgraph_mcp import SessionMcpMiddleware

    return SessionMcpMiddleware()


def adapt(graph: Any) -> LangGraphAgent:
    """The registry's entry point: a compiled graph -> an :class:`Agent`."""
    return LangGraphAgent(graph)


class LangGraphAgent(ServersAgent):
    """An ACP agent running a compiled LangGraph graph whose state has ``messages``.

    A tool's ``metadata`` declares its ACP kind (``acp_kind``), the argument holding the
    path its calls touch (``acp_path``) and whether it is a plan tool (``acp_plan``);
    ``tool_metadata`` adds to it by tool name (for tools the graph does not expose).
    ``commands`` are advertised as slash commands (their text goes to the model as
    typed); ``context_window`` (tokens), when given, enables ``usage_update``.
    ``models`` (two or more names, the first the default) are offered as the session's
    ``model`` config option; the chosen one reaches the graph as
    ``config["configurable"]["model"]``, which a model made with
    ``init_chat_model(..., configurable_fields=("model",))`` follows.
    The session's MCP servers reach a graph that has :func:`session_mcp`'s middleware.
    """

    name = "langgraph"
    # this project's MCP host (the mcp package) speaks streamable HTTP besides stdio
    mcp_http: ClassVar[bool] = installed("mcp")

    def __init__(
        self,
        graph: Any,
        *,
        name: str | None = None,
        tool_metadata: Mapping[str, Mapping[str, Any]] | None = None,
        commands: Sequence[Command] = (),
        context_window: int | None = None,
        models: Sequence[str] = (),
    ) -> None:
        self.graph_given = graph
        self.models = list(dict.fromkeys(models))
        self.given_metadata = dict(tool_metadata or {})
        self.slash_commands = list(commands)
        self.context_window = context_window
        if name is not None:
            self.name = name  # type: ignore[misc]
        self._graph: Any = None
        self._saver: SessionCheckpointer | None = None
        #: tool name -> its metadata (the ``acp_*`` keys are read)
        self.metadata: dict[str, Mapping[str, Any]] = {}
        #: the MCP servers of the sessions, held open (for a graph that takes them)
        self.mcp: SessionServers[McpServer] = SessionServers(_open_server, _ping)
        nodes = getattr(graph, "nodes", None) or {}
        self.takes_mcp = any(str(n).startswith(f"{MIDDLEWARE_NAME}.") for n in nodes)
        self.mcp_http = self.takes_mcp and installed("mcp")  # type: ignore[misc]
        self._untaken_noted = False

    def _ready(self) -> tuple[Any, SessionCheckpointer]:
        """The graph on our checkpointer (made at the first turn: imports LangGraph)."""
        if self._graph is None or self._saver is None:
            from ._langgraph_runtime import SessionCheckpointer, whole_channels

            self._saver = SessionCheckpointer()
            update: JSON = {"checkpointer": self._saver}
            channels = whole_channels(self.graph_given.channels)
            if channels is not None:
                update["channels"] = channels
            self._graph = self.graph_given.copy(update=update)
            for node in self.graph_given.nodes.values():
                for tool_name, tool in (getattr(node.bound, "tools_by_name", None) or {}).items():
                    self.metadata[tool_name] = getattr(tool, "metadata", None) or {}
            self.metadata.update(self.given_metadata)
        return self._graph, self._saver

    async def new_session(self, session: Session) -> None:
        self._hold_servers(session)

    async def load_session(self, session: Session) -> None:
        self._hold_servers(session)

    def _hold_servers(self, session: Session) -> None:
        if self.takes_mcp:
            self.mcp.start(session)
        elif session.mcp_servers and not self._untaken_noted:
            self._untaken_noted = True
            log.warning(
                "the graph has no session_mcp() middleware: the session's MCP servers "
                "are not connected"
            )

    def commands(self, session: Session) -> Sequence[Command]:
        return self.slash_commands

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        return model_option(self.models)

    def chosen_model(self, session: Session) -> str | None:
        """The session's ``model`` choice (None when no choice is offered)."""
        if len(self.models) < 2:
            return None
        chosen = session.config.get("model")
        return chosen if isinstance(chosen, str) and chosen in self.models else self.models[0]

    async def prompt(self, turn: PromptTurn) -> StopReason:
        require_asyncio("LangGraph")
        graph, saver = self._ready()
        if self.takes_mcp:
            servers = await self.mcp.ready(turn.session)
            if turn.session.mcp_servers:
                from ._langgraph_mcp import set_turn_tools

                set_turn_tools(turn.session.state, servers)
        thread = turn.session.session_id
        # the session's saved turns fold into the thread: restored for the turn, what the
        # turn changed in it saved with its end, and the thread dropped after it
        base = fold(saved(turn.session)[0])
        saver.restore_thread(thread, base)
        adapter = AdapterTurn(turn)
        run = _GraphRun(self, adapter, graph)
        try:
            return await serve_turn(
                adapter, run.run, lambda: changes(base, saver.export_thread(thread))
            )
        finally:
            saver.forget_thread(thread)


class _GraphRun:
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

    async def announce(self, call_id: str, name: str, raw_input: Any = None) -> None:
        self.names[call_id] = name
        kind = declared_kind(self.agent.metadata.get(name))
        await self.adapter.calls.announce(
            call_id, name, kind=kind, raw_input=raw_input, locations=self.locations(name, raw_input)
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
            await self.announce(call_id, interrupt_title(value), value)
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
                await self.announce(call_id, str(action["name"]), action.get("args"))
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


def _open_server(spec: Mapping[str, Any], cwd: str) -> AbstractAsyncContextManager[McpServer]:
    from ._langgraph_mcp import open_server

    return open_server(spec, cwd)


async def _ping(server: McpServer) -> None:
    from ._langgraph_mcp import ping

    await ping(server)


# -- pure helpers ---------------------------------------------------------------------------


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
