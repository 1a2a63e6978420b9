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
with a line saying so (``--allow-terminals`` lets terminal commands run). Those
questions are :mod:`acp_agent.chat.questions`'s; this module owns the session loop, the
local commands and Ctrl-C, not the questions, the connection or how updates are shown.

Local commands (not sent to the agent) are listed at start and by ``/?``: ``/mode`` and
``/model`` show or pick the session's mode and model. ``--resume``/``--load`` open a
stored session instead of a new one; ``-p PROMPT`` runs one turn for a script, its
answer on stdout (``--format json``: the stop reason, the text and every update).

A permission the agent asks is the question; chat asks its own "run it?" only for a
terminal the agent starts without having asked. A terminal's output is shown as the
command writes it. After Ctrl-C, only a short tail of the cancelled turn is shown.

Whatever ends the chat (the person, an error, SIGTERM or SIGHUP), the agent's process
group is stopped.

Exit codes: 0 when the chat ends normally, 1 when the agent fails or exits (with ``-p``:
when the turn did not end ``end_turn``), 2 for a usage error.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from typing import Any

import anyio
from rich.console import Console
from rich.text import Text

from acp_agent.errors import ConnectionClosed, RequestError

from .client import AcpClient, open_client
from .lines import LineReader
from .questions import Questions, pick_option
from .render import Renderer

__all__ = ["KEYS", "LOCAL_COMMANDS", "ChatApp", "pick_option", "write_out"]

LOCAL_COMMANDS = {
    "/?": "list the chat's own commands and keys",
    "/mode": "show or set the session mode: /mode [ID]",
    "/model": "show or pick the session's model: /model [NAME]",
    "/stderr": "show the agent's stderr",
    "/quit": "leave the chat",
}
KEYS = "Tab completes a command; Ctrl-C cancels the running turn (twice: quits); Ctrl-D quits"


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
        self.init_timeout = init_timeout
        self.console = console
        self.interactive = sys.stdin.isatty()
        self.renderer = Renderer(console)
        self.reader = LineReader(self.interactive, self._completions)
        self.questions = Questions(
            self.renderer,
            self.reader,
            cwd,
            approve=approve,
            allow_terminals=allow_terminals,
            interactive=self.interactive,
        )
        self.client: AcpClient | None = None
        self.session_id = ""
        self.in_turn = False
        self.cancelling = False
        self.interrupts = 0
        self.quit_scope: anyio.CancelScope | None = None
        self.url: str | None = None  # talk to a remote agent instead of the command
        self.ca_file: str | None = None  # with an https:// or wss:// url: whom to trust
        self.token: str | None = None
        self.open_session: tuple[str, str] | None = None  # ("resume"|"load", session id)
        self.one_shot: str | None = None  # -p: this prompt, then exit
        self.output_format = "text"
        self.updates: list[dict[str, Any]] = []  # -p: what the turn streamed

    # -- the Observer interface ----------------------------------------------------------

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        if self.one_shot is not None:
            self.updates.append(update)
        self.renderer.update(session_id, update)

    def notice(self, method: str, params: dict[str, Any]) -> None:
        self.renderer.notice(method, params)

    async def ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.questions.ask_permission(params)

    async def allow_terminal(self, params: dict[str, Any]) -> bool:
        return await self.questions.allow_terminal(params)

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
                client.workspace.on_output = self.renderer.terminal_output
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
            if self.client is None:
                raise  # could not start or reach the agent: the message names it, main prints it
            self.renderer.error(f"{self._program()}: {exc}")
            self._show_stderr(tail=20)
            return 1
        except Exception as exc:
            leaf = _leaf(exc)
            if not _is_broken_connection(leaf):
                raise
            # a remote agent's connection broke under the HTTP/WebSocket library (which
            # may wrap it in exception groups): one line, not their tracebacks
            self.renderer.error(f"{self._program()}: the connection broke ({_words(leaf)})")
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
            await client.agent.stop(grace=0)  # it is not listening: no point waiting
        except RequestError as exc:
            self.renderer.error(
                f"{program} did not answer as an ACP agent (initialize: {exc.code} {exc.message})"
            )
        except ConnectionClosed as exc:
            why = client.connection.close_reason
            self.renderer.error(
                f"{program} {why}"
                if why
                else f"{program} {await self._gone(client)} without answering initialize: it "
                "is not an ACP agent, or it failed to start"
            )
            del exc
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
            session = await self._open(client)
        except (RequestError, ConnectionClosed) as exc:
            self.renderer.error(f"the agent did not open the session: {exc}")
            if isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED:
                self._show_auth_methods(info)
            self._show_stderr(tail=20)
            return 1
        self.session_id = str(session.get("sessionId") or self.session_id)
        self.renderer.config(session.get("configOptions"))
        modes = session.get("modes") or {}
        if modes:
            self.renderer.mode = modes.get("currentModeId")
            ids = ", ".join(m.get("id", "?") for m in modes.get("availableModes", []))
            self.renderer.info(f"mode: {self.renderer.mode} (available: {ids})")
        model = self.renderer.config_options.get("model")
        if model is not None:
            about = f" ({model['description']})" if model.get("description") else ""
            self.renderer.info(f"model: {model.get('currentValue')}{about}")
        if self.one_shot is not None:
            return await self._one_shot(client, self.one_shot)
        self.renderer.info(f"session {self.session_id}")
        self._show_help()
        while True:
            line = await self.questions.ask("> ")
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
            if await self._turn(client, line) is None:
                return 1

    def _show_auth_methods(self, info: dict[str, Any]) -> None:
        """How the agent says one logs in (``authMethods`` of its initialize answer)."""
        for method in info.get("authMethods") or []:
            if not isinstance(method, dict):
                continue
            how = str(method.get("name") or method.get("id"))
            if method.get("type") == "terminal":
                how += f" (run the agent with: {shlex.join(map(str, method.get('args') or []))})"
            about = f": {method['description']}" if method.get("description") else ""
            self.renderer.info(f"  to log in: {how}{about}")

    async def _open(self, client: AcpClient) -> dict[str, Any]:
        """A new session, or the stored one of ``--resume``/``--load``."""
        if self.open_session is None:
            return await client.new_session(self.cwd)
        how, session_id = self.open_session
        self.session_id = session_id
        self.renderer.info(f"{'loading' if how == 'load' else 'resuming'} session {session_id}")
        return await client.open_session(how, session_id, self.cwd)

    async def _one_shot(self, client: AcpClient, prompt: str) -> int:
        """``-p``: one turn; its answer on stdout; 0 when it ended normally."""
        self.updates.clear()  # what --load replayed is not this turn's
        if self.output_format == "text":
            self.renderer.answer = write_out
        stop = await self._turn(client, prompt)
        text = "".join(
            str((u.get("content") or {}).get("text", ""))
            for u in self.updates
            if u.get("sessionUpdate") == "agent_message_chunk"
        )
        if self.output_format == "json":
            document = {
                "sessionId": self.session_id,
                "stopReason": stop,
                "text": text,
                "updates": self.updates,
            }
            sys.stdout.write(json.dumps(document) + "\n")
        elif text and not text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        return 0 if stop == "end_turn" else 1

    def _show_help(self) -> None:
        ask = "/help asks the agent for its commands; " if "help" in self.renderer.commands else ""
        self.renderer.info(
            f"type a prompt ({ask}Tab completes); chat commands: " + ", ".join(LOCAL_COMMANDS)
        )

    async def _turn(self, client: AcpClient, text: str) -> str | None:
        """Run one turn; its stop reason (``error`` for an error answer), None when the
        agent is gone."""
        self.in_turn, self.cancelling, self.questions.approved_runs = True, False, 0
        stop: str | None = "error"
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
                stop = None
            finally:
                tg.cancel_scope.cancel()
                self.in_turn = False
                self.renderer.tail = None
                self.renderer.clear_status()
        return stop

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
            elif self.renderer.mode is None:
                self.renderer.info("this agent has no modes")
            else:
                self.renderer.info(f"mode: {self.renderer.mode}")
        elif name == "/model":
            await self._model(client, arg.strip())
        return True

    async def _model(self, client: AcpClient, name: str) -> None:
        """``/model``: the model config option, shown or set."""
        option = self.renderer.config_options.get("model")
        if option is None:
            self.renderer.info("this agent offers no choice of model")
            return
        values = [str(o.get("value")) for o in option.get("options") or [] if isinstance(o, dict)]
        if not name:
            current = option.get("currentValue")
            listed = ", ".join(f"*{v}" if v == current else v for v in values)
            self.renderer.info(f"model: {current} (available: {listed})")
            return
        try:
            options = await client.set_config_option(self.session_id, "model", name)
        except RequestError as exc:
            self.renderer.error(f"error {exc.code}: {exc.message}")
            return
        self.renderer.config(options)
        self.renderer.info(f"model: {self.renderer.config_options['model'].get('currentValue')}")

    def _show_stderr(self, tail: int | None = None) -> None:
        if self.client is None:
            return
        if self.url:  # a remote agent's stderr is on its own host
            if tail is None:
                self.renderer.info(f"the agent at {self.url} writes its stderr on its host")
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
                    self.interrupts = 1  # the next Ctrl-C quits, even once the cancel is done
                    self.renderer.cancelling()
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


AUTH_REQUIRED = -32000

#: the modules whose errors mean that a remote connection broke
NETWORK_MODULES = ("httpx", "httpcore", "httpx_ws", "wsproto", "h11", "anyio")


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _is_broken_connection(exc: BaseException) -> bool:
    if isinstance(exc, (OSError, ConnectionClosed, anyio.BrokenResourceError)):
        return True
    return type(exc).__module__.split(".")[0] in NETWORK_MODULES


def _words(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def write_out(text: str) -> None:
    """The answer's text, on stdout as it streams (``-p``)."""
    sys.stdout.write(text)
    sys.stdout.flush()
