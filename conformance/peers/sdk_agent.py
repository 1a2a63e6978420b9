"""The reference-agent commands on the official ACP Python SDK (`agent-client-protocol`, module
`acp`), written as idiomatically as that SDK allows, so the conformance suite can be run against
it: `python -m acp_agent_conformance -- python conformance/peers/sdk_agent.py`.

Implements /echo, /sleep, /write, /tools, /plan and /fail, the `ask` / `auto` modes (as session
modes and as a `mode` select config option), and cancellation. Everything protocol-level is left
to the SDK on purpose: this is a peer to measure, not a fixed-up agent.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    SetSessionModeResponse,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
from acp.helpers import update_available_commands, update_current_mode
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    ConfigOptionUpdate,
    Implementation,
    PermissionOption,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    ToolCallUpdate,
)

COMMANDS = {
    "echo": "Reply with the given text",
    "sleep": "Wait the given milliseconds",
    "write": "Write text to a file (asks permission in ask mode)",
    "tools": "Run n fake tool calls",
    "plan": "Show a plan of n steps",
    "fail": "Answer with a JSON-RPC error",
}
MODES = [SessionMode(id="ask", name="Ask"), SessionMode(id="auto", name="Auto")]


class SdkAgent(Agent):
    def __init__(self) -> None:
        self._conn: Client | None = None
        self._caps: Any = None
        self._modes: dict[str, str] = {}
        self._turns: dict[str, asyncio.Task[Any]] = {}

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def conn(self) -> Client:
        assert self._conn is not None
        return self._conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self._caps = client_capabilities
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="sdk-reference-agent", version="0.1"),
            auth_methods=[],
        )

    def _mode_state(self, sid: str) -> SessionModeState:
        return SessionModeState(current_mode_id=self._modes[sid], available_modes=MODES)

    def _config(self, sid: str) -> list[SessionConfigOptionSelect]:
        values = [SessionConfigSelectOption(value=m.id, name=m.name) for m in MODES]
        return [
            SessionConfigOptionSelect(
                id="mode",
                name="Mode",
                category="mode",
                type="select",
                current_value=self._modes[sid],
                options=values,
            )
        ]

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        sid = uuid.uuid4().hex
        self._modes[sid] = "ask"
        commands = [AvailableCommand(name=n, description=d) for n, d in COMMANDS.items()]
        asyncio.get_running_loop().create_task(
            self.conn.session_update(session_id=sid, update=update_available_commands(commands))
        )
        return NewSessionResponse(
            session_id=sid, modes=self._mode_state(sid), config_options=self._config(sid)
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        if mode_id not in {m.id for m in MODES} or session_id not in self._modes:
            raise RequestError.invalid_params({"modeId": mode_id})
        self._modes[session_id] = mode_id
        await self.conn.session_update(
            session_id=session_id,
            update=ConfigOptionUpdate(
                session_update="config_option_update", config_options=self._config(session_id)
            ),
        )
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        if (
            config_id != "mode"
            or value not in {m.id for m in MODES}
            or session_id not in self._modes
        ):
            raise RequestError.invalid_params({"configId": config_id})
        self._modes[session_id] = str(value)
        await self.conn.session_update(
            session_id=session_id, update=update_current_mode(str(value))
        )
        return SetSessionConfigOptionResponse(config_options=self._config(session_id))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        task = self._turns.get(session_id)
        if task is not None:
            task.cancel()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        if session_id not in self._modes:
            raise RequestError(-32002, "Resource not found", {"sessionId": session_id})
        text = next((b.text for b in prompt if getattr(b, "type", None) == "text"), "")
        task = asyncio.current_task()
        assert task is not None
        self._turns[session_id] = task
        try:
            await self._run(session_id, text)
        except asyncio.CancelledError:
            return PromptResponse(stop_reason="cancelled")
        finally:
            self._turns.pop(session_id, None)
        return PromptResponse(stop_reason="end_turn")

    async def _say(self, sid: str, text: str) -> None:
        await self.conn.session_update(session_id=sid, update=update_agent_message_text(text))

    async def _run(self, sid: str, text: str) -> None:
        if not text.startswith("/"):
            await self._say(sid, f"{text} (no language model configured; see /help)")
            return
        name, _, rest = text[1:].partition(" ")
        args = rest.split()
        if name == "echo":
            await self._say(sid, rest)
        elif name == "sleep":
            await asyncio.sleep(int(args[0]) / 1000)
            await self._say(sid, f"slept {args[0]}")
        elif name == "fail":
            raise RequestError(int(args[0]), " ".join(args[1:]))
        elif name == "tools":
            for i in range(1, int(args[0]) + 1):
                tid = f"tool-{uuid.uuid4().hex[:8]}"
                await self.conn.session_update(
                    sid, start_tool_call(tid, f"tool {i}", kind="other", status="pending")
                )
                await self.conn.session_update(sid, update_tool_call(tid, status="in_progress"))
                done = [tool_content(text_block(f"done {i}"))]
                await self.conn.session_update(
                    sid, update_tool_call(tid, status="completed", content=done)
                )
        elif name == "plan":
            n = int(args[0])
            status = ["pending"] * n
            for k in range(n + 1):
                if k:
                    status[k - 1] = "completed"
                entries = [
                    plan_entry(f"step {i + 1}", priority="medium", status=status[i])
                    for i in range(n)
                ]
                await self.conn.session_update(sid, update_plan(entries))
        elif name == "write":
            await self._write(sid, args[0], " ".join(args[1:]))
        else:
            await self._say(sid, "commands: " + " ".join("/" + c for c in COMMANDS))

    async def _write(self, sid: str, path: str, content: str) -> None:
        fs = getattr(self._caps, "fs", None)
        if not (fs and fs.write_text_file):
            await self._say(sid, "the client does not support fs.writeTextFile")
            return
        tid = f"write-{uuid.uuid4().hex[:8]}"
        diff = [tool_diff_content(path, content)]
        await self.conn.session_update(
            sid, start_tool_call(tid, f"write {path}", kind="edit", status="pending", content=diff)
        )
        if self._modes[sid] != "auto":
            options = [
                PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ]
            answer = await self.conn.request_permission(
                session_id=sid, tool_call=ToolCallUpdate(tool_call_id=tid), options=options
            )
            outcome = answer.outcome
            if outcome.outcome == "cancelled":
                await self.conn.session_update(sid, update_tool_call(tid, status="failed"))
                raise asyncio.CancelledError
            if getattr(outcome, "option_id", None) != "allow":
                await self.conn.session_update(sid, update_tool_call(tid, status="failed"))
                return
        await self.conn.session_update(sid, update_tool_call(tid, status="in_progress"))
        await self.conn.write_text_file(session_id=sid, path=path, content=content)
        await self.conn.session_update(sid, update_tool_call(tid, status="completed"))


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(run_agent(SdkAgent()))


if __name__ == "__main__":
    main()
