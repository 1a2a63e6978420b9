"""The official Python SDK's client (``agent-client-protocol``, module ``acp``) drives each
adapter in a real ``acp-agent-kit --agent`` subprocess it spawns itself
(``acp.spawn_agent_process``), on the fake OpenAI-compatible endpoint: streaming, a plain
tool, approval (allow, reject, dismiss), cancel, and ``session/load`` in a new process
with the model remembering the earlier turns.

Every update goes through the SDK's own schema models, so a message it cannot parse
fails the test. Two agent processes per framework (each imports its framework): the first
runs the turns, the second loads the session and goes on.

The official TypeScript SDK's client does the same (``ts/drive.mjs``, run by node, on the
pinned node project ``tests/ts``; skipped without node and npm, failed in CI then).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers import ts_sdk
from tests.helpers.wire_client import ROOT, Turn, child_env

from .serving import calls, conversation_is_valid, statuses, text

acp = pytest.importorskip("acp")

from acp import spawn_agent_process, text_block  # noqa: E402
from acp.schema import (  # noqa: E402
    AllowedOutcome,
    DeniedOutcome,
    RequestPermissionResponse,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]


@dataclass(frozen=True)
class Framework:
    """A served agent with one plain tool and one that needs approval, and the prompts
    that make the fake endpoint call each of them."""

    module: str  # the framework's package, to skip when it is not installed
    spec: str
    plain: str  # prompt calling the plain tool
    plain_output: str
    approval: str  # prompt calling the tool that needs approval
    approval_output: str
    keeps_cut_answer: bool  # the model's history keeps what was seen of a cancelled answer

    def prompts(self) -> list[str]:
        """The prompts both clients send in the first process, in order."""
        return ["fake:chunked", self.plain, *[self.approval] * 3, "fake:slow"]


FRAMEWORKS = {
    "pydantic-ai": Framework(
        "pydantic_ai",
        "tests.adapters.example_pydantic:agent",
        "fake:call add a=2 b=3",
        "5",
        "fake:call delete_file path=notes.txt",
        "deleted notes.txt",
        keeps_cut_answer=True,
    ),
    "langgraph": Framework(
        "langgraph",
        "tests.adapters.lg_agent:agent",
        "fake:call read_file path=a.txt",
        "contents of a.txt",
        "fake:run echo hi",
        "ran echo hi",
        keeps_cut_answer=False,
    ),
    "deep-agents": Framework(
        "deepagents",
        "tests.adapters.da_agent:served",
        "fake:call add a=2 b=3",
        "5",
        "fake:run echo hi",
        "ran echo hi",
        keeps_cut_answer=False,
    ),
    "openai-agents": Framework(
        "agents",
        "tests.adapters.oa_agent:served",
        "fake:call read_file path=a.txt",
        "contents of a.txt",
        "fake:run echo hi",
        "ran echo hi",
        keeps_cut_answer=False,
    ),
    "google-adk": Framework(
        "google.adk",
        "tests.adapters.adk_agent:served",
        "fake:call read_file path=a.txt",
        "contents of a.txt",
        "fake:run echo hi",
        "ran echo hi",
        keeps_cut_answer=False,
    ),
    "llama-index": Framework(
        "llama_index.core",
        "tests.adapters.li_agent:served",
        "fake:call read_file path=a.txt",
        "contents of a.txt",
        "fake:run echo hi",
        "ran echo hi",
        keeps_cut_answer=False,
    ),
    "strands": Framework(
        "strands",
        "tests.adapters.st_agent:served",
        "fake:call read_file path=a.txt",
        "contents of a.txt",
        "fake:run echo hi",
        "ran echo hi",
        keeps_cut_answer=False,
    ),
}


#: the permission answer (None: dismissed), the turn's stop reason, the call's statuses
APPROVALS = [
    ("allow_once", "end_turn", ["pending", "in_progress", "completed"]),
    ("reject_once", "end_turn", ["pending", "failed"]),
    (None, "cancelled", ["pending", "failed"]),
]


@pytest.fixture(params=sorted(FRAMEWORKS))
def framework(request: pytest.FixtureRequest) -> Framework:
    chosen = FRAMEWORKS[str(request.param)]
    pytest.importorskip(chosen.module)
    return chosen


class SdkClient:
    """An SDK ``Client`` that keeps every update (as the wire's JSON) and answers
    permission requests with ``option`` (None: dismisses them)."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []  # the permission requests, as on the wire
        self.option: str | None = "allow_once"
        self.first_chunk = anyio.Event()

    def on_connect(self, conn: Any) -> None:
        pass

    def take(self, answer: Any) -> Turn:
        """The prompt's ``answer`` with the updates and requests since the last one."""
        result = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        turn = Turn({"result": result}, self.updates, self.asked)
        self.updates, self.asked = [], []
        return turn

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))
        if update.session_update == "agent_message_chunk":
            self.first_chunk.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        params = {
            "sessionId": session_id,
            "toolCall": tool_call.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        self.asked.append({"method": "session/request_permission", "params": params})
        if self.option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        assert self.option in [o.option_id for o in options], options
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.option)
        )


def agent_args(framework: Framework, store: Path) -> list[str]:
    return ["-m", "acp_agent", "--store", str(store), "--agent", framework.spec]


@asynccontextmanager
async def served(
    client: SdkClient, framework: Framework, fake: FakeModelServer, store: Path
) -> AsyncIterator[Any]:
    """The SDK spawns ``acp-agent-kit --agent`` over its pipes (stderr into a file)."""
    args = agent_args(framework, store)
    env = child_env({"ACP_FAKE_BASE_URL": fake.base_url})
    with (store.parent / "stderr.txt").open("ab") as stderr:
        spawned = spawn_agent_process(
            client,
            sys.executable,
            *args,
            env=env,
            cwd=ROOT,
            transport_kwargs={"stderr": stderr.fileno()},
        )
        async with spawned as (conn, _):
            await conn.initialize(protocol_version=1)
            yield conn


async def test_the_python_sdk_client_drives_the_adapter(
    framework: Framework, fake: FakeModelServer, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    client = SdkClient()
    shown: list[str] = []  # every text chunk the client was shown
    ended: dict[str, str] = {}  # each tool call's last status
    async with served(client, framework, fake, store) as conn:
        session = (await conn.new_session(cwd=str(tmp_path))).session_id
        client.updates.clear()  # the session's commands, if any

        async def prompt(words: str) -> Turn:
            answer = await conn.prompt(session_id=session, prompt=[text_block(words)])
            turn = client.take(answer)
            shown.extend(turn.texts())
            ended.update({i: statuses(u)[-1] for i, u in calls(turn).items()})
            return turn

        # streaming: the chunks as the model sent them, nothing else
        turn = await prompt("fake:chunked")
        assert turn.stop_reason == "end_turn"
        assert "".join(turn.texts()) == "Streaming in many small pieces: naïve café ✓ done."
        assert len(turn.texts()) > 5
        assert set(turn.kinds()) == {"agent_message_chunk"}

        # a plain tool: pending -> in_progress -> completed, its output in content
        turn = await prompt(framework.plain)
        assert turn.stop_reason == "end_turn" and turn.requests == []
        [updates] = calls(turn).values()
        assert statuses(updates) == ["pending", "in_progress", "completed"]
        assert text(updates) == framework.plain_output

        # approval, asked on the streamed call's id: allow, reject, dismiss
        for option, stop_reason, expected in APPROVALS:
            client.option = option
            turn = await prompt(framework.approval)
            assert turn.stop_reason == stop_reason, option
            [(call_id, updates)] = calls(turn).items()
            [asked] = turn.requests
            assert asked["params"]["toolCall"]["toolCallId"] == call_id
            assert statuses(updates) == expected, option
            assert (framework.approval_output in text(updates)) == (option == "allow_once")

        # cancel while the model streams: the turn ends cancelled
        client.first_chunk = anyio.Event()
        cut: list[Turn] = []

        async def slow() -> None:
            cut.append(await prompt("fake:slow"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await client.first_chunk.wait()
            await conn.cancel(session_id=session)
        [turn] = cut
        assert turn.stop_reason == "cancelled"
        seen = "".join(turn.texts())
        assert seen

    # a new process loads the session (replaying it) and the model remembers every turn
    client = SdkClient()
    async with served(client, framework, fake, store) as conn:
        await conn.load_session(cwd=str(tmp_path), session_id=session)
        answer = await conn.prompt(session_id=session, prompt=[text_block("fake:echo")])
        turn = client.take(answer)  # the replay's updates, then the turn's
        assert turn.stop_reason == "end_turn"
    assert turn.texts("user_message_chunk") == framework.prompts()
    assert {i: statuses(u)[-1] for i, u in calls(turn).items()} == ended  # none left running
    logged = (tmp_path / "stderr.txt").read_bytes()
    assert b"Traceback" not in logged and b"ERROR" not in logged
    assert_the_model_remembers(framework, fake, "".join(shown), seen)


def assert_the_model_remembers(
    framework: Framework, fake: FakeModelServer, shown: str, seen: str
) -> None:
    """The last model request (``fake:echo`` after ``session/load`` in a new process)
    carried every earlier turn, nothing the client was not ``shown``, a valid history,
    and what was ``seen`` of the cancelled answer where the adapter keeps it."""
    messages = fake.requests[-1]["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    sent = [u if isinstance(u, str) else u[0]["text"] for u in users]
    assert sent == [*framework.prompts(), "fake:echo"]
    # (ADK gives the model the tool's response as JSON: {"result": ...})
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert any(framework.plain_output in output for output in tools), tools
    # (LiteLLM leaves out the content of an assistant message that only calls tools;
    # Strands sends it as text parts)
    answers = [
        m["content"] if isinstance(m["content"], str) else "".join(p["text"] for p in m["content"])
        for m in messages
        if m["role"] == "assistant" and m.get("content")
    ]
    assert all(answer in shown for answer in answers)  # nothing the agent never said
    assert (seen in answers) == framework.keeps_cut_answer
    assert conversation_is_valid(messages)
    assert fake.script.id_errors == []


@pytest.fixture(scope="module")
def node_project(ts_sdk_project: Path) -> Path:
    return ts_sdk.with_scripts(ts_sdk_project, Path(__file__).with_name("ts") / "drive.mjs")


async def test_the_typescript_sdk_client_drives_the_adapter(
    framework: Framework, fake: FakeModelServer, node_project: Path, tmp_path: Path
) -> None:
    """The same run with the TypeScript SDK's client (``ts/drive.mjs``)."""
    config = {
        "command": [sys.executable, *agent_args(framework, tmp_path / "s.db")],
        "cwd": str(tmp_path),
        "agentCwd": str(ROOT),
        "plain": framework.plain,
        "approval": framework.approval,
    }
    done = await anyio.run_process(
        ["node", "drive.mjs", json.dumps(config)],
        cwd=node_project,
        check=False,
        env=child_env({"ACP_FAKE_BASE_URL": fake.base_url}),
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"Traceback" not in done.stderr and b"ERROR" not in done.stderr
    results = json.loads(done.stdout.decode().strip().splitlines()[-1])
    chunked = results["chunked"]
    assert chunked["stop"] == "end_turn"
    assert "".join(chunked["texts"]) == "Streaming in many small pieces: naïve café ✓ done."
    assert set(chunked["kinds"]) == {"agent_message_chunk"}
    plain = results["plain"]
    assert (plain["stop"], plain["asked"]) == ("end_turn", [])
    [call] = plain["calls"].values()
    assert call == {
        "statuses": ["pending", "in_progress", "completed"],
        "content": framework.plain_output,
    }
    for option, stop, expected in APPROVALS:
        turn = results[f"approval {'null' if option is None else option}"]
        assert turn["stop"] == stop, option
        [(call_id, call)] = turn["calls"].items()
        assert turn["asked"] == [call_id]
        assert call["statuses"] == expected, option
        assert (framework.approval_output in call["content"]) == (option == "allow_once")
    cancelled = results["cancelled"]
    assert cancelled["stop"] == "cancelled"
    seen = "".join(cancelled["texts"])
    assert seen
    loaded = results["loaded"]
    assert (loaded["stop"], loaded["users"]) == ("end_turn", framework.prompts())
    ended = {
        call_id: call["statuses"][-1]
        for step in results.values()
        if step is not loaded
        for call_id, call in step["calls"].items()
    }
    assert {i: c["statuses"][-1] for i, c in loaded["calls"].items()} == ended
    shown = "".join(text for step in results.values() for text in step["texts"])
    assert_the_model_remembers(framework, fake, shown, seen)
