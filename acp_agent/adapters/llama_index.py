"""Serve a LlamaIndex agent workflow (a ``FunctionAgent``, ``ReActAgent`` or
``AgentWorkflow`` of ``llama_index.core.agent.workflow``) over ACP.

Owns :class:`LlamaIndexAgent` and the translation of one workflow run's event stream
(``handler.stream_events()``) into ACP updates:

* ``AgentStream``: its ``delta`` becomes message chunks and its ``thinking_delta``
  thought chunks as the model streams them; a tool call it carries is announced
  ``pending`` on the model's call id the first time it is seen, with the tool's ``name``
  and the kind its metadata declares; the ``AgentOutput`` that ends the model's response
  gives its whole arguments (and locations, and the plan of a plan tool);
* ``ToolCall`` (the step that runs the tool starts) sets the call ``in_progress`` (after
  the person's answer, for a tool that needs approval); ``ToolCallResult`` ends it
  ``completed`` with the tool's output as its content, ``failed`` when it was rejected
  or its output is an error;
* approvals are LlamaIndex's human-in-the-loop events: a tool wrapped by
  :func:`needs_approval` (or calling :func:`request_approval`) waits for an
  ``ApprovalResponse`` after writing an ``ApprovalRequest`` (an ``InputRequiredEvent``);
  the request becomes ``session/request_permission`` on the call's id ("always"
  remembered per tool, :class:`~acp_agent.adapters.turns.Approvals`) and the answer is
  sent into the run; a dismissed request ends the turn ``cancelled``;
* memory: the run is given the chat history the session's turns saved
  (``chat_history``), and the agent's ``state`` and current agent saved before, in a new
  ``Context``; the messages the run added to the memory (and its unfinished scratchpad)
  are saved with the turn's end, a tool call left without a result answered as not run;
* the model: the agent's own LLM (an OpenAI-compatible endpoint through
  ``llama_index.llms.litellm.LiteLLM``); ``models`` (two or more) are offered as the
  ``model`` config option, the chosen one set on a copy of the agent. An answer whose
  stream was cut or that holds nothing fails the turn, and is not saved.

LlamaIndex runs on asyncio only. Nothing of it is imported until an agent is adapted.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import orjson

from ..agent import Agent, Command, ConfigOption, PromptTurn, StopReason
from ..errors import InternalError
from ..session import Session
from .openai_based import locations, prompt_text, require_asyncio, serve_turn
from .turns import (
    CUT_STREAM,
    PATH_KEY,
    PLAN_KEY,
    AdapterTurn,
    ModelFailed,
    declared_kind,
    model_option,
    plan_entries,
    saved,
    unfinished_answer,
    unwinding,
)

__all__ = ["LlamaIndexAgent", "adapt", "editor_tools", "needs_approval", "request_approval"]

#: the result a tool call left without one by a cut turn gets
NOT_RUN: Final = "The user cancelled this tool call; it did not run."
#: the keys of the workflow's store a turn saves and the next one starts from
KEPT: Final = ("state", "current_agent_name")


def adapt(agent: Any) -> LlamaIndexAgent:
    """The registry's entry point: a LlamaIndex agent workflow -> an :class:`Agent`."""
    return LlamaIndexAgent(agent)


def needs_approval(tool: Any) -> Any:
    """``tool`` (a LlamaIndex tool or a function) asking the person before each call."""
    from ._llama_index_runtime import needs_approval as made

    return made(tool)


async def request_approval(ctx: Any, tool_name: str, tool_kwargs: Mapping[str, Any]) -> bool:
    """From inside a tool taking ``ctx: Context``: wait for the person's approval of this
    call (the step is replayed when the answer comes: call it first)."""
    from ._llama_index_runtime import request_approval as ask

    return await ask(ctx, tool_name, tool_kwargs)


def editor_tools(*, approve_writes: bool = True, approve_commands: bool = True) -> list[Any]:
    """The client's editor as LlamaIndex tools: ``read_file``, ``write_file`` and
    ``run_command`` (``sh -c`` in a client terminal, shown in the tool call), paths inside
    the session's roots, their kinds and paths declared; each answers an error when the
    client does not offer its capability. Writing and running need approval unless told
    not to."""
    from ._llama_index_runtime import editor_tools as made

    return made(approve_writes=approve_writes, approve_commands=approve_commands)


class LlamaIndexAgent(Agent):
    """An ACP agent running a LlamaIndex agent workflow.

    ``tool_metadata`` maps tool names to what ``metadata`` declares in other frameworks
    (``{"acp_kind": "read", "acp_path": "path", "acp_plan": True}``; the editor's tools
    declare their own); ``commands`` are advertised as slash commands (their text goes to
    the model as typed); ``max_iterations`` bounds the model requests of one prompt (then
    the turn ends ``max_turn_requests``). ``models`` (two or more LlamaIndex LLMs; the
    first the default) are offered as the session's ``model`` config option, for an agent
    with one LLM (not an ``AgentWorkflow``).
    """

    name = "llama-index"
    mcp_http: ClassVar[bool] = False

    def __init__(
        self,
        agent: Any,
        *,
        name: str | None = None,
        tool_metadata: Mapping[str, Mapping[str, Any]] | None = None,
        commands: Sequence[Command] = (),
        max_iterations: int = 20,
        models: Sequence[Any] = (),
    ) -> None:
        # LlamaIndex is imported (its agent exists): the adapter's side of it now
        from . import _llama_index_runtime as rt

        self.agent = agent
        agents = list(getattr(agent, "agents", {}).values()) or [agent]
        self.metadata: dict[str, Mapping[str, Any]] = {}
        self.approved: set[str] = set()  # the tools asking before they run
        for one in agents:
            for tool in getattr(one, "tools", None) or ():
                tool_name = str(tool.metadata.name)
                declared = getattr(tool, rt.METADATA_ATTR, None)
                if isinstance(declared, Mapping):
                    self.metadata[tool_name] = declared
                if isinstance(tool, rt.ApprovalTool):
                    self.approved.add(tool_name)
        self.metadata.update(tool_metadata or {})
        self.slash_commands = list(commands)
        self.max_iterations = max_iterations
        if models and not hasattr(agent, "llm"):
            raise ValueError("models= needs an agent with one LLM (not an AgentWorkflow)")
        self.models: dict[str, Any] = {}
        for model in models:
            self.models[_model_name(model)] = agent.model_copy(update={"llm": model})
        if name is not None:
            self.name = name  # type: ignore[misc]

    def commands(self, session: Session) -> Sequence[Command]:
        return self.slash_commands

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        return model_option(list(self.models))

    def agent_for(self, session: Session) -> Any:
        """The agent, with the model the session chose when a choice is offered."""
        if len(self.models) < 2:
            return self.agent
        chosen = self.models.get(str(session.config.get("model")))
        return chosen if chosen is not None else next(iter(self.models.values()))

    async def prompt(self, turn: PromptTurn) -> StopReason:
        require_asyncio("LlamaIndex")
        adapter = AdapterTurn(turn)
        run = _LlamaRun(self, self.agent_for(turn.session), adapter)
        return await serve_turn(adapter, run.run, run.turn_memory)


class _LlamaRun:
    """One prompt turn: one run of the workflow, its events sent as ACP updates."""

    def __init__(self, owner: LlamaIndexAgent, agent: Any, adapter: AdapterTurn) -> None:
        self.owner = owner
        self.agent = agent
        self.adapter = adapter
        self.client = adapter.client
        memory, _ = saved(adapter.session)
        self.saved = memory
        self.handler: Any = None
        self.ctx: Any = None
        self.history: list[Any] = []
        self.rejected: set[str] = set()
        self.asked: set[str] = set()  # the calls whose approval was asked
        #: the calls whose whole arguments were sent: id -> (tool name, arguments)
        self.argued: dict[str, tuple[str, Any]] = {}
        self.finished = False  # the model's current response had a finish reason
        self.failure: ModelFailed | None = None
        self.failed_answer: Any = None
        self.dismissed = False
        self.memory: dict[str, Any] = {}

    def turn_memory(self) -> dict[str, Any]:
        """What :meth:`run` left to save (the prompt alone if it never began)."""
        if self.memory:
            return self.memory
        text = prompt_text(self.adapter.turn.blocks)
        message = {"role": "user", "blocks": [{"block_type": "text", "text": text}]}
        return {"messages": [message]}

    async def run(self) -> StopReason:
        from llama_index.core.workflow import Context

        from . import _llama_index_runtime as rt

        self.history = rt.loaded(self.saved)
        self.ctx = ctx = Context(self.agent)
        kept = _kept(self.saved)
        for key, value in kept.items():
            await ctx.store.set(key, value)
        text = prompt_text(self.adapter.turn.blocks)
        self.handler = self.agent.run(
            user_msg=text,
            chat_history=self.history or None,
            ctx=ctx,
            max_iterations=self.owner.max_iterations,
        )
        try:
            try:
                async for event in self.handler.stream_events():
                    await self.on_event(event)
                    if self.dismissed:
                        return "cancelled"
                    if self.failure is not None:
                        raise self.failure
                await self.handler
            except Exception as exc:
                return _stopped(exc)
            return "end_turn"
        finally:
            with unwinding():
                if not self.handler.done():
                    await self.handler.cancel_run()
                self.memory = await self.remembered()

    async def remembered(self) -> dict[str, Any]:
        """What the turn saves: the messages it added to the memory, its scratchpad
        when it did not end, every call left open answered, the failed answer left out."""
        from . import _llama_index_runtime as rt

        ctx = self.ctx
        memory = await ctx.store.get("memory", default=None)
        if memory is None:  # it failed before it began: the prompt alone (turn_memory)
            return {}
        everything = await memory.aget_all()
        added = list(everything[len(self.history) :])
        added += await ctx.store.get(getattr(self.agent, "scratchpad_key", "scratchpad"), [])
        if self.failed_answer is not None:
            added = [m for m in added if m != self.failed_answer]
        out: dict[str, Any] = {"messages": rt.dumped(rt.closed(added, NOT_RUN))}
        for key in KEPT:
            value = await ctx.store.get(key, default=None)
            if value is not None and _plain(value):
                out[key] = value
        return out

    async def on_event(self, event: Any) -> None:
        from llama_index.core.agent.workflow import (
            AgentInput,
            AgentOutput,
            AgentStream,
            ToolCall,
            ToolCallResult,
        )
        from llama_index.core.workflow import InputRequiredEvent

        from . import _llama_index_runtime as rt

        if isinstance(event, AgentStream):
            await self.on_stream(event)
        elif isinstance(event, AgentInput):
            self.finished = False
        elif isinstance(event, AgentOutput):
            await self.on_output(event)
        elif isinstance(event, ToolCall):
            call = await self.announce(event.tool_id, event.tool_name)
            await self.give_arguments(event.tool_id, event.tool_name, event.tool_kwargs)
            if event.tool_name not in self.owner.approved and call.status == "pending":
                await self.adapter.calls.start(event.tool_id)
        elif isinstance(event, ToolCallResult):
            await self.on_result(event)
        elif isinstance(event, rt.ApprovalRequest):
            await self.approve(event)
        elif isinstance(event, InputRequiredEvent):
            raise InternalError(
                f"the workflow asks for input this adapter cannot give ({type(event).__name__})"
            )

    async def on_stream(self, event: Any) -> None:
        if event.thinking_delta:
            await self.client.thought(event.thinking_delta)
        if event.delta:
            await self.client.message(event.delta)
        for selection in event.tool_calls or ():
            if selection.tool_id:
                await self.announce(selection.tool_id, selection.tool_name)
        if _finish_reason(event.raw):
            self.finished = True

    async def on_output(self, event: Any) -> None:
        self.finished = self.finished or bool(_finish_reason(event.raw))
        empty = not (event.response.content or "").strip() and not event.tool_calls
        failure = unfinished_answer(finished=self.finished, empty=empty)
        if failure is not None:
            self.failure, self.failed_answer = failure, event.response
            return
        for selection in event.tool_calls:
            await self.announce(selection.tool_id, selection.tool_name)
            await self.give_arguments(selection.tool_id, selection.tool_name, selection.tool_kwargs)

    async def announce(self, call_id: str, tool_name: str) -> Any:
        kind = declared_kind(self.owner.metadata.get(tool_name))
        return await self.adapter.calls.announce(call_id, tool_name, kind=kind)

    async def give_arguments(self, call_id: str, tool_name: str, args: Any) -> None:
        call = self.adapter.calls.get(call_id)
        if call is None or call_id in self.argued or call.status != "pending":
            return
        self.argued[call_id] = (tool_name, args)
        metadata = self.owner.metadata.get(tool_name) or {}
        where = locations(self.adapter.session, args, metadata.get(PATH_KEY))
        await call.update(raw_input=args, locations=where)
        entries = plan_entries(args) if metadata.get(PLAN_KEY) else None
        if entries is not None:
            await self.client.plan(entries)

    async def on_result(self, event: Any) -> None:
        call_id = event.tool_id
        await self.announce(call_id, event.tool_name)
        output = event.tool_output
        rejected = call_id in self.rejected
        if not rejected:  # it ran
            await self.adapter.calls.start(call_id)
        text = str(output.content if output.content is not None else "")
        await self.adapter.calls.finish(call_id, text, failed=rejected or bool(output.is_error))

    async def approve(self, request: Any) -> None:
        from . import _llama_index_runtime as rt

        call_id = request.tool_id or self.matching_call(request.tool_name, request.tool_kwargs)
        if call_id is None:
            raise InternalError(f"an approval of {request.tool_name} for no tool call")
        call = await self.announce(call_id, request.tool_name)
        self.asked.add(call_id)
        decision = await self.adapter.approvals.ask(self.client, call, request.tool_name)
        if decision == "dismissed":
            self.dismissed = True
            return
        if decision == "reject":
            self.rejected.add(call_id)
        else:
            await self.adapter.calls.start(call_id)
        self.handler.ctx.send_event(
            rt.ApprovalResponse(
                response="yes" if decision == "allow" else "no",
                tool_name=request.tool_name,
                tool_kwargs=request.tool_kwargs,
                tool_id=request.tool_id,
                approved=decision == "allow",
            )
        )

    def matching_call(self, tool_name: str, args: Any) -> str | None:
        """The first open call of ``tool_name`` with ``args`` not yet asked about."""
        for call_id, called in self.argued.items():
            call = self.adapter.calls.get(call_id)
            open_call = call is not None and not call.finished and call_id not in self.asked
            if open_call and called == (tool_name, args):
                return call_id
        return None


def _stopped(exc: Exception) -> StopReason:
    """How a run that raised ``exc`` ends: ``max_turn_requests``, or raised (a cut
    stream named as such)."""
    if "Max iterations" in str(exc) and type(exc).__name__ == "WorkflowRuntimeError":
        return "max_turn_requests"
    cut = getattr(sys.modules.get("litellm.exceptions"), "MidStreamFallbackError", None)
    if cut is not None and isinstance(exc, cut) and "finish_reason" in str(exc):
        raise ModelFailed(CUT_STREAM) from None
    raise exc


def _finish_reason(raw: Any) -> str | None:
    choices = raw.get("choices") if isinstance(raw, Mapping) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    return None


def _kept(memory: Sequence[Any]) -> dict[str, Any]:
    """The workflow's store values the latest turns saved (:data:`KEPT`)."""
    kept: dict[str, Any] = {}
    for saved_turn in memory:
        if isinstance(saved_turn, Mapping):
            kept.update({k: saved_turn[k] for k in KEPT if k in saved_turn})
    return kept


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON as it is (what the store keeps)."""
    try:
        return bool(orjson.loads(orjson.dumps(value)) == value)
    except (TypeError, orjson.JSONEncodeError):
        return False


def _model_name(model: Any) -> str:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else str(model)
