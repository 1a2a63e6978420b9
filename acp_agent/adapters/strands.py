"""Serve a Strands Agents ``Agent`` (``strands-agents``) over ACP.

Owns :class:`StrandsAgent` and the translation of one ``Agent.stream_async`` run into ACP
updates:

* text deltas become message chunks and reasoning deltas thought chunks as the model
  streams them; a tool use is announced ``pending`` on its ``toolUseId`` when its content
  block starts, with the tool's ``name`` and the kind its metadata declares; the model's
  whole message gives its input (and locations, and the plan of a plan tool); each model
  response's usage is counted for the prompt result;
* a call goes ``in_progress`` when the tool really runs (an ``ExecuteToolStage`` input
  middleware, after every ``BeforeToolCallEvent`` hook); the tool result message ends it
  ``completed``, or ``failed`` for an error result (a rejected call among them);
* approvals: every interrupt raised for a tool call (a ``BeforeToolCallEvent`` hook's or
  the tool's own ``tool_context.interrupt``; the tools declared ``acp_approve`` get one
  from the adapter's hook) becomes ``session/request_permission`` on that call's id
  ("always" remembered per tool); the run resumes with ``True`` (allowed) or ``False``
  (rejected) as each interrupt's response; a dismissed request ends the turn
  ``cancelled``;
* a model answer whose stream ended with a content block still open (cut: no finish
  reason) or that holds nothing fails the turn (:class:`~acp_agent.adapters.turns.ModelFailed`)
  and is taken out of the agent's messages, so it is not remembered;
* memory: the agent's messages, ``state`` and conversation manager state are the session's,
  saved with each turn's end and put back on the agent before the next, in any process;
  a tool use a cut turn left without a result gets one first;
* the model: the agent's own; ``models`` (two or more Strands models, the first the
  default) are offered as the ``model`` config option, the chosen one set for the turn.

One Strands ``Agent`` runs one invocation at a time, so the turns of one served agent run
one after another, whichever session they belong to. Strands runs on asyncio only.
Nothing of it is imported until an agent is adapted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
import orjson

from ..agent import Agent, Command, ConfigOption, PromptTurn, StopReason
from ..errors import InternalError
from ..session import Session
from .openai_based import locations, prompt_text, require_asyncio, serve_turn
from .turns import (
    PATH_KEY,
    PLAN_KEY,
    AdapterTurn,
    ModelFailed,
    declared_kind,
    model_option,
    plan_entries,
    saved,
    unfinished_answer,
)

__all__ = ["StrandsAgent", "adapt", "editor_tools"]

#: the metadata key of a tool that needs the person's approval before it runs
APPROVE_KEY: Final = "acp_approve"
#: the result a tool use left without one by a cut turn gets
NOT_RUN: Final = "The user cancelled this tool call; it did not run."

#: Strands' stop reasons -> ACP's (the rest end the turn)
STOPS: Final[Mapping[str, StopReason]] = {
    "cancelled": "cancelled",
    "max_tokens": "max_tokens",
    "limit_output_tokens": "max_tokens",
    "limit_total_tokens": "max_tokens",
    "limit_turns": "max_turn_requests",
    "guardrail_intervened": "refusal",
    "content_filtered": "refusal",
}


def editor_tools(*, approve_writes: bool = True, approve_commands: bool = True) -> list[Any]:
    """The client's editor as Strands tools: ``read_file``, ``write_file`` and
    ``run_command`` (``sh -c`` in a client terminal, shown in the tool call), paths
    inside the session's roots, their kinds and paths declared; a tool the client's
    capabilities do not allow tells the model so. Writing and running need approval
    unless told not to."""
    from ._strands_runtime import editor_tools as made

    return made(approve_writes=approve_writes, approve_commands=approve_commands)


def adapt(agent: Any) -> StrandsAgent:
    """The registry's entry point: a Strands ``Agent`` -> an :class:`Agent`."""
    return StrandsAgent(agent)


class StrandsAgent(Agent):
    """An ACP agent running a Strands Agents ``Agent``.

    ``tool_metadata`` maps tool names to what ``metadata`` declares in other frameworks
    (``{"acp_kind": "read", "acp_path": "path", "acp_plan": True}``, and ``"acp_approve":
    True`` for a tool that asks the person first); ``approve`` names more tools that do;
    ``commands`` are advertised as slash commands (their text goes to the model as
    typed). ``models`` (two or more Strands models; the first the default) are offered as
    the session's ``model`` config option.

    It fits the agent it is given for serving (a middleware and a hook added, the
    printing callback handler replaced): serve each ``Agent`` object once.
    """

    name = "strands"

    def __init__(
        self,
        agent: Any,
        *,
        name: str | None = None,
        tool_metadata: Mapping[str, Mapping[str, Any]] | None = None,
        approve: Sequence[str] = (),
        commands: Sequence[Command] = (),
        models: Sequence[Any] = (),
    ) -> None:
        from . import _strands_runtime as rt

        self.agent = agent
        self.metadata = rt.tool_metadata(agent)
        self.metadata.update(tool_metadata or {})
        self.approve = frozenset(approve)
        self.slash_commands = list(commands)
        self.models: dict[str, Any] = {_model_name(m): m for m in models}
        if name is not None:
            self.name = name  # type: ignore[misc]
        rt.fitted(agent, self.needs_approval)
        #: what a new session starts from
        self.initial = rt.Memory.initial_of(agent)
        self._lock: anyio.Lock | None = None

    def needs_approval(self, tool: str) -> bool:
        return tool in self.approve or bool((self.metadata.get(tool) or {}).get(APPROVE_KEY))

    def commands(self, session: Session) -> Sequence[Command]:
        return self.slash_commands

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        return model_option(list(self.models))

    def chosen_model(self, session: Session) -> Any:
        """The model the session chose (None when no choice is offered)."""
        if len(self.models) < 2:
            return None
        return self.models.get(str(session.config.get("model")), next(iter(self.models.values())))

    async def prompt(self, turn: PromptTurn) -> StopReason:
        require_asyncio("Strands Agents")
        from ._strands_runtime import Memory

        if self._lock is None:
            self._lock = anyio.Lock()
        adapter = AdapterTurn(turn)
        async with self._lock:  # the one agent object: one invocation at a time
            memory = Memory(self.agent, self.initial)
            memory.restore(saved(turn.session)[0], NOT_RUN)
            previous = self.agent.model
            chosen = self.chosen_model(turn.session)
            if chosen is not None:
                self.agent.model = chosen
            try:
                run = _StrandsRun(self, adapter, memory)
                return await serve_turn(adapter, run.run, memory.turn_memory)
            finally:
                self.agent.model = previous


class _StrandsRun:
    """One prompt turn: runs the agent, and resumes it after each interrupt."""

    def __init__(self, owner: StrandsAgent, adapter: AdapterTurn, memory: Any) -> None:
        self.owner = owner
        self.agent = owner.agent
        self.adapter = adapter
        self.client = adapter.client
        self.memory = memory
        #: a content block of the model's message is open; the message stopped so (cut)
        self.open_block = False
        self.cut = False
        #: this run's interrupts: (tool use, its interrupts)
        self.interrupts: list[tuple[Mapping[str, Any], list[Any]]] = []

    async def run(self) -> StopReason:
        from ._strands_runtime import closing

        request: Any = prompt_text(self.adapter.turn.blocks)
        while True:
            self.interrupts = []
            result: Any = None
            events = self.agent.stream_async(request)
            try:
                async for event in events:
                    await self.on_event(event)
                    if "result" in event:
                        result = event["result"]
            except Exception as exc:
                failure = _model_error(exc)
                if failure is None:
                    raise
                raise failure from None
            finally:
                with anyio.CancelScope(shield=True):
                    await closing(events)
            stop = str(getattr(result, "stop_reason", "end_turn"))
            if stop != "interrupt":
                return STOPS.get(stop, "end_turn")
            request = await self.answers(result)
            if request is None:
                return "cancelled"

    async def answers(self, result: Any) -> list[Any] | None:
        """The responses to this run's interrupts, asking the person once per tool
        call; None if a request was dismissed."""
        responses: list[Any] = []
        for tool_use, interrupts in self.interrupts:
            call_id = str(tool_use.get("toolUseId"))
            name = str(tool_use.get("name"))
            call = self.adapter.calls.get(call_id)
            if call is None:
                call = await self.adapter.calls.announce(
                    call_id, name, kind=declared_kind(self.owner.metadata.get(name))
                )
            decision = await self.adapter.approvals.ask(self.client, call, name)
            if decision == "dismissed":
                return None
            responses.extend(
                {"interruptResponse": {"interruptId": i.id, "response": decision == "allow"}}
                for i in interrupts
            )
        answered = {r["interruptResponse"]["interruptId"] for r in responses}
        left = [i.name for i in getattr(result, "interrupts", None) or () if i.id not in answered]
        if left:
            raise InternalError(
                f"Strands interrupts not raised for a tool call cannot be answered: {left}"
            )
        return responses

    async def on_event(self, event: Mapping[str, Any]) -> None:
        if "data" in event and isinstance(event["data"], str):
            if event["data"]:
                await self.client.message(event["data"])
        elif isinstance(event.get("reasoningText"), str):
            if event["reasoningText"]:
                await self.client.thought(event["reasoningText"])
        elif "event" in event:
            await self.on_chunk(event["event"])
        elif "message" in event:
            await self.on_message(event["message"])
        elif "tool_interrupt_event" in event:
            raised = event["tool_interrupt_event"]
            self.interrupts.append((raised["tool_use"], list(raised["interrupts"])))

    async def on_chunk(self, chunk: Mapping[str, Any]) -> None:
        if "contentBlockStart" in chunk or "contentBlockDelta" in chunk:
            self.open_block = True
        elif "contentBlockStop" in chunk:
            self.open_block = False
        elif "messageStop" in chunk:  # a block still open: the stream was cut
            self.cut, self.open_block = self.open_block, False
        start = chunk.get("contentBlockStart")
        used = ((start or {}).get("start") or {}).get("toolUse")
        if used:
            name = str(used.get("name"))
            await self.adapter.calls.announce(
                str(used.get("toolUseId")),
                name,
                kind=declared_kind(self.owner.metadata.get(name)),
            )
        usage = (chunk.get("metadata") or {}).get("usage")
        if usage and usage.get("totalTokens"):
            self.adapter.add_usage(
                int(usage.get("inputTokens", 0)), int(usage.get("outputTokens", 0))
            )

    async def on_message(self, message: Mapping[str, Any]) -> None:
        content = [b for b in message.get("content") or () if isinstance(b, Mapping)]
        if message.get("role") == "assistant":
            failure = unfinished_answer(
                finished=not self.cut, empty=not any(_holds_something(b) for b in content)
            )
            if failure is not None:
                self.forget(message)
                raise failure
            for block in content:
                if "toolUse" in block:
                    await self.on_tool_use(block["toolUse"])
            return
        for block in content:
            result = block.get("toolResult")
            if isinstance(result, Mapping):
                await self.adapter.calls.finish(
                    str(result.get("toolUseId")),
                    _result_text(result.get("content")),
                    failed=result.get("status") == "error",
                )

    async def on_tool_use(self, used: Mapping[str, Any]) -> None:
        name = str(used.get("name"))
        call = await self.adapter.calls.announce(
            str(used.get("toolUseId")), name, kind=declared_kind(self.owner.metadata.get(name))
        )
        if call.status != "pending":
            return
        args = used.get("input")
        metadata = self.owner.metadata.get(name) or {}
        where = locations(self.adapter.session, args, metadata.get(PATH_KEY))
        await call.update(raw_input=args, locations=where)
        entries = (
            plan_entries(args) if metadata.get(PLAN_KEY) and isinstance(args, Mapping) else None
        )
        if entries is not None:
            await self.client.plan(entries)

    def forget(self, message: Mapping[str, Any]) -> None:
        """Take a failed answer out of the agent's messages: it is not remembered."""
        messages = self.agent.messages
        for i in range(len(messages) - 1, -1, -1):
            if messages[i] is message:
                self.memory.drop_from(i)
                return


def _holds_something(block: Mapping[str, Any]) -> bool:
    text = block.get("text")
    return not (set(block) <= {"text"} and not text)


def _result_text(content: Any) -> str:
    """A tool result's content as text: its text parts, others as JSON."""
    parts: list[str] = []
    for part in content or ():
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, Mapping) and "json" in part:
            parts.append(orjson.dumps(part["json"], default=str).decode())
    return "".join(parts)


def _model_error(exc: BaseException) -> ModelFailed | None:
    """A Strands model exception (throttled, context overflow) as :class:`ModelFailed`
    (the ``openai`` client's own are :func:`serve_turn`'s)."""
    from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException

    if isinstance(exc, (ContextWindowOverflowException, ModelThrottledException)):
        return ModelFailed(str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__)
    return None


def _model_name(model: Any) -> str:
    config = model.get_config() if hasattr(model, "get_config") else None
    found = config.get("model_id") if isinstance(config, Mapping) else None
    return str(found or model)
