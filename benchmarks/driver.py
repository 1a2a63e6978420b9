"""Benchmark driver: a raw ACP client that measures agents launched as subprocesses.

It owns the scenarios (S1-S6), the interleaved rounds, the aggregation and the markdown report.
It deliberately uses no ACP library: it speaks newline-delimited JSON-RPC itself through an
asyncio subprocess protocol (no line-length limit, lines split straight from the pipe buffer,
writes go straight to the pipe transport) and orjson, so that its own cost stays far below that
of the agents it measures. The floor agent (`peers/floor_agent.py`) is the evidence.

Every agent follows the command contract in `shared/reference-agent.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import importlib
import itertools
import math
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any, Final

import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
MIB = 1 << 20
SMALL_CONTENT = "hello, world\n"
PACKAGES = ["agent-client-protocol", "orjson"]

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


# --------------------------------------------------------------------------- the raw client


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
            with open(f"/proc/{self.pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024 / 1e6
        except OSError as exc:
            raise AgentFailed(f"cannot read the agent's {key}: {exc}") from None
        raise AgentFailed(f"no {key} in /proc/{self.pid}/status")

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


async def spawn(spec: AgentSpec) -> tuple[AgentProcess, float]:
    """Start the agent; return it with the time just before the spawn."""
    loop = asyncio.get_running_loop()
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the agent; closed in close())
    started = time.perf_counter()
    try:
        _, agent = await loop.subprocess_exec(
            AgentProcess,
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


# --------------------------------------------------------------------------- results


@dataclass
class AgentResult:
    spec: AgentSpec
    start_error: str | None = None
    values: dict[str, list[Any]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)

    @property
    def started(self) -> bool:
        return self.start_error is None

    def add(self, key: str, value: Any) -> None:
        self.values.setdefault(key, []).append(value)

    def fail(self, scenario: str, reason: str) -> None:
        self.failures.setdefault(scenario, []).append(reason)

    def median(self, key: str) -> float | None:
        values = [v for v in self.values.get(key, []) if isinstance(v, (int, float))]
        return statistics.median(values) if values else None


SCENARIOS = ["S1", "S2", "S3", "S4", "S5 read", "S5 echo", "S6"]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


# --------------------------------------------------------------------------- scenarios


async def scenario_spawn(spec: AgentSpec, settings: Settings, result: AgentResult) -> None:
    """S1: spawn to `initialize` response, then VmRSS right after it."""
    agent, started = await spawn(spec)
    try:
        received = await initialize(agent, settings)
        rss = agent.memory_mb("VmRSS")
        result.add("s1_ms", (received - started) * 1e3)
        result.add("s1_rss", rss)
    finally:
        await agent.close()


async def scenario_echo(
    agent: AgentProcess, session_id: str, settings: Settings, result: AgentResult
) -> None:
    """S2: `/echo hi` turns back to back."""
    for _ in range(settings.warmup_turns):
        await turn(agent, session_id, "/echo hi", settings.turn_timeout)
    durations = []
    began = time.perf_counter()
    for _ in range(settings.echo_turns):
        durations.append(await turn(agent, session_id, "/echo hi", settings.turn_timeout))
        if agent.last_text != "hi":
            raise AgentFailed(f"/echo hi answered {agent.last_text!r}")
    elapsed = time.perf_counter() - began
    result.add("s2_median", statistics.median(durations) * 1e6)
    result.add("s2_p99", percentile(durations, 0.99) * 1e6)
    result.add("s2_rate", settings.echo_turns / elapsed)


async def scenario_reads(
    agent: AgentProcess, session_id: str, settings: Settings, result: AgentResult
) -> None:
    """S4: `/read bench.txt N`, each fs/read_text_file answered at once with a small text."""
    body = orjson.dumps(SMALL_CONTENT)

    def answer(request: Message) -> list[bytes]:
        request_id = orjson.dumps(request["id"])
        return [b'{"jsonrpc":"2.0","id":' + request_id + b',"result":{"content":' + body + b"}}\n"]

    agent.on_request = answer
    try:
        duration = await turn(
            agent, session_id, f"/read bench.txt {settings.reads}", settings.turn_timeout
        )
    finally:
        agent.on_request = None
    expected = f"read {settings.reads * len(SMALL_CONTENT)} chars"
    if agent.last_text != expected:
        raise AgentFailed(f"/read answered {agent.last_text!r}, expected {expected!r}")
    result.add("s4_read", duration / settings.reads * 1e6)


async def scenario_cancel(
    agent: AgentProcess, session_id: str, settings: Settings, result: AgentResult
) -> None:
    """S6: `session/cancel` during `/sleep 10000`, timed from the cancel write to the response."""
    for _ in range(settings.cancels_per_round):
        future, _ = agent.send_request("session/prompt", prompt_params(session_id, "/sleep 10000"))
        await asyncio.sleep(settings.cancel_after)
        if future.done():
            raise AgentFailed("/sleep 10000 answered before it was cancelled")
        cancelled_at = agent.notify("session/cancel", {"sessionId": session_id})
        message, received = await wait_response(future, 15.0, "the cancelled prompt")
        agent.check_output()
        stop = result_of(message, "the cancelled prompt").get("stopReason")
        result.add("s6_ms", (received - cancelled_at) * 1e3)
        result.add("s6_stop", str(stop))
        if stop != "cancelled":
            raise AgentFailed(f"the cancelled prompt ended with {stop!r}")


async def scenario_stream(
    agent: AgentProcess, session_id: str, settings: Settings, result: AgentResult
) -> None:
    """S3: one `/stream COUNT 64` turn; updates/s and the agent's peak RSS."""
    agent.chunks = agent.bad_chunks = 0
    agent.expect_size = settings.stream_size
    try:
        duration = await turn(
            agent,
            session_id,
            f"/stream {settings.stream_count} {settings.stream_size}",
            settings.turn_timeout,
        )
    finally:
        agent.expect_size = -1
    if agent.chunks != settings.stream_count or agent.bad_chunks:
        raise AgentFailed(
            f"/stream sent {agent.chunks} chunks ({agent.bad_chunks} of the wrong size), "
            f"expected {settings.stream_count}"
        )
    result.add("s3_rate", settings.stream_count / duration)
    result.add("s3_hwm", agent.memory_mb("VmHWM"))


SESSION_SCENARIOS = [
    ("S2", scenario_echo),
    ("S4", scenario_reads),
    ("S6", scenario_cancel),
    ("S3", scenario_stream),  # last: its VmHWM must not include the others' peaks
]


async def run_session_scenarios(
    spec: AgentSpec, settings: Settings, result: AgentResult, cwd: str
) -> None:
    """S2, S4, S6 and S3 in one agent process and one session."""
    try:
        agent, session_id = await open_session(spec, settings, cwd)
    except Exception as exc:
        for name, _ in SESSION_SCENARIOS:
            result.fail(name, f"no session: {describe(exc)}")
        return
    try:
        for name, scenario in SESSION_SCENARIOS:
            if not agent.alive:
                result.fail(name, "the agent has exited" + stderr_note(agent))
                continue
            try:
                await scenario(agent, session_id, settings, result)
            except Exception as exc:
                result.fail(name, describe(exc) + stderr_note(agent))
    finally:
        await agent.close()


def stderr_note(agent: AgentProcess) -> str:
    if agent.alive:
        return ""
    tail = agent.stderr_tail()
    return f"; stderr: {tail}" if tail else ""


@dataclass(frozen=True)
class BigPayloads:
    """The S5 payloads, built once: the file content's JSON string and the echo prompt text."""

    size: int
    content_json: bytes
    echo_text: str

    @classmethod
    def build(cls, size: int) -> BigPayloads:
        line = "The quick brown fox jumps over the lazy dog, 0123456789 ABCDEFG.\n"
        content = (line * (size // len(line) + 1))[:size]
        return cls(size, orjson.dumps(content), "x" * size)


async def scenario_big_read(
    spec: AgentSpec, settings: Settings, result: AgentResult, cwd: str, big: BigPayloads
) -> None:
    """S5 read: `/read big.txt` answered with one fs/read_text_file result of `big.size` chars."""
    try:
        agent, session_id = await open_session(spec, settings, cwd)
    except Exception:
        result.add("s5_read_ok", False)
        raise

    def answer(request: Message) -> list[bytes]:
        request_id = orjson.dumps(request["id"])
        head = b'{"jsonrpc":"2.0","id":' + request_id + b',"result":{"content":'
        return [head, big.content_json, b"}}\n"]

    agent.on_request = answer
    try:
        before = agent.memory_mb("VmRSS")
        duration = await turn(agent, session_id, "/read big.txt", settings.big_timeout)
        expected = f"read {big.size} chars"
        if agent.last_text != expected:
            raise AgentFailed(f"/read answered {agent.last_text!r}, expected {expected!r}")
        result.add("s5_read_ms", duration * 1e3)
        peak = agent.memory_mb("VmHWM")
        result.add("s5_read_hwm", peak)
        result.add("s5_read_growth", peak - before)
        result.add("s5_read_ok", True)
    except Exception as exc:
        result.add("s5_read_ok", False)
        raise AgentFailed(describe(exc) + stderr_note(agent)) from None
    finally:
        await agent.close()


async def scenario_big_echo(
    spec: AgentSpec, settings: Settings, result: AgentResult, cwd: str, big: BigPayloads
) -> None:
    """S5 echo: a `/echo` prompt whose text block is `big.size` characters."""
    try:
        agent, session_id = await open_session(spec, settings, cwd)
    except Exception:
        result.add("s5_echo_ok", False)
        raise
    try:
        agent.last_text = None
        before = agent.memory_mb("VmRSS")
        future, sent = agent.send_request(
            "session/prompt", prompt_params(session_id, "/echo " + big.echo_text)
        )
        message, received = await wait_response(future, settings.big_timeout, "the big /echo")
        agent.check_output()
        stop = result_of(message, "the big /echo").get("stopReason")
        if stop != "end_turn":
            raise AgentFailed(f"the big /echo ended with {stop!r}")
        if agent.last_text != big.echo_text:
            got = None if agent.last_text is None else len(agent.last_text)
            raise AgentFailed(f"the big /echo echoed {got} chars, expected {big.size}")
        result.add("s5_echo_ms", (received - sent) * 1e3)
        peak = agent.memory_mb("VmHWM")
        result.add("s5_echo_hwm", peak)
        result.add("s5_echo_growth", peak - before)
        result.add("s5_echo_ok", True)
    except Exception as exc:
        result.add("s5_echo_ok", False)
        raise AgentFailed(describe(exc) + stderr_note(agent)) from None
    finally:
        agent.last_text = None
        await agent.close()


async def guarded(result: AgentResult, scenario: str, work: Any) -> None:
    try:
        await work
    except Exception as exc:
        result.fail(scenario, describe(exc))


def agent_environment(home: str) -> dict[str, str]:
    """The agents' environment: ours, with bytecode caching on and per-run XDG directories.

    Installed packages come with compiled bytecode; a source checkout run with
    PYTHONDONTWRITEBYTECODE (set in some CI and sandbox images) would compile every module on
    every start. With a per-run PYTHONPYCACHEPREFIX, filled by the warm-up start, every agent
    starts from compiled bytecode and nothing is written next to the sources. The XDG base
    directories point into the same throw-away directory, so that agents that keep state (a
    session store, caches, logs) neither read the user's files nor leave the benchmark's
    sessions, 50 MiB prompts included, behind.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(home, "pycache")
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = os.path.join(home, name.lower())
    return env


async def warm_up(result: AgentResult, settings: Settings, log: Callable[[str], None]) -> None:
    """One unmeasured start: fills the bytecode cache and tells whether the agent starts."""
    try:
        agent, _ = await spawn(result.spec)
    except Exception as exc:
        result.start_error = describe(exc)
    else:
        try:
            await initialize(agent, settings)
        except Exception as exc:
            result.start_error = describe(exc)
        finally:
            await agent.close()
    if result.start_error is not None:
        log(f"  {result.spec.name}: did not start: {result.start_error}")


async def run_benchmarks(
    specs: list[AgentSpec], settings: Settings, log: Callable[[str], None]
) -> list[AgentResult]:
    big = BigPayloads.build(settings.big_size)
    with (
        tempfile.TemporaryDirectory(prefix="acp-bench-") as cwd,
        tempfile.TemporaryDirectory(prefix="acp-bench-home-") as home,
    ):
        env = agent_environment(home)
        results = [AgentResult(dataclasses.replace(spec, env=env)) for spec in specs]
        log("warm-up")
        for result in results:
            await warm_up(result, settings, log)
        for round_index in range(settings.rounds):
            log(f"round {round_index + 1}/{settings.rounds}")
            active = [r for r in results if r.started]
            for result in active:
                for _ in range(settings.spawns_per_round):
                    await guarded(result, "S1", scenario_spawn(result.spec, settings, result))
            for result in active:
                log(f"  {result.spec.name}: S2 S4 S6 S3")
                await run_session_scenarios(result.spec, settings, result, cwd)
            for result in active:
                log(f"  {result.spec.name}: S5")
                await guarded(
                    result, "S5 read", scenario_big_read(result.spec, settings, result, cwd, big)
                )
                await guarded(
                    result, "S5 echo", scenario_big_echo(result.spec, settings, result, cwd, big)
                )
    return results


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Row:
    scenario: str
    label: str
    key: str
    unit: str = ""
    higher_is_better: bool = False


def rows_for(settings: Settings) -> list[Row]:
    size = f"{settings.big_size // MIB} MiB"
    return [
        Row("S1", "spawn → `initialize` response, ms", "s1_ms"),
        Row("S1", "RSS after `initialize`, MB", "s1_rss"),
        Row("S2", "`/echo hi` turn, µs (median)", "s2_median"),
        Row("S2", "`/echo hi` turn, µs (p99)", "s2_p99"),
        Row("S2", "turns/s", "s2_rate", higher_is_better=True),
        Row(
            "S3",
            f"`/stream {settings.stream_count} {settings.stream_size}`: updates/s",
            "s3_rate",
            higher_is_better=True,
        ),
        Row("S3", "peak RSS (VmHWM), MB", "s3_hwm"),
        Row("S4", f"`fs/read_text_file` round trip, µs ({settings.reads} reads)", "s4_read"),
        Row("S5", f"{size} `fs/read_text_file` answer: works", "s5_read_ok"),
        Row("S5", f"{size} `fs/read_text_file` answer: turn, ms", "s5_read_ms"),
        Row("S5", f"{size} `fs/read_text_file` answer: peak RSS, MB", "s5_read_hwm"),
        Row("S5", f"{size} `fs/read_text_file` answer: RSS growth, MB", "s5_read_growth"),
        Row("S5", f"{size} `/echo` prompt: works", "s5_echo_ok"),
        Row("S5", f"{size} `/echo` prompt: turn, ms", "s5_echo_ms"),
        Row("S5", f"{size} `/echo` prompt: peak RSS, MB", "s5_echo_hwm"),
        Row("S5", f"{size} `/echo` prompt: RSS growth, MB", "s5_echo_growth"),
        Row("S6", "`session/cancel` → prompt response, ms", "s6_ms"),
        Row("S6", "stop reason", "s6_stop"),
    ]


def fmt_number(value: float) -> str:
    if value >= 10_000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(result: AgentResult, key: str) -> str:
    if not result.started:
        return "did not start"
    values = result.values.get(key, [])
    if key.endswith("_ok"):
        if not values:
            return "not run"
        good = sum(1 for v in values if v)
        return f"{'yes' if good == len(values) else 'NO'} ({good}/{len(values)})"
    if key == "s6_stop":
        if not values:
            return "failed"
        return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in Counter(values).items())
    median = result.median(key)
    return "failed" if median is None else fmt_number(median)


def ratio(result: AgentResult, sdk: AgentResult | None, key: str) -> str:
    if sdk is None or not result.started or not sdk.started:
        return "—"
    mine, theirs = result.median(key), sdk.median(key)
    if mine is None or theirs is None or theirs == 0 or key.endswith(("_ok", "_stop")):
        return "—"
    return f"{mine / theirs:.2f}x"


Verdict = tuple[str, bool | None]


class Targets:
    """The acp-agent targets, judged against the other agents' medians in this run."""

    def __init__(self, results: dict[str, AgentResult], settings: Settings) -> None:
        self.results = results
        self.settings = settings
        self.ours = results.get("acp-agent")

    def _median(self, name: str, key: str) -> float | None:
        result = self.results.get(name)
        return result.median(key) if result is not None and result.started else None

    def _relative(self, key: str, other: str, factor: float, at_most: bool) -> Verdict:
        sign = "≤" if at_most else "≥"
        text = f"{sign} {other}" if factor == 1 else f"{sign} {factor:g}x {other}"
        mine, theirs = self._median("acp-agent", key), self._median(other, key)
        if mine is None:
            return text, False
        if theirs is None:
            return f"{text} ({other} not measured)", None
        return text, mine <= factor * theirs if at_most else mine >= factor * theirs

    def _absolute(self, key: str, limit: float, text: str) -> Verdict:
        mine = self._median("acp-agent", key)
        return text, (mine is not None and mine < limit)

    def _all_true(self, key: str, text: str) -> Verdict:
        values = self.ours.values.get(key, []) if self.ours else []
        return text, bool(values) and all(values)

    def _peak(self, key: str) -> list[Verdict]:
        """Full mode judges the peak itself; quick mode (8 MiB, where 4x the message is less
        than an idle interpreter) judges the growth of the peak over the RSS before the turn."""
        judged = "growth" if self.settings.mode == "quick" else "hwm"
        if not key.endswith(judged):
            return []
        limit = 4 * self.settings.big_size / 1e6
        return [self._absolute(key, limit, f"< 4x message size ({limit:.1f} MB)")]

    def verdicts(self, key: str) -> list[Verdict]:
        if key == "s1_ms":
            return [self._relative(key, "sdk", 0.3, at_most=True)]
        if key == "s1_rss":
            return [self._absolute(key, 35.0, "< 35 MB")]
        if key == "s2_median":
            return [
                self._relative(key, "sdk", 0.7, at_most=True),
                self._relative(key, "floor", 1.5, at_most=True),
            ]
        if key == "s3_rate":
            return [self._relative(key, "sdk", 4.0, at_most=False)]
        if key == "s3_hwm":
            return [self._relative(key, "sdk", 1.0, at_most=True)]
        if key == "s4_read":
            return [self._relative(key, "sdk", 0.8, at_most=True)]
        if key in ("s5_read_ok", "s5_echo_ok"):
            return [self._all_true(key, "works every time")]
        if key.startswith("s5_") and key.endswith(("_hwm", "_growth")):
            return self._peak(key)
        if key == "s6_ms":
            return [self._absolute(key, 2.0, "< 2 ms")]
        if key == "s6_stop":
            values = self.ours.values.get(key, []) if self.ours else []
            return [("`cancelled`", bool(values) and all(v == "cancelled" for v in values))]
        return []

    def cell(self, key: str) -> str:
        if self.ours is None:
            return ""
        if not self.ours.started:
            return "acp-agent did not start" if self.verdicts(key) else ""
        parts = []
        for text, met in self.verdicts(key):
            mark = "n/a" if met is None else ("met" if met else "**not met**")
            parts.append(f"{text}: {mark}")
        return "; ".join(parts)

    def summary(self) -> tuple[int, int]:
        verdicts = [v for row in rows_for(self.settings) for _, v in self.verdicts(row.key)]
        judged = [v for v in verdicts if v is not None]
        return sum(1 for v in judged if v), len(judged)


def machine_description() -> list[str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = []
    for package in dependency_names():
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return [
        f"- CPU: {cpu}, {os.cpu_count()} cores",
        f"- OS: {platform.system()} {platform.release()}",
        f"- Python: {platform.python_version()} ({sys.executable})",
        f"- Packages: {', '.join(versions)}",
    ]


def dependency_names() -> list[str]:
    """acp-agent's runtime dependencies (from its metadata or pyproject) plus the SDK."""
    requirements: list[str] = []
    try:
        requirements = [r for r in metadata.requires("acp-agent-kit") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        with contextlib.suppress(ImportError, OSError, KeyError):
            tomllib = importlib.import_module("tomllib")  # Python 3.11+
            with open(REPO_ROOT / "pyproject.toml", "rb") as pyproject:
                requirements = tomllib.load(pyproject)["project"]["dependencies"]
    names = [re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in requirements]
    return list(dict.fromkeys([*names, *PACKAGES]))


SPREAD_KEYS: Final = (
    ("S2", "`/echo hi` turn, µs (median)", "s2_median"),
    ("S3", "updates/s", "s3_rate"),
    ("S4", "`fs/read_text_file` round trip, µs", "s4_read"),
)


def spread(results: list[AgentResult], sdk: AgentResult | None) -> list[str]:
    """How much the per-round values moved: the range of each agent's values and, since
    the agents ran interleaved, the range of its round-by-round ratio to ``sdk``."""
    if not any(len(r.values.get(key, [])) > 1 for r in results for _, _, key in SPREAD_KEYS):
        return []
    lines = [
        "",
        "Spread over the rounds (lowest to highest per-round value; in brackets, the range of the "
        "round-by-round ratio to `sdk`, the agents having run back to back in each round):",
        "",
        "| scenario | metric | " + " | ".join(f"`{r.spec.name}`" for r in results) + " |",
        "|---|---|" + "---|" * len(results),
    ]
    for scenario, label, key in SPREAD_KEYS:
        cells = []
        for result in results:
            values = [v for v in result.values.get(key, []) if isinstance(v, (int, float))]
            if not values:
                cells.append("—")
                continue
            text = f"{fmt_number(min(values))} to {fmt_number(max(values))}"
            theirs = [] if sdk is None or result is sdk else sdk.values.get(key, [])
            # round by round only when both have every round (a failed round would shift them)
            if theirs and len(theirs) == len(values) and all(theirs):
                ratios = [a / b for a, b in zip(values, theirs, strict=True)]
                text += f" ({min(ratios):.2f}x to {max(ratios):.2f}x)"
            cells.append(text)
        lines.append(f"| {scenario} | {label} | " + " | ".join(cells) + " |")
    return lines


def render(
    results: list[AgentResult], settings: Settings, elapsed: float, smoke: bool, command: str
) -> str:
    by_name = {r.spec.name: r for r in results}
    sdk = by_name.get("sdk")
    others = [r for r in results if r.spec.name != "sdk"] if sdk else []
    targets = Targets(by_name, settings)
    mode = "smoke (quick settings)" if smoke else settings.mode
    lines = [
        "# acp-agent benchmarks",
        "",
        f"Generated by `{command}`; do not edit by hand. "
        "See `benchmarks/README.md` for what each scenario measures.",
        "",
        f"- Date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- Mode: **{mode}**: {settings.rounds} rounds; S1 {settings.spawns_per_round} spawns "
        f"per round; S2 {settings.echo_turns} turns (+{settings.warmup_turns} warm-up); "
        f"S3 `/stream {settings.stream_count} {settings.stream_size}`; S4 {settings.reads} "
        f"reads; S5 {settings.big_size // MIB} MiB; S6 {settings.cancels_per_round} cancels "
        f"per round, {settings.cancel_after * 1e3:.0f} ms into `/sleep 10000`",
        f"- Run time: {elapsed:.1f} s",
        *machine_description(),
        "- Agents' environment: the driver's, without PYTHONDONTWRITEBYTECODE, with a per-run "
        "PYTHONPYCACHEPREFIX filled by one unmeasured warm-up start per agent and per-run "
        "XDG_DATA_HOME, XDG_STATE_HOME, XDG_CACHE_HOME and XDG_CONFIG_HOME under /tmp",
        "",
        "Agents:",
        "",
    ]
    for result in results:
        state = "" if result.started else f" — **did not start**: {result.start_error}"
        lines.append(f"- `{result.spec.name}`: `{result.spec.command}`{state}")
    header = ["scenario", "metric", *[f"`{r.spec.name}`" for r in results]]
    header += [f"{r.spec.name}/sdk" for r in others]
    if targets.ours is not None:
        header.append("target (acp-agent)")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows_for(settings):
        label = row.label + (" ↑" if row.higher_is_better else "")
        cells = [row.scenario, label, *[cell(r, row.key) for r in results]]
        cells += [ratio(r, sdk, row.key) for r in others]
        if targets.ours is not None:
            cells.append(targets.cell(row.key))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Medians over the rounds (S1 and S6: over every sample). ↑ = higher is better, otherwise "
        "lower is better. Ratios are agent ÷ `sdk` for the same metric. MB = 10^6 bytes.",
    ]
    lines += spread(results, sdk)
    if targets.ours is not None and targets.ours.started:
        met, judged = targets.summary()
        lines += ["", f"acp-agent targets met: **{met} of {judged}**."]
    elif targets.ours is not None:
        lines += ["", "acp-agent targets: **not judged, acp-agent did not start**."]
    floor = by_name.get("floor")
    if floor and sdk and floor.median("s3_rate") and sdk.median("s3_rate"):
        headroom = (floor.median("s3_rate") or 0) / (sdk.median("s3_rate") or 1)
        lines += [
            "",
            f"Driver headroom: the floor agent streams {headroom:.1f}x as many updates/s as "
            "`sdk` through the same driver, so the driver is not what limits the other agents.",
        ]
    durable = by_name.get("floor-sqlite")
    floor_turn = floor.median("s2_median") if floor else None
    durable_turn = durable.median("s2_median") if durable else None
    if floor_turn and durable_turn:
        lines += [
            "",
            f"Durable floor: the floor agent committing each turn to SQLite before answering "
            f"(`floor-sqlite`) takes {fmt_number(durable_turn)} µs per S2 turn, "
            f"{durable_turn / floor_turn:.2f}x the floor's {fmt_number(floor_turn)} µs: what "
            "one SQLite commit per turn, before its answer, adds on this machine.",
        ]
    failures = [
        f"- `{r.spec.name}` {scenario}: {reason}"
        for r in results
        for scenario, reasons in r.failures.items()
        for reason in dict.fromkeys(reasons)
    ]
    if failures:
        lines += ["", "## Failures", "", *failures]
    return "\n".join(lines) + "\n"


def incomplete(results: list[AgentResult]) -> list[str]:
    """Smoke verdict: the scenarios that did not complete for an agent that started."""
    problems = []
    for result in results:
        if not result.started:
            continue
        for scenario in SCENARIOS:
            if result.failures.get(scenario):
                problems.append(f"{result.spec.name} {scenario}: {result.failures[scenario][0]}")
    if not any(r.started for r in results):
        problems.append("no agent started")
    return problems


# --------------------------------------------------------------------------- command line


def default_agents() -> list[AgentSpec]:
    peers = BENCH_DIR / "peers"
    return [
        AgentSpec("acp-agent", [sys.executable, "-m", "acp_agent"]),
        AgentSpec("sdk", [sys.executable, str(peers / "sdk_agent.py")]),
        AgentSpec("floor", [sys.executable, str(peers / "floor_agent.py")]),
        AgentSpec("floor-sqlite", [sys.executable, str(peers / "floor_agent.py"), "--sqlite"]),
    ]


def parse_agent(value: str) -> AgentSpec:
    name, sep, command = value.partition("=")
    if not sep or not name or not command.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=COMMAND, got {value!r}")
    return AgentSpec(name.strip(), shlex.split(command))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark ACP agents (reference-agent contract) over stdio.",
    )
    parser.add_argument(
        "--agent",
        action="append",
        type=parse_agent,
        metavar="NAME=COMMAND",
        help="an agent to run (repeatable); default: acp-agent, sdk, floor and floor-sqlite",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer rounds, smaller counts")
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="quick mode; exit 1 unless every scenario completed for every agent that started",
    )
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument(
        "--output",
        type=Path,
        help="where to write the markdown report (default: benchmarks/RESULTS.md; "
        "--smoke writes none unless given)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = QUICK if args.quick or args.smoke else FULL
    if args.rounds:
        settings = Settings(**{**settings.__dict__, "rounds": args.rounds})
    specs: list[AgentSpec] = args.agent or default_agents()
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        print(f"duplicate agent names: {names}", file=sys.stderr)
        return 2

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    began = time.perf_counter()
    results = asyncio.run(run_benchmarks(specs, settings, log))
    elapsed = time.perf_counter() - began
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    report = render(results, settings, elapsed, args.smoke, command)
    print(report)
    output = args.output or (None if args.smoke else BENCH_DIR / "RESULTS.md")
    if output is not None:
        output.write_text(report, encoding="utf-8")
        log(f"wrote {output}")
    if args.smoke:
        problems = incomplete(results)
        for problem in problems:
            log(f"smoke: FAILED {problem}")
        if problems:
            return 1
        log("smoke: every scenario completed for every agent that started")
    return 0
