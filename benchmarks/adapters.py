"""Our pydantic-ai adapter against acpkit's ``pydantic-acp``, side by side, on the fake endpoint.

    python -m benchmarks.adapters [--runs 5] [--peer-venv /tmp/acp-bench-pydantic-acp]

Both serve the same pydantic-ai agent (``benchmarks/adapter_agent.py``: the fake model, one
plain tool ``add``): ours with ``acp-agent-kit --store memory --agent
benchmarks.adapter_agent:agent``, theirs with ``run_acp(agent=agent)`` of
``pydantic-acp==1.10.0``, which this script installs into a throw-away virtualenv (never a
dependency of the project). Runs alternate between the
two. Each run starts a fresh process and measures, with the raw JSON-RPC client below:

- the time from the spawn to the ``initialize`` answer;
- the first turn of a session (``fake:cold``: one short answer), whole;
- then the median of 5 such trivial turns: the time to the first ``agent_message_chunk`` and
  to the answer, and of 5 two-tool turns (the model calls ``add`` twice in one response,
  then answers): the whole turn;
- the RSS added by each of 20 idle sessions (``session/new``), from ``/proc``.

Medians are printed as a table. It imports nothing from ``acp_agent`` but the fake endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
PEER_PACKAGES = ("pydantic-acp==1.10.0",)
IDLE_SESSIONS = 20
TURNS = 5
TRIVIAL = "fake:cold"
TWO_TOOLS = "fake:call add a=1 b=2 ; add a=3 b=4"


class Wire:
    """Newline-delimited JSON-RPC to one agent process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        await self.proc.stdin.drain()

    async def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        if not line:
            raise EOFError("the agent closed its output")
        message: dict[str, Any] = orjson.loads(line)
        return message

    async def call(self, method: str, params: Any, on_update: Any = None) -> Any:
        self.next_id += 1
        request_id = self.next_id
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            message = await self.receive()
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result")
            if "method" in message and "id" in message:  # a request of the agent's: refuse
                await self.send(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "error": {"code": -32601, "message": "no"},
                    }
                )
            elif on_update is not None and message.get("method") == "session/update":
                on_update(message["params"]["update"])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def one_run(command: list[str], env: dict[str, str], cwd: str) -> dict[str, float]:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=str(ROOT),
        limit=64 * 1024 * 1024,
    )
    wire = Wire(proc)
    try:
        await wire.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        figures = {"initialize_s": time.perf_counter() - start}
        new = {"cwd": cwd, "mcpServers": []}
        session = (await wire.call("session/new", new))["sessionId"]
        first: list[float] = []

        def seen(update: dict[str, Any]) -> None:
            if update.get("sessionUpdate") == "agent_message_chunk" and not first:
                first.append(time.perf_counter())

        async def turn(text: str) -> tuple[float, float]:
            first.clear()
            prompt = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
            began = time.perf_counter()
            await wire.call("session/prompt", prompt, seen)
            ended = time.perf_counter()
            return ((first[0] if first else ended) - began) * 1e3, (ended - began) * 1e3

        figures["first_turn_ms"] = (await turn(TRIVIAL))[1]
        trivial = [await turn(TRIVIAL) for _ in range(TURNS)]
        figures["first_chunk_ms"] = statistics.median(t[0] for t in trivial)
        figures["trivial_turn_ms"] = statistics.median(t[1] for t in trivial)
        two_tools = [await turn(TWO_TOOLS) for _ in range(TURNS)]
        figures["two_tool_turn_ms"] = statistics.median(t[1] for t in two_tools)
        before = rss_kib(proc.pid)
        for _ in range(IDLE_SESSIONS):
            await wire.call("session/new", new)
        figures["rss_per_session_kib"] = (rss_kib(proc.pid) - before) / IDLE_SESSIONS
        return figures
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


def peer_python(venv: Path) -> Path:
    """The throw-away virtualenv's python, with pydantic-acp installed (made if missing)."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import pydantic_acp"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    return python


def fake_endpoint() -> str:
    """Start the fake endpoint in a thread of its own; its base URL."""
    import anyio

    from acp_agent.llm.fake_server import FakeModelServer

    ready: list[str] = []
    started = threading.Event()

    async def serve() -> None:
        async with FakeModelServer.running() as server:
            ready.append(server.base_url)
            started.set()
            await anyio.sleep_forever()

    threading.Thread(target=anyio.run, args=(serve,), daemon=True).start()
    started.wait(30)
    return ready[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adapters")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--peer-venv", type=Path, default=Path("/tmp/acp-bench-pydantic-acp"))
    args = parser.parse_args(argv)
    env = dict(os.environ, ACP_FAKE_BASE_URL=fake_endpoint(), PYTHONPATH=str(ROOT))
    spec = "benchmarks.adapter_agent:agent"
    agents = {
        "ours": [sys.executable, "-m", "acp_agent", "--store", "memory", "--agent", spec],
        "pydantic-acp": [str(peer_python(args.peer_venv)), "-m", "benchmarks.adapter_agent"],
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in agents}
    cwd = str(ROOT)
    for _ in range(args.runs + 1):  # the first round warms the bytecode caches, unmeasured
        for name, command in agents.items():
            figures = asyncio.run(one_run(command, env, cwd))
            results[name].append(figures)
    keys = list(results["ours"][0])
    print(f"| figure (median of {args.runs}) | " + " | ".join(agents) + " |")
    print("|---|" + "---|" * len(agents))
    for key in keys:
        row = [statistics.median(r[key] for r in results[name][1:]) for name in agents]
        print(f"| {key} | " + " | ".join(f"{v:.3g}" for v in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
