"""The reference agent's benchmark commands, built on the official Python ACP SDK.

This is the comparison point for the benchmarks: the agent a developer would write with the
`agent-client-protocol` package (module `acp`) by following its API the ordinary way: an `Agent`
implementation with pydantic models in and out, served by `acp.run_agent` over stdio,
`session_update` for every update and `read_text_file` for file reads. Cancellation is done the
natural way for asyncio: each prompt runs its command in a task that `cancel` cancels.

It implements only what the benchmark scenarios use (see `shared/reference-agent.md`): `/echo`,
`/stream`, `/sleep`, `/read`, `/think`, `/fail` and `/help`, the `available_commands_update` after
`session/new`, and `session/cancel`. Nothing here is tuned for speed, and nothing is slowed down.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Client,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    update_agent_message_text,
    update_agent_thought_text,
)
from acp.helpers import update_available_commands
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    ClientCapabilities,
    Implementation,
    TextContentBlock,
    UnstructuredCommandInput,
)

COMMANDS: list[tuple[str, str, str | None]] = [
    ("echo", "Reply with the given text", "text"),
    ("stream", "Stream <count> chunks of <size> characters", "<count> [<size>]"),
    ("sleep", "Wait <ms> milliseconds (cancellable)", "<ms>"),
    ("read", "Read a file through the client <times> times", "<path> [<times>]"),
    ("think", "Send the text as a thought", "text"),
    ("fail", "Answer the prompt with a JSON-RPC error", "<code> <message>"),
    ("help", "List the commands", None),
]


@dataclass
class SessionState:
    cwd: str
    turn: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    background: set[asyncio.Task[None]] = field(default_factory=set)


def _non_negative_int(value: str, name: str) -> int:
    if not value.isdigit():
        raise RequestError.invalid_params({"argument": name, "value": value})
    return int(value)


class ReferenceAgent:
    """An ACP agent written with the official SDK."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._client_capabilities = ClientCapabilities()
        self._sessions: dict[str, SessionState] = {}

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    @property
    def client(self) -> Client:
        assert self._client is not None, "on_connect was not called"
        return self._client

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        if client_capabilities is not None:
            self._client_capabilities = client_capabilities
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="sdk-reference-agent", version="0.1.0"),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        session = SessionState(cwd=cwd)
        self._sessions[session_id] = session
        # The SDK sends the response once this method returns; the commands must follow it, so
        # they go out from a task that runs after the response has been queued.
        task = asyncio.create_task(self._advertise_commands(session_id))
        session.background.add(task)
        task.add_done_callback(session.background.discard)
        return NewSessionResponse(session_id=session_id)

    async def _advertise_commands(self, session_id: str) -> None:
        commands = [
            AvailableCommand(
                name=name,
                description=description,
                input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint))
                if hint
                else None,
            )
            for name, description, hint in COMMANDS
        ]
        await self.client.session_update(session_id, update_available_commands(commands))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        text = "".join(block.text for block in prompt if isinstance(block, TextContentBlock))
        session.cancel_requested = False
        turn = asyncio.create_task(self._run(session_id, session, text))
        session.turn = turn
        try:
            await turn
        except asyncio.CancelledError:
            if session.cancel_requested and turn.cancelled():
                return PromptResponse(stop_reason="cancelled")
            turn.cancel()
            raise
        finally:
            session.turn = None
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is None or session.turn is None:
            return
        session.cancel_requested = True
        session.turn.cancel()

    async def _say(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, update_agent_message_text(text))

    async def _run(self, session_id: str, session: SessionState, text: str) -> None:
        if not text.startswith("/"):
            await self._say(session_id, f"{text}\n\n(no language model is configured; try /help)")
            return
        line = text.partition("\n")[0]
        name, _, rest = line[1:].partition(" ")
        rest = rest.lstrip()
        args = rest.split()
        if name == "echo":
            await self._say(session_id, rest)
        elif name == "think":
            await self.client.session_update(session_id, update_agent_thought_text(rest))
        elif name == "stream":
            if not args:
                raise RequestError.invalid_params({"argument": "count"})
            count = _non_negative_int(args[0], "count")
            size = _non_negative_int(args[1], "size") if len(args) > 1 else 64
            chunk = "x" * size
            for _ in range(count):
                await self._say(session_id, chunk)
        elif name == "sleep":
            if not args:
                raise RequestError.invalid_params({"argument": "ms"})
            ms = _non_negative_int(args[0], "ms")
            await asyncio.sleep(ms / 1000)
            await self._say(session_id, f"slept {ms}")
        elif name == "read":
            await self._read(session_id, session, args)
        elif name == "fail":
            if not args or not args[0].lstrip("-").isdigit():
                raise RequestError.invalid_params({"argument": "code"})
            raise RequestError(int(args[0]), " ".join(args[1:]) or "failed")
        elif name == "help":
            await self._say(session_id, "\n".join(f"/{n}: {d}" for n, d, _ in COMMANDS))
        else:
            raise RequestError.invalid_params({"argument": "command", "value": name})

    async def _read(self, session_id: str, session: SessionState, args: list[str]) -> None:
        if not args:
            raise RequestError.invalid_params({"argument": "path"})
        times = _non_negative_int(args[1], "times") if len(args) > 1 else 1
        fs = self._client_capabilities.fs
        if fs is None or not fs.read_text_file:
            await self._say(session_id, "the client does not offer fs.readTextFile")
            return
        path = os.path.join(session.cwd, args[0])
        total = 0
        for _ in range(times):
            response = await self.client.read_text_file(session_id=session_id, path=path)
            total += len(response.content)
        await self._say(session_id, f"read {total} chars")


def main() -> None:
    # Only the methods the benchmarks use are implemented, so it is not a complete `acp.Agent`.
    asyncio.run(run_agent(ReferenceAgent()))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
