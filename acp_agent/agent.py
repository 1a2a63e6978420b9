"""The interface an agent author implements.

Subclass :class:`Agent` and override :meth:`Agent.prompt`; everything else has a
default. The library keeps the protocol's invariants around it: one active prompt per
session, cancellation that always answers ``cancelled``, updates ordered before the
prompt response, session persistence and replay, capability-gated client calls.

Defaults answer ``-32601`` for what an agent does not support (authentication,
``logout``, extension methods) and the advertised capabilities follow what is
implemented: prompt content types come from :attr:`Agent.prompt_capabilities`,
session features from the store the server was given.

Shapes the agent *emits* (commands, modes, config options, auth methods) are plain
dicts typed with ``TypedDict``s in their wire spelling; what the agent *receives*
(the prompt, request params) is validated into the generated pydantic models.

This module does not know the connection or the store.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .client import ClientCapabilities, SessionClient
from .errors import ConnectionClosed, InternalError, MethodNotFound, PathOutsideRoots, RequestError
from .history import STATE_KIND, STOP_REASONS
from .session import Session

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired, TypedDict

if TYPE_CHECKING:
    from .protocol import ContentBlock, PromptRequest

log = logging.getLogger("acp_agent.agent")

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


class CommandInput(TypedDict):
    hint: str


class Command(TypedDict):
    """A slash command (``available_commands_update``)."""

    name: str
    description: str
    input: NotRequired[CommandInput]


class Mode(TypedDict):
    """A session mode. The first mode an agent lists is the default."""

    id: str
    name: str
    description: NotRequired[str]


class SelectValue(TypedDict):
    value: str
    name: str
    description: NotRequired[str]


class ConfigOption(TypedDict):
    """A session config option *definition*; the library adds ``currentValue``.

    ``type`` is ``"select"`` (with ``options`` and a ``default`` value id) or
    ``"boolean"`` (a ``default`` bool; only offered to clients that advertise
    ``session.configOptions.boolean``). An option of ``category: "mode"`` whose values
    are the mode ids is kept in step with the session mode by the library.
    """

    id: str
    name: str
    type: Literal["select", "boolean"]
    default: str | bool
    description: NotRequired[str]
    category: NotRequired[str]
    options: NotRequired[list[SelectValue]]


class AuthMethod(TypedDict):
    id: str
    name: str
    description: NotRequired[str]
    type: NotRequired[str]
    args: NotRequired[list[str]]  # a ``terminal`` method: the agent command's arguments
    env: NotRequired[dict[str, str]]


class PromptCapabilities(TypedDict, total=False):
    image: bool
    audio: bool
    embeddedContext: bool


@dataclass(frozen=True, slots=True)
class InitializeParams:
    """What the client sent in ``initialize`` (read without pydantic: it is on the
    start-up path, and every field but the version is optional)."""

    protocol_version: int
    capabilities: ClientCapabilities
    client_info: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(slots=True)
class PromptTurn:
    """What :meth:`Agent.prompt` receives for one turn."""

    session: Session
    client: SessionClient
    #: the ``session/prompt`` params exactly as received (already validated)
    params: dict[str, Any]
    #: the prompt's content blocks exactly as received (wire dicts)
    blocks: list[dict[str, Any]]
    turn_id: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: the turn's token usage for the (unstable) ``usage`` of the prompt result, in its
    #: wire spelling (``totalTokens``, ``inputTokens``, ``outputTokens``, ...); None: unknown
    usage: dict[str, int] | None = None
    _request: PromptRequest | None = field(default=None, repr=False)

    @property
    def request(self) -> PromptRequest:
        """The params as the typed ``PromptRequest`` model.

        A prompt of plain text blocks is validated without pydantic when it arrives, and
        its model is only built here, on first use (it then cannot fail).
        """
        if self._request is None:
            from .protocol import PromptRequest
            from .protocol.wire import from_wire

            self._request = from_wire(PromptRequest, self.params)
        return self._request

    @property
    def prompt(self) -> list[ContentBlock]:
        """The prompt as typed content blocks."""
        return list(self.request.prompt)

    @property
    def first_text(self) -> str:
        """The text of the first text block ('' if none): where a slash command lives."""
        for block in self.blocks:
            if block.get("type") == "text":
                return str(block.get("text", ""))
        return ""

    @property
    def text(self) -> str:
        """The text of the prompt's text blocks, joined with newlines."""
        return "\n".join(str(b.get("text", "")) for b in self.blocks if b.get("type") == "text")

    def save_state(self, state: Any) -> None:
        """Keep ``state`` (JSON-ready, not None) with this turn, durably.

        It is written with the turn's history, at the latest with the turn's end, and is
        never sent to a client nor replayed. A later turn, in this process or after
        ``session/load`` in another, reads every turn's saved state, oldest first, from
        ``session.history.states()``. Saving again in the same turn replaces it. It does
        not wait, so it may be called while the turn unwinds from a cancel.
        """
        if state is None:
            raise ValueError("save_state needs a value (None means nothing saved)")
        self.client.record({"sessionUpdate": STATE_KIND, "state": state})


class Agent:
    """Base class of an ACP agent. Override :meth:`prompt` at least."""

    #: ``agentInfo`` in the initialize response
    name: ClassVar[str] = "acp-agent"
    title: ClassVar[str | None] = None
    version: ClassVar[str] = "0"

    #: which prompt content blocks besides text and resource links are accepted
    prompt_capabilities: ClassVar[PromptCapabilities] = {}
    #: which MCP transports besides stdio are accepted in ``mcpServers``
    mcp_http: ClassVar[bool] = False
    mcp_sse: ClassVar[bool] = False

    # -- connection-level -----------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Held open for as long as the connection is served.

        Override to own resources that outlive single turns and sessions (a task group
        for background work such as MCP server connections, an HTTP client pool); they
        close when the connection ends, after every session has been closed.
        """
        yield

    async def initialize(self, params: InitializeParams) -> None:
        """Called for every ``initialize`` (a client may send it again)."""

    def auth_methods(self, capabilities: ClientCapabilities) -> Sequence[AuthMethod]:
        """Authentication methods to advertise. Terminal methods are filtered out by
        the library unless the client advertised ``auth.terminal``."""
        return ()

    async def authenticate(self, method_id: str, meta: Mapping[str, Any] | None) -> None:
        """``authenticate`` with one of :meth:`auth_methods` (``meta`` is the request's
        ``_meta``). Raise :class:`~acp_agent.errors.RequestError` to refuse."""
        raise MethodNotFound("this agent needs no authentication")

    def requires_auth(self) -> bool:
        """True while session creation must answer ``-32000``."""
        return False

    def supports_logout(self) -> bool:
        """Whether ``logout`` is offered (``agentCapabilities.auth.logout``); an agent
        that overrides :meth:`logout` says True while it authenticates."""
        return False

    async def logout(self) -> None:
        """``logout``: forget the credentials :meth:`authenticate` was given."""
        raise MethodNotFound("this agent has nothing to log out of")

    # -- sessions ---------------------------------------------------------------

    def commands(self, session: Session) -> Sequence[Command]:
        """Slash commands advertised after ``session/new`` (and on load/resume)."""
        return ()

    def modes(self, session: Session) -> Sequence[Mode]:
        """Session modes; empty for none. The first is the default."""
        return ()

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        """Session config option definitions; empty for none."""
        return ()

    async def new_session(self, session: Session) -> None:
        """A session was created (before its response is sent: do not send updates)."""

    async def load_session(self, session: Session) -> None:
        """A stored session was loaded or resumed on this connection."""

    async def close_session(self, session: Session) -> None:
        """The session is being closed (any turn has already been cancelled)."""

    async def mode_changed(self, session: Session, mode_id: str) -> None:
        """The session mode changed (already validated, stored and announced)."""

    async def config_changed(self, session: Session, config_id: str, value: str | bool) -> None:
        """A config option changed (already validated and stored)."""

    # -- turns --------------------------------------------------------------------

    async def prompt(self, turn: PromptTurn) -> StopReason:
        """Run one prompt turn and return its stop reason.

        Send output through ``turn.client``. When the turn is cancelled, the awaiting
        call raises the backend's cancellation exception: let it propagate (use
        ``try/finally`` for cleanup); the library answers ``cancelled``.
        """
        raise NotImplementedError

    # -- extensions -------------------------------------------------------------

    async def ext_method(self, method: str, params: Any) -> Any:
        """A ``_``-prefixed request. Default: method not found."""
        raise MethodNotFound(f"unknown extension method {method[:100]!r}")

    async def ext_notification(self, method: str, params: Any) -> None:
        """A ``_``-prefixed notification. Default: ignored."""


# -- the turn's boundary ----------------------------------------------------------


async def run_prompt(agent: Agent, turn: PromptTurn) -> StopReason:
    """Run ``agent.prompt(turn)`` and check what it returns.

    An agent's bug becomes a JSON-RPC error that names it, with the details in the log:
    a result that is not a :data:`StopReason` (``None``, say) raises
    :class:`~acp_agent.errors.InternalError` ("Shouty.prompt returned None; expected a
    StopReason ..."), and so does an exception ("Shouty.prompt raised KeyError (the
    traceback is in the agent's log ...)"), whose message and traceback are only logged. What the
    library itself raises for the turn passes unchanged: a
    :class:`~acp_agent.errors.RequestError` (its code and message are the answer),
    :class:`~acp_agent.errors.ConnectionClosed`, :class:`~acp_agent.errors.PathOutsideRoots`
    and cancellation.
    """
    where = f"{type(agent).__name__}.prompt"
    try:
        stop: object = await agent.prompt(turn)
    except (RequestError, ConnectionClosed, PathOutsideRoots):
        raise
    except Exception as exc:
        log.exception("%s raised in session %s", where, turn.session.session_id)
        # The exception's text stays in the log: it may hold what the client must not see.
        raise InternalError(
            f"{where} raised {type(exc).__name__} "
            "(the traceback is in the agent's log: stderr or --log-file)",
            data={"agent": where, "exception": type(exc).__name__},
        ) from exc
    if stop not in STOP_REASONS:
        shown = repr(stop)[:100]
        expected = ", ".join(sorted(STOP_REASONS))
        log.error("%s returned %s in session %s", where, shown, turn.session.session_id)
        raise InternalError(
            f"{where} returned {shown}; expected a StopReason ({expected})",
            data={"agent": where},
        )
    return stop  # type: ignore[return-value]
