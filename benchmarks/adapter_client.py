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
import contextlib
import importlib.util
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


#: a framework's agent served by ``acp-agent-kit --agent``
@dataclass(frozen=True)
class Ours:
    #: ``module:object`` for ``--agent``
    target: str
    #: modules the agent needs (the framework, the adapter): absent, it is skipped
    needs: tuple[str, ...] = ()


#: the peer packages a benchmark installs, each into its own throw-away venv
@dataclass(frozen=True)
class Kit:
    name: str
    packages: tuple[str, ...]
    #: the packages whose versions the report gives
    versions: tuple[str, ...]

    #: its venv's folder under /tmp/acp-bench-peers (``$ACP_BENCH_PEER_VENV`` for acpkit)
    folder: str

    @property
    def venv(self) -> Path:
        default = f"/tmp/acp-bench-peers/{self.folder}"
        if self.name == "acpkit":
            return Path(os.environ.get("ACP_BENCH_PEER_VENV", default))
        return Path(default)


#: the acpkit release the issue compared against, installed only into a throw-away venv
ACPKIT_VERSION = "1.10.0"
#: the deepagents-acp release compared against (the newest on the index when measured)
DEEPAGENTS_ACP_VERSION = "0.0.13"
KITS = {
    "acpkit": Kit(
        "acpkit",
        (f"pydantic-acp=={ACPKIT_VERSION}", f"langchain-acp=={ACPKIT_VERSION}", "langchain-openai"),
        (
            *("pydantic-acp", "langchain-acp", "agent-client-protocol", "pydantic-ai-slim"),
            *("langchain", "langgraph"),
        ),
        f"acpkit-{ACPKIT_VERSION}",
    ),
    "deepagents-acp": Kit(
        "deepagents-acp",
        (
            f"deepagents-acp=={DEEPAGENTS_ACP_VERSION}",
            "langchain-openai",
            "langgraph-checkpoint-sqlite",  # its durable sessions (the checks)
        ),
        ("deepagents-acp", "deepagents", "agent-client-protocol", "langchain", "langgraph"),
        f"deepagents-acp-{DEEPAGENTS_ACP_VERSION}",
    ),
}
PEER_PACKAGES = list(KITS["acpkit"].packages)
PEER_VENV = KITS["acpkit"].venv

OURS = {
    "ours-pydantic-ai": Ours("benchmarks.peers.agent_pydantic:agent"),
    "ours-langgraph": Ours("benchmarks.peers.agent_langgraph:agent"),
    "ours-openai-agents": Ours("benchmarks.peers.agent_openai:agent"),
    "ours-deepagents": Ours("benchmarks.peers.agent_deepagents:agent", ("deepagents",)),
    "ours-google-adk": Ours("benchmarks.peers.agent_adk:agent", ("google.adk",)),
    # the test agents of the adapters being written: skipped until their modules exist
    "ours-llama-index": Ours(
        "tests.adapters.li_agent:served",
        ("llama_index.core", "acp_agent.adapters.llama_index", "tests.adapters.li_agent"),
    ),
    "ours-strands": Ours(
        "tests.adapters.st_agent:served",
        ("strands", "acp_agent.adapters.strands", "tests.adapters.st_agent"),
    ),
}


#: a peer's agent: its kit and the arguments of its ``python -m`` module
@dataclass(frozen=True)
class Theirs:
    kit: str
    argv: tuple[str, ...]
    #: ``for_checks`` adds these (durable sessions), ``{home}`` the agent's home
    durable: tuple[str, ...]


#: acpkit's agents (``benchmarks/peers/acpkit_agents.py``): ``langchain-acp`` gets the
#: quickstart's graph (no checkpointer: it forgets earlier turns), ``+memory`` the same
#: graph with one (it remembers them, as ours does: the same model input); deepagents-acp
#: (``deepagents_acp_agent.py``) the Deep Agents graph ours serves
ACPKIT = ("-m", "benchmarks.peers.acpkit_agents")
ACPKIT_STORE = ("--file-store", "{home}/acpkit-sessions")
THEIRS = {
    "pydantic-acp": Theirs("acpkit", (*ACPKIT, "pydantic"), ACPKIT_STORE),
    "langchain-acp": Theirs("acpkit", (*ACPKIT, "langchain"), ACPKIT_STORE),
    "langchain-acp+memory": Theirs("acpkit", (*ACPKIT, "langchain", "--memory"), ACPKIT_STORE),
    "deepagents-acp": Theirs(
        "deepagents-acp",
        ("-m", "benchmarks.peers.deepagents_acp_agent"),
        ("--sqlite", "{home}/deepagents-acp/sessions.sqlite"),
    ),
}
#: which of ours each peer is compared with
PAIRS = {
    "pydantic-acp": "ours-pydantic-ai",
    "langchain-acp": "ours-langgraph",
    "langchain-acp+memory": "ours-langgraph",
    "deepagents-acp": "ours-deepagents",
}
LLM = "ours-llm"


def missing(ours: Ours) -> str | None:
    """The first module ``ours`` needs that is not there (None: it can run)."""
    for module in ours.needs:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return module
    return None


def kit_python(kit: Kit, log: Any) -> Path | None:
    """The interpreter of ``kit``'s throw-away venv, with its packages (made once), or None."""
    python = kit.venv / "bin" / "python"
    marker = kit.venv / ".installed"
    if marker.exists() and marker.read_text().split() == list(kit.packages):
        return python
    log(f"installing {' '.join(kit.packages)} into {kit.venv} (once)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(kit.venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *kit.packages],
            check=True,
            timeout=900,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"  could not install {kit.name}: {exc}")
        return None
    marker.write_text("\n".join(kit.packages) + "\n")
    return python


def peer_python(log: Any) -> Path | None:
    """acpkit's interpreter (``kit_python``), for the benchmarks that run acpkit only."""
    return kit_python(KITS["acpkit"], log)


def kit_versions(kit: Kit, python: Path) -> str:
    """``name version`` of the kit venv's relevant packages, one string."""
    code = (
        "import importlib.metadata as m, sys\n"
        "for n in sys.argv[1:]:\n"
        "    try: print(n, m.version(n))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    done = subprocess.run(
        [str(python), "-c", code, *kit.versions], capture_output=True, text=True, check=False
    )
    return ", ".join(done.stdout.split("\n")[:-1])


def peer_versions(python: Path) -> str:
    return kit_versions(KITS["acpkit"], python)


def agent_specs(
    env: dict[str, str],
    peers: dict[str, Path] | Path | None,
    names: list[str] | None,
    skipped: list[str] | None = None,
) -> list[AgentSpec]:
    """Every agent the benchmark runs (``names`` narrows them), on the environment ``env``
    (which names the fake endpoint in ``ACP_FAKE_BASE_URL``); ``peers``: each kit's
    interpreter (a bare path: acpkit's). An agent whose modules are absent is left out,
    with one line in ``skipped``."""
    if isinstance(peers, Path):
        peers = {"acpkit": peers}
    specs = []
    for name, ours in OURS.items():
        if names is not None and name not in names:
            continue
        absent = missing(ours)
        if absent is not None:
            if skipped is not None:
                skipped.append(f"{name}: skipped, {absent} is not installed or not written yet")
            continue
        specs.append(
            AgentSpec(name, [sys.executable, "-m", "acp_agent", "--agent", ours.target], env)
        )
    base_url = env["ACP_FAKE_BASE_URL"]
    llm = [sys.executable, "-m", "acp_agent", "--model", "fake", "--base-url", base_url]
    specs.append(AgentSpec(LLM, llm, env))
    for name, theirs in THEIRS.items():
        python = (peers or {}).get(theirs.kit)
        if python is not None:
            specs.append(AgentSpec(name, [str(python), *theirs.argv], env))
    return [s for s in specs if names is None or s.name in names]


def for_checks(spec: AgentSpec, home: str) -> AgentSpec:
    """``spec`` for the defect checks: its own home and XDG directories (what it writes
    is searched for secrets), the peers' agents on their durable session stores there (as
    ours are by default)."""
    env = dict(spec.env or {})
    env["HOME"] = home
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = str(Path(home) / name.lower())
    argv = spec.argv
    if spec.name in THEIRS:
        argv = [*argv, *(a.replace("{home}", home) for a in THEIRS[spec.name].durable)]
    return AgentSpec(spec.name, argv, env)


@dataclass
class Event:
    at: float
    message: Message

    @property
    def update(self) -> Message:
        return self.message.get("params", {}).get("update", {})  # type: ignore[no-any-return]


#: :attr:`Recorder.permission`: a permission request is left unanswered
HOLD = "hold"


class Recorder(AgentProcess):
    """The benchmark client, keeping every notification and agent request in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Event] = []
        #: the ``kind`` of the permission option to pick; None dismisses the request,
        #: :data:`HOLD` leaves it unanswered
        self.permission: str | None = "allow_once"
        self.first_chunk = asyncio.Event()
        self.asked = asyncio.Event()

    def _message(self, message: Message, received: float) -> None:
        if message.get("method") is None:
            super()._message(message, received)
            return
        self.log.append(Event(received, message))
        update = message.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            self.first_chunk.set()
        if message.get("method") == "session/request_permission":
            self.asked.set()
            if self.permission == HOLD:
                return
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

    async def kill(self) -> None:
        """SIGKILL, as a crash or a closed laptop does: no chance to save anything."""
        if self.transport is not None and not self.exited.done():
            with contextlib.suppress(ProcessLookupError):
                self.transport.kill()
        await self.close()

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
