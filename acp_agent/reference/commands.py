"""The reference agent's slash commands, one small function each.

Every command below does exactly what ``reference-agent.md`` says the client observes,
and nothing more, so that editors, the conformance suite and the benchmarks get the
same result every time. Each is an ``async`` function taking the turn and the parsed
command line and returning the turn's stop reason; :data:`COMMANDS` lists them with
the description and input hint advertised in ``available_commands_update``.

Cancellation needs no code here: every await (``anyio.sleep``, a client call, a
terminal wait) raises the backend's cancellation exception when ``session/cancel``
arrives, and the library answers ``stopReason: "cancelled"``.

This module uses only the public API of acp-agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.lowlevel

from acp_agent.agent import PromptTurn, StopReason
from acp_agent.client import TerminalExit, diff_content, terminal_content, text_content
from acp_agent.errors import InvalidParams, PathOutsideRoots, RequestError

from .args import CommandLine, bad_argument

Handler = Callable[[PromptTurn, CommandLine], Awaitable[StopReason]]

DEFAULT_CHUNK_SIZE = 64


# ----------------------------------------------------------------------- output


async def echo(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/echo <text...>``: one message chunk whose text is exactly ``<text...>``."""
    await turn.client.message(line.text_after(0))
    return "end_turn"


async def stream(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/stream <count> [<size>]``: ``count`` message chunks of ``size`` characters."""
    count = line.count(0, "count")
    size = line.count(1, "size", default=DEFAULT_CHUNK_SIZE)
    line.at_most(2)
    text = "x" * size  # built once: this loop is benchmarked at 100k updates
    message = turn.client.message
    for _ in range(count):
        await message(text)
    return "end_turn"


MAX_SLEEP_MS: Final = 86_400_000  # a day


async def sleep(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/sleep <ms>``: wait ``ms`` milliseconds (cancellable), then say ``slept <ms>``."""
    ms = line.count(0, "ms", maximum=MAX_SLEEP_MS)
    line.at_most(1)
    await anyio.sleep(ms / 1000)
    await turn.client.message(f"slept {ms}")
    return "end_turn"


async def think(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/think <text...>``: one thought chunk whose text is ``<text...>``."""
    await turn.client.thought(line.text_after(0))
    return "end_turn"


async def plan(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/plan <n>``: a plan of ``n`` pending steps, then one update per completed step."""
    n = line.count(0, "n")
    line.at_most(1)
    entries = [
        {"content": f"step {i}", "priority": "medium", "status": "pending"} for i in range(1, n + 1)
    ]
    await turn.client.plan(entries)
    for entry in entries:
        entry["status"] = "completed"
        await turn.client.plan(entries)
    return "end_turn"


async def tools(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/tools <n>``: ``n`` tool calls, each pending, then in progress, then completed."""
    n = line.count(0, "n")
    line.at_most(1)
    for i in range(1, n + 1):
        call = await turn.client.tool_call(f"tool {i}", kind="other", name=f"tool_{i}")
        await call.start()
        await call.complete([text_content(f"done {i}")])
    return "end_turn"


# ----------------------------------------------------------------------- the client's side


def _missing(capability: str, command: str, what: str) -> str:
    return f"The client did not advertise {capability}, so {command} cannot {what}."


def _checked_path(turn: PromptTurn, path: str) -> str:
    """``path`` made absolute against the session's cwd, and inside its roots."""
    resolved = turn.session.resolve_path(path)
    if not turn.client.allow_outside_roots and not turn.session.within_roots(resolved):
        raise bad_argument("path", f"{resolved!r} is outside the session's directories")
    return resolved


async def read(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/read <path> [<times>]``: ``fs/read_text_file`` ``times`` times, then the total."""
    path = _checked_path(turn, line.word(0, "path"))
    times = line.count(1, "times", default=1)
    line.at_most(2)
    client = turn.client
    if not client.capabilities.read_text_file:
        await client.message(_missing("fs.readTextFile", "/read", "read files"))
        return "end_turn"
    total = 0
    for _ in range(times):
        total += len(await client.read_text_file(path))
    await client.message(f"read {total} chars")
    return "end_turn"


async def write(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/write <path> <text...>``: an ``edit`` tool call with a diff, the person's
    permission (skipped in mode ``auto``), then ``fs/write_text_file``."""
    path = _checked_path(turn, line.word(0, "path"))
    text = line.text_after(1)
    client = turn.client
    if not client.capabilities.write_text_file:
        await client.message(_missing("fs.writeTextFile", "/write", "write files"))
        return "end_turn"
    call = await client.tool_call(
        f"write {line.word(0, 'path')}",
        kind="edit",
        content=[diff_content(path, text)],
        locations=[{"path": path}],
    )
    if turn.session.mode_id != "auto":
        outcome = await client.request_permission(call)
        if outcome.cancelled:
            return "cancelled"  # the client answers so only when the turn is being cancelled
        if not outcome.allowed:
            await call.fail([text_content("the write was rejected")])
            return "end_turn"
    try:
        await client.write_text_file(path, text)
    except RequestError as exc:
        await call.fail([text_content(f"the write failed: {exc.message}")])
        raise
    await call.complete()
    return "end_turn"


def _describe_exit(status: TerminalExit) -> str:
    if status.exit_code is not None:
        return str(status.exit_code)
    return f"signal {status.signal}" if status.signal else "unknown"


async def run(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/run <command...>``: an ``execute`` tool call running the command in a terminal
    (through ``sh -c``, in the session's cwd), then ``exit <code>``."""
    command = line.text_after(0)
    if not command.strip():
        raise bad_argument("command", "missing")
    client = turn.client
    if not client.capabilities.terminal:
        await client.message(_missing("terminal", "/run", "run commands"))
        return "end_turn"
    call = await client.tool_call(f"run {command}", kind="execute", raw_input={"command": command})
    try:
        async with client.terminal("sh", ["-c", command]) as term:
            await call.update(status="in_progress", content=[terminal_content(term.id)])
            status = await term.wait_for_exit()
            output = await term.output()
    except RequestError as exc:  # e.g. the person declined to run it
        await call.fail([text_content(f"the command did not run: {exc.message}")])
        return "end_turn"
    raw_output = {"exitCode": status.exit_code, "signal": status.signal, "output": output.output}
    if status.exit_code == 0:
        await call.complete(raw_output=raw_output)
    else:
        await call.fail(raw_output=raw_output)
    await client.message(f"exit {_describe_exit(status)}")
    return "end_turn"


# ----------------------------------------------------------------------- ACP 1.25 updates

NOTICE_SEVERITIES = ("info", "warning", "error")


async def notice(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/notice <severity> <title...>``: a live ``notice`` (never replayed), or without
    ``session.notices`` a message ``notice: <title...>``."""
    severity = line.word(0, "severity")
    if severity not in NOTICE_SEVERITIES:
        raise bad_argument("severity", f"must be one of {', '.join(NOTICE_SEVERITIES)}")
    title = line.text_after(1)
    if not title.strip():
        raise bad_argument("title", "missing")
    if turn.client.capabilities.notices:
        await turn.client.notice(severity, title)
    else:
        await turn.client.message(f"notice: {title}")
    return "end_turn"


async def compact(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/compact <n>``: a compaction with ``n`` summary chunks, recorded and replayed;
    a cancel between chunks ends it ``cancelled``."""
    n = line.count(0, "n")
    line.at_most(1)
    client = turn.client
    if not client.capabilities.compaction:
        await client.message("compaction is not supported by this client")
        return "end_turn"
    compaction = await client.compaction()
    try:
        for i in range(1, n + 1):
            await anyio.lowlevel.checkpoint()  # where a cancel lands between chunks
            await compaction.chunk(f"summary {i}")
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await compaction.cancel()
        raise
    await compaction.complete()
    return "end_turn"


# ----------------------------------------------------------------------- errors and help


async def fail(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/fail <code> <message...>``: answer the prompt with that JSON-RPC error."""
    code = line.integer(0, "code")
    message = line.text_after(1)
    raise RequestError(message or None, code=code)


async def help_(turn: PromptTurn, line: CommandLine) -> StopReason:
    """``/help``: one message chunk listing the commands."""
    await turn.client.message(help_text())
    return "end_turn"


# ----------------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command: its handler, its description and the hint for its input."""

    handler: Handler
    description: str
    hint: str | None = None


COMMANDS: dict[str, CommandSpec] = {
    "echo": CommandSpec(echo, "Reply with exactly the given text", "<text...>"),
    "stream": CommandSpec(
        stream, "Stream <count> message chunks of <size> characters", "<count> [<size>]"
    ),
    "sleep": CommandSpec(sleep, "Wait <ms> milliseconds, then say so (cancellable)", "<ms>"),
    "think": CommandSpec(think, "Send the text as a thought", "<text...>"),
    "plan": CommandSpec(plan, "Show a plan of <n> steps and complete them one by one", "<n>"),
    "tools": CommandSpec(tools, "Run <n> tool calls to completion", "<n>"),
    "read": CommandSpec(read, "Read a file through the client <times> times", "<path> [<times>]"),
    "write": CommandSpec(
        write, "Write a file through the client, with permission", "<path> <text...>"
    ),
    "run": CommandSpec(run, "Run a shell command in a client terminal", "<command...>"),
    "fail": CommandSpec(
        fail, "Answer with the JSON-RPC error <code> and <message>", "<code> <message...>"
    ),
    "notice": CommandSpec(
        notice, "Show a live notice (info, warning or error)", "<severity> <title...>"
    ),
    "compact": CommandSpec(compact, "Compact the context: a summary of <n> chunks", "<n>"),
    "help": CommandSpec(help_, "List the commands"),
}


def help_text() -> str:
    lines = ["Commands of the acp-agent reference agent:"]
    for name, spec in COMMANDS.items():
        usage = f"/{name} {spec.hint}" if spec.hint else f"/{name}"
        lines.append(f"  {usage:<27} {spec.description}")
    return "\n".join(lines)


async def run_command(turn: PromptTurn, line: CommandLine) -> StopReason:
    """Run the command named on ``line``; an unknown name is a ``-32602`` error."""
    spec = COMMANDS.get(line.name)
    if spec is None:
        raise InvalidParams(
            f"command: unknown command '/{line.name[:40]}'; /help lists the commands",
            data={"argument": "command"},
        )
    try:
        return await spec.handler(turn, line)
    except PathOutsideRoots as exc:  # a path the library refused: the person's input
        raise bad_argument("path", str(exc)) from None
