"""Serve a pydantic-ai ``Agent`` over ACP: :class:`PydanticAIAgent` (or ``--agent module:agent``).

Each prompt turn is one pydantic-ai run, driven node by node (``Agent.iter``):

* the model's text and thinking parts stream as ``agent_message_chunk`` /
  ``agent_thought_chunk`` as they arrive (one ``messageId`` per model response);
* a tool call is announced ``pending`` when the model starts it (its ``name``, the kind its
  declaration gives in ``metadata={"acp_kind": ...}``, locations from the argument named
  by ``metadata={"acp_path": ...}``), goes ``in_progress`` when pydantic-ai runs it and
  ``completed`` / ``failed`` with the text the model was given as its content;
* a tool declared ``requires_approval=True`` (or one raising ``ApprovalRequired``) is a
  deferred call: it is resolved inside the run (pydantic-ai's ``HandleDeferredToolCalls``)
  by ``session/request_permission`` on the same tool call, allow/reject once or always
  (remembered per session, saved with its turns); a dismissed request ends the turn
  ``cancelled``;
* the run's new messages (``ModelMessagesTypeAdapter``'s JSON) are saved with the turn
  (:meth:`acp_agent.agent.PromptTurn.save_state`), also when it is cancelled, with every
  unanswered tool call closed by a return saying it did not run, so the model's history
  stays valid; the next turn, here or after ``session/load`` in another process, starts
  from every turn's saved messages;
* a tool declared a plan tool (``metadata={"acp_plan": True}``) also sends its ``entries``
  as the session's ``plan``; ``commands=`` are advertised, their text goes to the model;
* a failed model request is one :class:`~acp_agent.adapters.turns.ModelFailed` error
  (its reason, its HTTP status), and so is an answer whose stream was cut (no finish
  reason) or that is empty (:func:`~acp_agent.adapters.turns.unfinished_answer`); the
  turn then saves its prompt and what came before the failed answer, not the answer;
  usage counts into the prompt result and, when the context window is known, is sent
  as ``usage_update``.

:func:`editor_toolset` gives the client's editor as pydantic-ai tools. The model is the
``model`` config option when more than one is offered (``models=``). The MCP servers a
client gives in ``session/new`` / ``session/load`` are pydantic-ai MCP toolsets
(:mod:`acp_agent.adapters._pydantic_ai_mcp`), held open for the session by
:class:`~acp_agent.adapters.mcp_servers.SessionServers` and added to each run's toolsets.

This module imports pydantic-ai only when an agent is adapted or a toolset made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

import anyio

from ..agent import Command, ConfigOption, PromptCapabilities, PromptTurn, StopReason
from ..client import ToolKind, ToolStatus
from ..errors import AcpError
from ..session import Session
from ._pydantic_ai_editor import editor_toolset
from ._pydantic_ai_mcp import mcp_client_installed, open_toolset, ping
from ._pydantic_ai_messages import unfinished_messages, user_content
from .mcp_servers import ServersAgent, SessionServers
from .turns import (
    PATH_KEY,
    PLAN_KEY,
    AdapterTurn,
    ModelFailed,
    declared_kind,
    plan_entries,
    saved,
    unfinished_answer,
    unwinding,
)
from .unfinished import UnfinishedTurn

if TYPE_CHECKING:
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import Model
    from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext
    from pydantic_ai.toolsets import AbstractToolset

__all__ = ["PydanticAIAgent", "adapt", "editor_toolset"]

NOT_RUN: Final = "The tool call did not run: the turn was cancelled."
DISMISSED: Final = "The tool call did not run: the person dismissed the permission request."
REJECTED: Final = "The person rejected this tool call; it did not run."


class _Dismissed(Exception):
    """A permission request was dismissed: the turn ends ``cancelled``."""


def adapt(agent: Any) -> PydanticAIAgent:
    """The registry's entry point (:data:`acp_agent.adapters.FRAMEWORKS`)."""
    from pydantic_ai.agent import AbstractAgent

    if not isinstance(agent, AbstractAgent):
        raise TypeError(f"{type(agent).__qualname__} is not a pydantic-ai agent")
    return PydanticAIAgent(agent)


def _model_name(model: Model | str) -> str:
    return model if isinstance(model, str) else model.model_name


class PydanticAIAgent(ServersAgent):
    """A pydantic-ai ``Agent`` as an ACP agent.

    ``models``: more models to offer as the ``model`` config option (the agent's own model
    is the default); ``context_window``: the model's window in tokens, to send
    ``usage_update`` (unknown: none is sent); ``deps``: the run's dependencies;
    ``commands``: slash commands to advertise (their text goes to the model as typed).

    Constructing it builds pydantic-ai's message-history schema, which every turn reads
    and saves the history with (pydantic-ai defers it to first use): under ``--agent``
    that is in the import thread, not in the first turn.
    """

    name = "pydantic-ai"
    prompt_capabilities: ClassVar[PromptCapabilities] = {"image": True, "embeddedContext": True}
    # pydantic-ai's MCP client (fastmcp) speaks streamable HTTP and SSE besides stdio
    mcp_http: ClassVar[bool] = mcp_client_installed()
    mcp_sse: ClassVar[bool] = mcp_http

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        models: Sequence[Model | str] = (),
        context_window: int | None = None,
        deps: Any = None,
        commands: Sequence[Command] = (),
    ) -> None:
        self.agent = agent
        self._commands = list(commands)
        self.deps = deps
        self.context_window = context_window
        own = agent.model
        choices = [own] if own is not None else []
        choices += [m for m in models if _model_name(m) not in {_model_name(c) for c in choices}]
        self.models: dict[str, Model | str] = {_model_name(m): m for m in choices}
        #: the MCP servers of the sessions, as toolsets held open
        self.mcp: SessionServers[AbstractToolset[Any]] = SessionServers(open_toolset, ping)
        from pydantic_ai import ModelMessagesTypeAdapter

        ModelMessagesTypeAdapter.rebuild()  # once per process; a no-op once built

    def commands(self, session: Session) -> Sequence[Command]:
        return self._commands

    def unfinished_memory(self, turn: UnfinishedTurn, before: Sequence[Any]) -> Any:
        return unfinished_messages(turn)

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        if len(self.models) < 2:
            return ()
        names = list(self.models)
        return [
            {
                "id": "model",
                "name": "Model",
                "type": "select",
                "category": "model",
                "default": names[0],
                "options": [{"value": n, "name": n} for n in names],
            }
        ]

    async def prompt(self, turn: PromptTurn) -> StopReason:
        toolsets = await self.mcp.ready(turn.session)
        run = _Run(self, AdapterTurn(turn), toolsets)
        with run.adapter.active():
            return await run.run()


class _Run:
    """One prompt turn: one pydantic-ai run, its events made ACP updates."""

    def __init__(
        self, owner: PydanticAIAgent, adapter: AdapterTurn, toolsets: list[AbstractToolset[Any]]
    ) -> None:
        self.owner = owner
        self.toolsets = toolsets
        self.adapter = adapter
        self.client = adapter.client
        self.responses = 0
        self.message_id = ""
        self.agent_run: Any = None

    async def run(self) -> StopReason:
        from pydantic_ai import ModelMessagesTypeAdapter
        from pydantic_ai.capabilities import HandleDeferredToolCalls
        from pydantic_ai.exceptions import UsageLimitExceeded

        memory, _ = saved(self.adapter.session)
        history = ModelMessagesTypeAdapter.validate_python([m for turn in memory for m in turn])
        chosen = self.adapter.session.config.get("model")
        model = self.owner.models.get(chosen) if isinstance(chosen, str) else None
        stop: StopReason = "cancelled"
        unanswered = NOT_RUN
        try:
            async with self.owner.agent.iter(
                user_content(self.adapter.turn.blocks),
                message_history=history,
                model=model,
                deps=self.owner.deps,
                toolsets=self.toolsets,
                capabilities=[HandleDeferredToolCalls(handler=self._approve)],
            ) as agent_run:
                self.agent_run = agent_run
                async for node in agent_run:
                    await self._node(agent_run, node)
            cut = _answer_failure(agent_run.new_messages())
            if cut is not None:
                raise cut
            stop = _stop_reason(agent_run.all_messages())
        except _Dismissed:
            unanswered = DISMISSED
            await self._close_calls(DISMISSED)
        except UsageLimitExceeded as exc:
            stop = "max_tokens" if "token" in str(exc).lower() else "max_turn_requests"
        except anyio.get_cancelled_exc_class():
            # the model keeps what the person saw; open calls are answered "did not run"
            with unwinding():
                await self._close_calls(NOT_RUN)
            self._count_usage()
            self._save(NOT_RUN)
            raise
        except Exception as exc:
            # the model's history keeps the prompt, not the answer that failed
            error = exc if isinstance(exc, ModelFailed) else _model_error(exc, self.agent_run)
            with unwinding():
                await self._close_calls(f"Error: {error.reason if error else exc}")
            if error is not None:
                self._save(unanswered, failed=True)
                raise error from None
            raise
        self._count_usage()
        self._save(unanswered)
        return stop

    # ------------------------------------------------------------------ events

    async def _node(self, agent_run: Any, node: Any) -> None:
        from pydantic_ai import Agent as PaiAgent

        if PaiAgent.is_model_request_node(node):
            self.responses += 1
            self.message_id = f"{self.adapter.turn.turn_id}_m{self.responses}"
            streaming: Any = node.stream(agent_run.ctx)
            async with streaming as stream:
                async for event in stream:
                    await self._model_event(event)
            await self._report_context(agent_run.all_messages())
        elif PaiAgent.is_call_tools_node(node):
            async with node.stream(agent_run.ctx) as stream:
                async for event in stream:
                    await self._tool_event(event)

    async def _model_event(self, event: Any) -> None:
        from pydantic_ai.messages import (
            PartDeltaEvent,
            PartStartEvent,
            TextPart,
            TextPartDelta,
            ThinkingPart,
            ThinkingPartDelta,
            ToolCallPart,
        )

        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart) and part.content:
                await self.client.message(part.content, message_id=self.message_id)
            elif isinstance(part, ThinkingPart) and part.content:
                await self.client.thought(part.content, message_id=self.message_id + "_t")
            elif isinstance(part, ToolCallPart):
                await self._announce(part)
        elif isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta) and delta.content_delta:
                await self.client.message(delta.content_delta, message_id=self.message_id)
            elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
                await self.client.thought(delta.content_delta, message_id=self.message_id + "_t")

    async def _tool_event(self, event: Any) -> None:
        from pydantic_ai.messages import FunctionToolCallEvent, FunctionToolResultEvent

        if isinstance(event, FunctionToolCallEvent):
            part = event.part
            await self._announce(part)
            # the complete arguments; a call waiting for approval stays pending
            runs = event.args_valid is not None and not self._needs_approval(part.tool_name)
            await self._describe(part, status="in_progress" if runs else None)
            metadata = self._metadata(part.tool_name)
            entries = plan_entries(_args(part)) if metadata and metadata.get(PLAN_KEY) else None
            if runs and entries is not None:
                await self.client.plan(entries)
        elif isinstance(event, FunctionToolResultEvent):
            result = event.part
            failed = getattr(result, "outcome", "success") != "success"
            await self.adapter.calls.finish(
                result.tool_call_id, result.model_response_str(), failed=failed
            )

    def _tool_def(self, name: str) -> Any:
        manager = getattr(self.agent_run.ctx.deps, "tool_manager", None) if self.agent_run else None
        return manager.get_tool_def(name) if manager is not None else None

    def _needs_approval(self, name: str) -> bool:
        tool_def = self._tool_def(name)
        return tool_def is not None and tool_def.kind == "unapproved"

    def _metadata(self, name: str) -> Mapping[str, Any] | None:
        tool_def = self._tool_def(name)
        metadata = tool_def.metadata if tool_def is not None else None
        return metadata if isinstance(metadata, Mapping) else None

    async def _announce(self, part: Any) -> Any:
        """The ACP call for ``part``, announced ``pending`` when the model starts it."""
        kind: ToolKind = declared_kind(self._metadata(part.tool_name))
        return await self.adapter.calls.announce(part.tool_call_id, part.tool_name, kind=kind)

    async def _describe(self, part: Any, status: ToolStatus | None) -> None:
        """Send the call's complete arguments (and the path it touches, if declared)."""
        call = self.adapter.calls.get(part.tool_call_id)
        if call is None or call.finished:
            return
        args = _args(part)
        metadata = self._metadata(part.tool_name)
        path_arg = metadata.get(PATH_KEY) if metadata else None
        locations = None
        if isinstance(path_arg, str) and isinstance(args.get(path_arg), str):
            # a path outside the session's roots is not shown (the tool refuses it)
            with contextlib.suppress(AcpError, ValueError):
                path = self.adapter.session.resolve_path(args[path_arg])
                if self.client.allow_outside_roots or self.adapter.session.within_roots(path):
                    locations = [{"path": path}]
        await call.update(status=status, raw_input=args, locations=locations)

    async def _approve(
        self, ctx: RunContext[Any], requests: DeferredToolRequests
    ) -> DeferredToolResults:
        from pydantic_ai.tools import DeferredToolResults, ToolDenied

        results = DeferredToolResults()
        for part in requests.approvals:
            call = await self._announce(part)
            decision = await self.adapter.approvals.ask(self.client, call, part.tool_name)
            if decision == "dismissed":
                raise _Dismissed
            if decision == "allow":
                results.approvals[part.tool_call_id] = True
                await call.update(status="in_progress")
            else:
                results.approvals[part.tool_call_id] = ToolDenied(REJECTED)
        return results

    # ------------------------------------------------------------------ the end

    async def _close_calls(self, text: str) -> None:
        await self.adapter.calls.fail_open(text)

    def _save(self, unanswered: str, *, failed: bool = False) -> None:
        """Save the run's messages (``failed``: up to the first response that was no
        answer, or all of them if the request itself failed)."""
        from pydantic_ai import ModelMessagesTypeAdapter

        if self.agent_run is None:
            return
        messages = list(self.agent_run.new_messages())
        if failed:
            cut = next((i for i, m in enumerate(messages) if _answer_failure([m])), None)
            messages = messages[:cut]
        messages = _closed(messages, unanswered)
        self.adapter.save(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))

    def _count_usage(self) -> None:
        if self.agent_run is None:
            return
        usage = self.agent_run.usage
        if usage.input_tokens or usage.output_tokens:
            self.adapter.add_usage(usage.input_tokens, usage.output_tokens)

    async def _report_context(self, messages: list[ModelMessage]) -> None:
        from pydantic_ai.messages import ModelResponse

        window = self.owner.context_window
        last = messages[-1] if messages else None
        if window and isinstance(last, ModelResponse) and last.usage.total_tokens:
            await self.client.usage(last.usage.total_tokens, window)


def _args(part: Any) -> dict[str, Any]:
    try:
        args = part.args_as_dict()
    except Exception:
        return {}
    return args if isinstance(args, dict) else {}


def _closed(messages: list[ModelMessage], text: str) -> list[ModelMessage]:
    """``messages`` with every tool call of a trailing response answered by ``text``."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart

    last = messages[-1] if messages else None
    if isinstance(last, ModelResponse) and last.tool_calls:
        returns = [
            ToolReturnPart(call.tool_name, text, call.tool_call_id, outcome="interrupted")
            for call in last.tool_calls
        ]
        messages.append(ModelRequest(parts=returns))
    return messages


def _stop_reason(messages: list[ModelMessage]) -> StopReason:
    from pydantic_ai.messages import ModelResponse

    last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    reason = last.finish_reason if last is not None else None
    if reason == "length":
        return "max_tokens"
    if reason == "content_filter":
        return "refusal"
    return "end_turn"


def _answer_failure(messages: Sequence[ModelMessage]) -> ModelFailed | None:
    """The error for the run's last model response if it is no answer: its provider saw
    no finish reason (a cut stream), or it has no part."""
    from pydantic_ai.messages import ModelResponse

    last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    if last is None or not last.provider_name:
        return None
    details = last.provider_details or {}
    return unfinished_answer(finished="finish_reason" in details, empty=not last.parts)


def _model_error(exc: BaseException, agent_run: Any = None) -> ModelFailed | None:
    """The JSON-RPC error for a failed model request, or None if ``exc`` is not one."""
    from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UnexpectedModelBehavior

    if isinstance(exc, UnexpectedModelBehavior) and agent_run is not None:
        # pydantic-ai retries an empty answer, then says only that it ran out of retries
        named = _answer_failure(agent_run.new_messages())
        if named is not None:
            return named

    if isinstance(exc, ModelHTTPError):
        body = exc.body
        message = None
        if isinstance(body, Mapping):
            inner = body.get("error", body)
            message = inner.get("message") if isinstance(inner, Mapping) else None
        return ModelFailed(
            f"HTTP {exc.status_code} from {exc.model_name}: {message or exc.message}",
            status=exc.status_code,
        )
    if isinstance(exc, ModelAPIError):
        return ModelFailed(f"{exc.model_name}: {exc.message}")
    if isinstance(exc, UnexpectedModelBehavior):
        return ModelFailed(f"unexpected model behaviour: {exc.message}")
    return None
