"""An in-process ACP client for driving the LLM agent against the fake model server.

The client speaks JSON lines over one end of :func:`acp_agent.transport.memory_pair`
while :class:`acp_agent.server.AcpServer` serves the agent on the other. It answers
the agent's requests itself: ``fs/*`` on the local disk, ``terminal/*`` with real
local processes, ``session/request_permission`` by a policy the test sets.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_agent.llm import LlmAgent, LlmConfig
from acp_agent.llm.fake_server import FakeModelServer
from acp_agent.server import AcpServer
from acp_agent.transport import MemoryTransport, memory_pair

JSON = dict[str, Any]
TIMEOUT = 15.0
FIXTURES = Path(__file__).parent / "fixtures"


class RpcError(Exception):
    def __init__(self, error: JSON) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = str(error.get("message"))
        self.data = error.get("data")


@dataclass
class _Terminal:
    process: anyio.abc.Process
    output: bytearray = field(default_factory=bytearray)
    exited: anyio.Event = field(default_factory=anyio.Event)
    released: bool = False


class Client:
    """The scripted client. ``permission`` is ``allow_once``, ``allow_always``,
    ``reject_once`` or ``cancelled``."""

    def __init__(self, transport: MemoryTransport, tg: anyio.abc.TaskGroup) -> None:
        self.transport = transport
        self.tg = tg
        self.capabilities: JSON = {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": True,
        }
        self.permission = "allow_once"
        self.updates: list[JSON] = []  # every session/update params, in order
        self.agent_requests: list[JSON] = []  # every request the agent sent
        self.terminals: dict[str, _Terminal] = {}
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._next = 0
        self._changed = anyio.Event()
        self._buffer = b""

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(TIMEOUT):
            while not predicate():
                await self._changed.wait()

    async def send(self, message: JSON) -> None:
        await self.transport.send(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")

    async def run(self) -> None:
        while True:
            try:
                self._buffer += await self.transport.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                if line.strip():
                    self._on_message(orjson.loads(line))

    def _on_message(self, msg: JSON) -> None:
        if "method" in msg and "id" in msg:
            self.agent_requests.append(msg)
            self.tg.start_soon(self._answer, msg)
        elif "method" in msg:
            if msg["method"] == "session/update":
                self.updates.append(msg["params"])
        else:
            waiter = self._pending.pop(msg["id"], None)
            if waiter is not None:
                waiter[1].append(msg)
                waiter[0].set()
        self._notify()

    async def call(self, method: str, params: JSON) -> Any:
        """Send a request and wait for its response; an error response raises RpcError."""
        return await (await self.start(method, params))()

    async def start(self, method: str, params: JSON) -> Callable[[], Any]:
        self._next += 1
        request_id = self._next
        event, box = anyio.Event(), []
        self._pending[request_id] = (event, box)
        await self.send({"id": request_id, "method": method, "params": params})

        async def result() -> Any:
            with anyio.fail_after(TIMEOUT):
                await event.wait()
            if "error" in box[0]:
                raise RpcError(box[0]["error"])
            return box[0]["result"]

        return result

    async def initialize(self) -> JSON:
        result: JSON = await self.call(
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": self.capabilities},
        )
        return result

    async def new_session(self, cwd: str, mcp_servers: list[JSON] | None = None) -> str:
        result = await self.call("session/new", {"cwd": cwd, "mcpServers": mcp_servers or []})
        return str(result["sessionId"])

    async def prompt(self, session_id: str, text: str) -> str:
        result = await self.call(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
        )
        return str(result["stopReason"])

    # -- what the agent sent ----------------------------------------------------

    def kinds(self, session_id: str | None = None) -> list[str]:
        return [
            u["update"]["sessionUpdate"]
            for u in self.updates
            if session_id is None or u["sessionId"] == session_id
        ]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(
            u["update"]["content"].get("text", "")
            for u in self.updates
            if u["update"]["sessionUpdate"] == kind
        )

    def tool_calls(self) -> list[JSON]:
        return [u["update"] for u in self.updates if u["update"]["sessionUpdate"] == "tool_call"]

    def final_status(self, tool_call_id: str) -> str | None:
        status = None
        for u in self.updates:
            update = u["update"]
            if update.get("toolCallId") == tool_call_id and "status" in update:
                status = update["status"]
        return status

    def methods(self) -> list[str]:
        return [r["method"] for r in self.agent_requests]

    # -- answering the agent ----------------------------------------------------

    async def _answer(self, msg: JSON) -> None:
        method, params = msg["method"], msg.get("params") or {}
        try:
            result = await self._handle(method, params)
            answer: JSON = {"id": msg["id"], "result": result}
        except RpcError as exc:
            answer = {"id": msg["id"], "error": {"code": exc.code, "message": exc.message}}
        # An answer that lands after the test closed its side is dropped.
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.send(answer)

    async def _handle(self, method: str, params: JSON) -> Any:
        if method == "session/request_permission":
            if self.permission == "cancelled":
                return {"outcome": {"outcome": "cancelled"}}
            for option in params["options"]:
                if option["kind"] == self.permission:
                    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
            raise AssertionError(f"no {self.permission} option in {params['options']}")
        if method == "fs/read_text_file":
            try:
                text = await anyio.Path(params["path"]).read_text()
            except FileNotFoundError:
                raise RpcError({"code": -32002, "message": "Resource not found"}) from None
            lines = text.splitlines(keepends=True)
            start = (params.get("line") or 1) - 1
            end = start + params["limit"] if params.get("limit") else len(lines)
            return {"content": "".join(lines[start:end])}
        if method == "fs/write_text_file":
            await anyio.Path(params["path"]).write_text(params["content"])
            return None
        if method == "terminal/create":
            return await self._create_terminal(params)
        terminal = self.terminals[params["terminalId"]]
        if method == "terminal/wait_for_exit":
            await terminal.exited.wait()
            return {"exitCode": terminal.process.returncode, "signal": None}
        if method == "terminal/output":
            result: JSON = {"output": terminal.output.decode(), "truncated": False}
            if terminal.exited.is_set():
                result["exitStatus"] = {"exitCode": terminal.process.returncode}
            return result
        if method == "terminal/kill":
            _kill_group(terminal.process)
            return {}
        if method == "terminal/release":
            _kill_group(terminal.process)
            terminal.released = True
            return {}
        raise RpcError({"code": -32601, "message": f"unexpected {method}"})

    async def _create_terminal(self, params: JSON) -> JSON:
        process = await anyio.open_process(
            [params["command"], *params.get("args", [])],
            cwd=params.get("cwd"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        terminal_id = f"term_{len(self.terminals) + 1}"
        terminal = _Terminal(process)
        self.terminals[terminal_id] = terminal

        async def pump() -> None:
            assert process.stdout is not None
            async for chunk in process.stdout:
                terminal.output += chunk
            await process.wait()
            await process.aclose()
            terminal.exited.set()
            self._notify()

        self.tg.start_soon(pump)
        return {"terminalId": terminal_id}


def _kill_group(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@dataclass
class Harness:
    fake: FakeModelServer
    agent: LlmAgent
    client: Client
    cwd: str

    async def session(self, mcp_servers: list[JSON] | None = None) -> str:
        return await self.client.new_session(self.cwd, mcp_servers)

    async def idle(self) -> None:
        """Wait until the model server has no open connection (nothing leaked)."""
        with anyio.fail_after(TIMEOUT):
            await self.fake.wait_until(lambda s: s.open_connections == 0)


def base_config(fake: FakeModelServer, **overrides: Any) -> LlmConfig:
    config = LlmConfig(
        model="fake",
        base_url=fake.base_url,
        retries=2,
        retry_base_delay=0.01,
        request_timeout=TIMEOUT,
        mcp_connect_timeout=TIMEOUT,
    )
    return replace(config, **overrides)


@asynccontextmanager
async def harness(
    cwd: str,
    *,
    capabilities: JSON | None = None,
    config: Callable[[FakeModelServer], LlmConfig] | None = None,
    store: Any = None,
) -> AsyncIterator[Harness]:
    """Fake model server + LLM agent served in-process + scripted client. On exit:
    EOF to the agent, then checks that nothing leaked (model connections, MCP server
    tasks, child processes, asyncio tasks, terminals)."""
    children_before = child_pids()
    tasks_before = _asyncio_tasks()
    async with FakeModelServer.running() as fake:
        agent = LlmAgent(config(fake) if config is not None else base_config(fake))
        ours, theirs = memory_pair()
        served = anyio.Event()
        stack = contextlib.AsyncExitStack()
        stack.push_async_callback(theirs.aclose)
        stack.push_async_callback(ours.aclose)

        async def serve() -> None:
            try:
                await AcpServer(agent, store).serve(theirs)
            finally:
                served.set()

        async with stack, anyio.create_task_group() as tg:
            tg.start_soon(serve)
            client = Client(ours, tg)
            if capabilities is not None:
                client.capabilities = capabilities
            tg.start_soon(client.run)
            await client.initialize()
            h = Harness(fake, agent, client, cwd)
            try:
                yield h
            finally:
                await ours.send_eof()
                with anyio.fail_after(TIMEOUT):
                    await served.wait()
                    await client.wait_until(
                        lambda: all(t.exited.is_set() for t in client.terminals.values())
                    )
                tg.cancel_scope.cancel()
        await h.idle()
        assert not agent.mcp.serving, "the MCP host outlived the agent's lifespan"
        assert agent.mcp.server_tasks == 0, "an MCP server task outlived the lifespan"
        assert all(t.released for t in client.terminals.values()), "a terminal was not released"
    leaked = child_pids() - children_before
    assert not leaked, f"child processes outlived the agent: {sorted(leaked)}"
    assert _asyncio_tasks() <= tasks_before, "asyncio tasks outlived the agent"


def child_pids() -> set[int]:
    """This process's live (or unreaped) children, from /proc (empty where there is none)."""
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as fh:
                pids.update(int(pid) for pid in fh.read().split())
    return pids


def _asyncio_tasks() -> set[Any]:
    """The asyncio tasks alive now (empty on trio, whose nurseries cannot leak tasks)."""
    import sniffio

    if sniffio.current_async_library() != "asyncio":
        return set()
    import asyncio

    return {t for t in asyncio.all_tasks() if not t.done()}


@asynccontextmanager
async def mcp_web_server(token: str) -> AsyncIterator[str]:
    """Run ``fixtures/mcp_web.py`` (MCP over streamable HTTP, uvicorn on 127.0.0.1, a
    port the kernel picks) requiring ``X-Calc-Token: <token>``; yields its URL."""
    process = await anyio.open_process(
        [sys.executable, str(FIXTURES / "mcp_web.py")],
        env={**os.environ, "MCP_WEB_TOKEN": token},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=None,
    )
    try:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(TIMEOUT):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive()
        yield f"http://127.0.0.1:{int(line)}/mcp"
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
            with anyio.move_on_after(TIMEOUT):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
