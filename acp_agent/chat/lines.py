"""Reading the person's lines without blocking the event loop.

:class:`LineReader` reads one line at a time on a daemon thread: with readline (line
editing, history, Tab completion of slash commands) when stdin is a terminal, plain
``readline()`` from a pipe otherwise, so the chat can be scripted. The thread is a
daemon so that a question nobody answers never keeps the process alive; a read that
is abandoned (the caller was cancelled) is kept and handed to the next caller, so no
line is lost or read twice.

It knows nothing of ACP.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel


class _Read:
    __slots__ = ("done", "line", "prompt", "token")

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self.token = anyio.lowlevel.current_token()
        self.done = anyio.Event()
        self.line: str | None = None


class LineReader:
    """One line at a time from stdin; ``None`` at end of input."""

    def __init__(self, interactive: bool, words: Callable[[], list[str]] = list) -> None:
        self.interactive = interactive
        self._words = words
        self._pending: _Read | None = None
        self._saved_tty: Any = None
        self._fd = sys.stdin.fileno()
        self._buffer = b""
        if interactive:
            self._setup_readline()

    def _setup_readline(self) -> None:
        try:
            import readline
            import termios
        except ImportError:  # pragma: no cover - platforms without readline
            return
        with contextlib.suppress(termios.error):
            self._saved_tty = termios.tcgetattr(sys.stdin.fileno())
        readline.set_completer(self._complete)
        readline.set_completer_delims(" \t\n")
        if "libedit" in (readline.__doc__ or ""):
            readline.parse_and_bind("bind ^I rl_complete")
        else:
            readline.parse_and_bind("tab: complete")

    def _complete(self, text: str, state: int) -> str | None:
        # the space after a command: the person types its argument next
        matches = [w + " " for w in self._words() if w.startswith(text)]
        return matches[state] if state < len(matches) else None

    def restore_terminal(self) -> None:
        """Put the terminal back as we found it (a read may still be in progress)."""
        if self._saved_tty is None:
            return
        import termios

        with contextlib.suppress(termios.error):
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved_tty)

    async def readline(self, prompt: str = "") -> str | None:
        """The next line without its newline, or None at end of input."""
        if self._pending is None:
            read = self._pending = _Read(prompt)
            threading.Thread(
                target=self._read, args=(read, prompt), name="chat-input", daemon=True
            ).start()
        elif self.interactive and self._pending.prompt != prompt:
            # an abandoned read (a question cancelled) is still waiting under its prompt
            self._pending.prompt = prompt
            sys.stdout.write(prompt)
            sys.stdout.flush()
        read = self._pending
        await read.done.wait()
        self._pending = None
        return read.line

    def _read_piped(self) -> str | None:
        # os.read rather than sys.stdin: a daemon thread must not hold the lock of
        # sys.stdin's buffer when the interpreter shuts down.
        while b"\n" not in self._buffer:
            chunk = os.read(self._fd, 65536)
            if not chunk:
                if not self._buffer:
                    return None
                line, self._buffer = self._buffer, b""
                return line.decode("utf-8", "replace")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace").removesuffix("\r")

    def _read(self, read: _Read, prompt: str) -> None:
        try:
            if self.interactive:
                line: str | None = input(prompt)
            else:
                line = self._read_piped()
        except EOFError:
            line = None
        except Exception:  # stdin closed under us: treat as end of input
            line = None
        read.line = line
        with contextlib.suppress(anyio.RunFinishedError):
            anyio.from_thread.run_sync(read.done.set, token=read.token)
