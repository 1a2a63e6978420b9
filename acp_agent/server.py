"""ACP on top of the JSON-RPC engine: routes every v1 agent method to an :class:`Agent`.

``AcpServer`` owns the ACP semantics the library guarantees, whatever the agent does:

* ``initialize``: version negotiation (a v1 agent answers ``1`` whatever it is asked),
  capabilities in the schema's exact encodings, following what is implemented;
* sessions: creation, load with exact replay, resume, list, close, delete, backed by a
  :class:`~acp_agent.store.SessionStore`; updates for a session never precede the
  response that created it, and nothing follows a ``session/load`` response;
* prompt turns: one active prompt per session (refused at once, or queued FIFO by
  choice); one authoritative end per turn, written after every update of the turn
  and after the turn is durable in the store; ``cancelled`` whichever path races
  first; an optional per-turn time limit;
* modes and config options kept in step.

Requests other than ``initialize`` that arrive before it are refused with
``-32600`` (a documented choice: capabilities are unknown until then).

It does not read or write bytes (that is :class:`~acp_agent.connection.AgentSession`)
and does not know concrete transports or agents.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import anyio.abc
import anyio.to_thread

from ._loop import Soon, soon
from .agent import Agent, ConfigOption, InitializeParams, PromptTurn
from .client import ClientCapabilities, SessionClient
from .connection import AgentSession, Dispatcher, MethodTable, NativeDispatcher, RequestContext
from .errors import (
    INVALID_REQUEST,
    AuthRequired,
    InternalError,
    InvalidParams,
    MethodNotFound,
    PathOutsideRoots,
    PromptAlreadyActive,
    RequestError,
    ResourceNotFound,
    TurnTimeout,
)
from .protocol.wire import plain_text_prompt
from .session import (
    STOP_REASONS,
    CancelReason,
    History,
    Session,
    Turn,
    TurnLog,
    check_absolute_dir,
    check_additional_directories,
    sanitize,
)
from .store import (
    ImmediateTurnWrites,
    JsonText,
    MemorySessionStore,
    PackedJson,
    SessionRecord,
    SessionStore,
)
from .transport import Transport

if TYPE_CHECKING:
    from .protocol import PromptRequest

log = logging.getLogger("acp_agent.server")

PROTOCOL_VERSION: Final = 1
CLOSE_GRACE: Final = 5.0  # seconds a cancelled turn gets to unwind on close
WARM_IDLE: Final = 0.1  # seconds of a quiet connection before the models are built
BusyPolicy = Literal["reject", "queue"]

JSON = dict[str, Any]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _params(params: Any) -> JSON:
    """Params as an object: absent or null is ``{}``; an array is invalid for ACP."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object")
    return params


def _session_id(params: JSON) -> str:
    sid = params.get("sessionId")
    if not isinstance(sid, str) or not sid:
        raise InvalidParams("sessionId: a non-empty string is required")
    return sid


def _mcp_servers(params: JSON, agent: Agent) -> list[Any]:
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
_Parsed = tuple[JSON, "PromptRequest | None", list[Any]]


def _build_models() -> None:
    from .protocol import PromptRequest
    from .protocol.wire import from_wire

    from_wire(PromptRequest, {"sessionId": "warm-up", "prompt": [{"type": "text", "text": ""}]})


class _Batch:
    """Consecutive steps of one turn, written to the store in one ``write_turn``."""

    __slots__ = ("begin", "count", "end", "sealed", "session_id", "turn_id", "updates")

    def __init__(self, session_id: str, turn_id: str) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self.begin: list[Any] | None = None
        self.updates: list[Any] = []
        self.end: str | None = None
        self.count = 0  # how many pushes this batch holds
        self.sealed = False  # being written: later pushes start a new batch


class _Persister:
    """Writes turns to the store in order, off the turn's hot path, in batches.

    :class:`~acp_agent.session.History` reports a turn's start and events
    synchronously as updates are sent; they queue here and one task writes them.
    Consecutive steps of the same turn merge into one store call (one transaction),
    so a short turn costs one write. ``sync()`` waits until everything queued so far
    is durable.
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._soon: Soon | None = None  # loop.call_soon on asyncio (set by run)
        self._check_scheduled = False
        self._batches: deque[_Batch] = deque()
        self._queued = 0
        self._done = 0
        self._wake = anyio.Event()
        self._progress: anyio.Event | None = None  # made by the first ``sync`` that waits
        self._busy = False  # a write_turn is in progress
        self.failed: BaseException | None = None
        self._write_now = store.write_turn_now if isinstance(store, ImmediateTurnWrites) else None

    def sink_for(self, session_id: str) -> _SessionSink:
        return _SessionSink(self, session_id)

    def _batch(self, session_id: str, turn_id: str, *, fresh: bool = False) -> _Batch:
        if self._batches and not fresh:
            last = self._batches[-1]
            if (
                not last.sealed
                and last.end is None
                and last.session_id == session_id
                and last.turn_id == turn_id
            ):
                return last
        batch = _Batch(session_id, turn_id)
        self._batches.append(batch)
        if self._soon is None:
            self._wake.set()
        elif not self._check_scheduled:
            # The writer task is woken on the loop's next pass only if the batch is still
            # waiting then: a short turn has written it itself by then (see sync_now).
            self._check_scheduled = True
            self._soon(self._check)
        return batch

    def _check(self) -> None:
        self._check_scheduled = False
        if self._batches and not self._busy:
            self._wake.set()

    # Each push counts itself (batch.count, _queued): inline, as they run for every update.

    def begin(self, session_id: str, turn_id: str, prompt: list[Any]) -> None:
        batch = self._batch(session_id, turn_id, fresh=True)
        batch.begin = prompt
        batch.count += 1
        self._queued += 1

    def append(self, session_id: str, turn_id: str, update: Any) -> None:
        batch = self._batch(session_id, turn_id)
        batch.updates.append(update)
        batch.count += 1
        self._queued += 1

    def end(self, session_id: str, turn_id: str, stop_reason: str) -> None:
        batch = self._batch(session_id, turn_id)
        batch.end = stop_reason
        batch.count += 1
        self._queued += 1

    async def sync(self) -> None:
        """Wait until everything queued so far is durable.

        The caller writes what is queued itself when no write is in progress: a turn
        that ends costs one store call, not a wake-up of the writer task and another
        of the turn.
        """
        target = self._queued
        while self._done < target:
            if self.failed is not None:
                break
            if not self._busy and self._batches:
                await self._write_next()
                continue
            if self._progress is None:
                self._progress = anyio.Event()
            await self._progress.wait()
        if self.failed is not None:
            raise InternalError("the session store failed; see the agent's log")

    def sync_now(self) -> bool:
        """Make everything queued durable here and now, if the store can do that without
        waiting (see ``ImmediateTurnWrites``): True when done, False when ``sync`` is
        needed for the rest. Raises like ``sync`` when the store has failed."""
        write_now = self._write_now
        while self._batches and write_now is not None and not self._busy:
            batch = self._batches[0]
            try:
                written = write_now(
                    batch.session_id,
                    batch.turn_id,
                    begin=batch.begin,
                    updates=batch.updates,
                    end=batch.end,
                )
            except Exception as exc:
                self._failed(batch, exc)
                written = True
            if not written:
                break
            self._written(batch)
        if self.failed is not None:
            raise InternalError("the session store failed; see the agent's log")
        return self._done == self._queued

    async def run(self) -> None:
        """Write batches in the background (long turns stream to the store as they go)."""
        self._soon = soon()
        while True:
            if self._busy or not self._batches:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            await self._write_next()

    async def _write_next(self) -> None:
        batch = self._batches[0]
        batch.sealed = True  # later pushes for this turn start a new batch
        self._busy = True
        try:
            await self.store.write_turn(
                batch.session_id,
                batch.turn_id,
                begin=batch.begin,
                updates=batch.updates,
                end=batch.end,
            )
        except Exception as exc:
            self._failed(batch, exc)
        finally:
            self._busy = False
            self._written(batch)

    def _failed(self, batch: _Batch, exc: Exception) -> None:
        # The store is broken: fail the turns that wait on it.
        log.error("session store write failed for %s", batch.session_id, exc_info=exc)
        self.failed = exc

    def _written(self, batch: _Batch) -> None:
        batch.sealed = True
        self._batches.popleft()
        self._done += batch.count
        progress, self._progress = self._progress, None
        if progress is not None:
            progress.set()
        if self._batches:
            self._wake.set()


@dataclass(slots=True)
class _SessionSink:
    persister: _Persister
    session_id: str

    def turn_started(self, turn_id: str, prompt_updates: Sequence[JsonText | PackedJson]) -> None:
        self.persister.begin(self.session_id, turn_id, list(prompt_updates))

    def turn_event(self, turn_id: str, update: JsonText | PackedJson) -> None:
        self.persister.append(self.session_id, turn_id, update)


class AcpServer:
    """Serve an :class:`Agent` over ACP v1. One instance per connection."""

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
    ) -> None:
        self.agent = agent
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
        self._waiting: dict[str, deque[anyio.Event]] = {}
        self._persister = _Persister(self.store)
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

    def method_table(self) -> MethodTable:
        requests = {
            "initialize": self._initialize,
            "authenticate": self._gate(self._authenticate),
            "session/new": self._gate(self._new_session),
            "session/load": self._gate(self._load_session),
            "session/resume": self._gate(self._resume_session),
            "session/list": self._gate(self._list_sessions),
            "session/close": self._gate(self._close_session),
            "session/delete": self._gate(self._delete_session),
            "session/set_mode": self._gate(self._set_mode),
            "session/set_config_option": self._gate(self._set_config_option),
            "session/prompt": self._prompt,  # gated itself (a claimed prompt passed the gate)
        }
        return MethodTable(
            requests=requests,
            inline={"session/cancel": self._cancel},
            prepare={"session/prompt": self._claim_slot},
            fallback_request=self._ext_request,
            fallback_notification=self._ext_notification,
        )

    def _gate(self, fn: Any) -> Any:
        async def gated(params: Any, ctx: RequestContext) -> Any:
            self._check_initialized()
            return await fn(params, ctx)

        return gated

    def _check_initialized(self) -> None:
        if not self.initialized:
            raise RequestError(
                "The connection is not initialized: send initialize first",
                code=INVALID_REQUEST,
            )

    async def serve(self, transport: Transport) -> None:
        """Serve ``transport`` until EOF; then close every session and flush the store."""
        kwargs: dict[str, Any] = {"max_line": self.max_line}
        if self.dispatcher is not None:
            kwargs["dispatcher"] = self.dispatcher
        conn = AgentSession(transport, self.method_table(), **kwargs)
        self._conn = conn
        self._new_scope = type(anyio.CancelScope())
        async with self.agent.lifespan(), anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._persister.run, name="acp-persister")
            try:
                await conn.serve()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE):
                    for session in list(self.sessions.values()):
                        await self._shutdown_session(session, CancelReason.SHUTDOWN)
                    try:
                        await self._persister.sync()
                    except InternalError:  # logged when it failed; the turns were told
                        log.warning("the session store failed earlier: history was not saved")
                tg.cancel_scope.cancel()

    # ------------------------------------------------------------------ helpers

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

    # ------------------------------------------------------------------ initialize

    async def _initialize(self, params: Any, ctx: RequestContext) -> JSON:
        # No pydantic here: initialize is the start-up path (see _warm_when_idle).
        raw = _params(params)
        version = raw.get("protocolVersion")
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidParams("protocolVersion: an integer is required")
        caps_raw = raw.get("clientCapabilities")
        if caps_raw is not None and not isinstance(caps_raw, dict):
            raise InvalidParams("clientCapabilities must be an object")
        info = raw.get("clientInfo")
        meta = raw.get("_meta")
        self.capabilities = ClientCapabilities(caps_raw)
        self.initialized = True
        await self.agent.initialize(
            InitializeParams(
                version,
                self.capabilities,
                info if isinstance(info, dict) else None,
                meta if isinstance(meta, dict) else None,
            )
        )
        if not self._warm_scheduled and self._tg is not None:
            self._warm_scheduled = True
            self._tg.start_soon(self._warm_when_idle, name="acp-model-warm-up")
        caps = self.agent.prompt_capabilities
        auth = [
            dict(m)
            for m in self.agent.auth_methods(self.capabilities)
            if m.get("type") != "terminal" or self.capabilities.auth_terminal
        ]
        agent_info: JSON = {"name": self.agent.name, "version": self.agent.version}
        if self.agent.title:
            agent_info["title"] = self.agent.title
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {
                    "image": bool(caps.get("image", False)),
                    "audio": bool(caps.get("audio", False)),
                    "embeddedContext": bool(caps.get("embeddedContext", False)),
                },
                "mcpCapabilities": {"http": self.agent.mcp_http, "sse": self.agent.mcp_sse},
                "sessionCapabilities": {
                    "list": {},
                    "delete": {},
                    "resume": {},
                    "close": {},
                    "additionalDirectories": {},
                },
            },
            "authMethods": auth,
            "agentInfo": agent_info,
        }

    async def _warm_when_idle(self) -> None:
        """Build the protocol models once the client has gone quiet.

        Importing pydantic and building the models costs hundreds of milliseconds of
        CPU. Done in a thread while requests stream in, it would take the interpreter
        lock from them in 5 ms slices; so it waits until nothing has arrived and nothing
        is running for ``WARM_IDLE`` seconds (a person reading or typing). Plain text
        prompts never need the models; any other request that does builds them at once
        (:meth:`_models`).
        """
        conn = self.connection
        while self._models_ready is None:
            seen = conn.received_count
            await anyio.sleep(WARM_IDLE)
            if conn.received_count == seen and not conn.inflight_count:
                await self._models()

    async def _models(self) -> None:
        """Wait until the models are built, building them (in a thread) if nobody has."""
        ready = self._models_ready
        if ready is None:
            ready = self._models_ready = anyio.Event()
            try:
                await anyio.to_thread.run_sync(_build_models, abandon_on_cancel=True)
            finally:
                ready.set()
        elif not ready.is_set():  # (waiting on a set Event would still yield)
            await ready.wait()

    async def _authenticate(self, params: Any, ctx: RequestContext) -> JSON:
        raw = _params(params)
        method_id = raw.get("methodId")
        if not isinstance(method_id, str):
            raise InvalidParams("methodId: a string is required")
        offered = {m["id"]: m for m in self.agent.auth_methods(self.capabilities)}
        if method_id not in offered:
            raise InvalidParams(f"unknown authentication method {method_id[:100]!r}")
        if offered[method_id].get("type") == "terminal":
            raise InvalidParams("terminal authentication methods are run by the client")
        await self.agent.authenticate(method_id, raw.get("_meta"))
        return {}

    # ------------------------------------------------------------------ sessions

    def _require_auth(self) -> None:
        if self.agent.requires_auth() and list(self.agent.auth_methods(self.capabilities)):
            raise AuthRequired("Authentication required: call authenticate first")

    async def _new_session(self, params: Any, ctx: RequestContext) -> JSON:
        raw = _params(params)
        self._require_auth()
        if "cwd" not in raw:
            raise InvalidParams("cwd: Field required")
        cwd = check_absolute_dir(raw.get("cwd"), "cwd")
        extra = check_additional_directories(raw.get("additionalDirectories"))
        servers = _mcp_servers(raw, self.agent)
        session_id = f"sess_{os.urandom(12).hex()}"
        session = Session(
            session_id,
            cwd,
            extra,
            mcp_servers=servers,
            history=History(sink=self._persister.sink_for(session_id)),
        )
        self._init_state(session)
        now = _now()
        await self.store.create(
            SessionRecord(
                session_id=session_id,
                cwd=cwd,
                additional_directories=extra,
                created_at=now,
                updated_at=now,
                mode_id=session.mode_id,
                config=dict(session.config),
            )
        )
        self._attach(session)
        try:
            await self.agent.new_session(session)
        except BaseException:
            self.sessions.pop(session_id, None)
            self.clients.pop(session_id, None)
            raise
        # Nothing about the session may reach the client before this response.
        ctx.after_response.append(lambda: self._announce_commands(session))
        return self._setup_result(session, with_id=True)

    async def _restore(self, raw: JSON, *, replay: bool) -> tuple[Session, list[TurnLog]]:
        self._require_auth()
        session_id = _session_id(raw)
        if "cwd" not in raw:
            raise InvalidParams("cwd: Field required")
        cwd = check_absolute_dir(raw.get("cwd"), "cwd")
        extra = check_additional_directories(raw.get("additionalDirectories"))
        servers = _mcp_servers(raw, self.agent)
        record = await self.store.get(session_id)
        if record is None:
            raise ResourceNotFound(
                f"Session {session_id[:100]!r} not found", data={"sessionId": session_id[:200]}
            )
        live = self.sessions.get(session_id)
        if live is not None:
            await self._shutdown_session(live, CancelReason.CLOSE)
        await self._persister.sync()
        stored = await self.store.load_history(session_id)
        turns = sanitize(
            TurnLog(t.turn_id, list(t.updates), t.stop_reason, t.interrupted) for t in stored
        )
        session = Session(
            session_id,
            cwd,
            extra,
            title=record.title,
            mode_id=record.mode_id,
            config=dict(record.config),
            mcp_servers=servers,
            history=History(turns, sink=self._persister.sink_for(session_id)),
        )
        self._init_state(session)
        if cwd != record.cwd or extra != record.additional_directories:
            await self.store.update(session_id, cwd=cwd, additional_directories=extra)
        self._attach(session)
        await self.agent.load_session(session)
        return session, turns if replay else []

    async def _load_session(self, params: Any, ctx: RequestContext) -> JSON:
        session, turns = await self._restore(_params(params), replay=True)
        conn = self.connection
        for turn in turns:
            for event in turn.events:
                await conn.notify(
                    "session/update", {"sessionId": session.session_id, "update": event}
                )
        await self._after_restore(session)
        return self._setup_result(session, with_id=False)

    async def _resume_session(self, params: Any, ctx: RequestContext) -> JSON:
        session, _ = await self._restore(_params(params), replay=False)
        await self._after_restore(session)
        return self._setup_result(session, with_id=False)

    async def _after_restore(self, session: Session) -> None:
        # Extras go before the response: nothing for the session may follow it.
        await self._announce_commands(session)
        if session.mode_id is not None and self.agent.modes(session):
            await self._client(session).current_mode(session.mode_id)

    async def _list_sessions(self, params: Any, ctx: RequestContext) -> JSON:
        raw = _params(params)
        cwd = raw.get("cwd")
        cursor = raw.get("cursor")
        if cwd is not None:
            cwd = check_absolute_dir(cwd, "cwd")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParams("cursor must be a string")
        records, next_cursor = await self.store.list(cwd=cwd, cursor=cursor)
        sessions: list[JSON] = []
        for r in records:
            item: JSON = {"sessionId": r.session_id, "cwd": r.cwd}
            if r.additional_directories:
                item["additionalDirectories"] = list(r.additional_directories)
            if r.title is not None:
                item["title"] = r.title
            if r.updated_at:
                item["updatedAt"] = r.updated_at
            sessions.append(item)
        result: JSON = {"sessions": sessions}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def _shutdown_session(self, session: Session, reason: CancelReason) -> None:
        """Cancel any running turn, wait for it to unwind, and drop the live session."""
        turn = session.slot.close()
        if turn is not None:
            turn.cancel(reason)
        for waiter in self._waiting.pop(session.session_id, deque()):
            waiter.set()
        last = session.last_turn
        if last is not None and not last.finished:
            with anyio.move_on_after(CLOSE_GRACE):
                await last.done.wait()
        self.sessions.pop(session.session_id, None)
        self.clients.pop(session.session_id, None)
        try:
            await self.agent.close_session(session)
        except Exception:
            log.exception("agent.close_session failed for %s", session.session_id)

    async def _close_session(self, params: Any, ctx: RequestContext) -> JSON:
        session_id = _session_id(_params(params))
        session = self.sessions.get(session_id)
        if session is None:
            if await self.store.get(session_id) is None:
                raise ResourceNotFound(
                    f"Session {session_id[:100]!r} not found", data={"sessionId": session_id[:200]}
                )
            return {}
        await self._shutdown_session(session, CancelReason.CLOSE)
        return {}

    async def _delete_session(self, params: Any, ctx: RequestContext) -> JSON:
        session_id = _session_id(_params(params))
        session = self.sessions.get(session_id)
        if session is not None:
            await self._shutdown_session(session, CancelReason.CLOSE)
        await self._persister.sync()
        await self.store.delete(session_id)  # unknown ids succeed silently
        return {}

    # ------------------------------------------------------------------ modes & config

    def _linked_option(self, session: Session) -> ConfigOption | None:
        modes = {m["id"] for m in self.agent.modes(session)}
        for d in self.agent.config_options(session):
            values = {o["value"] for o in d.get("options", [])}
            if d.get("category") == "mode" and d["type"] == "select" and values == modes:
                return d
        return None

    async def _set_mode(self, params: Any, ctx: RequestContext) -> JSON:
        raw = _params(params)
        session = self._live(_session_id(raw))
        mode_id = raw.get("modeId")
        modes = {m["id"] for m in self.agent.modes(session)}
        if not modes:
            raise MethodNotFound("this agent has no session modes")
        if not isinstance(mode_id, str) or mode_id not in modes:
            raise InvalidParams(f"modeId must be one of {sorted(modes)}")
        await self._apply_mode(session, mode_id, announce_mode=False)
        return {}

    async def _apply_mode(self, session: Session, mode_id: str, *, announce_mode: bool) -> None:
        session.mode_id = mode_id
        linked = self._linked_option(session)
        if linked is not None:
            session.config[linked["id"]] = mode_id
        await self.store.update(session.session_id, mode_id=mode_id, config=dict(session.config))
        client = self._client(session)
        if announce_mode:
            await client.current_mode(mode_id)
        elif linked is not None and linked in self._option_defs(session):
            await client.config_options(self._config_wire(session))
        await self.agent.mode_changed(session, mode_id)

    async def _set_config_option(self, params: Any, ctx: RequestContext) -> JSON:
        raw = _params(params)
        session = self._live(_session_id(raw))
        config_id = raw.get("configId")
        defs = {d["id"]: d for d in self._option_defs(session)}
        if not isinstance(config_id, str) or config_id not in defs:
            raise InvalidParams(f"configId must be one of {sorted(defs)}")
        d = defs[config_id]
        value = raw.get("value")
        if d["type"] == "boolean":
            if raw.get("type") != "boolean" or not isinstance(value, bool):
                raise InvalidParams(f"{config_id} is a boolean option: send type boolean")
        else:
            allowed = {o["value"] for o in d.get("options", [])}
            if not isinstance(value, str) or value not in allowed:
                raise InvalidParams(f"value for {config_id} must be one of {sorted(allowed)}")
        linked = self._linked_option(session)
        if linked is not None and linked["id"] == config_id and isinstance(value, str):
            session.config[config_id] = value
            await self._apply_mode(session, value, announce_mode=True)
        else:
            session.config[config_id] = value
            await self.store.update(session.session_id, config=dict(session.config))
        await self.agent.config_changed(session, config_id, value)
        return {"configOptions": self._config_wire(session)}

    # ------------------------------------------------------------------ prompt turns

    def _enqueue_waiter(self, session: Session) -> anyio.Event:
        waiter = anyio.Event()
        self._waiting.setdefault(session.session_id, deque()).append(waiter)
        return waiter

    async def _acquire_slot(
        self, session: Session, turn: Turn, waiter: anyio.Event | None = None
    ) -> None:
        """Take the slot, refusing at once or waiting in FIFO order (``busy_policy``).

        ``waiter`` is a place in the queue taken at arrival (by :meth:`_claim_slot`).
        """
        if waiter is not None:
            try:
                await waiter.wait()
            finally:
                queue = self._waiting.get(session.session_id)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
        while not session.slot.try_start(turn):
            if session.closed or session.session_id not in self.sessions:
                raise ResourceNotFound(
                    f"Session {session.session_id!r} is closed",
                    data={"sessionId": session.session_id},
                )
            if self.busy_policy == "reject":
                raise PromptAlreadyActive(
                    f"A prompt is already active for session {session.session_id}"
                )
            waiter = self._enqueue_waiter(session)
            try:
                await waiter.wait()
            finally:
                queue = self._waiting.get(session.session_id)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)

    def _drop_waiter(self, session: Session, waiter: anyio.Event) -> None:
        queue = self._waiting.get(session.session_id)
        if queue is not None and waiter in queue:
            was_first = queue[0] is waiter
            queue.remove(waiter)
            if was_first and waiter.is_set():
                self._wake_next(session)

    def _wake_next(self, session: Session) -> None:
        queue = self._waiting.get(session.session_id)
        if queue:
            queue.popleft().set()

    def _claim_slot(self, params: Any, ctx: RequestContext) -> None:
        """Take the prompt slot in arrival order (run by the receive loop, not a task).

        A ``session/cancel`` or ``session/close`` read right after this prompt then
        finds its turn, even if the prompt's handler task has not started yet.
        """
        if not self.initialized or not isinstance(params, dict):
            return
        session_id = params.get("sessionId")
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            return
        turn = Turn(f"turn_{os.urandom(8).hex()}", self._new_scope())
        if session.slot.try_start(turn):
            ctx.state["claim"] = (session, turn, session.last_turn, self._client(session))
            session.last_turn = turn
            ctx.cancel_hook = lambda: self._cancel_turn(session, turn, CancelReason.CANCEL_REQUEST)
        elif self.busy_policy == "queue" and not session.closed:
            # Queue in arrival order, not in the order handler tasks happen to start.
            ctx.state["waiter"] = (session, self._enqueue_waiter(session))

    async def _parse_prompt(self, params: Any) -> _Parsed:
        """Validate the params: (params, the typed request or None, the blocks).

        A prompt of plain text blocks (the common case) is checked here exactly, without
        pydantic, and its typed model is left for :attr:`PromptTurn.request` to build if
        the agent asks for it; anything else goes through the generated models.
        """
        raw = _params(params)
        if plain_text_prompt(raw):  # only text blocks: none needs a capability
            return raw, None, raw["prompt"]
        await self._models()
        from .protocol import PromptRequest
        from .protocol.wire import from_wire

        request = from_wire(PromptRequest, raw)
        blocks = raw["prompt"]
        self._check_prompt_blocks(blocks)
        return raw, request, blocks

    async def _prompt(self, params: Any, ctx: RequestContext) -> JSON:
        claim: tuple[Session, Turn, Turn | None, SessionClient] | None = ctx.state.pop(
            "claim", None
        )
        if claim is None:
            self._check_initialized()  # a claim is only made once initialized
            return await self._prompt_unclaimed(params, ctx, ctx.state.pop("waiter", None))
        session, turn, previous, client = claim
        try:
            parsed = await self._parse_prompt(params)
            return await self._run_turn(session, client, turn, previous, parsed)
        finally:
            self._release(session, turn)

    async def _prompt_unclaimed(
        self, params: Any, ctx: RequestContext, queued: tuple[Session, anyio.Event] | None
    ) -> JSON:
        try:
            session = self._live(_session_id(_params(params)))
            parsed = await self._parse_prompt(params)
        except BaseException:
            if queued is not None:
                self._drop_waiter(*queued)
            raise
        turn = Turn(f"turn_{os.urandom(8).hex()}", self._new_scope())
        waiter = queued[1] if queued is not None and queued[0] is session else None
        await self._acquire_slot(session, turn, waiter)
        try:
            previous, session.last_turn = session.last_turn, turn
            client = self.clients.get(session.session_id)
            if client is None:
                raise ResourceNotFound(
                    f"Session {session.session_id!r} is closed",
                    data={"sessionId": session.session_id},
                )
            ctx.cancel_hook = lambda: self._cancel_turn(session, turn, CancelReason.CANCEL_REQUEST)
            return await self._run_turn(session, client, turn, previous, parsed)
        finally:
            self._release(session, turn)

    def _release(self, session: Session, turn: Turn) -> None:
        if not turn.finished:
            turn.finish(None)  # ended before it ran (bad params, closed session)
        session.slot.end_if_current(turn)
        if self._waiting:  # nobody waits, most of the time
            self._wake_next(session)

    async def _run_turn(
        self,
        session: Session,
        client: SessionClient,
        turn: Turn,
        previous: Turn | None,
        parsed: _Parsed,
    ) -> JSON:
        if previous is not None and not previous.finished:
            # A cancelled turn may still be unwinding: its history closes first.
            await previous.done.wait()
        params, request, blocks = parsed
        handle = session.history.start_turn(turn.turn_id, blocks)
        prompt_turn = PromptTurn(session, client, params, blocks, turn.turn_id, _request=request)
        stop: str | None = None
        error: RequestError | None = None
        try:
            with turn.scope:
                if turn.cancelled:
                    # The cancel (or close) arrived before the turn began: the prompt
                    # is kept in history, the agent never runs it.
                    pass
                elif self.turn_timeout is None:
                    stop = await self.agent.prompt(prompt_turn)
                else:
                    with anyio.fail_after(self.turn_timeout):
                        stop = await self.agent.prompt(prompt_turn)
            if stop is not None and stop not in STOP_REASONS:
                log.error("agent returned an invalid stop reason %r", stop)
                error, stop = (
                    InternalError("The agent ended the turn with an invalid stop reason"),
                    None,
                )
        except TimeoutError:
            error = TurnTimeout(f"The prompt turn exceeded its {self.turn_timeout:g} s time limit")
        except RequestError as exc:
            error = exc
        except PathOutsideRoots as exc:
            # A path from the prompt that leaves the session's roots: bad input.
            error = InvalidParams(str(exc))
        except Exception:
            log.exception("agent.prompt failed in session %s", session.session_id)
            error = InternalError("The agent failed while handling the prompt")
        finally:
            final = "cancelled" if turn.cancelled else (stop if error is None else None)
            if final is not None:
                handle.commit(final)
                self._persister.end(session.session_id, turn.turn_id, final)
            else:
                handle.abandon()
                self._persister.end(session.session_id, turn.turn_id, "end_turn")
            try:
                # Durable before the answer: at once when the store can (no await, so
                # nothing to shield), else waited for, shielded from this task's cancel.
                if not self._persister.sync_now():
                    with anyio.CancelScope(shield=True):
                        await self._persister.sync()
            finally:
                turn.finish(final)
        if final is None:
            raise error if error is not None else InternalError("The turn ended without a result")
        return {"stopReason": final}

    def _cancel_turn(self, session: Session, turn: Turn, reason: CancelReason) -> None:
        if session.slot.turn is turn:
            session.slot.cancel()
        turn.cancel(reason)

    def _cancel(self, params: Any) -> None:
        raw = params if isinstance(params, dict) else {}
        session_id = raw.get("sessionId")
        if not isinstance(session_id, str):
            return
        session = self.sessions.get(session_id)
        if session is None:
            return  # unknown or closed: a silent no-op
        turn = session.slot.cancel()
        if turn is not None:
            turn.cancel(CancelReason.SESSION_CANCEL)

    # ------------------------------------------------------------------ extensions

    async def _ext_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        if not method.startswith("_"):
            raise RequestError(f"Method not found: {method[:100]}", code=-32601)
        return await self.agent.ext_method(method, params)

    async def _ext_notification(self, method: str, params: Any) -> None:
        if method.startswith("_"):
            await self.agent.ext_notification(method, params)
        else:
            log.debug("ignored unknown notification %r", method[:100])


async def serve(
    agent: Agent,
    transport: Transport,
    store: SessionStore | None = None,
    **options: Any,
) -> None:
    """Serve ``agent`` on ``transport`` until EOF (an in-memory store unless given one)."""
    await AcpServer(agent, store, **options).serve(transport)


__all__ = ["AcpServer", "BusyPolicy", "NativeDispatcher", "serve"]
