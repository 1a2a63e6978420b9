"""A scripted ACP client over a real subprocess and real pipes.

``spawn()`` starts an agent command (by default ``python -m acp_agent --store memory``)
and yields a :class:`ProcessClient`: write frames with :meth:`~ProcessClient.send`,
read the agent's frames in order with :meth:`~ProcessClient.receive` or
:meth:`~ProcessClient.expect`, and run whole turns with :meth:`~ProcessClient.prompt`,
which answers the agent's own requests (fs, permission, terminal) through
:attr:`ProcessClient.on_request`.

Every wait is bounded by a timeout (a hung agent fails the test, it does not hang it);
nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "acp_agent", "--store", "memory"]
FULL_CAPS: dict[str, Any] = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
}
TIMEOUT = 10.0

Message = dict[str, Any]
#: answers one agent -> client request: returns the ``result``, or raises ``WireError``
RequestHandler = Callable[[Message], Awaitable[Any]]


class WireError(Exception):
    """Raise from a request handler to answer with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AgentError(Exception):
    """The agent answered our request with an error."""

    def __init__(self, error: Message) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.error = error
        self.code = error.get("code")
        self.message = error.get("message")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child that must import this checkout's ``acp_agent``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("ACP_AGENT_MODEL", None)
    env.update(extra or {})
    return env


@dataclass
class Turn:
    """What one ``session/prompt`` produced."""

    response: Message
    updates: list[Message] = field(default_factory=list)
    requests: list[Message] = field(default_factory=list)

    @property
    def stop_reason(self) -> str | None:
        result = self.response.get("result")
        return result.get("stopReason") if isinstance(result, dict) else None

    @property
    def error(self) -> Message | None:
        error = self.response.get("error")
        return error if isinstance(error, dict) else None

    def kinds(self) -> list[str]:
        return [u["sessionUpdate"] for u in self.updates]

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [u["content"]["text"] for u in self.updates if u["sessionUpdate"] == kind]

    @property
    def methods(self) -> list[str]:
        return [r["method"] for r in self.requests]


class ProcessClient:
    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self._buffer = b""
        self._next_id = 0
        self.stderr = bytearray()
        #: answers agent -> client requests during :meth:`prompt` (default: refuse)
        self.on_request: RequestHandler = refuse

    # -- frames -----------------------------------------------------------------

    async def send(self, message: Message) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(orjson.dumps(message) + b"\n")

    async def receive(self, timeout: float = TIMEOUT) -> Message:
        """The agent's next frame."""
        assert self.process.stdout is not None
        with anyio.fail_after(timeout):
            while b"\n" not in self._buffer:
                self._buffer += await self.process.stdout.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = orjson.loads(line)
        assert isinstance(message, dict), message
        return message

    async def expect(
        self, predicate: Callable[[Message], bool], timeout: float = TIMEOUT
    ) -> tuple[Message, list[Message]]:
        """Read until a frame matches; return it and the frames skipped on the way."""
        skipped: list[Message] = []
        with anyio.fail_after(timeout):
            while True:
                message = await self.receive(timeout)
                if predicate(message):
                    return message, skipped
                skipped.append(message)

    # -- requests -----------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> int:
        """Send a request; return its id."""
        self._next_id += 1
        message: Message = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return self._next_id

    async def notify(self, method: str, params: Any = None) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def call(self, method: str, params: Any = None) -> tuple[Any, list[Message]]:
        """Request and wait for the answer; return its result and the frames before it."""
        request_id = await self.request(method, params)
        response, before = await self.expect(lambda m: is_response(m, request_id))
        if "error" in response:
            raise AgentError(response["error"])
        return response["result"], before

    async def initialize(self, capabilities: Message | None = None) -> Message:
        result, _ = await self.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": FULL_CAPS if capabilities is None else capabilities,
                "clientInfo": {"name": "wire-client", "version": "0"},
            },
        )
        assert isinstance(result, dict)
        return result

    async def new_session(self, cwd: str | os.PathLike[str]) -> tuple[str, Message, list[Message]]:
        """``session/new``; returns the id, the result and the frames that followed
        up to and including the ``available_commands_update``."""
        result, before = await self.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        assert before == [], before  # nothing about a session precedes its response
        commands, _ = await self.expect(lambda m: update_kind(m) == "available_commands_update")
        return result["sessionId"], result, [commands]

    # -- turns ----------------------------------------------------------------------

    async def start_prompt(self, session_id: str, text: str | Sequence[Message]) -> int:
        blocks = [{"type": "text", "text": text}] if isinstance(text, str) else list(text)
        return await self.request("session/prompt", {"sessionId": session_id, "prompt": blocks})

    async def finish_prompt(self, request_id: int, timeout: float = TIMEOUT) -> Turn:
        """Collect updates, answer agent requests, until the prompt's response."""
        updates: list[Message] = []
        requests: list[Message] = []
        with anyio.fail_after(timeout):
            while True:
                message = await self.receive(timeout)
                if is_response(message, request_id):
                    return Turn(message, updates, requests)
                if message.get("method") == "session/update":
                    updates.append(message["params"]["update"])
                elif "method" in message and "id" in message:
                    requests.append(message)
                    await self.answer(message)

    async def prompt(
        self, session_id: str, text: str | Sequence[Message], timeout: float = TIMEOUT
    ) -> Turn:
        request_id = await self.start_prompt(session_id, text)
        return await self.finish_prompt(request_id, timeout)

    async def cancel(self, session_id: str, request_id: int) -> Turn:
        """Send ``session/cancel`` for the prompt ``request_id`` and collect the turn.

        The agent applies a cancel to the prompts it read before it, so one is enough
        even if the turn has not started running yet.
        """
        await self.notify("session/cancel", {"sessionId": session_id})
        return await self.finish_prompt(request_id)

    async def answer(self, request: Message) -> None:
        try:
            result = await self.on_request(request)
        except WireError as exc:
            await self.send(
                {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "error": {"code": exc.code, "message": exc.message},
                }
            )
            return
        await self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


async def refuse(request: Message) -> Any:
    raise WireError(-32601, f"the test did not expect {request['method']}")


def is_response(message: Message, request_id: int) -> bool:
    return message.get("id") == request_id and "method" not in message


def update_kind(message: Message) -> str | None:
    if message.get("method") != "session/update":
        return None
    return str(message["params"]["update"]["sessionUpdate"])


@asynccontextmanager
async def spawn(
    command: Sequence[str] = SERVER, *, env: dict[str, str] | None = None
) -> AsyncIterator[ProcessClient]:
    """Start ``command``; on exit close its stdin and wait for it (killing it if slow)."""
    process = await anyio.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(env),
        cwd=str(ROOT),
    )
    client = ProcessClient(process)

    async def drain_stderr() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            client.stderr += chunk

    async with process, anyio.create_task_group() as tg:
        tg.start_soon(drain_stderr)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                assert process.stdin is not None
                await process.stdin.aclose()
                with anyio.move_on_after(5):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            tg.cancel_scope.cancel()
