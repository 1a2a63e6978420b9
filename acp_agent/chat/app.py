"""``acp-agent-kit chat``: talk to any ACP agent from the terminal.

The chat launches the agent command (this package's own server by default, with the
options given before ``chat``), opens one session in the working directory and then
reads prompts: each line is sent as a ``session/prompt`` and the agent's updates are
shown as they stream in, with a status line while the turn runs. Ctrl-C during a turn
sends ``session/cancel``; a second Ctrl-C (or Ctrl-D at the prompt) quits. Slash
commands advertised by the agent complete with Tab. A program that does not answer
``initialize`` as an ACP agent is reported in one line.

Permission questions and the agent's terminal commands are asked of the person. With a
piped stdin the chat reads prompts line by line so it can be scripted; questions are
then never read from stdin: ``--auto-approve`` allows, otherwise they are rejected
with a line saying so (``--allow-terminals`` lets terminal commands run).

Local commands (not sent to the agent) are listed at start and by ``/?``.

Whatever ends the chat (the person, an error, SIGTERM or SIGHUP), the agent's process
group is stopped.

Exit codes: 0 when the chat ends normally, 1 when the agent fails or exits, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from rich.console import Console
from rich.text import Text

from acp_agent._loop import Backend, run
from acp_agent.errors import AcpError, ConnectionClosed, RequestError
from acp_agent.transport.remote import read_token, tls_context

from .client import AcpClient, default_agent_command, open_client
from .lines import LineReader
from .render import Renderer

LOCAL_COMMANDS = {
    "/?": "list the chat's own commands and keys",
    "/mode": "show or set the session mode: /mode [ID]",
    "/stderr": "show the agent's stderr",
    "/quit": "leave the chat",
}
KEYS = "Tab completes a command; Ctrl-C cancels the running turn (twice: quits); Ctrl-D quits"
USAGE = (
    "acp-agent-kit [OPTIONS] chat [-h] [--auto-approve | --auto-reject] [--allow-terminals]\n"
    "                          [--cwd DIR] [--init-timeout SECONDS] [-- AGENT_COMMAND...]"
)
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-agent-kit chat",
        usage=USAGE,
        description="Talk to an ACP agent from the terminal. The agent command comes after "
        "`--` (default: this package's own server, given the OPTIONS before `chat`). "
        "Local commands: "
        + "; ".join(f"{k}: {v}" for k, v in LOCAL_COMMANDS.items())
        + f". {KEYS}. With a piped stdin, questions are answered by --auto-approve or "
        "rejected.",
    )
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument(
        "--auto-approve",
        action="store_true",
        help="allow every permission request and terminal command without asking",
    )
    answer.add_argument(
        "--auto-reject", action="store_true", help="reject every permission request"
    )
    parser.add_argument(
        "--allow-terminals",
        action="store_true",
        help="run the agent's terminal commands without asking",
    )
    parser.add_argument(
        "--cwd",
        default=os.getcwd(),
        help="the session's working directory; files and terminals are confined to it "
        "(default: the current directory)",
    )
    parser.add_argument(
        "--url",
        help="talk to the agent served at this URL (ws://HOST:PORT/acp, wss://, http://, "
        "https://) "
        "instead of starting one",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="with --url: send the token in this file (a bare token, or the first "
        "`<principal> <token>` line)",
    )
    parser.add_argument(
        "--ca-file",
        metavar="PATH",
        help="with an https:// or wss:// --url: trust the server certificates this PEM "
        "file signs (default: the system's authorities)",
    )
    parser.add_argument(
        "--init-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up when the agent has not answered initialize by then (default 30)",
    )
    return parser


class ChatApp:
    """One chat: an agent, a session, a loop of prompts."""

    def __init__(
        self,
        command: list[str],
        cwd: str,
        *,
        approve: bool | None,
        console: Console,
        allow_terminals: bool = False,
        init_timeout: float = 30.0,
    ) -> None:
        self.command = command
        self.cwd = cwd
        self.approve = approve  # None: ask the person (reject when stdin is piped)
        self.allow_terminals = allow_terminals or approve is True
        self.init_timeout = init_timeout
        self.console = console
        self.interactive = sys.stdin.isatty()
        self.renderer = Renderer(console)
        self.reader = LineReader(self.interactive, self._completions)
        self.client: AcpClient | None = None
        self.session_id = ""
        self.in_turn = False
        self.cancelling = False
        self.interrupts = 0
        self.quit_scope: anyio.CancelScope | None = None
        self.url: str | None = None  # talk to a remote agent instead of the command
        self.ca_file: str | None = None  # with an https:// or wss:// url: whom to trust
        self.token: str | None = None

    # -- the Observer interface ----------------------------------------------------------

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        self.renderer.update(session_id, update)

    def notice(self, method: str, params: dict[str, Any]) -> None:
        self.renderer.notice(method, params)

    async def ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        tool = params.get("toolCall") or {}
        call_id = str(tool.get("toolCallId", ""))
        title = tool.get("title") or self.renderer.tool_titles.get(call_id, call_id)
        if self.approve is not None or not self.interactive:
            wanted = "allow" if self.approve else "reject"
            why = "automatic" if self.approve is not None else PIPED
            for option in options:
                if str(option.get("kind", "")).startswith(wanted):
                    self.renderer.info(f"permission for {title}: {option.get('name')} ({why})")
                    return {"outcome": "selected", "optionId": option["optionId"]}
            self.renderer.info(f"permission for {title}: cancelled ({why})")
            return {"outcome": "cancelled"}
        menu = Text(f"permission needed: {title}", style="bold yellow")
        for i, option in enumerate(options, 1):
            menu.append(f"\n  {i}) {option.get('name')} [{option.get('kind')}]")
        self.renderer.line(menu)
        while True:
            answer = await self._ask(f"choose 1-{len(options)}: ")
            if answer is None:
                return {"outcome": "cancelled"}
            chosen = pick_option(options, answer)
            if chosen is not None:
                return {"outcome": "selected", "optionId": chosen["optionId"]}
            self.renderer.error(f"not an option: {answer!r}")

    async def allow_terminal(self, params: dict[str, Any]) -> bool:
        args = params.get("args") if isinstance(params.get("args"), list) else []
        command = shlex.join([str(params.get("command")), *map(str, args or [])])
        where = params.get("cwd") or self.cwd
        if self.allow_terminals:
            return True
        if self.approve is False or not self.interactive:
            why = "--auto-reject" if self.approve is False else PIPED
            self.renderer.info(f"not running {command} ({why}; --allow-terminals allows)")
            return False
        self.renderer.line(Text(f"the agent wants to run: {command}  (in {where})", "bold yellow"))
        answer = await self._ask("run it? [y/N]: ")
        return answer is not None and answer.strip().lower() in ("y", "yes")

    async def _ask(self, prompt: str) -> str | None:
        """One line from the person, typed after ``prompt``."""
        self.renderer.clear_status()
        self.renderer.prompt_open = self.interactive
        try:
            return await self.reader.readline(prompt)
        finally:
            self.renderer.prompt_open = False

    # -- completion ---------------------------------------------------------------------

    def _completions(self) -> list[str]:
        return [f"/{name}" for name in self.renderer.commands] + list(LOCAL_COMMANDS)

    # -- running -------------------------------------------------------------------------

    async def run(self) -> int:
        try:
            async with open_client(
                self.command, self.cwd, self, url=self.url, token=self.token, ca_file=self.ca_file
            ) as client:
                self.client = client
                self.renderer.terminal_lookup = client.workspace.terminal_output
                self.renderer.file_text = client.workspace.existing_text
                self.quit_scope = anyio.CancelScope()
                with self.quit_scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._watch_signals)
                        code = await self._session(client)
                        tg.cancel_scope.cancel()
                    return code
                self.renderer.end_line()
                self.renderer.info("bye")
                return 0
        except ConnectionClosed as exc:
            self.renderer.error(f"{self._program()}: {exc}")
            self._show_stderr(tail=20)
            return 1
        finally:
            self.reader.restore_terminal()

    def _program(self) -> str:
        if self.url:
            return self.url
        return shlex.join(self.command[:3]) + (" ..." if len(self.command) > 3 else "")

    async def _start(self, client: AcpClient) -> dict[str, Any] | None:
        """``initialize``, saying so when the agent is slow; None (reported) on failure."""
        program = self._program()
        try:
            with anyio.fail_after(self.init_timeout):
                with anyio.move_on_after(min(2.0, self.init_timeout / 2)):
                    return await client.initialize()
                self.renderer.info(
                    f"waiting for {program} to answer initialize "
                    f"(giving up after {self.init_timeout:g} s: --init-timeout)"
                )
                return await client.initialize()
        except TimeoutError:
            self.renderer.error(
                f"{program} did not answer initialize within {self.init_timeout:g} s: "
                "is it an ACP agent?"
            )
        except RequestError as exc:
            self.renderer.error(
                f"{program} did not answer as an ACP agent (initialize: {exc.code} {exc.message})"
            )
        except ConnectionClosed:
            self.renderer.error(
                f"{program} {await self._gone(client)} without answering initialize: it is "
                "not an ACP agent, or it failed to start"
            )
        if self.client is not None and self.client.agent.stderr_lines:
            self._show_stderr(tail=20)
        return None

    @staticmethod
    async def _gone(client: AcpClient) -> str:
        """How the agent went away."""
        code = await client.agent.exit_code()
        return "closed the connection" if code is None else f"exited with code {code}"

    async def _session(self, client: AcpClient) -> int:
        info = await self._start(client)
        if info is None:
            return 1
        agent = info.get("agentInfo") or {}
        self.renderer.info(
            f"connected to {agent.get('title') or agent.get('name', 'an agent')} "
            f"{agent.get('version', '')} (protocol {info.get('protocolVersion')})"
        )
        try:
            session = await client.new_session(self.cwd)
        except (RequestError, ConnectionClosed) as exc:
            self.renderer.error(f"the agent did not start a session: {exc}")
            self._show_stderr(tail=20)
            return 1
        self.session_id = str(session.get("sessionId"))
        modes = session.get("modes") or {}
        if modes:
            self.renderer.mode = modes.get("currentModeId")
            ids = ", ".join(m.get("id", "?") for m in modes.get("availableModes", []))
            self.renderer.info(f"mode: {self.renderer.mode} (available: {ids})")
        self._show_help()
        while True:
            line = await self._ask("> ")
            if line is None:
                if self.interactive:
                    self.console.out("")  # Ctrl-D: the shell's prompt starts a line of its own
                self.renderer.end_line()
                return 0
            if not self.interactive:
                self.renderer.line(Text(f"> {line}", style="bold"))
            text = line.strip()
            if not text:
                continue
            self.interrupts = 0
            if text.split()[0] in LOCAL_COMMANDS:
                if not await self._local(client, text):
                    return 0
                continue
            if not await self._turn(client, line):
                return 1

    def _show_help(self) -> None:
        self.renderer.info(
            "type a prompt (/help asks the agent for its commands); chat commands: "
            + ", ".join(LOCAL_COMMANDS)
        )

    async def _turn(self, client: AcpClient, text: str) -> bool:
        """Run one turn; False when the agent is gone."""
        self.in_turn, self.cancelling = True, False
        async with anyio.create_task_group() as tg:
            if self.interactive:
                tg.start_soon(self._show_progress)
            try:
                stop = await client.prompt(self.session_id, text)
                self.renderer.info(f"[{stop}]")
            except RequestError as exc:
                self.renderer.error(f"error {exc.code}: {exc.message}")
            except ConnectionClosed:
                self.renderer.error(f"{self._program()} {await self._gone(client)} during the turn")
                self._show_stderr(tail=20)
                return False
            finally:
                tg.cancel_scope.cancel()
                self.in_turn = False
                self.renderer.clear_status()
        return True

    async def _show_progress(self) -> None:
        """A status line with the turn's elapsed time, while the turn runs."""
        started = anyio.current_time()
        while True:
            seconds = int(anyio.current_time() - started)
            self.renderer.status(f"⠿ working {seconds} s (Ctrl-C cancels)")
            await anyio.sleep(1)

    async def _local(self, client: AcpClient, text: str) -> bool:
        """A local command; False to quit."""
        name, _, arg = text.partition(" ")
        if name == "/quit":
            return False
        if name == "/?":
            for command, what in LOCAL_COMMANDS.items():
                self.renderer.info(f"  {command:<8} {what}")
            self.renderer.info(f"  {KEYS}")
        elif name == "/stderr":
            self._show_stderr()
        elif name == "/mode":
            if arg.strip():
                try:
                    await client.set_mode(self.session_id, arg.strip())
                except RequestError as exc:
                    self.renderer.error(f"error {exc.code}: {exc.message}")
            else:
                self.renderer.info(f"mode: {self.renderer.mode}")
        return True

    def _show_stderr(self, tail: int | None = None) -> None:
        if self.client is None:
            return
        lines = list(self.client.agent.stderr_lines)
        if tail is not None:
            lines = lines[-tail:]
        if not lines:
            self.renderer.info("(the agent wrote nothing to stderr)")
            return
        self.renderer.line(Text("agent stderr:", style="bold"))
        for entry in lines:
            self.renderer.line(Text("  " + entry, style="dim"))

    async def _watch_signals(self) -> None:
        """Ctrl-C: cancel the running turn; a second Ctrl-C quits. SIGTERM, SIGHUP: quit."""
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async for signum in signals:
                self.renderer.end_line()  # a question's line, or the streamed one, ends first
                if signum != signal.SIGINT:
                    self._quit()
                    return
                if self.in_turn and not self.cancelling and self.client is not None:
                    self.cancelling = True
                    self.renderer.info("cancelling the turn (Ctrl-C again to quit)")
                    await self.client.cancel(self.session_id)
                    continue
                self.interrupts += 1
                if self.in_turn or self.interrupts >= 2:
                    self._quit()
                    return
                self.renderer.info("(press Ctrl-C again or Ctrl-D to quit)")

    def _quit(self) -> None:
        if self.quit_scope is not None:
            self.quit_scope.cancel()


PIPED = "stdin is not a terminal; --auto-approve allows"


def pick_option(options: Sequence[dict[str, Any]], answer: str) -> dict[str, Any] | None:
    """The option an answer names: its number, id, kind, name, or y/n."""
    answer = answer.strip().lower()
    if answer.isdigit() and 1 <= int(answer) <= len(options):
        return options[int(answer) - 1]
    for option in options:
        names = {str(option.get(k, "")).lower() for k in ("optionId", "kind", "name")}
        if answer in names:
            return option
    prefix = {"y": "allow", "yes": "allow", "n": "reject", "no": "reject"}.get(answer)
    if prefix is not None:
        for option in options:
            if str(option.get("kind", "")).startswith(prefix):
                return option
    return None


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(own options, agent command)`` split at the first ``--``."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(
    argv: Sequence[str], *, backend: Backend = "auto", agent_options: Sequence[str] = ()
) -> int:
    own, command = split_command(argv)
    args = build_parser().parse_args(own)
    if command and agent_options:
        print(
            f"acp-agent-kit chat: {' '.join(agent_options)}: options before `chat` configure "
            "the server it starts; give them to the agent command after `--`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    cwd = os.path.realpath(args.cwd)
    if not os.path.isdir(cwd):
        print(f"acp-agent-kit chat: --cwd {args.cwd!r} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    if not args.init_timeout > 0:
        print("acp-agent-kit chat: --init-timeout must be positive", file=sys.stderr)
        return EXIT_USAGE
    approve = True if args.auto_approve else False if args.auto_reject else None
    if args.url and command:
        print("acp-agent-kit chat: give --url or an agent command, not both", file=sys.stderr)
        return 2
    try:
        token = read_token(args.token_file) if args.token_file else None
        if args.ca_file is not None:
            tls_context(args.ca_file)  # a bad file shows now, as one line
    except ValueError as exc:
        print(f"acp-agent-kit chat: {exc}", file=sys.stderr)
        return 2
    app = ChatApp(
        command or [*default_agent_command(), *agent_options],
        cwd,
        approve=approve,
        console=Console(highlight=False, soft_wrap=True),
        allow_terminals=args.allow_terminals,
        init_timeout=args.init_timeout,
    )
    app.url, app.token, app.ca_file = args.url, token, args.ca_file
    try:
        return int(run(app.run, backend=backend))
    except AcpError as exc:
        print(f"acp-agent-kit chat: {exc}", file=sys.stderr)
        return 1
