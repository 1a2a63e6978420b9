"""The benchmark's scenarios (S1-S6) and the interleaved rounds that run them.

It owns what each scenario sends and checks, which values it records in an `AgentResult`,
the agents' environment, the warm-up start and the order of the rounds. It does not own the
client plumbing (`client.py`), the report (`report.py`) or the command line (`driver.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from benchmarks.client import (
    AgentFailed,
    AgentProcess,
    AgentSpec,
    Message,
    Settings,
    describe,
    initialize,
    open_session,
    prompt_params,
    result_of,
    spawn,
    turn,
    wait_response,
)

SMALL_CONTENT = "hello, world\n"


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


async def big_turn(
    spec: AgentSpec,
    settings: Settings,
    result: AgentResult,
    cwd: str,
    key: str,
    run: Callable[[AgentProcess, str], Awaitable[float]],
) -> None:
    """One S5 turn in an agent of its own: ``run`` does it and returns its duration in seconds.

    Records ``{key}_ms``, the peak RSS ``{key}_hwm``, its growth over the RSS before the turn
    ``{key}_growth``, and ``{key}_ok``, False if anything failed."""
    try:
        agent, session_id = await open_session(spec, settings, cwd)
    except Exception:
        result.add(f"{key}_ok", False)
        raise
    try:
        agent.last_text = None
        before = agent.memory_mb("VmRSS")
        duration = await run(agent, session_id)
        result.add(f"{key}_ms", duration * 1e3)
        peak = agent.memory_mb("VmHWM")
        result.add(f"{key}_hwm", peak)
        result.add(f"{key}_growth", peak - before)
        result.add(f"{key}_ok", True)
    except Exception as exc:
        result.add(f"{key}_ok", False)
        raise AgentFailed(describe(exc) + stderr_note(agent)) from None
    finally:
        agent.last_text = None
        await agent.close()


async def scenario_big_read(
    spec: AgentSpec, settings: Settings, result: AgentResult, cwd: str, big: BigPayloads
) -> None:
    """S5 read: `/read big.txt` answered with one fs/read_text_file result of `big.size` chars."""

    def answer(request: Message) -> list[bytes]:
        request_id = orjson.dumps(request["id"])
        head = b'{"jsonrpc":"2.0","id":' + request_id + b',"result":{"content":'
        return [head, big.content_json, b"}}\n"]

    async def run(agent: AgentProcess, session_id: str) -> float:
        agent.on_request = answer
        duration = await turn(agent, session_id, "/read big.txt", settings.big_timeout)
        expected = f"read {big.size} chars"
        if agent.last_text != expected:
            raise AgentFailed(f"/read answered {agent.last_text!r}, expected {expected!r}")
        return duration

    await big_turn(spec, settings, result, cwd, "s5_read", run)


async def scenario_big_echo(
    spec: AgentSpec, settings: Settings, result: AgentResult, cwd: str, big: BigPayloads
) -> None:
    """S5 echo: a `/echo` prompt whose text block is `big.size` characters."""

    async def run(agent: AgentProcess, session_id: str) -> float:
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
        return received - sent

    await big_turn(spec, settings, result, cwd, "s5_echo", run)


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
