"""What every framework adapter does the same way during a prompt turn.

Owns, framework-neutral:

* :class:`AdapterTurn`, the turn as adapters and their tools see it (the
  :class:`~acp_agent.agent.PromptTurn`, its :class:`ToolCalls` and :class:`Approvals`),
  reachable from a tool function through :func:`current_turn` while the turn runs;
* :class:`ToolCalls`: the framework's tool call ids -> ACP tool calls, each announced once
  (``pending``), then ``in_progress``, then ``completed``/``failed`` with its output as text
  ``content`` (and ``rawOutput``), the tool's ``name`` and the kind its declaration gives
  (:func:`declared_kind`; ``other`` when it declares none, never guessed from the name);
  a tool declared a plan tool (:data:`PLAN_KEY`) also sends its entries as the ``plan``
  (:func:`plan_entries`);
* :class:`Approvals`: ``session/request_permission`` on the streamed call's own id, with
  "always" choices remembered per tool for the session;
* what a turn saves with the session (:func:`saved`, :meth:`AdapterTurn.save`): one
  JSON value per turn through :meth:`PromptTurn.save_state`, ``{"memory": <the framework's
  memory of this turn>, "approvals": {tool: "allow" | "reject"}}``, written with the turn's
  end and read back, in any process, from ``session.history.states()`` (a turn that
  ended with nothing saved by the entry :mod:`~acp_agent.adapters.unfinished` made for it
  at load);
* :class:`ModelFailed`, the one JSON-RPC error a failed model request becomes (and
  :func:`unfinished_answer`: the one for an answer a framework took as complete though
  its stream was cut or it held nothing), and the usage a turn reports
  (:meth:`AdapterTurn.add_usage`).

It does not know any framework, and sends nothing a framework did not produce.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final, Literal, get_args

import anyio

from ..agent import ConfigOption, PromptTurn
from ..client import (
    PermissionOption,
    SessionClient,
    Terminal,
    ToolCall,
    ToolKind,
    text_content,
)
from ..errors import ConnectionClosed, InternalError, RequestError
from ..session import Session
from .unfinished import call_meta, told_memory

#: the tool metadata key declaring its ACP tool kind (``read``, ``edit``, ``execute``, ...)
KIND_KEY: Final = "acp_kind"
#: the tool metadata key naming the argument that holds the file path a call touches
PATH_KEY: Final = "acp_path"
#: the tool metadata key marking a plan tool: its ``entries`` argument is the whole plan
PLAN_KEY: Final = "acp_plan"
#: how long a cancelled turn may take to tell the client its open tool calls failed
CLOSE_GRACE: Final = 2.0

KINDS: Final = frozenset(get_args(ToolKind))

Decision = Literal["allow", "reject", "dismissed"]

APPROVAL_OPTIONS: Final = (
    PermissionOption("allow_once", "Allow once", "allow_once"),
    PermissionOption("allow_always", "Always allow", "allow_always"),
    PermissionOption("reject_once", "Reject", "reject_once"),
    PermissionOption("reject_always", "Always reject", "reject_always"),
)
#: what is offered where the framework does not allow the call to be approved
REJECT_OPTIONS: Final = APPROVAL_OPTIONS[2:]


def declared_kind(metadata: Mapping[str, Any] | None) -> ToolKind:
    """The tool kind a tool's metadata declares under :data:`KIND_KEY`, else ``other``."""
    kind = metadata.get(KIND_KEY) if metadata else None
    return kind if isinstance(kind, str) and kind in KINDS else "other"  # type: ignore[return-value]


def plan_entries(args: Mapping[str, Any]) -> list[dict[str, str]] | None:
    """A plan tool's ``entries`` argument as ACP plan entries (``content``, ``priority``
    default ``medium``, ``status`` default ``pending``); None if it holds none."""
    entries = args.get("entries")
    if not isinstance(entries, list):
        return None
    out: list[dict[str, str]] = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"content": entry}
        if not isinstance(entry, Mapping) or not isinstance(entry.get("content"), str):
            return None
        priority = entry.get("priority")
        status = entry.get("status")
        out.append(
            {
                "content": entry["content"],
                "priority": priority if priority in ("high", "medium", "low") else "medium",
                "status": status
                if status in ("pending", "in_progress", "completed")
                else "pending",
            }
        )
    return out


def model_option(models: Sequence[str]) -> list[ConfigOption]:
    """The session's ``model`` config option over ``models`` (the first the default);
    none for fewer than two."""
    if len(models) < 2:
        return []
    return [
        {
            "id": "model",
            "name": "Model",
            "type": "select",
            "category": "model",
            "default": models[0],
            "options": [{"value": m, "name": m} for m in models],
        }
    ]


class ModelFailed(InternalError):
    """The model request failed: ``-32603``, ``data`` = ``{"reason": ..., "status": ...}``."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(
            f"The model request failed: {reason}", data={"reason": reason, "status": status}
        )
        self.reason = reason
        self.status = status


#: the reason of a model answer whose stream ended with no finish reason (cut, or no [DONE])
CUT_STREAM: Final = "the model's stream ended before it finished (no finish_reason)"
#: the reason of a model answer with no text, no tool call and no refusal
EMPTY_ANSWER: Final = "the model returned an empty response"


def unfinished_answer(*, finished: bool, empty: bool) -> ModelFailed | None:
    """The error for a model answer the framework took as complete: ``finished`` says
    the model sent a finish reason, ``empty`` that the answer holds nothing. An adapter
    raises it for the answer's message, and saves nothing of that answer."""
    if not finished:
        return ModelFailed(CUT_STREAM)
    if empty:
        return ModelFailed(EMPTY_ANSWER)
    return None


@contextlib.contextmanager
def unwinding() -> Iterator[None]:
    """For the last updates of a cancelled turn: shielded, bounded, quiet if the client
    is gone."""
    with (
        anyio.CancelScope(shield=True),
        anyio.move_on_after(CLOSE_GRACE),
        contextlib.suppress(ConnectionClosed),
    ):
        yield


class ToolCalls:
    """One turn's ACP tool calls, by the framework's tool call id."""

    __slots__ = ("_calls", "client")

    def __init__(self, client: SessionClient) -> None:
        self.client = client
        self._calls: dict[str, ToolCall] = {}

    def get(self, key: str) -> ToolCall | None:
        return self._calls.get(key)

    async def announce(
        self,
        key: str,
        name: str,
        *,
        kind: ToolKind = "other",
        raw_input: Any = None,
        locations: Sequence[Mapping[str, Any]] | None = None,
        model_call: bool = True,
    ) -> ToolCall:
        """The call for ``key``, announced ``pending`` the first time it is seen; a
        ``model_call`` (``key`` is the id the model gave it) names ``key`` in its ``_meta``
        (:func:`~acp_agent.adapters.unfinished.call_meta`)."""
        call = self._calls.get(key)
        if call is None:
            call = await self.client.tool_call(
                name,
                name=name,
                kind=kind,
                raw_input=raw_input,
                locations=[dict(x) for x in locations] if locations else None,
                meta=call_meta(key) if model_call else None,
            )
            self._calls[key] = call
        return call

    async def start(self, key: str, *, raw_input: Any = None) -> None:
        call = self._calls.get(key)
        if call is not None and call.status == "pending":
            await call.update(status="in_progress", raw_input=raw_input)

    async def finish(self, key: str, output: str, *, failed: bool = False) -> None:
        """End the call with ``output`` (the text the model was given) as its content."""
        call = self._calls.get(key)
        if call is None or call.finished:
            return
        content = [text_content(output)] if output else None
        await call.update(
            status="failed" if failed else "completed",
            content=content,
            raw_output={"output": output},
        )

    def open(self) -> list[ToolCall]:
        return [call for call in self._calls.values() if not call.finished]

    async def fail_open(self, output: str) -> None:
        """End every call still open as ``failed`` (v1 has no ``cancelled`` status)."""
        for call in self.open():
            await call.update(status="failed", content=[text_content(output)])


class Approvals:
    """Asks the person before a tool runs; remembers "always" answers per tool name."""

    __slots__ = ("always",)

    def __init__(self, remembered: Mapping[str, str] | None = None) -> None:
        self.always: dict[str, str] = {
            k: v for k, v in (remembered or {}).items() if v in ("allow", "reject")
        }

    async def ask(
        self, client: SessionClient, call: ToolCall, tool: str, *, allow: bool = True
    ) -> Decision:
        """``allow``, ``reject``, or ``dismissed`` (the request was cancelled: the turn ends
        ``cancelled``). An "always" answer given before is applied without asking.
        Without ``allow`` (the framework does not let this call be approved) only the
        reject options are offered, and an "always allow" given before is not applied."""
        remembered = self.always.get(tool)
        if remembered == "reject" or (remembered == "allow" and allow):
            return "allow" if remembered == "allow" else "reject"
        options = APPROVAL_OPTIONS if allow else REJECT_OPTIONS
        outcome = await client.request_permission(call, options)
        if outcome.cancelled or outcome.option is None:
            return "dismissed"
        kind = outcome.option.kind
        decision: Decision = "allow" if kind.startswith("allow") else "reject"
        if kind.endswith("always"):
            self.always[tool] = decision
        return decision


def saved(session: Session) -> tuple[list[Any], dict[str, str]]:
    """What the session's turns saved: each turn's memory, oldest first (for a loaded
    turn that saved none, the entry told at load), and the "always" approvals of the
    latest turn that saved any."""
    memory: list[Any] = []
    approvals: dict[str, str] = {}
    told = told_memory(session)
    for turn in session.history.turns:
        state = turn.state
        if turn.turn_id in told:
            memory.append(told[turn.turn_id])
            continue
        if not isinstance(state, dict):
            continue
        if "memory" in state:
            memory.append(state["memory"])
        if isinstance(state.get("approvals"), dict):
            approvals = state["approvals"]
    return memory, approvals


_current: ContextVar[AdapterTurn] = ContextVar("acp_agent.adapters.turn")


def current_turn() -> AdapterTurn:
    """The turn being served (for a tool function); ``LookupError`` outside one."""
    try:
        return _current.get()
    except LookupError:
        raise LookupError("not inside a prompt turn served by an acp_agent adapter") from None


class AdapterTurn:
    """One prompt turn of an adapted agent."""

    __slots__ = ("approvals", "calls", "terminals", "turn")

    def __init__(self, turn: PromptTurn) -> None:
        self.turn = turn
        self.calls = ToolCalls(turn.client)
        self.approvals = Approvals(saved(turn.session)[1])
        #: the client terminals this turn's tools opened (see :meth:`release_terminals`)
        self.terminals: list[Terminal] = []

    async def release_terminals(self) -> None:
        """Release every terminal the turn's tools opened and did not release: a tool the
        framework cancelled may not reach its own cleanup before the turn ends (a
        cancelled LangGraph turn answered with its terminal neither killed nor released).
        Called by the turn's own task at its end, however it ends."""
        for terminal in self.terminals:
            if not terminal.released:
                with contextlib.suppress(RequestError):
                    await terminal.release()

    @property
    def client(self) -> SessionClient:
        return self.turn.client

    @property
    def session(self) -> Session:
        return self.turn.session

    @contextlib.contextmanager
    def active(self) -> Iterator[AdapterTurn]:
        """Make this turn :func:`current_turn` for the code run inside."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def save(self, memory: Any) -> None:
        """Save this turn's memory (JSON-ready) and the session's "always" approvals."""
        self.turn.save_state({"memory": memory, "approvals": dict(self.approvals.always)})

    def add_usage(self, input_tokens: int, output_tokens: int) -> None:
        """Count tokens into the prompt result's ``usage``."""
        usage = self.turn.usage or {"totalTokens": 0, "inputTokens": 0, "outputTokens": 0}
        usage["inputTokens"] += input_tokens
        usage["outputTokens"] += output_tokens
        usage["totalTokens"] += input_tokens + output_tokens
        self.turn.usage = usage
