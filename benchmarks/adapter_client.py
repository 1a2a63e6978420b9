"""The adapter benchmark's client side: the agents it runs, a recording ACP client and turns.

It owns the list of agents (:func:`agent_specs`: this project's adapters and LLM agent, and
acpkit's ``pydantic-acp`` / ``langchain-acp`` (twice) from a throw-away virtualenv made by
:func:`peer_python`), :class:`Recorder` (the benchmark's raw client, which also keeps every
notification and agent request with its arrival time and answers permission requests as
told) and :func:`run_turn`. It does not own the timed figures or the report
(``benchmarks/adapters.py``) nor the defect checks (``benchmarks/adapter_checks.py``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.client import (
    INITIALIZE_PARAMS,
    AgentFailed,
    AgentProcess,
    AgentSpec,
    Message,
    prompt_params,
    result_of,
    spawn,
    wait_response,
)

#: the acpkit release the issue compared against, installed only into a throw-away venv
ACPKIT_VERSION = "1.10.0"
PEER_PACKAGES = [
    f"pydantic-acp=={ACPKIT_VERSION}",
    f"langchain-acp=={ACPKIT_VERSION}",
    "langchain-openai",
]
PEER_VENV = Path(
    os.environ.get("ACP_BENCH_PEER_VENV", f"/tmp/acp-bench-peers/acpkit-{ACPKIT_VERSION}")
)

OURS = {
    "ours-pydantic-ai": "benchmarks.peers.agent_pydantic:agent",
    "ours-langgraph": "benchmarks.peers.agent_langgraph:agent",
    "ours-openai-agents": "benchmarks.peers.agent_openai:agent",
}
#: acpkit's agents: the arguments of ``benchmarks/peers/acpkit_agents.py``. ``langchain-acp``
#: gets the quickstart's graph (no checkpointer: it forgets earlier turns), ``+memory`` the
#: same graph with one (it remembers them, as ours does: the same model input)
THEIRS = {
    "pydantic-acp": ["pydantic"],
    "langchain-acp": ["langchain"],
    "langchain-acp+memory": ["langchain", "--memory"],
}
#: which of ours each peer is compared with
PAIRS = {
    "pydantic-acp": "ours-pydantic-ai",
    "langchain-acp": "ours-langgraph",
    "langchain-acp+memory": "ours-langgraph",
}
LLM = "ours-llm"


def peer_python(log: Any) -> Path | None:
    """The throw-away venv's interpreter with acpkit installed (made once), or None."""
    python = PEER_VENV / "bin" / "python"
    marker = PEER_VENV / ".installed"
    if marker.exists():
        return python
    log(f"installing acpkit {ACPKIT_VERSION} into {PEER_VENV} (once)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES],
            check=True,
            timeout=900,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"  could not install acpkit: {exc}")
        return None
    marker.write_text("\n".join(PEER_PACKAGES) + "\n")
    return python


def peer_versions(python: Path) -> str:
    """``name version`` of the peer venv's relevant packages, one string."""
    names = ["pydantic-acp", "langchain-acp", "agent-client-protocol", "pydantic-ai-slim"]
    names += ["langchain", "langgraph"]
    code = (
        "import importlib.metadata as m, sys\n"
        "for n in sys.argv[1:]:\n"
        "    try: print(n, m.version(n))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    done = subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, check=False
    )
    return ", ".join(done.stdout.split("\n")[:-1])


def agent_specs(env: dict[str, str], peer: Path | None, names: list[str] | None) -> list[AgentSpec]:
    """Every agent the benchmark runs (``names`` narrows them), on the environment ``env``
    (which names the fake endpoint in ``ACP_FAKE_BASE_URL``)."""
    specs = [
        AgentSpec(name, [sys.executable, "-m", "acp_agent", "--agent", target], env)
        for name, target in OURS.items()
    ]
    base_url = env["ACP_FAKE_BASE_URL"]
    llm = [sys.executable, "-m", "acp_agent", "--model", "fake", "--base-url", base_url]
    specs.append(AgentSpec(LLM, llm, env))
    if peer is not None:
        specs += [
            AgentSpec(name, [str(peer), "-m", "benchmarks.peers.acpkit_agents", *args], env)
            for name, args in THEIRS.items()
        ]
    return [s for s in specs if names is None or s.name in names]


def for_checks(spec: AgentSpec, home: str) -> AgentSpec:
    """``spec`` for the defect checks: its own home and XDG directories (what it writes
    is searched for secrets), acpkit's agents on their file session store there (durable
    sessions, as ours are by default)."""
    env = dict(spec.env or {})
    env["HOME"] = home
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = str(Path(home) / name.lower())
    argv = spec.argv
    if spec.name in THEIRS:
        argv = [*argv, "--file-store", str(Path(home) / "acpkit-sessions")]
    return AgentSpec(spec.name, argv, env)


@dataclass
class Event:
    at: float
    message: Message

    @property
    def update(self) -> Message:
        return self.message.get("params", {}).get("update", {})  # type: ignore[no-any-return]


class Recorder(AgentProcess):
    """The benchmark client, keeping every notification and agent request in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Event] = []
        #: the ``kind`` of the permission option to pick; None dismisses the request
        self.permission: str | None = "allow_once"
        self.first_chunk = asyncio.Event()

    def _message(self, message: Message, received: float) -> None:
        if message.get("method") is None:
            super()._message(message, received)
            return
        self.log.append(Event(received, message))
        update = message.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            self.first_chunk.set()
        if "id" in message:
            self.write(orjson.dumps(self._answer_to(message)) + b"\n")

    def _answer_to(self, request: Message) -> Message:
        reply: Message = {"jsonrpc": "2.0", "id": request["id"]}
        if request["method"] != "session/request_permission":
            reply["error"] = {"code": -32601, "message": "Method not found"}
            return reply
        options = request["params"].get("options", [])
        chosen = next((o for o in options if o.get("kind") == self.permission), None)
        if chosen is None:
            reply["result"] = {"outcome": {"outcome": "cancelled"}}
        else:
            reply["result"] = {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}
        return reply

    async def call(self, method: str, params: Any, timeout: float = 60.0) -> Message:
        """Send a request; return the whole response message (result or error)."""
        future, _ = self.send_request(method, params)
        message, _ = await wait_response(future, timeout, method)
        self.check_output()
        return message


async def start(
    spec: AgentSpec, timeout: float, params: Message | None = None
) -> tuple[Recorder, float, Message]:
    """Spawn and initialize; return the agent, seconds to the answer, and the answer."""
    agent, started = await spawn(spec, protocol=Recorder)
    assert isinstance(agent, Recorder)
    try:
        future, _ = agent.send_request("initialize", params or INITIALIZE_PARAMS)
        try:
            message, received = await wait_response(future, timeout, "initialize")
        except AgentFailed as exc:
            tail = agent.stderr_tail()
            raise AgentFailed(f"{exc}" + (f"; stderr: {tail}" if tail else "")) from None
        agent.check_output()
    except BaseException:
        await agent.close()
        raise
    return agent, received - started, message


async def new_session(agent: Recorder, cwd: str, mcp: list[Message] | None = None) -> str:
    message = await agent.call("session/new", {"cwd": cwd, "mcpServers": mcp or []})
    return str(result_of(message, "session/new")["sessionId"])


@dataclass
class TurnResult:
    response: Message
    seconds: float
    #: seconds from the prompt's write to its first agent_message_chunk, if any
    first_chunk: float | None
    events: list[Event] = field(default_factory=list)

    @property
    def stop_reason(self) -> str | None:
        result = self.response.get("result")
        return result.get("stopReason") if isinstance(result, dict) else None

    @property
    def error(self) -> Message | None:
        error = self.response.get("error")
        return error if isinstance(error, dict) else None

    def updates(self, kind: str | None = None) -> list[Message]:
        found = [e.update for e in self.events if e.message.get("method") == "session/update"]
        return [u for u in found if kind is None or u.get("sessionUpdate") == kind]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"].get("text", "") for u in self.updates(kind))


async def run_turn(
    agent: Recorder, session_id: str, text: str, timeout: float, cancel_after_chunk: bool = False
) -> TurnResult:
    """One prompt turn; with ``cancel_after_chunk``, ``session/cancel`` at its first chunk."""
    mark = len(agent.log)
    agent.first_chunk.clear()
    future, sent = agent.send_request("session/prompt", prompt_params(session_id, text))
    if cancel_after_chunk:
        await asyncio.wait_for(agent.first_chunk.wait(), timeout)
        agent.notify("session/cancel", {"sessionId": session_id})
    message, received = await wait_response(future, timeout, "session/prompt")
    agent.check_output()
    events = agent.log[mark:]
    first = next(
        (e.at - sent for e in events if e.update.get("sessionUpdate") == "agent_message_chunk"),
        None,
    )
    return TurnResult(message, received - sent, first, events)
