"""A strict ACP client that drives one agent subprocess over stdio, for the conformance checks.

Owns: launching the agent (own process group, pipes), reading stdout with no line-length limit,
the wire transcript (both directions, timestamps), schema validation of every frame, answering
the agent's own requests (permission, fs on a real temp directory, terminals run for real or
refused, elicitation), waiting helpers, and the teardown ladder (close stdin -> grace -> SIGTERM
-> SIGKILL, draining stdout at each rung).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import Schema, frame_kind

FULL_CAPS: dict[str, Any] = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "auth": {"terminal": True},
    "elicitation": {"form": {}, "url": {}},
    "session": {"configOptions": {"boolean": {}}},
}
STDERR_TAIL = 20_000
STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
TRANSCRIPT_LINE_MAX = 4_000


class AgentGone(Exception):
    """The agent closed its stdout (exited) while we were waiting for something."""


class WaitTimeout(Exception):
    """Nothing matching arrived in time."""


@dataclass
class Msg:
    """One JSON-RPC message the agent wrote."""

    index: int
    t: float
    obj: dict[str, Any]
    kind: str  # request | notification | response
    after_eof: bool = False

    @property
    def method(self) -> str | None:
        m = self.obj.get("method")
        return m if isinstance(m, str) else None

    @property
    def params(self) -> Any:
        return self.obj.get("params")

    def session_id(self) -> Any:
        p = self.params
        return p.get("sessionId") if isinstance(p, dict) else None

    def update(self) -> dict[str, Any]:
        p = self.params
        u = p.get("update") if isinstance(p, dict) else None
        return u if isinstance(u, dict) else {}


@dataclass
class Violation:
    t: float
    code: str  # requirement id the problem belongs to
    detail: str
    frame: int | None = None  # transcript index


@dataclass
class ClientConfig:
    """How the client answers the agent's requests."""

    capabilities: dict[str, Any] | None = field(default_factory=lambda: dict(FULL_CAPS))
    # first | allow | reject | cancelled | hold (the check answers by itself)
    permission: str = "first"
    terminal: str = "real"  # real | refuse
    elicitation: str = "decline"


def same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class AgentProcess:
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
        self._terminals: dict[str, _Terminal] = {}
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
                    "R-TRANS-2", f"line is not one JSON value: {_clip(stripped, 120)!r}", idx
                )
            else:
                self._violate(
                    "R-TRANS-3", f"stdout line is not JSON: {_clip(stripped, 120)!r}", idx
                )
            return
        if isinstance(obj, list):
            self._violate("R-TRANS-8", "agent wrote a JSON array (batch) on stdout", idx)
            return
        if not isinstance(obj, dict):
            self._violate(
                "R-TRANS-3", f"stdout line is JSON but not an object: {_clip(stripped, 60)}", idx
            )
            return
        kind = frame_kind(obj)
        answered = None
        if kind == "response":
            answered = self._method_for(obj.get("id"))
        for p in self.schema.check_frame(obj, "agent", answered):
            code = p.split(":", 1)[0] if p.startswith("R-") else _schema_code(kind, obj)
            self._violate(code, p, idx)
        if kind == "response" and "error" in obj and isinstance(obj["error"], dict):
            m = obj["error"].get("message")
            if not isinstance(m, str) or not m.strip() or "\n" in m:
                self._violate("R-RPC-12", f"error message not a single non-empty line: {m!r}", idx)
        self._semantics(obj, kind, answered, idx)
        msg = Msg(len(self.inbox), self.now(), obj, kind, after_eof=self.stdin_closed)
        self.inbox.append(msg)
        self._pulse()
        if kind == "request":
            self._spawn(self._answer(msg))

    def _semantics(self, obj: dict[str, Any], kind: str, answered: str | None, idx: int) -> None:
        """Cross-frame rules the schema cannot express."""
        if (
            kind == "response"
            and answered == "session/prompt"
            and isinstance(obj.get("result"), dict)
        ):
            sr = obj["result"].get("stopReason")
            if sr not in STOP_REASONS:
                self._violate("R-TURN-2", f"stopReason {sr!r} is not a v1 stop reason", idx)
        if obj.get("method") != "session/update" or not isinstance(obj.get("params"), dict):
            return
        sid = obj["params"].get("sessionId")
        u = obj["params"].get("update")
        if not isinstance(u, dict):
            return
        for loc in u.get("locations") or []:
            if isinstance(loc, dict) and not os.path.isabs(str(loc.get("path", ""))):
                self._violate(
                    "R-TOOL-8", f"tool call location path {loc.get('path')!r} not absolute", idx
                )
        for c in u.get("content") or []:
            if (
                isinstance(c, dict)
                and c.get("type") == "diff"
                and not os.path.isabs(str(c.get("path")))
            ):
                self._violate("R-TOOL-8", f"diff path {c.get('path')!r} is not absolute", idx)
        known = self._tool_ids.setdefault(repr(sid), set())
        if u.get("sessionUpdate") == "tool_call":
            known.add(repr(u.get("toolCallId")))
        elif (
            u.get("sessionUpdate") == "tool_call_update" and repr(u.get("toolCallId")) not in known
        ):
            self._violate(
                "R-TOOL-9", f"tool_call_update for unannounced id {u.get('toolCallId')!r}", idx
            )

    def _method_for(self, rid: Any) -> str | None:
        return self._sent_methods.get(_idkey(rid))

    def _record(self, direction: str, text: str, nbytes: int) -> None:
        self.transcript.append(
            {
                "t": self.now(),
                "dir": direction,
                "bytes": nbytes,
                "line": _clip(text, TRANSCRIPT_LINE_MAX),
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
            self._sent_methods[_idkey(obj["id"])] = obj["method"]
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

    # -- conveniences --------------------------------------------------------------------------

    async def initialize(self, caps: dict[str, Any] | str | None = "config", **extra: Any) -> Any:
        params: dict[str, Any] = {"protocolVersion": 1}
        c = self.config.capabilities if caps == "config" else caps
        if c is not None:
            params["clientCapabilities"] = c
        params.update(extra)
        return await self.call("initialize", params)

    async def new_session(self, cwd: str | None = None, **extra: Any) -> tuple[str, Any]:
        params: dict[str, Any] = {"cwd": cwd or str(self.cwd), "mcpServers": []}
        params.update(extra)
        result = await self.call("session/new", params)
        if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
            raise CallError("session/new", {"message": f"no sessionId in result: {result!r}"})
        return result["sessionId"], result

    async def start_session(self, caps: Any = "config") -> str:
        await self.initialize(caps)
        sid, _ = await self.new_session()
        return sid

    async def send_prompt(self, sid: str, prompt: str | list[dict[str, Any]], **extra: Any) -> Any:
        blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
        return await self.send_request(
            "session/prompt", {"sessionId": sid, "prompt": blocks, **extra}
        )

    async def prompt(
        self,
        sid: str,
        prompt: str | list[dict[str, Any]],
        timeout: float | None = None,
        **extra: Any,
    ) -> Msg:
        rid = await self.send_prompt(sid, prompt, **extra)
        return await self.wait_response(rid, timeout=timeout, what="session/prompt")

    # -- answering the agent's requests --------------------------------------------------------

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
            term = await _Terminal.start(p, str(self.cwd))
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


class CallError(Exception):
    def __init__(self, method: str, error: Any) -> None:
        super().__init__(f"{method} failed: {json.dumps(error)[:300]}")
        self.error = error


class _Terminal:
    def __init__(self, proc: asyncio.subprocess.Process, limit: int | None) -> None:
        self.proc = proc
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.released = False
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, p: dict[str, Any], default_cwd: str) -> _Terminal:
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


def _idkey(rid: Any) -> tuple[str, Any]:
    return (type(rid).__name__, rid if isinstance(rid, (int, str)) else repr(rid))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text)} chars]"


def _schema_code(kind: str, obj: dict[str, Any]) -> str:
    if kind == "response":
        return "R-RPC-3"
    if obj.get("method") == "session/update":
        return "R-TURN-3"
    return "R-EXT-4"
