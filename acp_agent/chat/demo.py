"""``acp-agent-kit demo``: one scripted session through the real server, checked step by step.

The demo starts ``python -m acp_agent --store memory`` as a subprocess (or the agent
command given after ``--``, which must follow ``reference-agent.md``), connects to it
with the chat's client over real pipes, and drives one session in a temporary
directory: echo, streaming, a thought, a plan, tool calls, a file read, a
permission-gated file write (allowed, then rejected, then in mode ``auto``), a
terminal command and a cancelled ``/sleep``. It prints what the agent sent, checks
each step's updates and stop reason against the contract, and ends with
``demo: N/N steps passed``. Exit code 0 only if every step passed.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from acp_agent._loop import Backend, run
from acp_agent.errors import AcpError, ConnectionClosed, RequestError

from .client import AcpClient, open_client
from .command import split_command
from .render import Renderer

Update = dict[str, Any]


class StepFailed(Exception):
    """A step did not behave as the contract says."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise StepFailed(message)


@dataclass
class Recorder:
    """The demo's Observer: shows everything, records what the current step saw."""

    renderer: Renderer
    updates: list[Update] = field(default_factory=list)
    served: list[str] = field(default_factory=list)
    permissions: list[dict[str, Any]] = field(default_factory=list)
    answer: str = "allow_once"

    def reset(self) -> None:
        self.updates, self.served, self.permissions = [], [], []

    def update(self, session_id: str, update: Update) -> None:
        self.updates.append(update)
        self.renderer.update(session_id, update)

    def notice(self, method: str, params: dict[str, Any]) -> None:
        self.served.append(method)
        self.renderer.notice(method, params)

    async def allow_terminal(self, params: dict[str, Any]) -> bool:
        return True  # the demo's own /run step asks for its scripted command

    async def ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        self.permissions.append(params)
        options = {o.get("optionId") for o in params.get("options", [])}
        self.renderer.info(
            f"permission asked ({', '.join(sorted(map(str, options)))}): {self.answer}"
        )
        return {"outcome": "selected", "optionId": self.answer}

    def kinds(self) -> list[str]:
        return [str(u.get("sessionUpdate")) for u in self.updates]

    def of(self, kind: str) -> list[Update]:
        return [u for u in self.updates if u.get("sessionUpdate") == kind]

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [str(u.get("content", {}).get("text")) for u in self.of(kind)]


@dataclass
class Demo:
    client: AcpClient
    recorder: Recorder
    console: Console
    root: Path
    step_timeout: float = 10.0
    session_id: str = ""
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    gone: bool = False  # the agent exited: no step can run

    async def prompt(self, text: str) -> str:
        self.recorder.renderer.line(Text(f"> {text}", style="bold"))
        stop = await self.client.prompt(self.session_id, text)
        self.recorder.renderer.info(f"[{stop}]")
        return stop

    async def step(self, title: str, body: Callable[[], Awaitable[str]]) -> None:
        self.console.print(Rule(title, align="left", style="blue"))
        self.recorder.reset()
        try:
            with anyio.fail_after(self.step_timeout):
                summary = await body()
        except TimeoutError:
            self.failed.append(title)
            self.recorder.renderer.error(f"✗ {title}: no answer within {self.step_timeout:g} s")
            return
        except ConnectionClosed:
            self.failed.append(title)
            self.gone = True
            code = await self.client.agent.exit_code()
            how = "closed its output" if code is None else f"exited with code {code}"
            self.recorder.renderer.error(f"✗ {title}: the agent {how}; is it an ACP agent?")
            return
        except (StepFailed, RequestError) as exc:
            self.failed.append(title)
            self.recorder.renderer.line(Text(f"✗ {title}: {exc}", style="bold red"))
            return
        self.passed += 1
        self.recorder.renderer.line(Text(f"✓ {summary}", style="green"))

    # -- the steps ------------------------------------------------------------------

    async def start(self) -> str:
        try:
            info = await self.client.initialize()
        except RequestError as exc:
            raise StepFailed(
                f"the command did not answer as an ACP agent (initialize: {exc.code} {exc.message})"
            ) from None
        caps = info.get("agentCapabilities", {})
        check(info.get("protocolVersion") == 1, f"protocol version {info.get('protocolVersion')}")
        session = await self.client.new_session(str(self.root))
        self.session_id = str(session.get("sessionId"))
        modes = [m.get("id") for m in session.get("modes", {}).get("availableModes", [])]
        check(modes == ["ask", "auto"], f"modes {modes}, expected ask and auto")
        options = {o.get("id"): o for o in session.get("configOptions", [])}
        check(options.get("mode", {}).get("category") == "mode", "no config option `mode`")
        self.recorder.renderer.info(f"session {self.session_id} in {self.root}")
        return f"initialized (loadSession={caps.get('loadSession')}), session with modes {modes}"

    async def echo(self) -> str:
        stop = await self.prompt("/echo Hello from the acp-agent demo!")
        commands = self.client_commands()
        check("echo" in commands and "help" in commands, "no available_commands_update seen")
        check(stop == "end_turn", f"stop reason {stop}")
        check(self.recorder.kinds() == ["agent_message_chunk"], f"updates {self.recorder.kinds()}")
        check(
            self.recorder.texts() == ["Hello from the acp-agent demo!"],
            f"text {self.recorder.texts()}",
        )
        return f"echo: one message chunk, end_turn ({len(commands)} commands advertised)"

    def client_commands(self) -> list[str]:
        return list(self.recorder.renderer.commands)

    async def stream(self) -> str:
        stop = await self.prompt("/stream 20 8")
        texts = self.recorder.texts()
        check(stop == "end_turn", f"stop reason {stop}")
        check(len(texts) == 20 and all(len(t) == 8 for t in texts), f"{len(texts)} chunks")
        return "stream: 20 message chunks of 8 characters, in order"

    async def think(self) -> str:
        stop = await self.prompt("/think Reasoning happens here.")
        check(stop == "end_turn", f"stop reason {stop}")
        check(
            self.recorder.texts("agent_thought_chunk") == ["Reasoning happens here."], "no thought"
        )
        return "think: one thought chunk"

    async def plan(self) -> str:
        stop = await self.prompt("/plan 3")
        plans = [[e.get("status") for e in p.get("entries", [])] for p in self.recorder.of("plan")]
        check(stop == "end_turn", f"stop reason {stop}")
        expected = [
            ["pending"] * 3,
            ["completed", "pending", "pending"],
            ["completed", "completed", "pending"],
            ["completed"] * 3,
        ]
        check(plans == expected, f"plans {plans}")
        return "plan: 3 steps, completed one by one"

    async def tools(self) -> str:
        stop = await self.prompt("/tools 2")
        statuses = [u.get("status") for u in self.updates_of_tools()]
        check(stop == "end_turn", f"stop reason {stop}")
        check(statuses == ["pending", "in_progress", "completed"] * 2, f"statuses {statuses}")
        return "tools: 2 tool calls, pending -> in_progress -> completed"

    def updates_of_tools(self) -> list[Update]:
        return [
            u for u in self.recorder.updates if str(u.get("sessionUpdate")).startswith("tool_call")
        ]

    async def read(self) -> str:
        content = "line one\nline two\n"
        (self.root / "notes.txt").write_text(content, encoding="utf-8")
        stop = await self.prompt("/read notes.txt 2")
        check(stop == "end_turn", f"stop reason {stop}")
        check(self.recorder.served == ["fs/read_text_file"] * 2, f"served {self.recorder.served}")
        check(
            self.recorder.texts() == [f"read {2 * len(content)} chars"], f"{self.recorder.texts()}"
        )
        return "read: two fs/read_text_file calls, total reported"

    async def write_allowed(self) -> str:
        self.recorder.answer = "allow_once"
        stop = await self.prompt("/write hello.txt Hello, ACP!")
        self.check_write_call()
        check(len(self.recorder.permissions) == 1, "no permission request")
        check(stop == "end_turn", f"stop reason {stop}")
        written = (self.root / "hello.txt").read_text(encoding="utf-8")
        check(written == "Hello, ACP!", f"the file holds {written!r}")
        check(self.updates_of_tools()[-1].get("status") == "completed", "tool call not completed")
        return "write: edit tool call with a diff, permission allowed, file written"

    def check_write_call(self) -> None:
        calls = self.recorder.of("tool_call")
        check(len(calls) == 1 and calls[0].get("kind") == "edit", "no edit tool call")
        content = calls[0].get("content") or [{}]
        check(content[0].get("type") == "diff", "the tool call has no diff")

    async def write_rejected(self) -> str:
        self.recorder.answer = "reject_once"
        stop = await self.prompt("/write rejected.txt This must not be written.")
        self.check_write_call()
        check(stop == "end_turn", f"stop reason {stop}")
        check(not (self.root / "rejected.txt").exists(), "the file was written anyway")
        check(self.updates_of_tools()[-1].get("status") == "failed", "tool call not failed")
        return "write: permission rejected, tool call failed, nothing written"

    async def write_auto(self) -> str:
        self.recorder.renderer.line(Text("> (session/set_mode auto)", style="bold"))
        await self.client.set_mode(self.session_id, "auto")
        check(self.recorder.kinds() == ["config_option_update"], f"{self.recorder.kinds()}")
        self.recorder.reset()
        stop = await self.prompt("/write auto.txt Written without asking.")
        check(stop == "end_turn", f"stop reason {stop}")
        check(not self.recorder.permissions, "permission was asked in mode auto")
        check((self.root / "auto.txt").exists(), "the file was not written")
        return "mode auto: config option followed, /write wrote without asking"

    async def run(self) -> str:
        stop = await self.prompt("/run echo hello from a terminal; exit 3")
        check(stop == "end_turn", f"stop reason {stop}")
        served = self.recorder.served
        check(
            served[:1] == ["terminal/create"] and "terminal/release" in served, f"served {served}"
        )
        check(self.updates_of_tools()[-1].get("status") == "failed", "a non-zero exit did not fail")
        check(self.recorder.texts() == ["exit 3"], f"{self.recorder.texts()}")
        return "run: terminal created, waited on, read, released; exit 3 reported"

    async def cancel(self) -> str:
        self.recorder.renderer.line(Text("> /sleep 10000   (then session/cancel)", style="bold"))
        result: list[str] = []
        done = anyio.Event()

        async def prompt() -> None:
            result.append(await self.client.prompt(self.session_id, "/sleep 10000"))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            # The turn may not have started when a cancel arrives: repeat until it ends.
            while not done.is_set():
                await self.client.cancel(self.session_id)
                with anyio.move_on_after(0.05):
                    await done.wait()
        self.recorder.renderer.info(f"[{result[0]}]")
        check(result == ["cancelled"], f"stop reason {result}")
        check(not self.recorder.updates, f"updates {self.recorder.kinds()}")
        return "sleep: cancelled promptly with stopReason cancelled"


STEPS = [
    ("initialize and open a session", Demo.start),
    ("/echo", Demo.echo),
    ("/stream", Demo.stream),
    ("/think", Demo.think),
    ("/plan", Demo.plan),
    ("/tools", Demo.tools),
    ("/read", Demo.read),
    ("/write, allowed", Demo.write_allowed),
    ("/write, rejected", Demo.write_rejected),
    ("/write in mode auto", Demo.write_auto),
    ("/run", Demo.run),
    ("/sleep, cancelled", Demo.cancel),
]


async def run_demo(
    command: Sequence[str], console: Console, root: Path, step_timeout: float
) -> int:
    renderer = Renderer(console)
    recorder = Recorder(renderer)
    async with open_client(command, str(root), recorder) as client:
        renderer.terminal_lookup = client.workspace.terminal_output
        demo = Demo(client, recorder, console, root, step_timeout)
        for title, body in STEPS:
            await demo.step(title, functools.partial(body, demo))
            if demo.gone or (title.startswith("initialize") and demo.failed):
                break
    total = len(STEPS)
    console.print(Rule(style="blue"))
    style = "bold green" if demo.passed == total else "bold red"
    console.print(Text(f"demo: {demo.passed}/{total} steps passed", style=style))
    if demo.failed:
        console.print(Text("failed: " + ", ".join(demo.failed), style="red"))
        tail = list(client.agent.stderr_lines)[-20:]
        if tail:
            console.print(Text("agent stderr:\n" + "\n".join(tail), style="dim"))
    return 0 if demo.passed == total else 1


def main(
    argv: Sequence[str], *, backend: Backend = "auto", agent_options: Sequence[str] = ()
) -> int:
    own, command = split_command(argv)
    parser = argparse.ArgumentParser(
        prog="acp-agent-kit demo",
        usage="acp-agent-kit [OPTIONS] demo [-h] [--step-timeout SECONDS] [-- AGENT_COMMAND...]",
        description="Run the server as a subprocess through one scripted session and check "
        "every step against the reference-agent contract. An agent command after `--` "
        "replaces the default `python -m acp_agent --store memory`.",
    )
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="fail a step that takes longer (default 10)",
    )
    args = parser.parse_args(own)
    if command and agent_options:
        print(
            f"acp-agent-kit demo: {' '.join(agent_options)}: options before `demo` configure "
            "the server it starts; give them to the agent command after `--`",
            file=sys.stderr,
        )
        return 2
    command = command or [sys.executable, "-m", "acp_agent", "--store", "memory", *agent_options]
    console = Console(highlight=False, soft_wrap=True)
    try:
        with tempfile.TemporaryDirectory(prefix="acp-agent-demo-") as tmp:
            root = Path(os.path.realpath(tmp))
            demo = functools.partial(run_demo, command, console, root, args.step_timeout)
            return int(run(demo, backend=backend))
    except AcpError as exc:
        console.print(Text(f"demo: the agent failed: {exc}", style="bold red"))
        console.print(Text("demo: 0 steps passed", style="bold red"))
        return 1
