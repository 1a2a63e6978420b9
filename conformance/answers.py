"""How the conformance harness answers the agent's own requests: permission, fs, terminals,
elicitation, each only when the client advertised it (a call without the capability is a
violation and is refused).

Owns the answers and the terminals run for real; the mixin is part of ``AgentProcess``
(``harness.py``), whose wire, config and violation record it uses. Decides nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .frames import ClientConfig, Msg


class ClientAnswers:
    """The agent -> client requests, answered (mixed into ``AgentProcess``)."""

    if TYPE_CHECKING:  # what it uses of AgentProcess
        config: ClientConfig
        root: Path
        cwd: Path
        fs_writes: list[tuple[str, str]]
        _held: list[Msg]
        _cancelled_sessions: set[Any]
        _terminals: dict[str, Terminal]

        def _violate(self, code: str, detail: str, frame: int | None = None) -> None: ...

        async def respond(
            self, m: Msg, result: Any = None, error: dict[str, Any] | None = None
        ) -> None: ...

    def _cap(self, *path: str) -> bool:
        c: Any = self.config.capabilities or {}
        for p in path:
            if not isinstance(c, dict):
                return False
            c = c.get(p)
        return c is True or isinstance(c, dict)

    async def _answer(self, m: Msg) -> None:
        method = m.method or ""
        p = m.params if isinstance(m.params, dict) else {}
        try:
            if method == "session/request_permission":
                await self._answer_permission(m, p)
            elif method == "fs/read_text_file":
                if not self._cap("fs", "readTextFile"):
                    self._violate("R-FS-1", "fs/read_text_file without fs.readTextFile")
                    return await self.respond(m, error=_err(-32601, "Method not found"))
                await self._fs_read(m, p)
            elif method == "fs/write_text_file":
                if not self._cap("fs", "writeTextFile"):
                    self._violate("R-FS-1", "fs/write_text_file without fs.writeTextFile")
                    return await self.respond(m, error=_err(-32601, "Method not found"))
                await self._fs_write(m, p)
            elif method.startswith("terminal/"):
                if not self._cap("terminal"):
                    self._violate("R-TERM-1", f"{method} without the terminal capability")
                    return await self.respond(m, error=_err(-32601, "Method not found"))
                if self.config.terminal != "real":
                    return await self.respond(m, error=_err(-32601, "Method not found"))
                await self._terminal(m, method, p)
            elif method == "elicitation/create":
                mode = p.get("mode")
                if not (isinstance(mode, str) and self._cap("elicitation", mode)):
                    self._violate("R-ELICIT-1", f"elicitation/create mode {mode!r} not advertised")
                    return await self.respond(
                        m, error=_err(-32602, "Elicitation mode not supported")
                    )
                await self.respond(m, {"action": self.config.elicitation})
            else:
                await self.respond(m, error=_err(-32601, "Method not found"))
        except Exception as e:  # a bad agent request must not kill the client
            await self.respond(m, error=_err(-32603, f"client error: {type(e).__name__}: {e}"))

    async def _answer_permission(self, m: Msg, p: dict[str, Any]) -> None:
        if p.get("sessionId") in self._cancelled_sessions:
            return await self.respond(m, {"outcome": {"outcome": "cancelled"}})
        mode = self.config.permission
        if mode == "hold":
            self._held.append(m)
            return None
        if mode == "cancelled":
            return await self.respond(m, {"outcome": {"outcome": "cancelled"}})
        options = [o for o in p.get("options") or [] if isinstance(o, dict)]
        chosen = None
        if mode == "first":
            chosen = options[0] if options else None
        else:
            want = (
                ("allow_once", "allow_always")
                if mode == "allow"
                else ("reject_once", "reject_always")
            )
            if mode not in ("allow", "reject"):
                want = (mode,)
            chosen = next((o for o in options if o.get("kind") in want), None)
        if chosen is None:
            return await self.respond(m, {"outcome": {"outcome": "cancelled"}})
        await self.respond(
            m, {"outcome": {"outcome": "selected", "optionId": chosen.get("optionId")}}
        )

    def _sandboxed(self, path: Any) -> Path | None:
        if not isinstance(path, str) or not os.path.isabs(path):
            return None
        full = Path(os.path.normpath(path))
        root = Path(os.path.normpath(self.root))
        return full if full == root or root in full.parents else None

    async def _fs_read(self, m: Msg, p: dict[str, Any]) -> None:
        path = p.get("path")
        if not isinstance(path, str) or not os.path.isabs(path):
            self._violate("R-FS-2", f"fs/read_text_file with a non-absolute path {path!r}")
            return await self.respond(m, error=_err(-32602, "path must be absolute"))
        full = self._sandboxed(path)
        if full is None or not full.is_file():
            return await self.respond(m, error=_err(-32002, "Resource not found"))
        text = full.read_text(encoding="utf-8", errors="replace")
        line, limit = p.get("line"), p.get("limit")
        if isinstance(line, int) or isinstance(limit, int):
            lines = text.splitlines(keepends=True)
            first = (line - 1) if isinstance(line, int) and line > 0 else 0
            lines = lines[first:]
            if isinstance(limit, int):
                lines = lines[:limit]
            text = "".join(lines)
        await self.respond(m, {"content": text})

    async def _fs_write(self, m: Msg, p: dict[str, Any]) -> None:
        path, content = p.get("path"), p.get("content")
        if not isinstance(path, str) or not os.path.isabs(path):
            self._violate("R-FS-2", f"fs/write_text_file with a non-absolute path {path!r}")
            return await self.respond(m, error=_err(-32602, "path must be absolute"))
        full = self._sandboxed(path)
        if full is None or not isinstance(content, str):
            return await self.respond(m, error=_err(-32002, "outside the client's sandbox"))
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content, encoding="utf-8")
        self.fs_writes.append((path, content))
        await self.respond(m, None)

    async def _terminal(self, m: Msg, method: str, p: dict[str, Any]) -> None:
        if method == "terminal/create":
            term = await Terminal.start(p, str(self.cwd))
            tid = f"term-{len(self._terminals) + 1}"
            self._terminals[tid] = term
            return await self.respond(m, {"terminalId": tid})
        term = self._terminals.get(p.get("terminalId"))  # type: ignore[arg-type]
        if term is None or term.released:
            return await self.respond(m, error=_err(-32002, "unknown or released terminal"))
        if method == "terminal/output":
            return await self.respond(m, term.output())
        if method == "terminal/wait_for_exit":
            await term.wait()
            return await self.respond(m, term.exit_status())
        if method == "terminal/kill":
            term.kill()
            return await self.respond(m, {})
        if method == "terminal/release":
            term.kill()
            term.released = True
            return await self.respond(m, {})
        await self.respond(m, error=_err(-32601, "Method not found"))


class Terminal:
    def __init__(self, proc: asyncio.subprocess.Process, limit: int | None) -> None:
        self.proc = proc
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.released = False
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, p: dict[str, Any], default_cwd: str) -> Terminal:
        command = str(p.get("command", ""))
        args = [str(a) for a in p.get("args") or []]
        env = dict(os.environ)
        for e in p.get("env") or []:
            if isinstance(e, dict) and "name" in e:
                env[str(e["name"])] = str(e.get("value", ""))
        cwd = p.get("cwd") if isinstance(p.get("cwd"), str) else default_cwd
        kw: dict[str, Any] = {
            "stdout": asyncio.subprocess.PIPE,
            "stderr": asyncio.subprocess.STDOUT,
            "stdin": asyncio.subprocess.DEVNULL,
            "cwd": cwd,
            "env": env,
            "start_new_session": True,
        }
        if args:
            proc = await asyncio.create_subprocess_exec(command, *args, **kw)
        else:
            proc = await asyncio.create_subprocess_shell(command, **kw)
        limit = p.get("outputByteLimit")
        return cls(proc, limit if isinstance(limit, int) else None)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = await self.proc.stdout.read(65536)
            if not chunk:
                return
            self.buf += chunk
            if self.limit is not None and len(self.buf) > self.limit:
                del self.buf[: len(self.buf) - self.limit]
                while self.buf and (self.buf[0] & 0xC0) == 0x80:
                    del self.buf[0]
                self.truncated = True

    def exit_status(self) -> dict[str, Any]:
        rc = self.proc.returncode
        if rc is None:
            return {}
        return (
            {"exitCode": rc, "signal": None}
            if rc >= 0
            else {"exitCode": None, "signal": f"SIG{-rc}"}
        )

    def output(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "output": self.buf.decode("utf-8", "replace"),
            "truncated": self.truncated,
        }
        if self.proc.returncode is not None:
            out["exitStatus"] = self.exit_status()
        return out

    async def wait(self) -> None:
        await self.proc.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.reader, 2.0)

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def reap(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 3.0)
        self.reader.cancel()
        with contextlib.suppress(BaseException):
            await self.reader


def _err(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}
