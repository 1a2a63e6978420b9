"""Serving a framework agent in a real ``acp-agent-kit --agent`` subprocess on the fake
endpoint, and reading what its turns sent: shared by the adapters' end-to-end tests.

A module may serve one process to several tests (:class:`Shared`, :func:`quiet`): each test
opens its own sessions, and starts and ends with nothing unread on the pipe."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import (
    FULL_CAPS,
    Message,
    ProcessClient,
    Turn,
    is_response,
    refuse,
    spawn,
)

SLOW = 30.0  # initialize (or the first request after it) waits for the framework's import
#: ``initialize`` waits for the import as long as a test waits for its answer, so that it
#: always announces the object's own capabilities however busy the machine
WAIT_FOR_IMPORT = {"ACP_AGENT_INITIALIZE_WAIT": str(SLOW)}

#: ``python -c`` serving ``sys.argv[1]`` from Python (its own ``initialize`` answer, all
#: it supports announced) on the store ``sys.argv[2]``
SERVE_FROM_PYTHON = (
    "import sys\n"
    "from acp_agent.adapters import load\n"
    "from acp_agent.runner import run_agent\n"
    "raise SystemExit(run_agent(load(sys.argv[1]), store=sys.argv[2]))\n"
)


@asynccontextmanager
async def served(
    spec: str,
    fake: FakeModelServer,
    store: str = "memory",
    *extra: str,
    env: dict[str, str] | None = None,
    from_python: bool = False,
) -> AsyncIterator[ProcessClient]:
    """``acp-agent-kit --agent SPEC`` on ``fake`` (or, ``from_python``, the object served
    from Python), initialized."""
    command = [sys.executable, "-m", "acp_agent", "--store", store, *extra, "--agent", spec]
    if from_python:
        command = [sys.executable, "-c", SERVE_FROM_PYTHON, spec, store]
    env = {"ACP_FAKE_BASE_URL": fake.base_url, **WAIT_FOR_IMPORT, **(env or {})}
    async with spawn(command, env=env) as client:
        # answered once the agent's module is imported
        request_id = await client.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": FULL_CAPS}
        )
        await client.expect(lambda m: is_response(m, request_id), timeout=SLOW)
        await loaded(client)
        yield client


async def loaded(client: ProcessClient) -> None:
    """Wait (up to ``SLOW``) until the agent's module is imported: a cheap request, which
    waits for it as every request after ``initialize`` does."""
    request_id = await client.request("session/list", {})
    answer, _ = await client.expect(lambda m: is_response(m, request_id), timeout=SLOW)
    assert "result" in answer, answer


@dataclass
class Shared:
    """An agent process served to several tests of a module, on its own fake endpoint."""

    spec: str
    client: ProcessClient
    fake: FakeModelServer


@asynccontextmanager
async def one_test(shared: Shared) -> AsyncIterator[Shared]:
    """``shared`` for one test: nothing unread before or after it, and agent requests
    refused unless the test says how to answer them."""
    await quiet(shared.client)
    shared.client.on_request = refuse
    yield shared
    await quiet(shared.client)


async def quiet(client: ProcessClient) -> None:
    """Nothing of an earlier turn is left unread: a round trip with no frame before it."""
    _, before = await client.call("session/list", {})
    assert before == [], before


async def new_session(client: ProcessClient, cwd: Path) -> str:
    result, _ = await client.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    return str(result["sessionId"])


def answering(option: str | None) -> Callable[[Message], Awaitable[Any]]:
    """A permission handler that picks ``option`` (None: dismisses the request)."""

    async def answer(request: Message) -> Any:
        assert request["method"] == "session/request_permission", request
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}

    return answer


def calls(turn: Turn) -> dict[str, list[Message]]:
    """The turn's tool call updates, by tool call id, in order."""
    out: dict[str, list[Message]] = {}
    for update in turn.updates:
        if update["sessionUpdate"] in ("tool_call", "tool_call_update"):
            out.setdefault(update["toolCallId"], []).append(update)
    return out


def statuses(updates: list[Message]) -> list[str]:
    return [u["status"] for u in updates if "status" in u]


def text(updates: list[Message]) -> str:
    """The text content of a tool call's updates."""
    return "".join(
        item["content"]["text"]
        for update in updates
        for item in update.get("content") or ()
        if item.get("type") == "content"
    )


def conversation_is_valid(messages: list[Message]) -> bool:
    """Every assistant tool call is answered by a tool message before the next turn."""
    open_ids: set[str] = set()
    for message in messages:
        if message["role"] == "assistant":
            if open_ids:
                return False
            open_ids = {c["id"] for c in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            open_ids.discard(message["tool_call_id"])
        elif message["role"] == "user" and open_ids:
            return False
    return not open_ids
