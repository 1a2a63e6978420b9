"""What every part of :class:`~acp_agent.server.AcpServer` shares: its state, the
checks on common params, and the wire shapes of modes and config options.

It owns the server's attributes (sessions, their clients, the persister, the
connection), param helpers (``params``, ``session_id``, ``mcp_servers``), the lazily
built protocol models, and the ``session/new``/``load`` result shapes. The ACP
methods themselves live in the sibling modules, one concern each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import anyio.abc
import anyio.to_thread

from ..agent import Agent, ConfigOption
from ..client import ClientCapabilities, SessionClient
from ..connection import AgentSession, Dispatcher
from ..errors import INVALID_REQUEST, AuthRequired, InvalidParams, RequestError, ResourceNotFound
from ..persistence import Persister
from ..session import Session
from ..store import DEFAULT_OWNER, MemorySessionStore, SessionRecord, SessionStore
from .ordering import ArrivalOrder
from .owners import SessionOwners

if TYPE_CHECKING:
    from ..protocol import PromptRequest

log = logging.getLogger("acp_agent.server")

PROTOCOL_VERSION: Final = 1
CLOSE_GRACE: Final = 5.0  # seconds a cancelled turn gets to unwind on close
BusyPolicy = Literal["reject", "queue"]

JSON = dict[str, Any]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def params_object(params: Any) -> JSON:
    """Params as an object: absent or null is ``{}``; an array is invalid for ACP."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object")
    return params


def require_session_id(params: JSON) -> str:
    sid = params.get("sessionId")
    if not isinstance(sid, str) or not sid:
        raise InvalidParams("sessionId: a non-empty string is required")
    return sid


def check_mcp_servers(params: JSON, agent: Agent) -> list[Any]:
    servers = params.get("mcpServers")
    if servers is None:
        return []
    if not isinstance(servers, list):
        raise InvalidParams("mcpServers must be an array")
    for i, server in enumerate(servers):
        if not isinstance(server, dict):
            raise InvalidParams(f"mcpServers[{i}] must be an object")
        kind = server.get("type")
        if kind == "http" and not agent.mcp_http:
            raise InvalidParams(f"mcpServers[{i}]: HTTP MCP servers are not supported")
        if kind == "sse" and not agent.mcp_sse:
            raise InvalidParams(f"mcpServers[{i}]: SSE MCP servers are not supported")
        if kind is None:
            for key in ("name", "command"):
                if not isinstance(server.get(key), str):
                    raise InvalidParams(f"mcpServers[{i}].{key}: a string is required")
    return servers


_GATED_BLOCKS: Final = {"image": "image", "audio": "audio", "resource": "embeddedContext"}


#: a prompt's params, its typed request when already built, its content blocks
ParsedPrompt = tuple[JSON, "PromptRequest | None", list[Any]]


_models_built = False  # set once per process: the models are shared by every server


def build_models() -> None:
    """Import pydantic and build the protocol models, once per process (any thread)."""
    global _models_built
    from ..protocol import PromptRequest
    from ..protocol.wire import from_wire

    from_wire(PromptRequest, {"sessionId": "warm-up", "prompt": [{"type": "text", "text": ""}]})
    _models_built = True


def models_built() -> bool:
    return _models_built


class ServerBase:
    """State and helpers shared by the concerns :class:`AcpServer` is made of."""

    def __init__(
        self,
        agent: Agent,
        store: SessionStore | None = None,
        *,
        busy_policy: BusyPolicy = "reject",
        turn_timeout: float | None = None,
        allow_outside_roots: bool = False,
        max_line: int = 64 * 1024 * 1024,
        dispatcher: type[Dispatcher] | None = None,
        owner: str = DEFAULT_OWNER,
        unstable: bool = False,
        owners: SessionOwners | None = None,
    ) -> None:
        self.agent = agent
        self.owner = owner  # the principal whose sessions this connection sees
        #: which connection of the process has each session open (shared by ``serve``)
        self._owners = owners if owners is not None else SessionOwners()
        #: serve (and advertise) the unstable methods of :mod:`.unstable`
        self.unstable = unstable
        self.store: SessionStore = store if store is not None else MemorySessionStore()
        self.busy_policy = busy_policy
        self.turn_timeout = turn_timeout
        self.allow_outside_roots = allow_outside_roots
        self.max_line = max_line
        self.dispatcher = dispatcher
        self.capabilities = ClientCapabilities()
        self.initialized = False
        self.sessions: dict[str, Session] = {}
        self.clients: dict[str, SessionClient] = {}
        self._order = ArrivalOrder()
        self._persister = Persister(self.store)
        self._conn: AgentSession | None = None
        self._models_ready: anyio.Event | None = None  # created by the first build
        self._warm_scheduled = False
        self._tg: anyio.abc.TaskGroup | None = None
        #: makes each turn's cancel scope: set by ``serve`` to the running backend's scope
        #: class, which skips anyio's look-up of the backend (a few microseconds a turn)
        self._new_scope: Callable[[], anyio.CancelScope] = anyio.CancelScope

    # ------------------------------------------------------------------ wiring

    @property
    def connection(self) -> AgentSession:
        if self._conn is None:
            raise RuntimeError("the server is not serving")
        return self._conn

    def _check_initialized(self) -> None:
        if not self.initialized:
            raise RequestError(
                "The connection is not initialized: send initialize first",
                code=INVALID_REQUEST,
            )

    def _record(self, session: Session) -> SessionRecord:
        """What the store keeps of a live session."""
        return SessionRecord(
            session_id=session.session_id,
            cwd=session.cwd,
            owner=self.owner,
            additional_directories=session.additional_directories,
            title=session.title,
            mode_id=session.mode_id,
            config=dict(session.config),
        )

    def _live(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise ResourceNotFound(
                f"Session {session_id[:100]!r} is not open on this connection",
                data={"sessionId": session_id[:200]},
            )
        return session

    def _client(self, session: Session) -> SessionClient:
        return self.clients[session.session_id]

    def _attach(self, session: Session) -> SessionClient:
        client = SessionClient(
            session,
            self.connection,
            self.capabilities,
            allow_outside_roots=self.allow_outside_roots,
        )
        self.sessions[session.session_id] = session
        self.clients[session.session_id] = client
        self._owners.claim(session.session_id, self)
        return client

    def _option_defs(self, session: Session) -> list[ConfigOption]:
        defs = list(self.agent.config_options(session))
        if not self.capabilities.boolean_config_options:
            defs = [d for d in defs if d["type"] != "boolean"]
        return defs

    def _init_state(self, session: Session) -> None:
        """Give a session its default mode and config values where it has none."""
        modes = list(self.agent.modes(session))
        if modes and session.mode_id not in {m["id"] for m in modes}:
            session.mode_id = modes[0]["id"]
        for d in self.agent.config_options(session):
            if d["id"] not in session.config:
                session.config[d["id"]] = d["default"]
            if d.get("category") == "mode" and session.mode_id is not None:
                session.config[d["id"]] = session.mode_id

    def _modes_wire(self, session: Session) -> JSON | None:
        modes = list(self.agent.modes(session))
        if not modes:
            return None
        return {
            "currentModeId": session.mode_id or modes[0]["id"],
            "availableModes": [dict(m) for m in modes],
        }

    def _config_wire(self, session: Session) -> list[JSON]:
        out: list[JSON] = []
        for d in self._option_defs(session):
            item: JSON = {"id": d["id"], "name": d["name"], "type": d["type"]}
            if "description" in d:
                item["description"] = d["description"]
            if "category" in d:
                item["category"] = d["category"]
            if d["type"] == "select":
                item["options"] = [dict(o) for o in d.get("options", [])]
            item["currentValue"] = session.config.get(d["id"], d["default"])
            out.append(item)
        return out

    def _setup_result(self, session: Session, *, with_id: bool) -> JSON:
        result: JSON = {"sessionId": session.session_id} if with_id else {}
        modes = self._modes_wire(session)
        if modes is not None:
            result["modes"] = modes
        options = self._config_wire(session)
        if options:
            result["configOptions"] = options
        return result

    async def give_up(self, session_id: str) -> None:
        """Close this connection's copy of the session (see :mod:`.lifecycle`)."""

    async def _run_held_prompts(self, session: Session) -> None:
        """Run the prompts other hosts held for ``session`` (see :mod:`.turns`)."""

    async def _announce_commands(self, session: Session) -> None:
        commands = list(self.agent.commands(session))
        if commands and session.session_id in self.sessions:
            await self._client(session).available_commands(list(map(dict, commands)))

    def _check_prompt_blocks(self, blocks: list[Any]) -> None:
        caps = self.agent.prompt_capabilities
        for i, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, dict) else None
            cap = _GATED_BLOCKS.get(kind) if isinstance(kind, str) else None
            if cap is not None and not caps.get(cap, False):
                raise InvalidParams(
                    f"prompt[{i}] is an {kind} block, but the agent did not advertise "
                    f"promptCapabilities.{cap}"
                )

    async def _models(self) -> None:
        """Wait until the models are built, building them (in a thread) if nobody has."""
        if _models_built:
            return
        ready = self._models_ready
        if ready is None:
            ready = self._models_ready = anyio.Event()
            try:
                await anyio.to_thread.run_sync(build_models, abandon_on_cancel=True)
            finally:
                ready.set()
        elif not ready.is_set():  # (waiting on a set Event would still yield)
            await ready.wait()

    def _require_auth(self) -> None:
        if self.agent.requires_auth() and list(self.agent.auth_methods(self.capabilities)):
            raise AuthRequired("Authentication required: call authenticate first")
