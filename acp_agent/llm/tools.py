"""The built-in tools the model may call, each shown to the client as an ACP tool call.

This module owns the tools' JSON schemas (what the model sees) and how each runs on
ACP: ``read_file`` (kind ``read``) through ``fs/read_text_file`` when the client
offers it, else from the local disk; ``write_file`` / ``edit_file`` (kind ``edit``)
with a ``diff``, after the person's permission, through ``fs/write_text_file`` or
the local disk; ``run_command`` (kind ``execute``) after permission, in a client
terminal embedded in the tool call, else in a local subprocess; ``list_files`` /
``search_files`` (kind ``search``) on the local disk. Every local file access stays
within the session's root set.

:class:`Invocation` is the ACP side of one call: announce, ask, start, finish. The
model-facing result goes into ``rawOutput.output`` so a loaded session can rebuild
the conversation (see :mod:`acp_agent.llm.context`).

It does not talk to the model; the schemas the model sees are in
:mod:`acp_agent.llm.tool_schemas`, MCP tools in :mod:`acp_agent.llm.mcp_host`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.lowlevel

from ..client import (
    ALLOW_ONCE,
    REJECT_ONCE,
    PermissionOption,
    SessionClient,
    ToolCall,
    ToolKind,
    diff_content,
    terminal_content,
    text_content,
)
from ..errors import AcpError, RequestError
from ..session import Session
from .config import LlmConfig
from .context import META_KEY
from .disk_search import MAX_LIST, MAX_MATCHES, search, walk

log = logging.getLogger("acp_agent.llm.tools")

JSON = dict[str, Any]

ALLOW_ALWAYS: Final = PermissionOption("allow_always", "Always allow", "allow_always")
PERMISSION_OPTIONS: Final = (ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE)
ALWAYS_KEY: Final = "llm.always_allowed"
REJECTED: Final = "The user rejected this tool call. Do not retry it; ask the user how to proceed."


class ToolFailure(Exception):
    """A tool cannot do what was asked; the message goes to the model and the person."""


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


class Invocation:
    """One model tool call as an ACP tool call: announce, ask, start, finish exactly once."""

    def __init__(
        self,
        client: SessionClient,
        *,
        name: str,
        arguments: str,
        args: Any,
        message_id: str,
        call_id: str | None = None,
    ) -> None:
        self.client = client
        #: the model's own id for this call (sent back to it unchanged)
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.args = args
        self.message_id = message_id
        self.handle: ToolCall | None = None

    @property
    def finished(self) -> bool:
        return self.handle is not None and self.handle.finished

    async def announce(
        self,
        title: str,
        kind: ToolKind,
        *,
        locations: Sequence[JSON] | None = None,
        content: Sequence[JSON] | None = None,
    ) -> ToolCall:
        """Send the ``tool_call`` (status ``pending``) with what rebuilds the conversation."""
        call_id = self.client.session.new_tool_call_id()
        meta: JSON = {"messageId": self.message_id, "name": self.name, "arguments": self.arguments}
        if self.call_id:
            meta["id"] = self.call_id
        update: JSON = {
            "sessionUpdate": "tool_call",
            "toolCallId": call_id,
            "title": title,
            "kind": kind,
            "status": "pending",
            "rawInput": self.args if isinstance(self.args, dict) else {"arguments": self.arguments},
            "_meta": {META_KEY: meta},
        }
        if self.name:
            update["name"] = self.name
        if locations:
            update["locations"] = list(locations)
        if content:
            update["content"] = list(content)
        await self.client.update(update)
        self.handle = ToolCall(self.client.update, call_id, "pending")
        return self.handle

    async def permit(self) -> bool:
        """Ask the person (unless they always allowed this tool); False means rejected."""
        assert self.handle is not None
        always: set[str] = self.client.session.state.setdefault(ALWAYS_KEY, set())
        if self.name in always:
            return True
        outcome = await self.client.request_permission(self.handle, PERMISSION_OPTIONS)
        if outcome.cancelled:
            # The client answers "cancelled" when the turn is being cancelled; let the
            # pending cancellation land, and never run the tool.
            await anyio.lowlevel.checkpoint()
            await self.fail("The tool call was cancelled.")
            return False
        if not outcome.allowed:
            await self.fail(REJECTED)
            return False
        if outcome.option is not None and outcome.option.kind == "allow_always":
            always.add(self.name)
        return True

    async def start(self) -> None:
        assert self.handle is not None
        await self.handle.start()

    async def succeed(self, output: str, content: Sequence[JSON] | None = None) -> None:
        assert self.handle is not None
        await self.handle.complete(content=content, raw_output={"output": output})

    async def fail(self, output: str, content: Sequence[JSON] | None = None) -> None:
        assert self.handle is not None
        if content is None:
            content = [text_content(output)]
        await self.handle.fail(content=content, raw_output={"output": output})


@dataclass
class Workspace:
    """The session's files as the tools see them: the client's fs when offered, else disk."""

    session: Session
    client: SessionClient
    config: LlmConfig

    def path(self, raw: Any) -> str:
        if not isinstance(raw, str) or not raw.strip():
            raise ToolFailure("a non-empty path is required")
        resolved = self.session.resolve_path(raw.strip())
        if not self.client.allow_outside_roots and not self.session.within_roots(resolved):
            raise ToolFailure(f"{resolved} is outside the workspace roots")
        return resolved

    def display(self, path: str) -> str:
        try:
            rel = os.path.relpath(path, self.session.cwd)
        except ValueError:
            return path
        return path if rel.startswith("..") else rel

    async def read(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        if self.client.capabilities.read_text_file:
            try:
                return await self.client.read_text_file(path, line=line, limit=limit)
            except RequestError as exc:
                raise ToolFailure(f"cannot read {path}: {exc.message}") from None
        try:
            text = await anyio.Path(path).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise ToolFailure(f"{path} does not exist") from None
        except OSError as exc:
            raise ToolFailure(f"cannot read {path}: {exc.strerror}") from None
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = len(lines) if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    async def read_if_exists(self, path: str) -> str | None:
        exists = await anyio.Path(path).exists()
        if not self.client.capabilities.read_text_file and not exists:
            return None
        try:
            return await self.read(path)
        except ToolFailure:
            if not exists:
                return None
            raise

    async def write(self, path: str, content: str) -> None:
        if self.client.capabilities.write_text_file:
            try:
                await self.client.write_text_file(path, content)
            except RequestError as exc:
                raise ToolFailure(f"cannot write {path}: {exc.message}") from None
            return
        try:
            await anyio.Path(path).parent.mkdir(parents=True, exist_ok=True)
            await anyio.Path(path).write_text(content, encoding="utf-8")
        except OSError as exc:
            raise ToolFailure(f"cannot write {path}: {exc.strerror}") from None


def _str(args: Mapping[str, Any], key: str, *, required: bool = True) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ToolFailure(f"argument {key!r} must be a string")
    return value


def _int(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ToolFailure(f"argument {key!r} must be a non-negative integer")
    return int(value)


# --------------------------------------------------------------------------- the tools


async def read_file(inv: Invocation, ws: Workspace) -> None:
    path = ws.path(inv.args.get("path"))
    line, limit = _int(inv.args, "offset"), _int(inv.args, "limit")
    location: JSON = {"path": path}
    if line:
        location["line"] = line
    await inv.announce(f"Read {ws.display(path)}", "read", locations=[location])
    await inv.start()
    text = await ws.read(path, line or None, limit)
    await inv.succeed(clip(text, ws.config.max_tool_output))


async def write_file(inv: Invocation, ws: Workspace) -> None:
    path = ws.path(inv.args.get("path"))
    content = _str(inv.args, "content")
    assert content is not None
    old = await ws.read_if_exists(path)
    await inv.announce(
        f"Write {ws.display(path)}",
        "edit",
        locations=[{"path": path}],
        content=[diff_content(path, content, old)],
    )
    if not await inv.permit():
        return
    await inv.start()
    await ws.write(path, content)
    verb = "Created" if old is None else "Overwrote"
    await inv.succeed(f"{verb} {path} ({len(content.splitlines())} lines).")


async def edit_file(inv: Invocation, ws: Workspace) -> None:
    path = ws.path(inv.args.get("path"))
    old_string = _str(inv.args, "old_string")
    new_string = _str(inv.args, "new_string")
    assert old_string is not None and new_string is not None
    replace_all = inv.args.get("replace_all") is True
    current = await ws.read(path)
    count = current.count(old_string) if old_string else 0
    if count == 0:
        raise ToolFailure(f"old_string was not found in {path}; read the file and retry")
    if count > 1 and not replace_all:
        raise ToolFailure(
            f"old_string occurs {count} times in {path}; give more context or set replace_all"
        )
    updated = current.replace(old_string, new_string, -1 if replace_all else 1)
    line = current[: current.index(old_string)].count("\n") + 1
    await inv.announce(
        f"Edit {ws.display(path)}",
        "edit",
        locations=[{"path": path, "line": line}],
        content=[diff_content(path, updated, current)],
    )
    if not await inv.permit():
        return
    await inv.start()
    await ws.write(path, updated)
    await inv.succeed(f"Edited {path}: replaced {count if replace_all else 1} occurrence(s).")


def _command_result(code: int | None, signal: str | None, output: str, timed_out: bool) -> str:
    if timed_out:
        head = "The command timed out and was killed."
    elif code is not None:
        head = f"Exit code {code}."
    else:
        head = f"The command was terminated by signal {signal or 'unknown'}."
    return f"{head}\n{output}" if output else f"{head} (no output)"


async def run_command(inv: Invocation, ws: Workspace) -> None:
    command = _str(inv.args, "command")
    assert command is not None
    if not command.strip():
        raise ToolFailure("the command is empty")
    cwd = ws.path(inv.args["cwd"]) if inv.args.get("cwd") else ws.session.cwd
    timeout = inv.args.get("timeout")
    limit = ws.config.command_timeout
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        limit = min(float(timeout), limit)
    short = command if len(command) <= 80 else command[:79] + "…"
    handle = await inv.announce(f"Run `{short}`", "execute", locations=[{"path": cwd}])
    if not await inv.permit():
        return
    await inv.start()
    max_out = ws.config.max_tool_output
    if ws.client.capabilities.terminal:
        async with ws.client.terminal(
            "/bin/sh", ["-c", command], cwd=cwd, output_byte_limit=max_out
        ) as term:
            await handle.update(content=[terminal_content(term.id)])
            with anyio.move_on_after(limit) as scope:
                await term.wait_for_exit()
            timed_out = scope.cancelled_caught
            if timed_out:
                await term.kill()
            out = await term.output()
            status = out.exit_status
            code = status.exit_code if status is not None else None
            sig = status.signal if status is not None else None
            text = out.output + ("\n[output truncated]" if out.truncated else "")
            result = _command_result(code, sig, clip(text, max_out), timed_out)
            if timed_out:
                await inv.fail(result, content=[terminal_content(term.id)])
            else:
                await inv.succeed(result)
        return
    code, output, timed_out = await run_local(command, cwd, limit, max_out)
    result = _command_result(code, None, output, timed_out)
    shown = [text_content(f"$ {command}\n{output}".rstrip())]
    if timed_out:
        await inv.fail(result, content=shown)
    else:
        await inv.succeed(result, content=shown)


async def run_local(
    command: str, cwd: str, timeout: float, limit: int
) -> tuple[int | None, str, bool]:
    """Run ``command`` with ``/bin/sh`` in its own process group; kill the group on the
    way out (timeout or cancellation). Returns (exit code, output, timed out)."""
    # Shielded: a cancel landing while the child starts would lose its handle (and
    # leave the child running); the cancel is seen at the next await instead.
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    log.debug("started local command, pid %d", process.pid)
    chunks = bytearray()
    kept = 0
    try:
        with anyio.move_on_after(timeout) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                if kept < limit:
                    chunks += chunk[: limit - kept]
                    kept = len(chunks)
            await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
        with anyio.CancelScope(shield=True):
            await process.aclose()
        log.debug("local command pid %d ended: exit %s", process.pid, process.returncode)
    output = chunks.decode("utf-8", "replace")
    if kept >= limit:
        output += "\n[output truncated]"
    return (None if timed_out else process.returncode), output, timed_out


async def _in_thread(fn: Callable[[threading.Event], Any]) -> Any:
    """Run blocking file-system work in a thread; a cancelled turn stops waiting at once
    and tells the thread to stop."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(fn, stop, abandon_on_cancel=True)
    finally:
        stop.set()


async def list_files(inv: Invocation, ws: Workspace) -> None:
    raw = inv.args.get("path") or "."
    path = ws.path(raw)
    recursive = inv.args.get("recursive") is True
    await inv.announce(f"List {ws.display(path)}", "search", locations=[{"path": path}])
    await inv.start()
    if not await anyio.Path(path).exists():
        raise ToolFailure(f"{path} does not exist")
    try:
        entries: list[str] = await _in_thread(lambda stop: walk(path, recursive, stop))
    except OSError as exc:
        raise ToolFailure(f"cannot list {path}: {exc.strerror}") from None
    text = "\n".join(entries) if entries else "(empty)"
    if len(entries) >= MAX_LIST:
        text += f"\n[listing stopped at {MAX_LIST} entries]"
    await inv.succeed(clip(text, ws.config.max_tool_output), content=[text_content(text)])


async def search_files(inv: Invocation, ws: Workspace) -> None:
    raw_pattern = _str(inv.args, "pattern")
    assert raw_pattern is not None
    path = ws.path(inv.args.get("path") or ".")
    glob = _str(inv.args, "glob", required=False)
    await inv.announce(
        f"Search {raw_pattern[:60]!r} in {ws.display(path)}", "search", locations=[{"path": path}]
    )
    await inv.start()
    try:
        pattern = re.compile(raw_pattern)
    except re.error as exc:
        raise ToolFailure(f"invalid regular expression: {exc}") from None
    matches: list[tuple[str, int, str]] = await _in_thread(
        lambda stop: search(path, pattern, glob, stop)
    )
    lines = [f"{ws.display(f)}:{n}: {t}" for f, n, t in matches]
    text = "\n".join(lines) if lines else "No matches."
    if len(matches) >= MAX_MATCHES:
        text += f"\n[stopped at {MAX_MATCHES} matches]"
    if inv.handle is not None and matches:
        await inv.handle.update(locations=[{"path": f, "line": n} for f, n, _ in matches[:50]])
    await inv.succeed(clip(text, ws.config.max_tool_output), content=[text_content(text)])


BUILTINS: Final[Mapping[str, Callable[[Invocation, Workspace], Awaitable[None]]]] = {
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "run_command": run_command,
    "list_files": list_files,
    "search_files": search_files,
}


def describe_error(exc: BaseException) -> str:
    """A one-line description of an unexpected tool error for the model and the person."""
    if isinstance(exc, ToolFailure):
        return str(exc)
    if isinstance(exc, RequestError):
        return f"the client answered an error: {exc.message}"
    if isinstance(exc, AcpError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
