"""The performance floor: the benchmark commands on a bare asyncio + orjson loop.

No validation, no models, no framework: read a line from stdin, `orjson.loads` it, dispatch on
`method`, build the reply as a dict and `orjson.dumps` it into one buffered writer. Whatever this
agent costs is the cost of pipes, JSON and the event loop on this machine, which no real agent can
beat; the benchmark uses it to show that the driver is not the bottleneck and how close the other
agents come to the floor.

It follows `shared/reference-agent.md` for the commands the scenarios use: `/echo`, `/stream`,
`/sleep` (cancellable), `/read`, the `available_commands_update` after `session/new`, and
`session/cancel`.

With ``--sqlite`` it is the *durable floor*: before answering a prompt, it commits the turn (its
prompt, the texts it sent and its stop reason) as one row of a WAL-mode SQLite file in one
transaction, with ``synchronous=NORMAL`` and WAL checkpoints on a background thread, which
then also makes the first commit after each (the one that syncs the restarted WAL's header),
as acp-agent's store does. The benchmark uses it to show what one SQLite commit per turn
costs on top of the floor.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from itertools import count
from typing import Any

import orjson

FLUSH_AT = 1 << 16

COMMANDS = [
    {"name": "echo", "description": "Reply with the given text", "input": {"hint": "text"}},
    {"name": "stream", "description": "Stream chunks", "input": {"hint": "<count> [<size>]"}},
    {"name": "sleep", "description": "Wait (cancellable)", "input": {"hint": "<ms>"}},
    {"name": "read", "description": "Read a file", "input": {"hint": "<path> [<times>]"}},
]


class InvalidParams(Exception):
    pass


CHECKPOINT_EVERY = 128  # commits between background WAL checkpoints


class TurnLog:
    """The durable floor's store: one row per turn, committed before the turn is answered."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.conn = self._connect()
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS turns (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
            " prompt TEXT NOT NULL, said TEXT NOT NULL, stop_reason TEXT NOT NULL)"
        )
        self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        self.checkpointer: sqlite3.Connection | None = None
        self.commits = 0

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn

    def commit(self, session_id: str, prompt: Any, said: list[str], stop_reason: str) -> None:
        self.conn.execute(
            "INSERT INTO turns (session_id, prompt, said, stop_reason) VALUES (?, ?, ?, ?)",
            (session_id, orjson.dumps(prompt).decode(), "\n".join(said), stop_reason),
        )
        self.commits += 1
        if self.commits % CHECKPOINT_EVERY == 0:
            asyncio.get_running_loop().run_in_executor(None, self._checkpoint)

    def _checkpoint(self) -> None:
        if self.checkpointer is None:
            self.checkpointer = self._connect()
        self.checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.checkpointer.execute("PRAGMA user_version = 0")  # the first commit after it


class Writer:
    """Buffers encoded lines and hands them to the stdout pipe transport in batches."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self._buffer: list[bytes] = []
        self._size = 0

    def send(self, message: dict[str, Any]) -> None:
        data = orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
        self._buffer.append(data)
        self._size += len(data)
        if self._size >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._transport.write(b"".join(self._buffer))
            self._buffer.clear()
            self._size = 0


class _DrainProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self._paused = False
        self._resumed: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    async def drain(self) -> None:
        if self._paused:
            self._resumed = asyncio.get_running_loop().create_future()
            await self._resumed


class FloorAgent:
    def __init__(
        self, writer: Writer, drain: _DrainProtocol, turn_log: TurnLog | None = None
    ) -> None:
        self.writer = writer
        self.drain = drain
        self.turn_log = turn_log
        self.said: dict[str, list[str]] = {}  # with a turn log: the texts of running turns
        self.read_text_file = False
        self.sessions: dict[str, str] = {}
        self.turns: dict[str, asyncio.Task[None]] = {}
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.ids = count()
        self.session_ids = count(1)

    def handle(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        msg_id = message.get("id")
        if method is None:
            future = self.pending.pop(msg_id, None) if isinstance(msg_id, int) else None
            if future is not None and not future.done():
                future.set_result(message.get("result"))
            return
        params = message.get("params") or {}
        if method == "session/prompt":
            session_id = params["sessionId"]
            task = asyncio.get_running_loop().create_task(self.prompt(msg_id, session_id, params))
            self.turns[session_id] = task
            return
        if method == "session/cancel":
            turn = self.turns.get(str(params.get("sessionId")))
            if turn is not None:
                turn.cancel()
            return
        if method == "initialize":
            fs = (params.get("clientCapabilities") or {}).get("fs") or {}
            self.read_text_file = bool(fs.get("readTextFile"))
            result: Any = {
                "protocolVersion": 1,
                "agentCapabilities": {},
                "agentInfo": {"name": "floor-agent", "version": "0.1.0"},
            }
        elif method == "session/new":
            session_id = f"floor-{next(self.session_ids)}"
            self.sessions[session_id] = params.get("cwd", "/")
            self.writer.send({"jsonrpc": "2.0", "id": msg_id, "result": {"sessionId": session_id}})
            self.update(
                session_id,
                {"sessionUpdate": "available_commands_update", "availableCommands": COMMANDS},
            )
            self.writer.flush()
            return
        elif "id" in message:
            self.writer.send(
                {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "error": {"code": -32601, "message": "Method not found"},
                }
            )
            self.writer.flush()
            return
        else:
            return
        self.writer.send({"jsonrpc": "2.0", "id": msg_id, "result": result})
        self.writer.flush()

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        self.writer.send(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": session_id, "update": update},
            }
        )

    def say(self, session_id: str, text: str) -> None:
        said = self.said.get(session_id)
        if said is not None:
            said.append(text)
        self.update(
            session_id,
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
        )

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = next(self.ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.writer.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        self.writer.flush()
        try:
            return await future
        finally:
            self.pending.pop(request_id, None)

    async def prompt(self, msg_id: Any, session_id: str, params: dict[str, Any]) -> None:
        reply: dict[str, Any]
        said: list[str] = []
        if self.turn_log is not None:
            self.said[session_id] = said
        try:
            await self.run(session_id, params)
            reply = {"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "end_turn"}}
        except asyncio.CancelledError:
            reply = {"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "cancelled"}}
        except InvalidParams as exc:
            error = {"code": -32602, "message": f"Invalid params: {exc}"}
            reply = {"jsonrpc": "2.0", "id": msg_id, "error": error}
        finally:
            if self.turns.get(session_id) is asyncio.current_task():
                del self.turns[session_id]
            if self.said.get(session_id) is said:
                del self.said[session_id]
        result = reply.get("result")
        if self.turn_log is not None and result is not None:
            self.turn_log.commit(session_id, params.get("prompt"), said, result["stopReason"])
        self.writer.send(reply)
        self.writer.flush()

    async def run(self, session_id: str, params: dict[str, Any]) -> None:
        blocks = params.get("prompt") or []
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        if not text.startswith("/"):
            self.say(session_id, f"{text}\n\n(no language model is configured; try /help)")
            return
        # Slice the arguments out once: with a 50 MiB /echo every copy counts.
        line_end = text.find("\n")
        if line_end < 0:
            line_end = len(text)
        space = text.find(" ", 1, line_end)
        name = text[1:line_end] if space < 0 else text[1:space]
        rest = "" if space < 0 else text[space + 1 : line_end].lstrip()
        if name == "echo":
            self.say(session_id, rest)
            return
        args = rest.split()
        if name == "stream":
            number = _int_arg(args, 0, "count")
            size = _int_arg(args, 1, "size", 64)
            chunk = "x" * size
            for i in range(number):
                self.say(session_id, chunk)
                if i & 1023 == 1023:
                    await self.drain.drain()
        elif name == "sleep":
            ms = _int_arg(args, 0, "ms")
            await asyncio.sleep(ms / 1000)
            self.say(session_id, f"slept {ms}")
        elif name == "read":
            if not args:
                raise InvalidParams("path")
            times = _int_arg(args, 1, "times", 1)
            if not self.read_text_file:
                self.say(session_id, "the client does not offer fs.readTextFile")
                return
            path = os.path.join(self.sessions.get(session_id, "/"), args[0])
            total = 0
            for _ in range(times):
                result = await self.request(
                    "fs/read_text_file", {"sessionId": session_id, "path": path}
                )
                total += len(result["content"])
            self.say(session_id, f"read {total} chars")
        else:
            raise InvalidParams(f"unknown command {name}")


def _int_arg(args: list[str], index: int, name: str, default: int | None = None) -> int:
    if index >= len(args):
        if default is None:
            raise InvalidParams(name)
        return default
    if not args[index].isdigit():
        raise InvalidParams(name)
    return int(args[index])


class LineReader:
    """Splits stdin into lines as it arrives; a long line is kept as a list of chunks."""

    def __init__(self, agent: FloorAgent) -> None:
        self.agent = agent
        self.partial: list[bytes] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        start = 0
        end = data.find(b"\n")
        if end < 0:
            self.partial.append(data)
            return
        if self.partial:
            self.partial.append(data[:end])
            line = b"".join(self.partial)
            self.partial.clear()
            self.line(line)
            start = end + 1
            end = data.find(b"\n", start)
        while end >= 0:
            self.line(data[start:end])
            start = end + 1
            end = data.find(b"\n", start)
        if start < len(data):
            self.partial.append(data[start:])

    def line(self, line: bytes) -> None:
        if line.strip():
            self.agent.handle(orjson.loads(line))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


def read_stdin(loop: asyncio.AbstractEventLoop, reader: LineReader) -> None:
    """Feed stdin to ``reader`` from a readiness callback, through one kept buffer.

    asyncio's pipe transport allocates 256 KiB per read (with glibc, an ``mmap`` and a
    ``munmap`` for every small message), a cost no agent has to pay, so the floor does not.
    """
    fd = sys.stdin.fileno()
    os.set_blocking(fd, False)
    buffer = memoryview(bytearray(1 << 18))

    def on_readable() -> None:
        try:
            count = os.readv(fd, (buffer,))
        except BlockingIOError:
            return
        except OSError:
            count = 0
        if count:
            reader.data_received(buffer[:count].tobytes())
        else:
            loop.remove_reader(fd)
            reader.connection_lost(None)

    loop.add_reader(fd, on_readable)


async def main(turn_log: TurnLog | None) -> None:
    loop = asyncio.get_running_loop()
    drain = _DrainProtocol()
    transport, _ = await loop.connect_write_pipe(lambda: drain, sys.stdout)
    agent = FloorAgent(Writer(transport), drain, turn_log)
    reader = LineReader(agent)
    read_stdin(loop, reader)
    await reader.done
    agent.writer.flush()
    for task in list(agent.turns.values()):
        task.cancel()


def turn_log_from_args() -> TurnLog | None:
    if "--sqlite" not in sys.argv[1:]:
        return None
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return TurnLog(os.path.join(data_home, "floor-agent", "turns.db"))


if __name__ == "__main__":
    asyncio.run(main(turn_log_from_args()))
