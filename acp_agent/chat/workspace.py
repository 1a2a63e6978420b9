"""What the chat client serves to the agent: files and terminals, confined to one directory.

:class:`Workspace` implements the client side of ``fs/read_text_file``,
``fs/write_text_file`` and ``terminal/*`` for real: files are read and written on
disk, terminals are child processes started with ``anyio.open_process``. Every path
(and every terminal's cwd) must resolve, symlinks included, inside the workspace
root; anything else is refused with ``-32602``.

Terminal processes run in their own process group (the person's Ctrl-C is for the
client) and ``terminal/kill`` / ``terminal/release`` kill the whole group. Output is
kept up to the agent's ``outputByteLimit``, trimmed from the front at a character
boundary. The final output of a released terminal stays readable through
:meth:`Workspace.terminal_output` so the client can still show it.

It knows nothing of JSON-RPC framing or rendering.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from acp_agent.errors import InvalidParams, RequestError, ResourceNotFound

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
EOF_GRACE = 1.0  # seconds to wait for a terminal's pipe to drain after its process exits


def _str(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{key}: a non-empty string is required")
    return value


@dataclass
class TerminalState:
    """One terminal the agent created."""

    terminal_id: str
    command: str
    process: anyio.abc.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    exit_code: int | None = None
    signal: str | None = None
    exited: anyio.Event = field(default_factory=anyio.Event)
    drained: anyio.Event = field(default_factory=anyio.Event)

    def add(self, chunk: bytes) -> None:
        self.output += chunk
        excess = len(self.output) - self.limit
        if excess > 0:
            # Trim from the front, then forward to the start of a UTF-8 character.
            while excess < len(self.output) and (self.output[excess] & 0xC0) == 0x80:
                excess += 1
            del self.output[:excess]
            self.truncated = True

    def text(self) -> str:
        return self.output.decode("utf-8", "replace")

    def exit_status(self) -> dict[str, Any] | None:
        if not self.exited.is_set():
            return None
        return {"exitCode": self.exit_code, "signal": self.signal}


class Workspace:
    """Files and terminals for the agent, inside ``root``."""

    def __init__(self, root: str, task_group: anyio.abc.TaskGroup) -> None:
        self.root = os.path.realpath(root)
        self._tg = task_group
        self._terminals: dict[str, TerminalState] = {}
        self._released: dict[str, TerminalState] = {}
        self._next_terminal = 0
        #: shown each piece of a terminal's output as it comes: (terminal id, text)
        self.on_output: Callable[[str, str], None] = lambda _id, _text: None

    # -- paths -------------------------------------------------------------------

    def confine(self, path: str, what: str = "path") -> str:
        """``path`` if it is absolute and resolves inside the root; else ``-32602``."""
        if not os.path.isabs(path):
            raise InvalidParams(f"{what}: an absolute path is required, got {path[:200]!r}")
        real = os.path.realpath(path)
        if real != self.root and not real.startswith(self.root.rstrip(os.sep) + os.sep):
            raise InvalidParams(f"{what}: {path[:200]!r} is outside {self.root}")
        return real

    # -- fs ------------------------------------------------------------------------

    def existing_text(self, path: str, limit: int = 1024 * 1024) -> str | None:
        """What the file at ``path`` holds now, for display; None when it is not a readable
        text file inside the root (or is larger than ``limit`` bytes)."""
        try:
            real = self.confine(path)
            if not os.path.isfile(real) or os.path.getsize(real) > limit:
                return None
            with open(real, encoding="utf-8") as file:
                return file.read()
        except (RequestError, OSError, UnicodeDecodeError):
            return None

    async def read_text_file(self, params: Mapping[str, Any]) -> dict[str, Any]:
        path = self.confine(_str(params, "path"))
        try:
            text = await anyio.Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ResourceNotFound(f"no such file: {path}", data={"uri": path}) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RequestError(f"cannot read {path}: {exc}") from None
        line, limit = params.get("line"), params.get("limit")
        if isinstance(line, int) or isinstance(limit, int):
            lines = text.splitlines(keepends=True)
            start = max(line - 1, 0) if isinstance(line, int) else 0
            end = start + limit if isinstance(limit, int) else None
            text = "".join(lines[start:end])
        return {"content": text}

    async def write_text_file(self, params: Mapping[str, Any]) -> dict[str, Any]:
        path = self.confine(_str(params, "path"))
        content = params.get("content")
        if not isinstance(content, str):
            raise InvalidParams("content: a string is required")
        try:
            await anyio.Path(path).parent.mkdir(parents=True, exist_ok=True)
            await anyio.Path(path).write_text(content, encoding="utf-8")
        except OSError as exc:
            raise RequestError(f"cannot write {path}: {exc}") from None
        return {}

    # -- terminals -------------------------------------------------------------------

    def _terminal(self, params: Mapping[str, Any]) -> TerminalState:
        terminal_id = _str(params, "terminalId")
        term = self._terminals.get(terminal_id)
        if term is None:
            raise ResourceNotFound(f"no terminal {terminal_id[:100]!r}")
        return term

    def terminal_output(self, terminal_id: str) -> TerminalState | None:
        """A live or released terminal, for display."""
        return self._terminals.get(terminal_id) or self._released.get(terminal_id)

    async def create_terminal(self, params: Mapping[str, Any]) -> dict[str, Any]:
        command = _str(params, "command")
        args = params.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise InvalidParams("args: an array of strings is required")
        cwd = self.confine(params["cwd"], "cwd") if params.get("cwd") else self.root
        env = dict(os.environ)
        for item in params.get("env") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                env[item["name"]] = str(item.get("value", ""))
        limit = params.get("outputByteLimit")
        limit = limit if isinstance(limit, int) and limit >= 0 else DEFAULT_OUTPUT_LIMIT
        try:
            process = await anyio.open_process(
                [command, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise RequestError(f"cannot start {command!r}: {exc}") from None
        self._next_terminal += 1
        term = TerminalState(
            f"term_{self._next_terminal}", " ".join([command, *args]), process, limit
        )
        self._terminals[term.terminal_id] = term
        self._tg.start_soon(self._pump, term)
        self._tg.start_soon(self._watch, term)
        return {"terminalId": term.terminal_id}

    async def _pump(self, term: TerminalState) -> None:
        assert term.process.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            async for chunk in term.process.stdout:
                term.add(chunk)
                self.on_output(term.terminal_id, decoder.decode(chunk))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            term.drained.set()

    async def _watch(self, term: TerminalState) -> None:
        code = await term.process.wait()
        with anyio.move_on_after(EOF_GRACE):
            await term.drained.wait()
        if code < 0:
            term.signal = signal.Signals(-code).name
        else:
            term.exit_code = code
        term.exited.set()

    async def terminal_output_result(self, params: Mapping[str, Any]) -> dict[str, Any]:
        term = self._terminal(params)
        result: dict[str, Any] = {"output": term.text(), "truncated": term.truncated}
        status = term.exit_status()
        if status is not None:
            result["exitStatus"] = status
        return result

    async def wait_for_exit(self, params: Mapping[str, Any]) -> dict[str, Any]:
        term = self._terminal(params)
        await term.exited.wait()
        return {"exitCode": term.exit_code, "signal": term.signal}

    def _kill(self, term: TerminalState) -> None:
        if term.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(term.process.pid, signal.SIGKILL)

    async def kill_terminal(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self._kill(self._terminal(params))
        return {}

    async def release_terminal(self, params: Mapping[str, Any]) -> dict[str, Any]:
        term = self._terminal(params)
        self._kill(term)
        del self._terminals[term.terminal_id]
        self._released[term.terminal_id] = term
        return {}

    def close(self) -> None:
        """Kill every terminal still running (the client is exiting)."""
        for term in self._terminals.values():
            self._kill(term)
