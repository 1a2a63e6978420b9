"""`python -m benchmarks.turn_hops`: what one `/echo hi` turn costs the agent, in counts.

Deterministic counts, not timings, so that a loaded machine does not blur them. The agent
(`python -m acp_agent --store memory` unless `--agent` says otherwise) is driven by the
benchmark's client through warm-up turns, then `--turns` measured ones:

- under cProfile (switched on around the measured turns by `benchmarks/peers/profiled.py`):
  Python calls, anyio tasks started (`TaskGroup._spawn`), `anyio.Event`s and cancel scopes
  made, `wait_readable` / `wait_writable` calls, and the `write` / `readv` calls the process
  made from Python, each per turn;
- with `--strace`, twice more under `strace -c -f` (the turns, then twice as many): the
  difference of the two runs' system call counts, per turn, so that start-up cancels out.

Each figure is per turn, rounded to two decimals. The counts are for the asyncio backends
(uvloop by default); the function names are anyio 4's.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import pstats
import shlex
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anyio._backends import _asyncio as anyio_asyncio
from anyio._core import _sockets as anyio_sockets

from benchmarks.client import QUICK, AgentSpec, open_session, turn
from benchmarks.turn_cost import switch

PROFILED = Path(__file__).parent / "peers" / "profiled.py"
WARMUP = 50
SYSCALLS = ("write", "writev", "read", "readv", "epoll_wait", "epoll_pwait", "epoll_ctl", "futex")


def _key(fn: object) -> tuple[str, int, str]:
    code = inspect.unwrap(fn).__code__  # type: ignore[call-overload]
    return (code.co_filename, code.co_firstlineno, code.co_name)


COUNTED = {
    "tasks started": [_key(anyio_asyncio.TaskGroup._spawn)],
    "anyio events": [_key(anyio_asyncio.Event.__init__)],
    "cancel scopes": [_key(anyio_asyncio.CancelScope.__init__)],
    "wait_readable/writable": [
        _key(anyio_sockets.wait_readable),
        _key(anyio_sockets.wait_writable),
    ],
}
BUILTINS = {
    "write calls (Python)": "<built-in method posix.write>",
    "readv calls (Python)": "<built-in method posix.readv>",
}


def _made(stats: dict[tuple[str, int, str], Any], key: tuple[str, int, str]) -> int:
    """Calls of ``key``; for the backend's ``__init__``s, the objects made: ``anyio.Event()``
    runs the backend class's ``__init__`` twice (once in ``create_event``, once more as
    ``type.__call__`` of the public class), so only the calls made from the backend's
    own module count."""
    if key not in stats:
        return 0
    if key[2] != "__init__":
        return int(stats[key][1])
    callers = stats[key][4]
    return sum(entry[1] for caller, entry in callers.items() if caller[0] == key[0])


def _env(home: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = os.path.join(home, name.lower())
    return env


async def _drive(spec: AgentSpec, turns: int, profile: Path | None) -> None:
    agent, sid = await open_session(spec, QUICK, os.getcwd())
    try:
        for _ in range(WARMUP):
            await turn(agent, sid, "/echo hi", 30.0)
        if profile is not None:
            await switch(agent, signal.SIGUSR1, Path(f"{profile}.ack"), "on")  # type: ignore[arg-type]
        for _ in range(turns):
            await turn(agent, sid, "/echo hi", 30.0)
        if profile is not None:
            await switch(agent, signal.SIGUSR2, Path(f"{profile}.ack"), "off")  # type: ignore[arg-type]
    finally:
        await agent.close()


def profile_counts(argv: list[str], turns: int, home: str) -> dict[str, float]:
    out = Path(home) / "turn"
    spec = AgentSpec("agent", [sys.executable, str(PROFILED), str(out), *argv], _env(home))
    asyncio.run(_drive(spec, turns, out))
    stats = pstats.Stats(f"{out}.1.prof").stats  # type: ignore[attr-defined]
    counts = {"Python calls": sum(entry[1] for entry in stats.values()) / turns}
    for label, keys in COUNTED.items():
        counts[label] = sum(_made(stats, k) for k in keys) / turns
    for label, name in BUILTINS.items():
        counts[label] = sum(v[1] for k, v in stats.items() if k[2] == name) / turns
    return counts


def _strace(argv: list[str], turns: int, home: str) -> Counter[str]:
    out = Path(home) / f"strace.{turns}"
    # argv[1:] after "-m": the agent module and its arguments
    spec = AgentSpec(
        "agent", ["strace", "-c", "-f", "-o", str(out), sys.executable, *argv], _env(home)
    )
    asyncio.run(_drive(spec, turns, None))
    counts: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] in SYSCALLS and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts


def strace_counts(argv: list[str], turns: int, home: str) -> dict[str, float]:
    once, twice = _strace(argv, turns, home), _strace(argv, 2 * turns, home)
    return {f"{name} syscalls": (twice[name] - once[name]) / turns for name in SYSCALLS}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turn_hops", description=__doc__)
    parser.add_argument(
        "--agent",
        default="-m acp_agent --store memory",
        help="the agent's arguments after the interpreter (default: %(default)s)",
    )
    parser.add_argument("--turns", type=int, default=500, help="measured turns (default 500)")
    parser.add_argument("--strace", action="store_true", help="also count system calls")
    args = parser.parse_args(argv)
    agent_argv = shlex.split(args.agent)
    with tempfile.TemporaryDirectory(prefix="turn-hops-") as home:
        counts = profile_counts(agent_argv, args.turns, home)
        if os.environ.get("TURN_HOPS_KEEP"):
            shutil.copy(Path(home) / "turn.1.prof", os.environ["TURN_HOPS_KEEP"])
        if args.strace:
            if shutil.which("strace") is None:
                raise SystemExit("--strace needs strace on the PATH")
            counts.update(strace_counts(agent_argv, args.turns, home))
    print(f"per `/echo hi` turn, {args.turns} turns, agent: {args.agent}")
    for label, value in counts.items():
        print(f"  {label:26} {value:10.2f}")


if __name__ == "__main__":
    main()
