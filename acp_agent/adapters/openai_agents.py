"""Serve an OpenAI Agents SDK ``Agent`` over ACP.

Owns :class:`OpenAIAgentsAgent`, :class:`StoredSession` and the translation of one
``Runner.run_streamed`` run into ACP updates:

* raw response events: output text deltas become message chunks and reasoning deltas
  thought chunks as the model streams them; a function call is announced ``pending`` when
  its output item is added, with the tool's ``name`` and the kind its metadata declares
  (the SDK's tools carry none: the adapter's ``tool_metadata`` gives it, by tool name,
  with the keys of :mod:`acp_agent.adapters.turns`); its final arguments (and locations,
  and the plan of a plan tool) follow when the item is done; each completed response's usage
  is counted for the prompt result (and a ``usage_update`` when ``context_window`` is
  given);
* run hooks: a call goes ``in_progress`` when the tool really starts (after any approval);
  run items: its output (``tool_output``) ends it ``completed``, or ``failed`` when the
  person rejected it;
* approvals: each interruption (a tool with ``needs_approval``) becomes
  ``session/request_permission`` on the streamed call's own id; the run resumes from its
  state with the approvals and rejections; a dismissed request ends the turn ``cancelled``;
* memory: the run's ``session`` is a :class:`StoredSession` whose items are saved with each
  turn's end (the items the turn added, or the whole list if it removed any) and rebuilt,
  in any process, from the turns saved before; a function call a cut turn left without an
  output gets one before the next prompt, so the model's history stays valid; a turn
  that ended with nothing saved is told as items at load (:func:`unfinished_items`);
* MCP servers: those a client gives in ``session/new`` / ``session/load`` are the SDK's
  own MCP servers (``MCPServerStdio``, ``MCPServerStreamableHttp``, ``MCPServerSse``),
  held open for the session by :class:`~acp_agent.adapters.mcp_servers.SessionServers`
  and added to the agent's ``mcp_servers`` for each run (a clone of the agent).

The SDK runs on asyncio only. Nothing of it is imported until an agent is adapted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Final

import orjson

from ..agent import Command, ConfigOption, PromptTurn, StopReason
from ..session import Session
from .mcp_servers import ServersAgent, SessionServers
from .openai_based import locations, prompt_text, require_asyncio, serve_turn
from .turns import (
    EMPTY_ANSWER,
    PATH_KEY,
    PLAN_KEY,
    AdapterTurn,
    ModelFailed,
    declared_kind,
    model_option,
    plan_entries,
    saved,
)
from .unfinished import UnfinishedTurn

JSON = dict[str, Any]

__all__ = ["OpenAIAgentsAgent", "StoredSession", "adapt", "editor_tools"]

#: the output a function call left without one by a cut turn gets
NOT_RUN: Final = "The user cancelled this tool call; it did not run."


def editor_tools(*, approve_writes: bool = True, approve_commands: bool = True) -> list[Any]:
    """The client's editor as Agents SDK function tools: ``read_file``, ``write_file`` and
    ``run_command`` (``sh -c`` in a client terminal, shown in the tool call), each enabled
    only when the client's capabilities allow it, paths inside the session's roots, their
    kinds and paths declared. Writing and running need approval unless told not to."""
    from ._openai_agents_runtime import editor_tools as made

    return list(made(approve_writes=approve_writes, approve_commands=approve_commands))


def adapt(agent: Any) -> OpenAIAgentsAgent:
    """The registry's entry point: an Agents SDK ``Agent`` -> an :class:`Agent`."""
    return OpenAIAgentsAgent(agent)


class StoredSession:
    """The Agents SDK ``Session`` of one ACP session, kept with the session's turns.

    It holds the items in memory; :meth:`turn_memory` is what a turn saves, and
    :meth:`rebuilt` folds the saved turns back into the items.
    """

    session_settings: Any = None

    def __init__(self, session_id: str, items: Sequence[JSON] = ()) -> None:
        self.session_id = session_id
        self.items: list[JSON] = list(items)
        self._added: list[JSON] = []
        self._replaced = False

    @classmethod
    def rebuilt(cls, session_id: str, memory: Sequence[Any]) -> StoredSession:
        items: list[JSON] = []
        for saved_turn in memory:
            if not isinstance(saved_turn, Mapping):
                continue
            if isinstance(saved_turn.get("replace"), list):
                items = list(saved_turn["replace"])
            elif isinstance(saved_turn.get("items"), list):
                items.extend(saved_turn["items"])
        return cls(session_id, items)

    def turn_memory(self) -> JSON:
        """What this turn changed, then start counting the next turn's changes."""
        memory = {"replace": list(self.items)} if self._replaced else {"items": self._added}
        self._added, self._replaced = [], False
        return memory

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            return list(self.items)
        return list(self.items[-limit:]) if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        # JSON round trip: what is kept is exactly what will be stored and restored
        plain = [orjson.loads(orjson.dumps(item, default=_plain)) for item in items]
        self.items.extend(plain)
        self._added.extend(plain)

    async def pop_item(self) -> Any:
        if not self.items:
            return None
        self._replaced = True
        return self.items.pop()

    async def clear_session(self) -> None:
        self.items.clear()
        self._replaced = True

    def unanswered_calls(self) -> list[str]:
        """Call ids of function calls no function call output answers."""
        answered = {i.get("call_id") for i in self.items if i.get("type") == "function_call_output"}
        return [
            str(i["call_id"])
            for i in self.items
            if i.get("type") == "function_call" and i.get("call_id") not in answered
        ]


def unfinished_items(turn: UnfinishedTurn) -> list[JSON]:
    """A turn that ended with nothing saved as the SDK session's items: the user's
    prompt, each response's text and function calls, and the calls' outputs."""
    items: list[JSON] = [{"role": "user", "content": prompt_text(turn.prompt)}]
    for number, response in enumerate(turn.responses):
        if response.text:
            text = {"type": "output_text", "text": response.text, "annotations": []}
            items.append(
                {
                    "id": f"{turn.turn_id}_m{number}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text],
                }
            )
        for call in response.calls:
            arguments = orjson.dumps(call.arguments).decode()
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": arguments,
                }
            )
        items.extend(
            {"type": "function_call_output", "call_id": c.call_id, "output": c.result}
            for c in response.calls
        )
    return items


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    raise TypeError(f"{type(value).__name__} is not JSON-ready")


class OpenAIAgentsAgent(ServersAgent):
    """An ACP agent running an OpenAI Agents SDK ``Agent``.

    ``tool_metadata`` maps tool names to what ``metadata`` declares in other frameworks
    (``{"acp_kind": "read", "acp_path": "path", "acp_plan": True}``: the kind, the argument
    holding the path a call touches, a plan tool); ``commands`` are advertised as slash
    commands (their text goes to the model as typed); ``context_window`` (tokens), when
    given, enables ``usage_update``; ``max_turns`` bounds the model requests of one prompt
    (then the turn ends ``max_turn_requests``). ``models`` (two or more: names, resolved by
    the SDK's model provider, or ``Model`` objects; the first the default) are offered as
    the session's ``model`` config option, and the chosen one runs the turn
    (``RunConfig(model=...)``).
    """

    name = "openai-agents"
    # the SDK's MCP servers: stdio, streamable HTTP and SSE
    mcp_http: ClassVar[bool] = True
    mcp_sse: ClassVar[bool] = True

    def __init__(
        self,
        agent: Any,
        *,
        name: str | None = None,
        tool_metadata: Mapping[str, Mapping[str, Any]] | None = None,
        commands: Sequence[Command] = (),
        context_window: int | None = None,
        max_turns: int = 10,
        models: Sequence[Any] = (),
    ) -> None:
        self.agent = agent
        self.models: dict[str, Any] = {_model_name(m): m for m in models}
        self.metadata: dict[str, Mapping[str, Any]] = {
            str(tool.name): tool.acp_metadata
            for tool in getattr(agent, "tools", ())
            if isinstance(getattr(tool, "acp_metadata", None), Mapping)
        }
        self.metadata.update(tool_metadata or {})
        self.slash_commands = list(commands)
        self.context_window = context_window
        self.max_turns = max_turns
        if name is not None:
            self.name = name  # type: ignore[misc]
        #: the MCP servers of the sessions, held open
        self.mcp: SessionServers[Any] = SessionServers(_open_server, _ping)
        # the SDK is imported (its agent exists): the adapter's side of it now, not in a turn
        from . import _openai_agents_runtime  # noqa: F401

    def commands(self, session: Session) -> Sequence[Command]:
        return self.slash_commands

    def unfinished_memory(self, turn: UnfinishedTurn, before: Sequence[Any]) -> Any:
        return {"items": unfinished_items(turn)}

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        return model_option(list(self.models))

    def chosen_model(self, session: Session) -> Any:
        """The model the session chose (None when no choice is offered)."""
        if len(self.models) < 2:
            return None
        return self.models.get(str(session.config.get("model")), next(iter(self.models.values())))

    async def prompt(self, turn: PromptTurn) -> StopReason:
        require_asyncio("The OpenAI Agents SDK")
        servers = await self.mcp.ready(turn.session)
        agent = self.agent.clone(mcp_servers=[*self.agent.mcp_servers, *servers])
        # rebuilt from the session's saved turns: they are the memory, in any process
        stored = StoredSession.rebuilt(turn.session.session_id, saved(turn.session)[0])
        adapter = AdapterTurn(turn)
        run = _AgentsRun(self, agent, adapter, stored)
        return await serve_turn(adapter, run.run, lambda: stored.turn_memory())


class _AgentsRun:
    """One prompt turn: runs the agent (and resumes it after each interruption)."""

    def __init__(
        self, owner: OpenAIAgentsAgent, agent: Any, adapter: AdapterTurn, stored: StoredSession
    ) -> None:
        self.owner = owner
        self.agent = agent
        self.adapter = adapter
        self.stored = stored
        self.client = adapter.client
        self.rejected: set[str] = set()

    async def run(self) -> StopReason:
        from agents import RunConfig, Runner
        from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError

        from ._openai_agents_runtime import ToolStarts

        hooks = ToolStarts(self.adapter.calls.start)
        left = self.stored.unanswered_calls()
        if left:
            await self.stored.add_items(
                [{"type": "function_call_output", "call_id": c, "output": NOT_RUN} for c in left]
            )
        request: Any = prompt_text(self.adapter.turn.blocks)
        chosen = self.owner.chosen_model(self.adapter.session)
        run_config = RunConfig(model=chosen) if chosen is not None else None
        while True:
            result = Runner.run_streamed(
                self.agent,
                request,
                session=self.stored,
                hooks=hooks,
                max_turns=self.owner.max_turns,
                run_config=run_config,
            )
            try:
                async for event in result.stream_events():
                    await self.on_event(event)
            except MaxTurnsExceeded:
                return "max_turn_requests"
            except ModelBehaviorError as exc:  # a call of a tool the agent lacks, bad JSON
                raise ModelFailed(str(exc)) from None
            finally:
                if not result.is_complete:
                    result.cancel()
            if not result.interruptions:
                return "end_turn"
            state = result.to_state()
            for item in result.interruptions:
                decision = await self.decide(item)
                if decision == "dismissed":
                    return "cancelled"
                if decision == "allow":
                    state.approve(item)
                else:
                    self.rejected.add(str(_field(item.raw_item, "call_id")))
                    state.reject(item)
            request = state

    async def decide(self, item: Any) -> str:
        call_id = str(_field(item.raw_item, "call_id"))
        name = str(item.tool_name or _field(item.raw_item, "name") or "")
        call = self.adapter.calls.get(call_id)
        if call is None:
            call = await self.adapter.calls.announce(
                call_id, name, kind=declared_kind(self.owner.metadata.get(name))
            )
        return await self.adapter.approvals.ask(self.client, call, name)

    async def on_event(self, event: Any) -> None:
        if event.type == "raw_response_event":
            await self.on_raw(event.data)
        elif event.type == "run_item_stream_event":
            item = event.item
            if event.name == "tool_output":
                call_id = str(_field(item.raw_item, "call_id"))
                output = _output_text(item)
                await self.adapter.calls.finish(call_id, output, failed=call_id in self.rejected)
            elif event.name == "handoff_occured":
                call_id = str(_field(item.raw_item, "call_id"))
                await self.adapter.calls.finish(call_id, str(_field(item.raw_item, "output")))

    async def on_raw(self, data: Any) -> None:
        kind = getattr(data, "type", "")
        if kind == "response.output_text.delta":
            if data.delta:
                await self.client.message(data.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            if data.delta:
                await self.client.thought(data.delta)
        elif kind == "response.output_item.added":
            item = data.item
            if getattr(item, "type", None) == "function_call":
                name = str(item.name)
                await self.adapter.calls.announce(
                    str(item.call_id), name, kind=declared_kind(self.owner.metadata.get(name))
                )
        elif kind == "response.output_item.done":
            item = data.item
            if getattr(item, "type", None) == "function_call":
                call = self.adapter.calls.get(str(item.call_id))
                if call is not None and call.status == "pending":
                    args = _arguments(item.arguments)
                    metadata = self.owner.metadata.get(str(item.name)) or {}
                    where = locations(self.adapter.session, args, metadata.get(PATH_KEY))
                    await call.update(raw_input=args, locations=where)
                    entries = plan_entries(args) if metadata.get(PLAN_KEY) else None
                    if entries is not None:
                        await self.client.plan(entries)
        elif kind == "response.completed":
            await self.count_usage(getattr(data.response, "usage", None))
            if not getattr(data.response, "output", None):
                raise ModelFailed(EMPTY_ANSWER)

    async def count_usage(self, usage: Any) -> None:
        if usage is None or not getattr(usage, "total_tokens", 0):
            return
        self.adapter.add_usage(int(usage.input_tokens or 0), int(usage.output_tokens or 0))
        if self.owner.context_window is not None:
            await self.client.usage(int(usage.total_tokens), self.owner.context_window)


def _open_server(spec: Mapping[str, Any], cwd: str) -> AbstractAsyncContextManager[Any]:
    from ._openai_agents_runtime import open_server

    return open_server(spec, cwd)


async def _ping(server: Any) -> None:
    from ._openai_agents_runtime import ping

    await ping(server)


def _output_text(item: Any) -> str:
    """The text of a tool output as the model is given it: the raw item's output (text,
    or text parts: an MCP tool's result), else the tool's value as text."""
    raw = _field(item.raw_item, "output")
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        texts = [_field(part, "text") for part in raw]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    return item.output if isinstance(item.output, str) else str(item.output)


def _model_name(model: Any) -> str:
    return model if isinstance(model, str) else str(getattr(model, "model", None) or model)


def _field(raw: Any, name: str) -> Any:
    return raw.get(name) if isinstance(raw, Mapping) else getattr(raw, name, None)


def _arguments(arguments: Any) -> Any:
    try:
        return orjson.loads(arguments) if isinstance(arguments, str) else arguments
    except orjson.JSONDecodeError:
        return arguments
