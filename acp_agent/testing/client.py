"""A client that drives one agent, for tests: in memory or as a real subprocess.

:func:`connect` runs an :class:`~acp_agent.agent.Agent` object in this process (over
an in-memory transport, on an in-memory store unless given one) or spawns an agent
command (any ACP agent, over real pipes), initializes it, and yields an
:class:`AgentClient`. The client plays the editor's part the way a test wants:

* ``session/update`` payloads are collected per session, in order; a prompt returns a
  :class:`~acp_agent.testing.results.TurnResult` (stop reason, updates, text, tool calls);
* ``session/request_permission`` is answered with the option chosen by ``permission``
  (an option kind or id, or a function of the request);
* ``fs/*`` is served from a dict (``files``, which then holds what the agent wrote) or
  from the session's directory on disk; ``terminal/*`` runs real processes there when
  ``terminals=True``.

Every wait is bounded by ``timeout`` (a hung agent fails the test, it does not hang it).
It owns no protocol rules: the agent's answers are returned as they are, and an error
answer raises :class:`~acp_agent.errors.RequestError`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from acp_agent.agent import Agent
from acp_agent.chat.connection import AgentProcess
from acp_agent.chat.workspace import Workspace
from acp_agent.errors import InvalidParams, MethodNotFound, ResourceNotFound
from acp_agent.options import ServerOptions
from acp_agent.server import AcpServer
from acp_agent.store import SessionStore
from acp_agent.transport import Transport, memory_pair

from ..connection import Reply
from .link import Link
from .results import AgentRequest, TurnResult

JSON = dict[str, Any]
#: how permission questions are answered: an option kind (``"allow_once"``,
#: ``"reject_once"``, ...) or option id; a function of the request's params returning
#: one (or None); None answers every question ``cancelled``
Permission = str | Callable[[JSON], str | None] | None

FS_METHODS = ("fs/read_text_file", "fs/write_text_file")
TERMINAL_METHODS = (
    "terminal/create",
    "terminal/output",
    "terminal/wait_for_exit",
    "terminal/kill",
    "terminal/release",
)


def _lines(text: str, line: Any, limit: Any) -> str:
    """The part of ``text`` that ``fs/read_text_file``'s ``line`` and ``limit`` ask for."""
    if not isinstance(line, int) and not isinstance(limit, int):
        return text
    lines = text.splitlines(keepends=True)
    start = max(line - 1, 0) if isinstance(line, int) else 0
    return "".join(lines[start : start + limit if isinstance(limit, int) else None])


def _absolute(path: Any) -> str:
    """A path the agent sent, normalised; anything but an absolute path is bad params."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise InvalidParams(f"path: an absolute path is required, got {path!r:.200}")
    return os.path.normpath(path)


class MemoryFiles:
    """The client's files as a dict of absolute path -> text (relative keys are joined
    to ``cwd``). Writes land in :attr:`data`."""

    def __init__(self, files: Mapping[str, str], cwd: str) -> None:
        self.data: dict[str, str] = {
            os.path.normpath(os.path.join(cwd, path)): text for path, text in files.items()
        }

    async def read_text_file(self, params: Mapping[str, Any]) -> JSON:
        path = _absolute(params.get("path"))
        text = self.data.get(path)
        if text is None:
            raise ResourceNotFound(f"no such file: {path}", data={"uri": path})
        return {"content": _lines(text, params.get("line"), params.get("limit"))}

    async def write_text_file(self, params: Mapping[str, Any]) -> JSON:
        path, content = _absolute(params.get("path")), params.get("content")
        if not isinstance(content, str):
            raise InvalidParams("content: a string is required")
        self.data[path] = content
        return {}


class PendingTurn:
    """A prompt sent and not yet answered (from :meth:`ClientSession.start_prompt`)."""

    def __init__(self, session: ClientSession, answer: Reply, first: int, asked: int):
        self._session = session
        self._answer = answer
        self._first = first
        self._asked = asked

    @property
    def updates(self) -> list[JSON]:
        """The turn's updates received so far."""
        return self._session.updates[self._first :]

    async def result(self, timeout: float | None = None) -> TurnResult:
        """Wait for the answer; return the turn (an error answer raises ``RequestError``)."""
        session = self._session
        with anyio.fail_after(timeout or session.client.timeout):
            got = await Link.wait(self._answer)
        result = got if isinstance(got, dict) else {}
        return TurnResult(
            stop_reason=str(result.get("stopReason")),
            updates=session.updates[self._first :],
            requests=session.requests[self._asked :],
            usage=result.get("usage"),
        )


class ClientSession:
    """One ACP session of an :class:`AgentClient`.

    Attributes:
        id: the ``sessionId``.
        cwd: its working directory.
        result: the agent's answer to ``session/new`` (or load, resume): ``modes``,
            ``configOptions``, ...
        replay: for a loaded session, the updates the agent replayed.
    """

    def __init__(self, client: AgentClient, session_id: str, cwd: str, result: JSON) -> None:
        self.client = client
        self.id = session_id
        self.cwd = cwd
        self.result = result
        self.replay: list[JSON] = []

    @property
    def updates(self) -> list[JSON]:
        """Every ``session/update`` of this session so far, in order."""
        return self.client.updates.setdefault(self.id, [])

    @property
    def requests(self) -> list[AgentRequest]:
        """Every request the agent made for this session so far, in order."""
        return self.client.requests_by_session.setdefault(self.id, [])

    @property
    def commands(self) -> list[JSON]:
        """The slash commands of the last ``available_commands_update`` (or none)."""
        for update in reversed(self.updates):
            if update.get("sessionUpdate") == "available_commands_update":
                return list(update.get("availableCommands", []))
        return []

    async def start_prompt(self, prompt: str | Sequence[Mapping[str, Any]]) -> PendingTurn:
        """Send ``session/prompt`` (text, or content blocks) and return at once; the
        request is on its way, so a :meth:`cancel` sent next follows it."""
        blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else list(prompt)
        first, asked = len(self.updates), len(self.requests)
        answer = await self.client.link.send_request(
            "session/prompt", {"sessionId": self.id, "prompt": [dict(b) for b in blocks]}
        )
        return PendingTurn(self, answer, first, asked)

    async def prompt(
        self, prompt: str | Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> TurnResult:
        """Run one turn: send the prompt, answer the agent's requests meanwhile, and
        return what it produced. An error answer raises
        :class:`~acp_agent.errors.RequestError` (e.g. ``InternalError`` for ``-32603``)."""
        return await (await self.start_prompt(prompt)).result(timeout)

    async def cancel(self) -> None:
        """Send ``session/cancel``; the running turn should end ``cancelled``."""
        await self.client.link.notify("session/cancel", {"sessionId": self.id})

    async def set_mode(self, mode_id: str) -> Any:
        """``session/set_mode``."""
        return await self.client.call("session/set_mode", {"sessionId": self.id, "modeId": mode_id})

    async def set_config_option(self, config_id: str, value: str | bool) -> Any:
        """``session/set_config_option``; returns the agent's answer (the options)."""
        return await self.client.call(
            "session/set_config_option",
            {"sessionId": self.id, "configId": config_id, "value": value},
        )

    async def close(self) -> Any:
        """``session/close``."""
        return await self.client.call("session/close", {"sessionId": self.id})


class AgentClient:
    """The client side of one connection to an agent; made by :func:`connect`.

    Attributes:
        agent_info: the agent's ``initialize`` answer (``agentCapabilities``,
            ``agentInfo``, ``authMethods``).
        cwd: the directory sessions start in by default.
        files: with ``files=`` given, the client's files (what the agent wrote included),
            by absolute path; else None (the files are on disk under ``cwd``).
        permission: how permission questions are answered (may be changed any time).
        timeout: the bound, in seconds, on every wait.
        updates: every ``session/update`` received, by session id.
        requests: every request the agent made, in order.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        cwd: str,
        files: MemoryFiles | None,
        workspace: Workspace,
        terminals: bool,
        permission: Permission,
        capabilities: Mapping[str, Any] | None,
        timeout: float,
        process: AgentProcess | None = None,
    ) -> None:
        self.link = Link(transport, self._notification, self._request)
        self.cwd = cwd
        self._files = files
        self._workspace = workspace
        self._terminals = terminals
        self._process = process
        self.permission = permission
        self.capabilities: JSON = (
            dict(capabilities)
            if capabilities is not None
            else {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": terminals}
        )
        self.timeout = timeout
        self.agent_info: JSON = {}
        self.updates: dict[str, list[JSON]] = {}
        self.requests: list[AgentRequest] = []
        self.requests_by_session: dict[str, list[AgentRequest]] = {}

    @property
    def files(self) -> dict[str, str] | None:
        return self._files.data if self._files is not None else None

    @property
    def stderr(self) -> str:
        """What a spawned agent wrote to stderr so far ('' for an in-memory agent: its
        log goes to Python's logging, which pytest's ``caplog`` shows)."""
        return "\n".join(self._process.stderr_lines) if self._process is not None else ""

    # -- what the agent sends us -----------------------------------------------------

    def _notification(self, method: str, params: Any) -> None:
        if method == "session/update" and isinstance(params, dict):
            update = params.get("update")
            if isinstance(update, dict):
                self.updates.setdefault(str(params.get("sessionId")), []).append(update)

    async def _request(self, method: str, params: Any) -> Any:
        if not isinstance(params, dict):
            raise InvalidParams("params must be an object")
        request = AgentRequest(method, params)
        self.requests.append(request)
        self.requests_by_session.setdefault(str(params.get("sessionId")), []).append(request)
        if method == "session/request_permission":
            return self._choose(params)
        if method in FS_METHODS:
            served: Any = self._files if self._files is not None else self._workspace
            return await getattr(served, method.removeprefix("fs/"))(params)
        if method in TERMINAL_METHODS and self._terminals:
            ws = self._workspace
            handler = {
                "terminal/create": ws.create_terminal,
                "terminal/output": ws.terminal_output_result,
                "terminal/wait_for_exit": ws.wait_for_exit,
                "terminal/kill": ws.kill_terminal,
                "terminal/release": ws.release_terminal,
            }[method]
            return await handler(params)
        raise MethodNotFound(f"the test client does not serve {method[:100]}")

    def _choose(self, params: JSON) -> JSON:
        choice = self.permission(params) if callable(self.permission) else self.permission
        for option in params.get("options") or []:
            if choice is not None and choice in (option.get("kind"), option.get("optionId")):
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
        return {"outcome": {"outcome": "cancelled"}}

    # -- what we ask of the agent ------------------------------------------------------

    async def call(self, method: str, params: Any = None) -> Any:
        """Any request; returns its result (an error answer raises ``RequestError``)."""
        with anyio.fail_after(self.timeout):
            return await self.link.call(method, params)

    async def initialize(self, capabilities: Mapping[str, Any] | None = None) -> JSON:
        """``initialize`` (done by :func:`connect` unless ``initialize=False``)."""
        result = await self.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": dict(capabilities or self.capabilities),
                "clientInfo": {"name": "acp-agent-testing", "version": "0"},
            },
        )
        self.agent_info = result if isinstance(result, dict) else {}
        return self.agent_info

    async def new_session(
        self, cwd: str | os.PathLike[str] | None = None, *, mcp_servers: Sequence[JSON] = ()
    ) -> ClientSession:
        """``session/new`` in ``cwd`` (default: the client's); returns the session."""
        where = os.fspath(cwd) if cwd is not None else self.cwd
        result = await self.call("session/new", {"cwd": where, "mcpServers": list(mcp_servers)})
        return ClientSession(self, str(result["sessionId"]), where, result)

    async def load_session(
        self,
        session_id: str,
        cwd: str | os.PathLike[str] | None = None,
        *,
        mcp_servers: Sequence[JSON] = (),
    ) -> ClientSession:
        """``session/load``; the session's :attr:`~ClientSession.replay` holds what the
        agent replayed."""
        where = os.fspath(cwd) if cwd is not None else self.cwd
        seen = len(self.updates.setdefault(session_id, []))
        result = await self.call(
            "session/load",
            {"sessionId": session_id, "cwd": where, "mcpServers": list(mcp_servers)},
        )
        session = ClientSession(self, session_id, where, result if isinstance(result, dict) else {})
        session.replay = self.updates[session_id][seen:]
        return session

    async def resume_session(
        self, session_id: str, cwd: str | os.PathLike[str] | None = None
    ) -> ClientSession:
        """``session/resume``: the session again, without a replay."""
        where = os.fspath(cwd) if cwd is not None else self.cwd
        result = await self.call(
            "session/resume", {"sessionId": session_id, "cwd": where, "mcpServers": []}
        )
        return ClientSession(self, session_id, where, result if isinstance(result, dict) else {})


def _real(directory: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(directory))


@asynccontextmanager
async def connect(
    agent: Agent | Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    files: Mapping[str, str] | None = None,
    terminals: bool = False,
    permission: Permission = "allow_once",
    capabilities: Mapping[str, Any] | None = None,
    initialize: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    store: SessionStore | None = None,
    **server_options: Any,
) -> AsyncIterator[AgentClient]:
    """Connect to an agent and initialize it; on exit, end the connection and wait for
    the agent to shut down.

    Args:
        agent: an :class:`~acp_agent.agent.Agent` object, served in this process, or a
            command (``["python", "my_agent.py"]``) spawned with pipes.
        cwd: the directory sessions start in (default: a temporary directory, removed
            on exit).
        files: serve ``fs/*`` from this dict (path -> text; relative paths are under
            ``cwd``) instead of the disk; ``client.files`` shows what was written.
        terminals: serve ``terminal/*`` (real processes in ``cwd``) and advertise it.
        permission: how ``session/request_permission`` is answered (see
            :data:`Permission`).
        capabilities: the ``clientCapabilities`` to advertise instead of the default
            (fs, and terminals when ``terminals``).
        initialize: send ``initialize`` before yielding.
        env: extra environment variables for a spawned agent.
        timeout: seconds any single wait may take.
        store: for an in-memory agent, its session store (default: a fresh in-memory
            one); share one between two connections to load a session in the second.
        server_options: for an in-memory agent, the fields of its
            :class:`~acp_agent.options.ServerOptions` (``busy_policy``, ``unstable``,
            ``allow_outside_roots``, ``turn_timeout``).
    """
    with tempfile.TemporaryDirectory(prefix="acp-test-") as scratch:
        where = _real(cwd if cwd is not None else scratch)
        failed: BaseException | None = None
        async with anyio.create_task_group() as tg:
            stopped = anyio.Event()
            process: AgentProcess | None = None
            if isinstance(agent, Agent):
                ours, theirs = memory_pair()
                transport: Transport = ours
                server = AcpServer(agent, store, ServerOptions(**server_options))

                async def run_server() -> None:
                    try:
                        await server.serve(theirs)
                    finally:
                        await theirs.aclose()
                        stopped.set()

                tg.start_soon(run_server)
            else:
                if server_options or store is not None:
                    raise TypeError("a store and server options apply to an Agent object only")
                process = await AgentProcess.start(
                    list(agent), cwd=where, env={**os.environ, **(env or {})}
                )
                transport = process.transport
                tg.start_soon(process.collect_stderr)
            workspace = Workspace(where, tg)
            client = AgentClient(
                transport,
                cwd=where,
                files=MemoryFiles(files, where) if files is not None else None,
                workspace=workspace,
                terminals=terminals,
                permission=permission,
                capabilities=capabilities,
                timeout=timeout,
                process=process,
            )
            tg.start_soon(client.link.serve)
            try:
                if initialize:
                    await client.initialize()
                yield client
            except BaseException as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    raise
                failed = exc  # raised as it is once the tasks are done, not in a group
            finally:
                with anyio.CancelScope(shield=True):
                    workspace.close()
                    if process is not None:
                        await process.stop()
                    else:
                        with anyio.fail_after(timeout):
                            await ours.send_eof()
                            await stopped.wait()
                        await ours.aclose()
                tg.cancel_scope.cancel()
        if failed is not None:
            raise failed
