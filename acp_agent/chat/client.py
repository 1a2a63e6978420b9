"""An ACP client: launches an agent, serves its client-side requests, runs sessions.

:func:`open_client` starts the agent command as a subprocess and yields an
:class:`AcpClient` wired to a :class:`~.connection.ClientConnection`: ``session/update``
goes to the :class:`Observer` in order, ``session/request_permission`` is asked of the
observer (and answered ``cancelled`` for every question still open when the person
cancels the turn, as ACP requires), ``fs/*`` and ``terminal/*`` are served for real by
a :class:`~.workspace.Workspace` confined to the working directory; the observer is
asked first whether a terminal's command may run.

Both the interactive chat (:mod:`.app`) and the demo (:mod:`.demo`) are built on it.
It knows nothing of the terminal or of rendering.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio

from acp_agent import __version__
from acp_agent.errors import InvalidParams, MethodNotFound, RequestError
from acp_agent.transport import Transport
from acp_agent.transport.remote import open_remote

from .connection import AgentProcess, ClientConnection
from .workspace import Workspace

CLIENT_CAPABILITIES: dict[str, Any] = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "auth": {"terminal": True},  # shown, for the person to run (see app.py)
    # ACP 1.25: live notices and context compactions are shown (see render.py)
    "session": {"notices": {}, "compaction": {}},
}
CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
T = TypeVar("T")


def default_agent_command() -> list[str]:
    """This package's own server, run by the same Python."""
    return [sys.executable, "-m", "acp_agent"]


def agent_env(command: Sequence[str]) -> dict[str, str]:
    """The agent's environment; our own server can import this checkout's package."""
    env = dict(os.environ)
    if list(command[:3]) == [sys.executable, "-m", "acp_agent"]:
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    return env


class Observer(Protocol):
    """The person's side: sees updates, answers permission questions."""

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        """One ``session/update``, in order. Must not block."""

    async def ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """Answer one ``session/request_permission`` with its ``outcome`` object."""

    def notice(self, method: str, params: dict[str, Any]) -> None:
        """The client served ``method`` for the agent (a file read, a terminal started)."""

    async def allow_terminal(self, params: dict[str, Any]) -> bool:
        """Whether the command of a ``terminal/create`` may run."""


class AcpClient:
    """One agent connection, as the client side sees it."""

    def __init__(self, agent: AgentProcess, workspace: Workspace) -> None:
        self.connection = ClientConnection(agent.transport, self)
        self.agent = agent
        self.workspace = workspace
        self.observer: Observer | None = None
        self.agent_info: dict[str, Any] = {}
        self._asking: dict[str, set[anyio.CancelScope]] = {}

    # -- what the agent asks of us ---------------------------------------------------

    def notification(self, method: str, params: Any) -> None:
        if method == "session/update" and isinstance(params, dict) and self.observer:
            update = params.get("update")
            if isinstance(update, dict):
                self.observer.update(str(params.get("sessionId")), update)

    async def request(self, method: str, params: Any) -> Any:
        if not isinstance(params, dict):
            raise InvalidParams("params must be an object")
        if method == "session/request_permission":
            if self.observer is None:
                return CANCELLED
            outcome = await self._ask(params, self.observer.ask_permission(params))
            return CANCELLED if outcome is None else {"outcome": outcome}
        handler = self._workspace_routes().get(method)
        if handler is None:
            raise MethodNotFound(f"Method not found: {method[:100]}")
        if method == "terminal/create" and not await self._allow_terminal(params):
            raise RequestError("the user did not allow this command to run")
        result = await handler(params)
        if self.observer is not None:
            self.observer.notice(method, params)
        return result

    def _workspace_routes(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        ws = self.workspace
        return {
            "fs/read_text_file": ws.read_text_file,
            "fs/write_text_file": ws.write_text_file,
            "terminal/create": ws.create_terminal,
            "terminal/output": ws.terminal_output_result,
            "terminal/wait_for_exit": ws.wait_for_exit,
            "terminal/kill": ws.kill_terminal,
            "terminal/release": ws.release_terminal,
        }

    async def _allow_terminal(self, params: dict[str, Any]) -> bool:
        if self.observer is None:
            return True
        return bool(await self._ask(params, self.observer.allow_terminal(params)))

    async def _ask(self, params: dict[str, Any], question: Awaitable[T]) -> T | None:
        """The person's answer; None when they cancel the turn while it is asked."""
        session_id = str(params.get("sessionId"))
        scope = anyio.CancelScope()
        asking = self._asking.setdefault(session_id, set())
        asking.add(scope)
        try:
            with scope:
                return await question
        finally:
            asking.discard(scope)
        return None

    # -- what we ask of the agent -------------------------------------------------------

    async def initialize(self) -> dict[str, Any]:
        result = await self.connection.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": CLIENT_CAPABILITIES,
                "clientInfo": {
                    "name": "acp-agent-chat",
                    "title": "acp-agent chat",
                    "version": __version__,
                },
            },
        )
        self.agent_info = result if isinstance(result, dict) else {}
        return self.agent_info

    async def new_session(self, cwd: str) -> dict[str, Any]:
        result = await self.connection.call("session/new", {"cwd": cwd, "mcpServers": []})
        return result if isinstance(result, dict) else {}

    async def prompt(self, session_id: str, blocks: str | Sequence[Mapping[str, Any]]) -> str:
        """Run one turn; return its stop reason (an error answer raises ``RequestError``)."""
        prompt = [{"type": "text", "text": blocks}] if isinstance(blocks, str) else list(blocks)
        result = await self.connection.call(
            "session/prompt", {"sessionId": session_id, "prompt": prompt}
        )
        return str(result.get("stopReason")) if isinstance(result, dict) else "?"

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``; every open permission question is answered ``cancelled``."""
        for scope in self._asking.get(session_id, ()):
            scope.cancel()
        await self.connection.notify("session/cancel", {"sessionId": session_id})

    async def open_session(self, how: str, session_id: str, cwd: str) -> dict[str, Any]:
        """``session/load`` (``how`` = ``load``: the history is replayed as updates) or
        ``session/resume`` of a stored session."""
        result = await self.connection.call(
            f"session/{how}", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
        )
        return result if isinstance(result, dict) else {}

    async def set_config_option(self, session_id: str, config_id: str, value: str) -> Any:
        """``session/set_config_option``; the session's config options after it."""
        result = await self.connection.call(
            "session/set_config_option",
            {"sessionId": session_id, "configId": config_id, "value": value},
        )
        return result.get("configOptions") if isinstance(result, dict) else None

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        await self.connection.call("session/set_mode", {"sessionId": session_id, "modeId": mode_id})


class RemoteAgent:
    """An agent reached at a URL, in the place of a subprocess: it has no stderr."""

    def __init__(self, transport: Transport, url: str) -> None:
        self.transport = transport
        self.command = [url]
        self.stderr_lines: deque[str] = deque()

    async def collect_stderr(self) -> None:
        return

    async def exit_code(self) -> int | None:
        return None  # a remote agent has no exit code: its connection ended

    async def stop(self, grace: float = 0) -> None:
        await self.transport.aclose()


@asynccontextmanager
async def open_client(
    command: Sequence[str],
    cwd: str,
    observer: Observer | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    ca_file: str | None = None,
) -> AsyncIterator[AcpClient]:
    """Start ``command`` (or reach the agent at ``url``: ws://, wss://, http:// or
    https://, trusting ``ca_file`` if given) and connect to it; on exit stop the agent
    (or end the connection) and every terminal."""
    if url is not None:
        async with open_remote(url, token=token, ca_file=ca_file) as transport:
            remote: Any = RemoteAgent(transport, url)
            async with _connected(remote, cwd, observer) as client:
                yield client
        return
    agent = await AgentProcess.start(command, cwd=cwd, env=agent_env(command))
    async with _connected(agent, cwd, observer) as client:
        yield client


@asynccontextmanager
async def _connected(
    agent: AgentProcess, cwd: str, observer: Observer | None
) -> AsyncIterator[AcpClient]:
    async with anyio.create_task_group() as tg:
        workspace = Workspace(cwd, tg)
        client = AcpClient(agent, workspace)
        client.observer = observer
        tg.start_soon(agent.collect_stderr)
        tg.start_soon(client.connection.serve)
        try:
            yield client
        finally:
            workspace.close()
            await agent.stop()
            tg.cancel_scope.cancel()
