"""Cancellation of prompt turns: every race forced with events, every path ends ``cancelled``.

Each test runs inside ``checked``, which ends with a round trip and asserts that no
outbound call is pending, no inbound request is in flight, no turn holds a slot and no
frame arrives unasked or after EOF.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from acp_agent.agent import PromptTurn
from acp_agent.client import ALLOW_ONCE
from acp_agent.errors import RESOURCE_NOT_FOUND, RequestError
from acp_agent.jsonrpc import CANCEL_REQUEST
from acp_agent.server import AcpServer
from tests.core._support import (
    ScriptAgent,
    assert_no_leaks,
    checked,
    prompt_params,
    updates_for,
)
from tests.helpers.memclient import FULL_CAPS, WireClient

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]
CANCELLED = {"stopReason": "cancelled"}


class Probe:
    """Events a test agent reports through."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.unwound = anyio.Event()
        self.cancelled_at_await = False
        self.notes: list[str] = []

    async def wait_turn(self, turn: PromptTurn) -> str:
        """A turn that reports it began, then waits for ``release``."""
        self.entered.set()
        await self.release.wait()
        return "end_turn"


async def answers(client: WireClient, count: int) -> dict[Any, JSON]:
    """The next ``count`` responses, by id (notifications in between are skipped)."""
    found: dict[Any, JSON] = {}
    while len(found) < count:
        msg = await client.recv()
        if "method" not in msg:
            found[msg["id"]] = msg
    return found


async def cancel(client: WireClient, sid: str) -> None:
    await client.notify("session/cancel", {"sessionId": sid})


async def start(client: WireClient, server: AcpServer, value: str = "go") -> tuple[str, Any]:
    sid = await client.new_session()
    rid = await client.request("session/prompt", prompt_params(sid, value))
    return sid, rid


# (a) ------------------------------------------------------------------------------------


async def test_a_cancel_while_the_agent_awaits() -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        probe.entered.set()
        try:
            await probe.release.wait()
        except anyio.get_cancelled_exc_class():
            probe.cancelled_at_await = True
            raise
        finally:
            probe.unwound.set()
        return "end_turn"

    async with checked(ScriptAgent(script)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        await cancel(client, sid)
        resp, before = await client.until_response(rid)
        assert resp["result"] == CANCELLED
        assert before == []
        assert probe.cancelled_at_await
        assert server.sessions[sid].history.turns[-1].stop_reason == "cancelled"


# (b) ------------------------------------------------------------------------------------


async def test_b_agent_returns_end_turn_after_the_cancel_arrived() -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        probe.entered.set()
        with anyio.CancelScope(shield=True):
            await probe.release.wait()
        return "end_turn"  # the agent ignores the cancel and ends normally

    async with checked(ScriptAgent(script)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        await cancel(client, sid)
        await anyio.wait_all_tasks_blocked()  # the cancel has been handled
        assert server.sessions[sid].last_turn is not None
        assert server.sessions[sid].last_turn.cancelled
        probe.release.set()
        resp, _ = await client.until_response(rid)
        assert resp["result"] == CANCELLED


# (c) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("exc", ["request_error", "bug"])
async def test_c_agent_raises_after_the_cancel_arrived(exc: str) -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        probe.entered.set()
        with anyio.CancelScope(shield=True):
            await probe.release.wait()
        if exc == "bug":
            raise RuntimeError("cleanup failed")
        raise RequestError("the model call was aborted", code=-32603)

    async with checked(ScriptAgent(script)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        await cancel(client, sid)
        await anyio.wait_all_tasks_blocked()
        probe.release.set()
        resp, _ = await client.until_response(rid)
        assert resp["result"] == CANCELLED


# (d) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shielded", [True, False])
async def test_d_cancel_between_two_updates(shielded: bool) -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        await turn.client.message("update 1")
        probe.entered.set()
        with anyio.CancelScope(shield=shielded):
            await probe.release.wait()
        await turn.client.message("update 2")
        await turn.client.message("update 3")
        return "end_turn"

    async with checked(ScriptAgent(script)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        await cancel(client, sid)
        await anyio.wait_all_tasks_blocked()
        probe.release.set()
        resp, before = await client.until_response(rid)
        assert resp["result"] == CANCELLED
        texts = [u["content"]["text"] for u in updates_for(before, sid)]
        # update 1 went out before the cancel; whatever the agent still sent after it
        # (sending is not a checkpoint every time) came before the response, in order
        assert texts == ["update 1", "update 2", "update 3"][: len(texts)]
        if not shielded:
            assert texts == ["update 1"]  # cancelled at the await itself
        # history holds exactly what the client saw
        history = server.sessions[sid].history.turns[-1]
        assert history.events[1:] == updates_for(before, sid)
        assert history.stop_reason == "cancelled"


# (e) ------------------------------------------------------------------------------------


async def test_e_cancel_during_a_pending_permission_request(tmp_path: Any) -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        tool = await turn.client.tool_call("write a.txt", kind="edit")
        probe.entered.set()
        outcome = await turn.client.request_permission(tool)
        if outcome.allowed:
            await turn.client.write_text_file("a.txt", "x")
            await tool.complete()
        else:
            await tool.fail()
        return "end_turn"

    async with checked(ScriptAgent(script), FULL_CAPS) as (client, server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        perm = None
        while perm is None:
            msg = await client.recv()
            if msg.get("method") == "session/request_permission":
                perm = msg
        assert perm["params"]["options"][0] == ALLOW_ONCE.to_wire()
        await cancel(client, sid)
        resp, before = await client.until_response(rid)
        assert resp["result"] == CANCELLED
        cancels = [m for m in before if m.get("method") == CANCEL_REQUEST]
        assert cancels == [
            {"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": perm["id"]}}
        ]
        assert not any(m.get("method", "").startswith("fs/") for m in before)
        # the client answers late, as it must after a cancel: the answer is dropped
        await client.respond(
            perm["id"], {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
        )
        assert server.connection.pending_count == 0
    assert not any(m.get("method", "").startswith("fs/") for m in client.seen)


async def test_e2_a_cancelled_permission_answer_ends_the_turn_cancelled(tmp_path: Any) -> None:
    async def script(turn: PromptTurn) -> str:
        tool = await turn.client.tool_call("write a.txt", kind="edit")
        outcome = await turn.client.request_permission(tool)
        if outcome.allowed:
            await turn.client.write_text_file("a.txt", "x")
        return "end_turn"

    async with checked(ScriptAgent(script), FULL_CAPS) as (client, _server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid))
        perm = await client.recv()
        while perm.get("method") != "session/request_permission":
            perm = await client.recv()
        # the client cancels and answers its pending permission request with "cancelled"
        # in the same breath (R-CANCEL-5); either may be handled first
        await cancel(client, sid)
        await client.respond(perm["id"], {"outcome": {"outcome": "cancelled"}})
        resp, before = await client.until_response(rid)
        assert resp["result"] == CANCELLED
        assert not any(m.get("method", "").startswith("fs/") for m in before)


# (f) ------------------------------------------------------------------------------------


async def test_f_cancel_request_aimed_at_the_prompt_answers_cancelled() -> None:
    probe = Probe()

    async with checked(ScriptAgent(probe.wait_turn)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        await client.notify(CANCEL_REQUEST, {"requestId": rid})
        resp, _ = await client.until_response(rid)
        assert resp == {"jsonrpc": "2.0", "id": rid, "result": CANCELLED}
        # the session stays usable
        probe.release.set()
        resp, _ = await client.call("session/prompt", prompt_params(sid))
        assert resp["result"] == {"stopReason": "end_turn"}


# (g) ------------------------------------------------------------------------------------


async def test_g_session_close_during_a_turn() -> None:
    probe = Probe()
    closed: list[str] = []

    class Closing(ScriptAgent):
        async def close_session(self, session: Any) -> None:
            closed.append(session.session_id)

    async with checked(Closing(probe.wait_turn)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        close_id = await client.request("session/close", {"sessionId": sid})
        answered = await answers(client, 2)
        assert answered[close_id]["result"] == {}
        assert answered[rid]["result"] == CANCELLED
        assert closed == [sid]
        assert sid not in server.sessions
        for _ in range(2):
            resp, _ = await client.call("session/prompt", prompt_params(sid))
            assert resp["error"]["code"] == RESOURCE_NOT_FOUND
            assert sid in resp["error"]["message"]
        # cancel for the closed session is a silent no-op
        await cancel(client, sid)


# (h) ------------------------------------------------------------------------------------


async def test_h_cancel_with_nothing_running_is_a_noop() -> None:
    async with checked(ScriptAgent()) as (client, _server):
        sid = await client.new_session()
        await cancel(client, sid)
        await cancel(client, "sess_unknown")
        await client.notify("session/cancel", {})
        await client.notify("session/cancel", {"sessionId": 5})
        resp, before = await client.call("session/prompt", prompt_params(sid))
        assert before == []
        assert resp["result"] == {"stopReason": "end_turn"}


async def test_h2_a_late_cancel_after_the_turn_ended_does_not_leak() -> None:
    async with checked(ScriptAgent()) as (client, _server):
        sid = await client.new_session()
        resp, _ = await client.call("session/prompt", prompt_params(sid))
        assert resp["result"] == {"stopReason": "end_turn"}
        await client.notify(CANCEL_REQUEST, {"requestId": resp["id"]})
        await cancel(client, sid)
        resp, before = await client.call("session/prompt", prompt_params(sid))
        assert before == []
        assert resp["result"] == {"stopReason": "end_turn"}


# (i) ------------------------------------------------------------------------------------


async def test_i_the_next_prompt_after_a_cancel_starts_clean(tmp_path: Any) -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        if turn.text == "ask":
            probe.entered.set()
            await turn.client.read_text_file("notes.txt")
        await turn.client.message(f"reply to {turn.text}")
        return "end_turn"

    async with checked(ScriptAgent(script), FULL_CAPS) as (client, server):
        sid = await client.new_session(str(tmp_path))
        rid = await client.request("session/prompt", prompt_params(sid, "ask"))
        read = await client.recv()
        assert read["method"] == "fs/read_text_file"
        assert server.connection.pending_count == 1
        await cancel(client, sid)
        resp, before = await client.until_response(rid)
        assert resp["result"] == CANCELLED
        assert [m["method"] for m in before] == [CANCEL_REQUEST]
        assert server.connection.pending_count == 0
        assert server.connection.inflight_count == 0
        assert_no_leaks(server)
        resp, before = await client.call("session/prompt", prompt_params(sid, "next"))
        assert resp["result"] == {"stopReason": "end_turn"}
        assert [u["content"]["text"] for u in updates_for(before, sid)] == ["reply to next"]
        # the stale read answer arrives now and is dropped
        await client.respond(read["id"], {"content": "late"})


# (j) ------------------------------------------------------------------------------------


async def test_j_cancel_during_a_terminal_wait_kills_and_releases() -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        async with turn.client.terminal("sleep", ["30"]) as term:
            probe.entered.set()
            await term.wait_for_exit()
        return "end_turn"

    async with checked(ScriptAgent(script), FULL_CAPS) as (client, server):
        sid, rid = await start(client, server)
        create = await client.recv()
        assert create["method"] == "terminal/create"
        await client.respond(create["id"], {"terminalId": "term-1"})
        wait = await client.recv()
        assert wait["method"] == "terminal/wait_for_exit"
        await cancel(client, sid)

        async def answer(msg: JSON) -> None:
            if msg.get("method") in ("terminal/kill", "terminal/release"):
                assert msg["params"] == {"sessionId": sid, "terminalId": "term-1"}
                await client.respond(msg["id"], {})

        resp, before = await client.until_response(rid, on_other=answer)
        assert resp["result"] == CANCELLED
        methods = [m.get("method") for m in before]
        assert methods == [CANCEL_REQUEST, "terminal/kill", "terminal/release"]
        assert before[0]["params"] == {"requestId": wait["id"]}


# (k) ------------------------------------------------------------------------------------


async def test_k_session_cancel_sent_as_a_request_still_cancels_and_is_answered() -> None:
    probe = Probe()

    async with checked(ScriptAgent(probe.wait_turn)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        cid = await client.request("session/cancel", {"sessionId": sid})
        answered = await answers(client, 2)
        assert answered[rid]["result"] == CANCELLED
        assert "error" not in answered[cid]


# more races ------------------------------------------------------------------------------


async def test_cancel_and_cancel_request_together_answer_once() -> None:
    probe = Probe()

    async with checked(ScriptAgent(probe.wait_turn)) as (client, server):
        sid, rid = await start(client, server)
        await probe.entered.wait()
        await cancel(client, sid)
        await client.notify(CANCEL_REQUEST, {"requestId": rid})
        await cancel(client, sid)
        resp, _ = await client.until_response(rid)
        assert resp["result"] == CANCELLED
    assert len([m for m in client.seen if "method" not in m and m.get("id") == rid]) == 1


async def test_cancel_of_one_session_leaves_the_other_running() -> None:
    probes = {"a": Probe(), "b": Probe()}

    async def script(turn: PromptTurn) -> str:
        probe = probes[turn.text]
        probe.entered.set()
        await probe.release.wait()
        return "end_turn"

    async with checked(ScriptAgent(script)) as (client, _server):
        sid_a = await client.new_session()
        sid_b = await client.new_session()
        rid_a = await client.request("session/prompt", prompt_params(sid_a, "a"))
        rid_b = await client.request("session/prompt", prompt_params(sid_b, "b"))
        await probes["a"].entered.wait()
        await probes["b"].entered.wait()
        await cancel(client, sid_a)
        resp, _ = await client.until_response(rid_a)
        assert resp["result"] == CANCELLED
        probes["b"].release.set()
        resp, _ = await client.until_response(rid_b)
        assert resp["result"] == {"stopReason": "end_turn"}


async def test_queued_prompt_after_a_cancelled_turn_runs_normally() -> None:
    probe = Probe()

    async def script(turn: PromptTurn) -> str:
        if turn.text == "first":
            probe.entered.set()
            with anyio.CancelScope(shield=True):
                await probe.release.wait()
            await turn.client.message("late from first")
            return "end_turn"
        await turn.client.message("second")
        return "end_turn"

    async with checked(ScriptAgent(script), busy_policy="queue") as (client, server):
        sid = await client.new_session()
        first = await client.request("session/prompt", prompt_params(sid, "first"))
        await probe.entered.wait()
        await cancel(client, sid)
        second = await client.request("session/prompt", prompt_params(sid, "second"))
        await anyio.wait_all_tasks_blocked()
        probe.release.set()
        r1, _before1 = await client.until_response(first)
        assert r1["result"] == CANCELLED
        r2, before2 = await client.until_response(second)
        assert r2["result"] == {"stopReason": "end_turn"}
        assert [u["content"]["text"] for u in updates_for(before2, sid)] == ["second"]
        turns = server.sessions[sid].history.turns
        assert [t.stop_reason for t in turns] == ["cancelled", "end_turn"]
