"""Serve a Google ADK agent (an ``LlmAgent``, or agents composed of it) over ACP.

Owns :class:`GoogleAdkAgent` and the translation of one ``Runner.run_async`` run (SSE
streaming) into ACP updates:

* partial events: text parts become message chunks (thought parts thought chunks) as the
  model streams them; a function call is announced ``pending`` on its id the first time
  it is seen, with the tool's ``name`` and the kind ``tool_metadata`` declares; the whole
  event that follows gives its arguments (and locations, and the plan of a plan tool); the
  whole event's text is sent only when nothing of it was streamed;
* a tool's confirmation (``FunctionTool(require_confirmation=...)`` or
  ``ToolContext.request_confirmation``) is ADK's ``adk_request_confirmation`` call: it
  becomes ``session/request_permission`` on the original call's id ("always" remembered
  per tool, :class:`~acp_agent.adapters.turns.Approvals`); the run is resumed with the
  answers; a dismissed request ends the turn ``cancelled``;
* a function response ends its call ``completed`` with the response as its content
  (``failed`` when the person rejected it or it holds only an ``error``);
* memory: the run's session service is a
  :class:`~acp_agent.adapters._google_adk_runtime.StoredSessionService`, rebuilt from the
  session's saved turns in any process; the events a turn appended are saved with its end;
  a call a cut turn left without a response gets one before the next prompt; a turn
  that ended with nothing saved is told as events at ``session/load``
  (:mod:`~acp_agent.adapters.unfinished`);
* the model: ADK's own (an OpenAI-compatible endpoint through its ``LiteLlm`` model);
  ``models`` (two or more) are offered as the ``model`` config option, the chosen one set
  on the root agent for the turn.

ADK runs on asyncio only. Nothing of it is imported until an agent is adapted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import orjson

from ..agent import Agent, Command, ConfigOption, PromptTurn, StopReason
from ..session import Session
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
from .unfinished import UnfinishedTurn, remember_unfinished

__all__ = ["GoogleAdkAgent", "adapt"]

#: the response a function call left without one by a cut turn gets
NOT_RUN: Final = "The user cancelled this tool call; it did not run."
#: the function call ADK asks a tool's confirmation with
CONFIRMATION: Final = "adk_request_confirmation"


def adapt(agent: Any) -> GoogleAdkAgent:
    """The registry's entry point: an ADK agent -> an :class:`Agent`."""
    return GoogleAdkAgent(agent)


class GoogleAdkAgent(Agent):
    """An ACP agent running a Google ADK agent.

    ``tool_metadata`` maps tool names to what ``metadata`` declares in other frameworks
    (``{"acp_kind": "read", "acp_path": "path", "acp_plan": True}``); ``commands`` are
    advertised as slash commands (their text goes to the model as typed). ``models`` (two
    or more: model names or ADK model objects such as ``LiteLlm``; the first the default)
    are offered as the session's ``model`` config option.
    """

    name = "google-adk"
    mcp_http: ClassVar[bool] = False

    def __init__(
        self,
        agent: Any,
        *,
        name: str | None = None,
        tool_metadata: Mapping[str, Mapping[str, Any]] | None = None,
        commands: Sequence[Command] = (),
        models: Sequence[Any] = (),
    ) -> None:
        self.agent = agent
        self.metadata: dict[str, Mapping[str, Any]] = dict(tool_metadata or {})
        self.slash_commands = list(commands)
        self.models: dict[str, Any] = {_model_name(m): m for m in models}
        if name is not None:
            self.name = name  # type: ignore[misc]
        # ADK is imported (its agent exists): the adapter's side of it now, not in a turn
        from . import _google_adk_runtime  # noqa: F401

    def commands(self, session: Session) -> Sequence[Command]:
        return self.slash_commands

    async def load_session(self, session: Session) -> None:
        remember_unfinished(session, self.unfinished_memory)

    def unfinished_memory(self, turn: UnfinishedTurn, before: Sequence[Any]) -> Any:
        from ._google_adk_runtime import unfinished_events

        prompt = prompt_text(turn.prompt)
        return {"events": unfinished_events(turn, prompt, str(self.agent.name))}

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        return model_option(list(self.models))

    def agent_for(self, session: Session) -> Any:
        """The root agent, with the model the session chose when a choice is offered."""
        if len(self.models) < 2:
            return self.agent
        chosen = self.models.get(str(session.config.get("model")))
        if chosen is None:
            chosen = next(iter(self.models.values()))
        return self.agent.clone(update={"model": chosen})

    async def prompt(self, turn: PromptTurn) -> StopReason:
        require_asyncio("Google ADK")
        from ._google_adk_runtime import StoredSessionService

        # rebuilt from the session's saved turns: they are the memory, in any process
        service, adk_session = await StoredSessionService.rebuilt(
            turn.session.session_id, saved(turn.session)[0]
        )
        adapter = AdapterTurn(turn)
        run = _AdkRun(self, self.agent_for(turn.session), adapter, service, adk_session)
        return await serve_turn(adapter, run.run, service.turn_memory)


class _AdkRun:
    """One prompt turn: runs the agent, and resumes it after each confirmation."""

    def __init__(
        self,
        owner: GoogleAdkAgent,
        agent: Any,
        adapter: AdapterTurn,
        service: Any,
        adk_session: Any,
    ) -> None:
        self.owner = owner
        self.agent = agent
        self.adapter = adapter
        self.client = adapter.client
        self.service = service
        self.adk_session = adk_session
        self.rejected: set[str] = set()
        #: confirmation call id -> (its name, confirmed), answered when the run ends
        self.answers: dict[str, tuple[str, bool]] = {}
        #: the original calls whose confirmation is being asked or answered
        self.confirming: set[str] = set()
        self.streamed = False  # text of the model's current response already streamed
        self.dismissed = False

    async def run(self) -> StopReason:
        from google.adk.agents import RunConfig
        from google.adk.agents._streaming_mode import StreamingMode
        from google.adk.runners import Runner

        from . import _google_adk_runtime as rt

        await rt.answer_cut_calls(self.service, self.adk_session, NOT_RUN)
        runner = Runner(agent=self.agent, app_name=rt.APP, session_service=self.service)
        config = RunConfig(streaming_mode=StreamingMode.SSE)
        message = rt.user_message(prompt_text(self.adapter.turn.blocks))
        while True:
            events = runner.run_async(
                user_id=rt.USER,
                session_id=self.adk_session.id,
                new_message=message,
                run_config=config,
            )
            try:
                async for event in events:
                    await self.on_event(event)
                    if self.dismissed:
                        return "cancelled"
            finally:
                await events.aclose()
            if not self.answers:
                return "end_turn"
            message = rt.confirmations(self.answers)
            self.answers = {}

    async def on_event(self, event: Any) -> None:
        parts = (event.content.parts or []) if event.content else []
        for part in parts:
            await self.on_part(part, partial=bool(event.partial))
        if not event.partial:
            self.streamed = False
            usage = event.usage_metadata
            if usage is not None and usage.total_token_count:
                self.adapter.add_usage(
                    int(usage.prompt_token_count or 0), int(usage.candidates_token_count or 0)
                )

    async def on_part(self, part: Any, *, partial: bool) -> None:
        if part.text and (partial or not self.streamed):
            if part.thought:
                await self.client.thought(part.text)
            else:
                await self.client.message(part.text)
            self.streamed = self.streamed or partial
        call = part.function_call
        if call is not None and call.id:
            if call.name == CONFIRMATION:
                if not partial:
                    await self.confirm(call)
            else:
                await self.on_call(call, partial=partial)
        response = part.function_response
        if response is not None and response.id and response.name != CONFIRMATION:
            if response.id in self.confirming:  # "requires confirmation": asked instead
                self.confirming.discard(response.id)
                return
            body = response.response
            if response.id not in self.rejected:  # it ran
                await self.adapter.calls.start(str(response.id))
            await self.adapter.calls.finish(
                str(response.id),
                _output_text(body),
                failed=response.id in self.rejected or _only_error(body),
            )

    async def on_call(self, call: Any, *, partial: bool) -> None:
        name = str(call.name or "")
        metadata = self.owner.metadata.get(name) or {}
        tool_call = await self.adapter.calls.announce(
            str(call.id), name, kind=declared_kind(metadata)
        )
        if partial or tool_call.status != "pending" or call.args is None:
            return
        args = dict(call.args)
        where = locations(self.adapter.session, args, metadata.get(PATH_KEY))
        await tool_call.update(raw_input=args, locations=where)
        entries = plan_entries(args) if metadata.get(PLAN_KEY) else None
        if entries is not None:
            await self.client.plan(entries)

    async def confirm(self, request: Any) -> None:
        original = (request.args or {}).get("originalFunctionCall") or {}
        call_id = str(original.get("id") or "")
        name = str(original.get("name") or "")
        call = self.adapter.calls.get(call_id)
        if call is None:
            call = await self.adapter.calls.announce(
                call_id, name, kind=declared_kind(self.owner.metadata.get(name))
            )
        self.confirming.add(call_id)
        decision = await self.adapter.approvals.ask(self.client, call, name)
        if decision == "dismissed":
            self.dismissed = True
            return
        if decision == "reject":
            self.rejected.add(call_id)
        self.answers[str(request.id)] = (CONFIRMATION, decision == "allow")


def _output_text(body: Any) -> str:
    """A function response as text: its ``result`` (or ``error``) when that is all it
    holds, else the whole response as JSON."""
    if isinstance(body, Mapping) and len(body) == 1:
        (value,) = body.values()
        if isinstance(value, str):
            return value
    return orjson.dumps(body, default=str).decode()


def _only_error(body: Any) -> bool:
    return isinstance(body, Mapping) and set(body) == {"error"}


def _model_name(model: Any) -> str:
    return model if isinstance(model, str) else str(getattr(model, "model", None) or model)
