"""The benchmark's raw ACP client: agent subprocesses and the JSON-RPC over their stdio.

It owns the run settings, spawning an agent, the newline-delimited JSON-RPC connection to it
(requests, responses, notifications, answering its requests), `initialize`, `session/new` and
one prompt turn. It deliberately uses no ACP library: it speaks JSON-RPC itself through an
asyncio subprocess protocol (no line-length limit, lines split straight from the pipe buffer,
writes go straight to the pipe transport) and orjson, so that its own cost stays far below that
of the agents it measures. The floor agent (`peers/floor_agent.py`) is the evidence.

It does not own the scenarios (`scenarios.py`), the report (`report.py`) or the command line
(`driver.py`). Every agent follows the command contract in `shared/reference-agent.md`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any

import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
MIB = 1 << 20

Message = dict[str, Any]
RequestHandler = Callable[[Message], Sequence[bytes]]


@dataclass(frozen=True)
class Settings:
    mode: str
    rounds: int
    spawns_per_round: int
    warmup_turns: int
    echo_turns: int
    stream_count: int
    stream_size: int
    reads: int
    big_size: int
    cancels_per_round: int
    cancel_after: float = 0.1
    start_timeout: float = 30.0
    turn_timeout: float = 120.0
    big_timeout: float = 120.0


QUICK = Settings(
    mode="quick",
    rounds=2,
    spawns_per_round=2,
    warmup_turns=20,
    echo_turns=200,
    stream_count=20_000,
    stream_size=64,
    reads=300,
    big_size=8 * MIB,
    cancels_per_round=2,
    turn_timeout=60.0,
    big_timeout=60.0,
)
FULL = Settings(
    mode="full",
    rounds=5,
    spawns_per_round=3,
    warmup_turns=50,
    echo_turns=2000,
    stream_count=100_000,
    stream_size=64,
    reads=2000,
    big_size=50 * MIB,
    cancels_per_round=3,
)


class AgentFailed(Exception):
    """A scenario could not complete: the agent answered wrongly, died or timed out."""


def describe(exc: BaseException) -> str:
    """An exception as one line for the report; unexpected ones keep their type."""
    return str(exc) if isinstance(exc, AgentFailed) else f"{type(exc).__name__}: {exc}"


class AgentProcess(asyncio.SubprocessProtocol):
    """One agent subprocess and the client end of its stdio JSON-RPC connection."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.SubprocessTransport | None = None
        self.stdin: asyncio.WriteTransport | None = None
        self.stderr_file: IO[bytes] | None = None
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.exited: asyncio.Future[None] = self._loop.create_future()
        self.pending: dict[int, asyncio.Future[tuple[Message, float]]] = {}
        self._ids = itertools.count(1)
        self._partial: list[bytes] = []
        self.on_request: RequestHandler | None = None
        # What the agent said: counted and checked as the lines arrive.
        self.chunks = 0
        self.bad_chunks = 0
        self.expect_size = -1
        self.last_text: str | None = None
        self.protocol_errors: list[str] = []

    # asyncio protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self.stdin = stdin

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        start = 0
        if self._partial:
            end = data.find(b"\n")
            if end < 0:
                self._partial.append(data)
                return
            self._partial.append(data[:end])
            line = b"".join(self._partial)
            self._partial.clear()
            self._line(line)
            start = end + 1
        end = data.find(b"\n", start)
        while end >= 0:
            if end > start:
                self._line(data[start:end])
            start = end + 1
            end = data.find(b"\n", start)
        if start < len(data):
            self._partial.append(data[start:])

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._fail_pending(AgentFailed("the agent closed its stdout"))
            if not self.closed.done():
                self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    # incoming messages

    def _line(self, line: bytes) -> None:
        try:
            self._message(orjson.loads(line), time.perf_counter())
        except Exception as exc:  # a bad line must not take the connection down
            self.protocol_errors.append(f"{describe(exc)} on the line {line[:100]!r}")

    def _message(self, message: Message, received: float) -> None:
        method = message.get("method")
        if method == "session/update":
            update = message["params"]["update"]
            if update.get("sessionUpdate") == "agent_message_chunk":
                self.chunks += 1
                text = update["content"].get("text")
                self.last_text = text
                if self.expect_size >= 0 and len(text) != self.expect_size:
                    self.bad_chunks += 1
        elif method is not None:
            if "id" in message:
                self._answer(message)
        else:
            future = self.pending.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result((message, received))

    def _answer(self, request: Message) -> None:
        if self.on_request is not None and request["method"] == "fs/read_text_file":
            for piece in self.on_request(request):
                self.write(piece)
            return
        error = {"code": -32601, "message": "Method not found"}
        self.write(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "error": error}) + b"\n")

    def _fail_pending(self, exc: Exception) -> None:
        pending = list(self.pending.values())
        self.pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(exc)

    # outgoing messages

    @property
    def alive(self) -> bool:
        return not self.closed.done() and not self.exited.done()

    def write(self, data: bytes) -> None:
        if self.stdin is None or self.stdin.is_closing():
            raise AgentFailed("the agent's stdin is closed")
        self.stdin.write(data)

    def send_request(
        self, method: str, params: Any
    ) -> tuple[asyncio.Future[tuple[Message, float]], float]:
        """Write a request; return the future of its response and the time it was written."""
        if not self.alive:
            raise AgentFailed("the agent has exited")
        request_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        data = orjson.dumps(message)
        future: asyncio.Future[tuple[Message, float]] = self._loop.create_future()
        self.pending[request_id] = future
        sent = time.perf_counter()
        self.write(data + b"\n")
        return future, sent

    async def request(self, method: str, params: Any, timeout: float) -> tuple[Any, float, float]:
        """Send a request and wait for a result; return it with send and receive times."""
        future, sent = self.send_request(method, params)
        message, received = await wait_response(future, timeout, method)
        self.check_output()
        return result_of(message, method), sent, received

    def check_output(self) -> None:
        """Fail if anything but a JSON-RPC message appeared on the agent's stdout."""
        if self.protocol_errors:
            raise AgentFailed(f"not a valid message: {self.protocol_errors[0]}")

    def notify(self, method: str, params: Any) -> float:
        data = orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}) + b"\n"
        sent = time.perf_counter()
        self.write(data)
        return sent

    # process information and teardown

    @property
    def pid(self) -> int:
        assert self.transport is not None
        return self.transport.get_pid()

    def memory_mb(self, key: str) -> float:
        """`VmRSS` or `VmHWM` of the agent process, in MB (10^6 bytes)."""
        try:
            kib = status_kib(self.pid, key)
        except OSError as exc:
            raise AgentFailed(f"cannot read the agent's {key}: {exc}") from None
        if kib is None:
            raise AgentFailed(f"no {key} in /proc/{self.pid}/status")
        return kib * 1024 / 1e6

    def stderr_tail(self, limit: int = 400) -> str:
        if self.stderr_file is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self.stderr_file.seek(0, os.SEEK_END)
            size = self.stderr_file.tell()
            self.stderr_file.seek(max(0, size - limit))
            return self.stderr_file.read().decode("utf-8", "replace").strip()
        return ""

    async def close(self) -> None:
        """Close stdin, give the agent 2 s to exit, then kill it."""
        if self.stdin is not None:
            self.stdin.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 2.0)
        if self.transport is not None:
            if not self.exited.done():
                with contextlib.suppress(ProcessLookupError):
                    self.transport.kill()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.exited), 2.0)
            self.transport.close()
        if self.stderr_file is not None:
            self.stderr_file.close()


TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: [1] ppid, [11] utime..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_ticks(pid: int | str) -> int:
    """User and system CPU time of process ``pid`` so far, all threads, in clock ticks
    (:data:`TICKS` a second), from /proc."""
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12])


def descendants(pid: int) -> list[int]:
    """The live processes below ``pid`` (by their ppid in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(int(stat_fields(int(entry))[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def agent_cpu(pid: int) -> float:
    """CPU seconds, user and system, that process ``pid`` and its children have used so far.

    Each process's kernel CPU clock, every thread's, ended ones too: the counter
    /proc/<pid>/stat gives as utime + stime in clock ticks, read to the nanosecond (a turn
    is a few ticks); plus cutime + cstime (the children it has waited for).
    """
    total = 0.0
    for each in [pid, *descendants(pid)]:
        try:
            total += time.clock_gettime((~each << 3) | 2)  # the process's CPU clock id
            fields = stat_fields(each)
        except OSError:
            continue  # ended meanwhile
        total += (int(fields[13]) + int(fields[14])) / TICKS
    return total


def status_kib(pid: int, key: str) -> int | None:
    """``key`` (``VmRSS``, ``VmHWM``) of process ``pid`` from /proc, in KiB; None if absent."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


async def wait_response(
    future: asyncio.Future[tuple[Message, float]], timeout: float, what: str
) -> tuple[Message, float]:
    try:
        return await asyncio.wait_for(future, timeout)
    except asyncio.TimeoutError:
        raise AgentFailed(f"no response to {what} within {timeout:g} s") from None


def result_of(message: Message, what: str) -> Any:
    if "error" in message:
        error = message["error"]
        raise AgentFailed(f"{what} answered with error {error.get('code')}: {error.get('message')}")
    return message.get("result")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


async def spawn(
    spec: AgentSpec, protocol: type[AgentProcess] = AgentProcess
) -> tuple[AgentProcess, float]:
    """Start the agent; return it with the time just before the spawn."""
    loop = asyncio.get_running_loop()
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the agent; closed in close())
    started = time.perf_counter()
    try:
        _, agent = await loop.subprocess_exec(
            protocol,
            *spec.argv,
            stdin=PIPE,
            stdout=PIPE,
            stderr=stderr,
            cwd=REPO_ROOT,
            env=spec.env,
        )
    except OSError as exc:
        stderr.close()
        raise AgentFailed(f"cannot start {spec.command!r}: {exc}") from None
    agent.stderr_file = stderr
    return agent, started


INITIALIZE_PARAMS = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": False}, "terminal": False},
    "clientInfo": {"name": "acp-agent-benchmarks", "version": "0.1.0"},
}


async def initialize(agent: AgentProcess, settings: Settings) -> float:
    """Send `initialize` (advertising fs.readTextFile); return the time its response arrived."""
    future, _ = agent.send_request("initialize", INITIALIZE_PARAMS)
    try:
        message, received = await wait_response(future, settings.start_timeout, "initialize")
    except Exception as exc:
        tail = agent.stderr_tail()
        raise AgentFailed(describe(exc) + (f"; stderr: {tail}" if tail else "")) from None
    agent.check_output()
    result = result_of(message, "initialize")
    if not isinstance(result, dict) or result.get("protocolVersion") != 1:
        raise AgentFailed(f"unexpected initialize result {result!r}")
    return received


async def open_session(spec: AgentSpec, settings: Settings, cwd: str) -> tuple[AgentProcess, str]:
    agent, _ = await spawn(spec)
    try:
        await initialize(agent, settings)
        result, _, _ = await agent.request(
            "session/new", {"cwd": cwd, "mcpServers": []}, settings.turn_timeout
        )
        return agent, result["sessionId"]
    except BaseException:
        await agent.close()
        raise


def prompt_params(session_id: str, text: str) -> Message:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


async def turn(
    agent: AgentProcess, session_id: str, text: str, timeout: float, stop: str = "end_turn"
) -> float:
    """Run one prompt turn; return its duration in seconds."""
    agent.last_text = None
    result, sent, received = await agent.request(
        "session/prompt", prompt_params(session_id, text), timeout
    )
    if not isinstance(result, dict) or result.get("stopReason") != stop:
        raise AgentFailed(f"{text[:30]!r} ended with {result.get('stopReason')!r}, not {stop!r}")
    return received - sent
