"""The client's editor as tools, framework-neutral: read and write files through ``fs/*``
and run commands in a client terminal.

Each operation works on the turn being served (:func:`acp_agent.adapters.turns.current_turn`),
is available only when the client advertised its capability (:func:`available`), keeps
every path inside the session's roots (relative paths resolve against its cwd) and
returns the text the model is given; what goes wrong is an :class:`EditorError` whose
message is for the model. A command's terminal is shown in its tool call's content while
it runs. Each framework module wraps these as its own tools, declaring their kinds
(``read``, ``edit``, ``execute``) and the argument holding the path.

It does not decide when a tool needs approval: the framework's declaration does.
"""

from __future__ import annotations

from typing import Final

import anyio

from ..client import SessionClient, terminal_content
from ..errors import AcpError, RequestError
from .turns import AdapterTurn

#: the output a command's terminal keeps for the model (bytes)
OUTPUT_LIMIT: Final = 64 * 1024
#: how long a command may run before it is killed (seconds)
COMMAND_TIMEOUT: Final = 120.0

READ: Final = "read_file"
WRITE: Final = "write_file"
RUN: Final = "run_command"


class EditorError(Exception):
    """The operation could not be done; the message tells the model why."""


def available(client: SessionClient) -> frozenset[str]:
    """The names of the operations this client's capabilities allow."""
    caps = client.capabilities
    names = {READ} if caps.read_text_file else set()
    if caps.write_text_file:
        names.add(WRITE)
    if caps.terminal:
        names.add(RUN)
    return frozenset(names)


def _checked(client: SessionClient, path: str) -> str:
    session = client.session
    try:
        resolved = session.resolve_path(path)
    except (AcpError, ValueError) as exc:
        raise EditorError(f"bad path {path!r}: {exc}") from None
    if not client.allow_outside_roots and not session.within_roots(resolved):
        raise EditorError(f"{path} is outside the session's folders: {', '.join(session.roots)}")
    return resolved


async def read_file(
    turn: AdapterTurn, path: str, line: int | None = None, limit: int | None = None
) -> str:
    """The file's text (from 1-based ``line``, at most ``limit`` lines), as the editor
    has it (unsaved changes included)."""
    client = turn.client
    if READ not in available(client):
        raise EditorError("the editor does not let this agent read files")
    try:
        return await client.read_text_file(_checked(client, path), line=line, limit=limit)
    except RequestError as exc:
        raise EditorError(f"cannot read {path}: {exc.message}") from None


async def write_file(turn: AdapterTurn, path: str, content: str) -> str:
    """Write ``content`` to the file (created if missing) through the editor."""
    client = turn.client
    if WRITE not in available(client):
        raise EditorError("the editor does not let this agent write files")
    resolved = _checked(client, path)
    try:
        await client.write_text_file(resolved, content)
    except RequestError as exc:
        raise EditorError(f"cannot write {path}: {exc.message}") from None
    return f"Wrote {len(content)} characters to {resolved}"


async def run_command(
    turn: AdapterTurn,
    command: str,
    *,
    cwd: str | None = None,
    tool_call_id: str | None = None,
    timeout: float = COMMAND_TIMEOUT,
) -> str:
    """Run ``command`` with ``sh -c`` in a client terminal (in ``cwd``, default the
    session's); its exit status and output. ``tool_call_id`` (the framework's id of the
    call running it) shows the terminal in that call's content."""
    client = turn.client
    if RUN not in available(client):
        raise EditorError("the editor does not let this agent run commands")
    where = _checked(client, cwd) if cwd else client.session.cwd
    try:
        async with client.terminal(
            "sh", ["-c", command], cwd=where, output_byte_limit=OUTPUT_LIMIT
        ) as terminal:
            turn.terminals.append(terminal)  # released at the turn's end if not before
            call = turn.calls.get(tool_call_id) if tool_call_id else None
            if call is not None and not call.finished:
                await call.update(content=[terminal_content(terminal.id)])
            status = None
            with anyio.move_on_after(timeout):
                status = await terminal.wait_for_exit()
            output = await terminal.output()
    except RequestError as exc:
        raise EditorError(f"cannot run the command: {exc.message}") from None
    if status is None:
        head = f"The command did not finish within {timeout:g} s and was killed."
    elif status.signal:
        head = f"The command was ended by signal {status.signal}."
    else:
        head = f"Exit code {status.exit_code}."
    cut = " (output truncated)" if output.truncated else ""
    return f"{head}{cut}\n{output.output}"
