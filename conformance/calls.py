"""The ACP calls the conformance checks make most: initialize, session/new, a prompt.

A mixin of ``AgentProcess`` (``harness.py``), built on its wire methods; it owns only how
these requests are shaped, not how they are sent or judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .frames import CallError, ClientConfig, Msg


class AcpCalls:
    """initialize, session/new and session/prompt with the harness's defaults."""

    if TYPE_CHECKING:  # what it uses of AgentProcess
        config: ClientConfig
        cwd: Path

        async def call(self, method: str, params: Any = None, **kw: Any) -> Any: ...

        async def send_request(
            self, method: str, params: Any = None, *, rid: Any = ..., omit_params: bool = False
        ) -> Any: ...

        async def wait_response(
            self, rid: Any, *, timeout: float | None = None, what: str = ""
        ) -> Msg: ...

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
