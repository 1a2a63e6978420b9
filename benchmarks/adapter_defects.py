"""Which of issue 25's adapter defects each pydantic-ai adapter shows, on the fake endpoint.

    python -m benchmarks.adapter_defects [--peer-venv /tmp/acp-bench-pydantic-acp]

Serves ``benchmarks/adapter_agent.py`` (a plain tool ``add``, an approval tool
``delete_file``) with ours and with ``pydantic-acp==1.10.0`` (see ``benchmarks/adapters.py``),
probes each defect with a fresh process and prints a table: ``yes`` = the defect shows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .adapters import ROOT, Wire, fake_endpoint, peer_python

Event = tuple[str, dict[str, Any]]
SLOW_TEXT = "Working on it... and more"  # what the fake model says in fake:slow


class Probe(Wire):
    """A client that records every update and agent request of a turn, in order."""

    def __init__(self, proc: asyncio.subprocess.Process, cwd: str) -> None:
        super().__init__(proc)
        self.cwd = cwd
        self.permission: str | None = "allow_once"  # None: the request is dismissed

    async def request(self, method: str, params: Any) -> tuple[dict[str, Any], list[Event]]:
        """Send a request; its whole response and the events before it."""
        self.next_id += 1
        request_id = self.next_id
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await self.until(request_id)

    async def until(
        self, request_id: int, cancel: str | None = None
    ) -> tuple[dict[str, Any], list[Event]]:
        events: list[Event] = []
        while True:
            message = await self.receive()
            if message.get("id") == request_id and "method" not in message:
                return message, events
            if message.get("method") == "session/update":
                update = message["params"]["update"]
                events.append(("update", update))
                if cancel is not None and update.get("sessionUpdate") == "agent_message_chunk":
                    await self.send(
                        {
                            "jsonrpc": "2.0",
                            "method": "session/cancel",
                            "params": {"sessionId": cancel},
                        }
                    )
                    cancel = None
            elif "method" in message and "id" in message:
                events.append(("request", message))
                if message["method"] == "session/request_permission" and self.permission:
                    outcome = {"outcome": "selected", "optionId": self.permission}
                else:
                    outcome = {"outcome": "cancelled"}
                await self.send(
                    {"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}}
                )

    async def session(self) -> str:
        response, _ = await self.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        return str(response["result"]["sessionId"])

    async def prompt(
        self, session: str, text: str, *, cancel: bool = False
    ) -> tuple[dict[str, Any], list[Event]]:
        self.next_id += 1
        request_id = self.next_id
        params = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}
        )
        return await self.until(request_id, session if cancel else None)


def stop(response: dict[str, Any]) -> str | None:
    result = response.get("result")
    return result.get("stopReason") if isinstance(result, dict) else None


def updates(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e for t, e in events if t == "update" and e.get("sessionUpdate") == kind]


async def echoes_version(p: Probe, caps: dict[str, Any]) -> bool:
    return False  # judged from initialize in run_probe


async def advertised_unserved(p: Probe, caps: dict[str, Any]) -> bool:
    session = await p.session()
    advertised = (caps.get("sessionCapabilities") or {}).keys()
    for name, method in (
        ("close", "session/close"),
        ("resume", "session/resume"),
        ("fork", "session/fork"),
    ):
        if name in advertised:
            response, _ = await p.request(
                method, {"sessionId": session, "cwd": p.cwd, "mcpServers": []}
            )
            if (response.get("error") or {}).get("code") == -32601:
                return True
    return False


async def load_unknown_succeeds(p: Probe, caps: dict[str, Any]) -> bool:
    params = {"sessionId": "sess_does_not_exist", "cwd": p.cwd, "mcpServers": []}
    response, _ = await p.request("session/load", params)
    return "result" in response


async def idle_cancel_sticks(p: Probe, caps: dict[str, Any]) -> bool:
    session = await p.session()
    await p.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
    response, _ = await p.prompt(session, "fake:cold")
    return stop(response) == "cancelled"


async def thoughts_dropped(p: Probe, caps: dict[str, Any]) -> bool:
    session = await p.session()
    _, events = await p.prompt(session, "fake:reasoning think")
    return not updates(events, "agent_thought_chunk")


async def output_only_raw(p: Probe, caps: dict[str, Any]) -> bool:
    session = await p.session()
    _, events = await p.prompt(session, "fake:call add a=2 b=3")
    done = [u for u in updates(events, "tool_call_update") if u.get("status") == "completed"]
    return not any("5" in str(u.get("content")) for u in done)


async def _approval(p: Probe, dismiss: bool) -> tuple[dict[str, Any], list[Event]]:
    session = await p.session()
    p.permission = None if dismiss else "allow_once"
    return await p.prompt(session, "fake:call delete_file path=x.txt")


async def permission_other_id(p: Probe, caps: dict[str, Any]) -> bool:
    _, events = await _approval(p, dismiss=False)
    streamed = {u["toolCallId"] for u in updates(events, "tool_call")}
    asked = [e["params"]["toolCall"]["toolCallId"] for t, e in events if t == "request"]
    return not asked or any(i not in streamed for i in asked)


async def in_progress_before_asking(p: Probe, caps: dict[str, Any]) -> bool:
    _, events = await _approval(p, dismiss=False)
    for kind, event in events:
        if kind == "request":
            return False
        if event.get("status") == "in_progress":
            return True
    return False


async def dismiss_leaves_call_open(p: Probe, caps: dict[str, Any]) -> bool:
    response, events = await _approval(p, dismiss=True)
    status: dict[str, str] = {}
    for kind, event in events:
        if kind == "update" and "toolCallId" in event and "status" in event:
            status[event["toolCallId"]] = event["status"]
    open_calls = any(s in ("pending", "in_progress") for s in status.values())
    return "error" in response or open_calls or stop(response) != "cancelled"


async def cancel_injects_text(p: Probe, caps: dict[str, Any]) -> bool:
    session = await p.session()
    _, events = await p.prompt(session, "fake:slow", cancel=True)
    said = "".join(u["content"].get("text", "") for u in updates(events, "agent_message_chunk"))
    return not SLOW_TEXT.startswith(said)


async def bare_model_error(p: Probe, caps: dict[str, Any]) -> bool:
    session = await p.session()
    response, _ = await p.prompt(session, "fake:unauthorized")
    message = str((response.get("error") or {}).get("message", ""))
    return "401" not in message and "API key" not in message


PROBES: dict[str, Callable[[Probe, dict[str, Any]], Awaitable[bool]]] = {
    "echoes protocolVersion 99": echoes_version,
    "advertises close/resume/fork, answers -32601": advertised_unserved,
    "session/load of an unknown id succeeds": load_unknown_succeeds,
    "an idle session/cancel cancels the next prompt": idle_cancel_sticks,
    "thoughts dropped": thoughts_dropped,
    "tool output only in rawOutput": output_only_raw,
    "permission toolCallId differs from the streamed call": permission_other_id,
    "call in_progress before its permission request": in_progress_before_asking,
    "dismissed permission: error or call left open": dismiss_leaves_call_open,
    "cancel injects text the model did not say": cancel_injects_text,
    "model error without its reason": bare_model_error,
}


async def run_probe(command: list[str], env: dict[str, str], name: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=str(ROOT),
        limit=64 * 1024 * 1024,
    )
    probe = Probe(proc, str(ROOT))
    try:
        init, _ = await probe.request(
            "initialize", {"protocolVersion": 99, "clientCapabilities": {}}
        )
        result = init.get("result") or {}
        if name == "echoes protocolVersion 99":
            return "yes" if result.get("protocolVersion") == 99 else "no"
        caps = result.get("agentCapabilities") or {}
        return "yes" if await asyncio.wait_for(PROBES[name](probe, caps), 60) else "no"
    except Exception as exc:  # a probe that cannot finish shows a defect of its own
        return f"error ({type(exc).__name__})"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adapter_defects")
    parser.add_argument("--peer-venv", type=Path, default=Path("/tmp/acp-bench-pydantic-acp"))
    args = parser.parse_args(argv)
    env = dict(os.environ, ACP_FAKE_BASE_URL=fake_endpoint(), PYTHONPATH=str(ROOT))
    spec = "benchmarks.adapter_agent:agent"
    agents = {
        "ours": [sys.executable, "-m", "acp_agent", "--store", "memory", "--agent", spec],
        "pydantic-acp": [str(peer_python(args.peer_venv)), "-m", "benchmarks.adapter_agent"],
    }
    print("| defect | " + " | ".join(agents) + " |")
    print("|---|" + "---|" * len(agents))
    for name in PROBES:
        row = [asyncio.run(run_probe(command, env, name)) for command in agents.values()]
        print(f"| {name} | " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
