"""A strict ACP client that drives one agent subprocess over stdio, for the conformance checks.

Owns: launching the agent (own process group, pipes), reading stdout with no line-length limit,
the wire transcript (both directions, timestamps), schema validation of every frame, waiting
helpers, and the teardown ladder (close stdin -> grace -> SIGTERM -> SIGKILL, draining stdout at
each rung). Answering the agent's own requests (permission, fs on a real temp directory,
terminals run for real or refused, elicitation) is ``answers.py``'s; the records it keeps are
``frames.py``'s.

Does not own: deciding pass or fail. It records `violations` (frame-level problems) and leaves
their meaning to the checks and the runner. It imports nothing from `acp_agent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .answers import ClientAnswers, Terminal
from .calls import AcpCalls
from .frames import (
    FULL_CAPS,
    STDERR_TAIL,
    STOP_REASONS,
    TRANSCRIPT_LINE_MAX,
    AgentGone,
    CallError,
    ClientConfig,
    Msg,
    Violation,
    WaitTimeout,
    clip,
    id_key,
    same_id,
    schema_code,
)
from .schema import Schema, frame_kind
from .semantics import frame_problems

__all__ = [
    "FULL_CAPS",
    "STOP_REASONS",
    "AgentGone",
    "AgentProcess",
    "CallError",
    "ClientConfig",
    "Msg",
    "Violation",
    "WaitTimeout",
    "same_id",
]


class AgentProcess(ClientAnswers, AcpCalls):
    """One agent subprocess and the client side of its connection."""

    def __init__(
        self,
        argv: list[str],
        schema: Schema,
        *,
        root: Path,
        config: ClientConfig | None = None,
        timeout: float = 10.0,
        label: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.schema = schema
        self.config = config or ClientConfig()
        self.timeout = timeout
        self.label = label
        self.env = env
        self.root = root  # sandbox served by fs/*; session cwds live under it
        self.cwd = root / "work"  # the agent process itself runs in the invoker's cwd
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.proc: asyncio.subprocess.Process | None = None
        self.t0 = time.monotonic()
        self.started_at = time.time()
        self.transcript: list[dict[str, Any]] = []
        self.inbox: list[Msg] = []
        self.violations: list[Violation] = []
        self.stderr = bytearray()
        self.stderr_total = 0
        self.stdout_eof = False
        self.stdin_closed = False
        self.exit: dict[str, Any] | None = None
        self._new = asyncio.Event()
        self._next_id = 1000
        self._sent_methods: dict[Any, str] = {}  # our request ids -> method (by repr with type)
        self._held: list[Msg] = []
        self._cancelled_sessions: set[Any] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._terminals: dict[str, Terminal] = {}
        self._reader: asyncio.Task[None] | None = None
        self._err_reader: asyncio.Task[None] | None = None
        self.fs_writes: list[tuple[str, str]] = []
        self.raw_lines = 0
        self._tool_ids: dict[str, set[str]] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> AgentProcess:
        self.t0 = time.monotonic()
        self.started_at = time.time()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        self._reader = asyncio.create_task(self._read_stdout())
        self._err_reader = asyncio.create_task(self._read_stderr())
        self._event("started", " ".join(self.argv))
        return self

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def _event(self, what: str, detail: str = "") -> None:
        self.transcript.append(
            {"t": self.now(), "dir": "event", "line": f"{what} {detail}".strip()}
        )

    async def close(self, grace: float = 2.0) -> dict[str, Any]:
        """Teardown ladder. Returns {"rung": eof|sigterm|sigkill, "seconds": ..., "code": ...}."""
        if self.exit is not None:
            return self.exit
        assert self.proc is not None
        start = time.monotonic()
        await self.close_stdin()
        rung = "eof"
        if not await self._wait_exit(grace):
            rung = "sigterm"
            self._signal(signal.SIGTERM)
            if not await self._wait_exit(grace):
                rung = "sigkill"
                self._signal(signal.SIGKILL)
                await self._wait_exit(5.0)
        # the group may still hold the pipe (grandchildren): make sure they are gone
        self._signal(signal.SIGKILL)
        await self._drain()
        self.exit = {
            "rung": rung,
            "seconds": round(time.monotonic() - start, 3),
            "code": self.proc.returncode,
        }
        self._event("exited", json.dumps(self.exit))
        return self.exit

    async def terminate(self, grace: float = 2.0) -> dict[str, Any]:
        """SIGTERM first (stdin stays open), then SIGKILL; drains stdout."""
        assert self.proc is not None
        start = time.monotonic()
        self._signal(signal.SIGTERM)
        rung = "sigterm"
        if not await self._wait_exit(grace):
            rung = "sigkill"
            self._signal(signal.SIGKILL)
            await self._wait_exit(5.0)
        await self.close_stdin()
        await self._drain()
        self.exit = {
            "rung": rung,
            "seconds": round(time.monotonic() - start, 3),
            "code": self.proc.returncode,
        }
        self._event("exited", json.dumps(self.exit))
        return self.exit

    async def close_stdin(self) -> None:
        if self.stdin_closed or self.proc is None or self.proc.stdin is None:
            return
        self.stdin_closed = True
        self._event("stdin closed")
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
            await self.proc.stdin.wait_closed()

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self._event("signal", signal.Signals(sig).name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def _wait_exit(self, seconds: float) -> bool:
        assert self.proc is not None
        try:
            await asyncio.wait_for(self.proc.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    async def _drain(self) -> None:
        for task in (self._reader, self._err_reader):
            if task is not None:
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 3.0)
        for t in list(self._tasks):
            t.cancel()
        for term in self._terminals.values():
            term.kill()
        for term in self._terminals.values():
            await term.reap()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- reading -------------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        buf = bytearray()
        stream = self.proc.stdout
        while True:
            chunk = await stream.read(1 << 20)
            if not chunk:
                break
            buf += chunk
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                self._on_line(bytes(buf[start:nl]))
                start = nl + 1
            if start:
                del buf[:start]
        if buf:
            self._on_line(bytes(buf), unterminated=True)
        self.stdout_eof = True
        self._event("stdout EOF")
        self._pulse()

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            chunk = await self.proc.stderr.read(1 << 16)
            if not chunk:
                return
            self.stderr_total += len(chunk)
            self.stderr += chunk
            if len(self.stderr) > 2 * STDERR_TAIL:
                del self.stderr[: len(self.stderr) - STDERR_TAIL]

    def stderr_tail(self) -> str:
        return bytes(self.stderr[-STDERR_TAIL:]).decode("utf-8", "replace")

    def _pulse(self) -> None:
        self._new.set()
        self._new = asyncio.Event()

    def _violate(self, code: str, detail: str, frame: int | None = None) -> None:
        self.violations.append(Violation(self.now(), code, detail, frame))
        self._event("violation", f"{code}: {detail}")

    def _on_line(self, raw: bytes, unterminated: bool = False) -> None:
        self.raw_lines += 1
        idx = len(self.transcript)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            text = raw.decode("utf-8", "replace")
            self._record("recv", text, len(raw))
            self._violate("R-TRANS-1", f"stdout line is not UTF-8 ({e.reason})", idx)
            return
        self._record("recv", text, len(raw))
        if unterminated:
            self._violate("R-TRANS-2", "last stdout bytes were not ended by a newline", idx)
        stripped = text.strip(" \t\r")
        if not stripped:
            return
        try:
            obj = json.loads(stripped)
        except ValueError:
            if stripped[0] in '{}[]"':  # a fragment: a message split over lines (pretty-printed?)
                self._violate(
                    "R-TRANS-2", f"line is not one JSON value: {clip(stripped, 120)!r}", idx
                )
            else:
                self._violate("R-TRANS-3", f"stdout line is not JSON: {clip(stripped, 120)!r}", idx)
            return
        if isinstance(obj, list):
            self._violate("R-TRANS-8", "agent wrote a JSON array (batch) on stdout", idx)
            return
        if not isinstance(obj, dict):
            self._violate(
                "R-TRANS-3", f"stdout line is JSON but not an object: {clip(stripped, 60)}", idx
            )
            return
        kind = frame_kind(obj)
        answered = None
        if kind == "response":
            answered = self._method_for(obj.get("id"))
        for p in self.schema.check_frame(obj, "agent", answered):
            code = p.split(":", 1)[0] if p.startswith("R-") else schema_code(kind, obj)
            self._violate(code, p, idx)
        if kind == "response" and "error" in obj and isinstance(obj["error"], dict):
            m = obj["error"].get("message")
            if not isinstance(m, str) or not m.strip() or "\n" in m:
                self._violate("R-RPC-12", f"error message not a single non-empty line: {m!r}", idx)
        for code, detail in frame_problems(obj, kind, answered, self._tool_ids):
            self._violate(code, detail, idx)
        msg = Msg(len(self.inbox), self.now(), obj, kind, after_eof=self.stdin_closed)
        self.inbox.append(msg)
        self._pulse()
        if kind == "request":
            self._spawn(self._answer(msg))

    def _method_for(self, rid: Any) -> str | None:
        return self._sent_methods.get(id_key(rid))

    def _record(self, direction: str, text: str, nbytes: int) -> None:
        self.transcript.append(
            {
                "t": self.now(),
                "dir": direction,
                "bytes": nbytes,
                "line": clip(text, TRANSCRIPT_LINE_MAX),
            }
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- writing -------------------------------------------------------------------------------

    async def send_raw(self, data: bytes, note: str | None = None) -> bool:
        """Write bytes as they are. Returns False if the pipe is closed."""
        assert self.proc is not None and self.proc.stdin is not None
        text = data.decode("utf-8", "replace").rstrip("\n")
        self._record("send", note or text, len(data))
        try:
            self.proc.stdin.write(data)
            await asyncio.wait_for(self.proc.stdin.drain(), max(self.timeout, 30.0))
            return True
        except (BrokenPipeError, ConnectionResetError, RuntimeError, asyncio.TimeoutError) as e:
            self._event("write failed", type(e).__name__)
            return False

    async def send(self, obj: Any) -> bool:
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        if isinstance(obj, dict) and "method" in obj and "id" in obj:
            self._sent_methods[id_key(obj["id"])] = obj["method"]
        if isinstance(obj, dict) and len(line) < 1_000_000:
            for p in self.schema.check_frame(obj, "client", None):
                self._event("client frame note", p)  # ours; recorded, never judged
        return await self.send_raw((line + "\n").encode("utf-8"))

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def send_request(
        self, method: str, params: Any = None, *, rid: Any = ..., omit_params: bool = False
    ) -> Any:
        if rid is ...:
            rid = self.new_id()
        obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if not omit_params:
            obj["params"] = params if params is not None else {}
        await self.send(obj)
        return rid

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        rid: Any = ...,
        omit_params: bool = False,
        timeout: float | None = None,
    ) -> Msg:
        """Send a request and wait for the response with the same id (and JSON type)."""
        rid = await self.send_request(method, params, rid=rid, omit_params=omit_params)
        return await self.wait_response(rid, timeout=timeout, what=method)

    async def call(self, method: str, params: Any = None, **kw: Any) -> Any:
        """Request that must succeed; returns the result or raises CallError."""
        m = await self.request(method, params, **kw)
        if "error" in m.obj:
            raise CallError(method, m.obj["error"])
        return m.obj.get("result")

    async def notify(self, method: str, params: Any = None) -> None:
        obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            obj["params"] = params
        await self.send(obj)

    async def cancel(self, session_id: str) -> None:
        """session/cancel, then answer every held permission request of the session `cancelled`."""
        self._cancelled_sessions.add(session_id)
        await self.notify("session/cancel", {"sessionId": session_id})
        for m in list(self._held):
            if m.session_id() == session_id and m.method == "session/request_permission":
                self._held.remove(m)
                await self.respond(m, {"outcome": {"outcome": "cancelled"}})

    async def respond(
        self, m: Msg, result: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        if m in self._held:
            self._held.remove(m)
        obj: dict[str, Any] = {"jsonrpc": "2.0", "id": m.obj.get("id")}
        if error is not None:
            obj["error"] = error
        else:
            obj["result"] = result
        await self.send(obj)

    # -- waiting -------------------------------------------------------------------------------

    async def wait_for(
        self,
        pred: Callable[[Msg], bool],
        *,
        timeout: float | None = None,
        start: int = 0,
        what: str = "a message",
    ) -> Msg:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        i = start
        while True:
            event = self._new
            while i < len(self.inbox):
                m = self.inbox[i]
                i += 1
                if pred(m):
                    return m
            if self.stdout_eof:
                raise AgentGone(f"agent exited while waiting for {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"no {what} within {timeout or self.timeout:g} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), left)

    async def wait_response(self, rid: Any, *, timeout: float | None = None, what: str = "") -> Msg:
        return await self.wait_for(
            lambda m: m.kind == "response" and same_id(m.obj.get("id"), rid),
            timeout=timeout,
            what=f"response to {what or 'request'} id {rid!r}",
        )

    async def collect(
        self, pred: Callable[[Msg], bool], seconds: float, *, start: int | None = None
    ) -> list[Msg]:
        """Everything matching `pred` that arrives from `start` (default: now) within `seconds`."""
        begin = len(self.inbox) if start is None else start
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stdout_eof:
            event = self._new
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), max(0.0, deadline - time.monotonic()))
        return [m for m in self.inbox[begin:] if pred(m)]

    def updates(
        self, session_id: Any, start: int = 0, end: int | None = None
    ) -> list[dict[str, Any]]:
        return [
            m.update()
            for m in self.inbox[start:end]
            if m.method == "session/update" and m.session_id() == session_id
        ]

    def requests(self, prefix: str, start: int = 0) -> list[Msg]:
        return [
            m
            for m in self.inbox[start:]
            if m.kind == "request" and (m.method or "").startswith(prefix)
        ]
