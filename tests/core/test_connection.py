"""The JSON-RPC connection contract of AgentSession, over a hand-built MethodTable: calls.

Concurrency, calls to the peer, ``$/cancel_request``, the error boundary and notifications.
The frames themselves (ids, envelopes, batching, order, back pressure) and EOF and shutdown
are in ``test_connection_wire.py``; the doubles are in ``_connection.py``.

No ACP here: the methods are test doubles, the peer is a scripted WireClient on the
in-memory pair. Every test runs against both dispatchers (native and jsonrpcserver),
on asyncio and trio. Races are forced with events, never with sleeps.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest

from acp_agent.connection import RequestContext
from acp_agent.errors import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    CallTimeout,
    RequestError,
)
from acp_agent.jsonrpc import CANCEL_REQUEST
from tests.core._connection import JSON, Methods, connected, next_response

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------- concurrency


async def test_requests_run_concurrently_with_notifications(dispatcher: Any) -> None:
    m = Methods()
    m.gated("block", "released")

    async with connected(m, dispatcher) as peer:
        blocked = await peer.request("block")
        # another request is served while the first waits
        resp, before = await peer.call("ping")
        assert resp["result"] == "pong" and before == []
        await peer.notify("release")
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": blocked, "result": "released"}


async def test_responses_are_routed_by_id_not_order(dispatcher: Any) -> None:
    m = Methods()

    @m.request("ask_two")
    async def ask_two(params: Any, ctx: RequestContext) -> Any:
        results: dict[str, Any] = {}

        async def ask(name: str) -> None:
            results[name] = await m.connection.call(name, {"q": name})

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "first")
            tg.start_soon(ask, "second")
        return results

    async with connected(m, dispatcher) as peer:
        outer = await peer.request("ask_two")
        reqs = [await peer.recv(), await peer.recv()]
        assert {r["method"] for r in reqs} == {"first", "second"}
        assert reqs[0]["id"] != reqs[1]["id"]
        for r in reversed(reqs):
            await peer.respond(r["id"], f"answer to {r['method']}")
        resp = await next_response(peer)
        assert resp["id"] == outer
        assert resp["result"] == {"first": "answer to first", "second": "answer to second"}
        assert m.connection.pending_count == 0


async def test_call_timeout_sends_cancel_request_and_drops_the_late_reply(
    dispatcher: Any,
) -> None:
    m = Methods()

    @m.request("ask")
    async def ask(params: Any, ctx: RequestContext) -> Any:
        try:
            await m.connection.call("slow", {}, timeout=0.01)
        except CallTimeout as exc:
            return {"timeout": exc.method}
        return "answered"

    async with connected(m, dispatcher) as peer:
        outer = await peer.request("ask")
        slow = await peer.recv()
        assert slow["method"] == "slow"
        cancel = await peer.recv()
        assert cancel == {
            "jsonrpc": "2.0",
            "method": CANCEL_REQUEST,
            "params": {"requestId": slow["id"]},
        }
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": outer, "result": {"timeout": "slow"}}
        assert m.connection.pending_count == 0
        # the late reply is dropped silently; the connection goes on
        await peer.respond(slow["id"], "too late")
        resp, before = await peer.call("ping")
        assert resp["result"] == "pong" and before == []


async def test_cancelling_the_caller_sends_cancel_request(dispatcher: Any) -> None:
    m = Methods()
    scopes: list[anyio.CancelScope] = []
    outcome: list[str] = []

    @m.request("ask")
    async def ask(params: Any, ctx: RequestContext) -> Any:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await m.connection.call("question", {})
            outcome.append("answered")
        if scope.cancelled_caught:
            outcome.append("cancelled")
        return outcome

    @m.notification("stop_asking")
    async def stop_asking(params: Any) -> None:
        scopes[0].cancel()

    async with connected(m, dispatcher) as peer:
        outer = await peer.request("ask")
        question = await peer.recv()
        assert question["method"] == "question"
        await peer.notify("stop_asking")
        cancel = await peer.recv()
        assert cancel["method"] == CANCEL_REQUEST
        assert cancel["params"] == {"requestId": question["id"]}
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": outer, "result": ["cancelled"]}
        await peer.respond(question["id"], "late")
        resp, before = await peer.call("ping")
        assert before == [] and resp["result"] == "pong"
        assert m.connection.pending_count == 0


async def test_an_error_reply_raises_request_error_in_the_caller(dispatcher: Any) -> None:
    m = Methods()

    @m.request("ask")
    async def ask(params: Any, ctx: RequestContext) -> Any:
        try:
            await m.connection.call("q", {})
        except RequestError as exc:
            return [exc.code, exc.message, exc.data]
        return None

    async with connected(m, dispatcher) as peer:
        outer = await peer.request("ask")
        q = await peer.recv()
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": q["id"],
                "error": {"code": -32002, "message": "nope", "data": 1},
            }
        )
        resp = await next_response(peer)
        assert resp["id"] == outer and resp["result"] == [-32002, "nope", 1]


# --------------------------------------------------------------------------- $/cancel_request


async def test_cancel_request_for_a_running_handler_answers_once_with_32800(
    dispatcher: Any,
) -> None:
    m = Methods()
    entered = anyio.Event()
    unwound = anyio.Event()

    @m.request("forever")
    async def forever(params: Any, ctx: RequestContext) -> Any:
        try:
            entered.set()
            await anyio.Event().wait()
        finally:
            unwound.set()

    async with connected(m, dispatcher) as peer:
        rid = await peer.request("forever")
        await entered.wait()
        await peer.notify(CANCEL_REQUEST, {"requestId": rid})
        resp = await next_response(peer)
        assert resp["id"] == rid
        assert resp["error"]["code"] == REQUEST_CANCELLED
        assert unwound.is_set()
        # a second cancel for the same (finished) id is ignored
        await peer.notify(CANCEL_REQUEST, {"requestId": rid})
        resp, before = await peer.call("ping")
        assert before == [] and resp["result"] == "pong"
        assert m.connection.inflight_count == 0
    assert len(peer.responses(rid)) == 1


@pytest.mark.parametrize("target", [999, "nope", None, True, 1.5])
async def test_cancel_request_for_an_unknown_id_is_ignored(dispatcher: Any, target: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        await peer.notify(CANCEL_REQUEST, {"requestId": target})
        resp, before = await peer.call("ping")
        assert before == [] and resp["result"] == "pong"
    assert peer.tail == []


async def test_cancel_request_for_a_finished_request_is_ignored(dispatcher: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        resp, _ = await peer.call("ping")
        await peer.notify(CANCEL_REQUEST, {"requestId": resp["id"]})
        resp2, before = await peer.call("ping")
        assert before == [] and resp2["result"] == "pong"
    assert len(peer.responses(resp["id"])) == 1


async def test_cancel_request_with_string_id_does_not_hit_the_integer_id(dispatcher: Any) -> None:
    m = Methods()
    entered = m.gated("wait", "done")

    async with connected(m, dispatcher) as peer:
        await peer.request("wait", id=7)
        await entered.wait()
        await peer.notify(CANCEL_REQUEST, {"requestId": "7"})
        await peer.notify("release")
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": 7, "result": "done"}


async def test_a_request_cancelled_in_the_same_read_starts_and_answers_for_itself(
    dispatcher: Any,
) -> None:
    """The handler runs to its first ``await`` before the cancel behind it is read; it
    catches the cancellation and its value is the answer (as a prompt's ``cancelled``)."""
    m = Methods()
    started: list[str] = []

    @m.request("turn")
    async def turn(params: Any, ctx: RequestContext) -> Any:
        started.append("turn")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return {"stopReason": "cancelled"}

    async with connected(m, dispatcher) as peer:
        await peer.send_raw(
            orjson.dumps({"jsonrpc": "2.0", "id": 5, "method": "turn"})
            + b"\n"
            + orjson.dumps({"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": 5}})
            + b"\n"
        )
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "cancelled"}}
        assert started == ["turn"]


async def test_handlers_start_in_arrival_order_before_the_next_message(dispatcher: Any) -> None:
    """Requests and notifications read in one chunk: each handler's code up to its first
    ``await`` runs before the next message is dispatched."""
    m = Methods()
    order: list[tuple[str, int]] = []
    done = anyio.Event()

    async def request(params: Any, ctx: RequestContext) -> Any:
        order.append(("request", params["n"]))
        await anyio.lowlevel.checkpoint()
        return None

    async def note(params: Any) -> None:
        order.append(("note", params["n"]))
        await anyio.lowlevel.checkpoint()
        if params["n"] == 9:
            done.set()

    m.table.requests["r"] = request
    m.table.notifications["n"] = note
    frames = []
    for n in range(10):
        if n % 2:
            frames.append({"jsonrpc": "2.0", "method": "n", "params": {"n": n}})
        else:
            frames.append({"jsonrpc": "2.0", "id": n, "method": "r", "params": {"n": n}})
    async with connected(m, dispatcher) as peer:
        await peer.send_raw(b"".join(orjson.dumps(f) + b"\n" for f in frames))
        await done.wait()
    assert [n for _, n in order] == list(range(10))


# --------------------------------------------------------------------------- the error boundary


async def test_every_request_is_answered_exactly_once(dispatcher: Any) -> None:
    m = Methods()
    entered = anyio.Event()

    @m.request("ok")
    async def ok(params: Any, ctx: RequestContext) -> Any:
        return {"echo": params}

    @m.request("fail")
    async def fail(params: Any, ctx: RequestContext) -> Any:
        raise RequestError("refused", code=-32099)

    @m.request("bug")
    async def bug(params: Any, ctx: RequestContext) -> Any:
        raise KeyError("oops")

    @m.request("unserialisable")
    async def unserialisable(params: Any, ctx: RequestContext) -> Any:
        return {"x": object()}

    @m.request("hang")
    async def hang(params: Any, ctx: RequestContext) -> Any:
        entered.set()
        await anyio.Event().wait()

    @m.notification("note")
    async def note(params: Any) -> None:
        pass

    async with connected(m, dispatcher) as peer:
        ids = [
            await peer.request("ok", {"a": 1}),
            await peer.request("fail"),
            await peer.request("bug"),
            await peer.request("unserialisable"),
            await peer.request("note"),  # a notification method sent with an id
            await peer.request("no/such/method"),
            await peer.request("hang"),
            await peer.request("ping", id="str-id"),
        ]
        await entered.wait()
        await peer.notify(CANCEL_REQUEST, {"requestId": ids[6]})
        ids.append(await peer.request("hang", id="hang-at-eof"))
        resp, _ = await peer.call("ping")
        ids.append(resp["id"])
    counts = Counter(m_["id"] for m_ in peer.seen if "method" not in m_)
    assert {i: counts[i] for i in ids} == dict.fromkeys(ids, 1)
    assert set(counts) == set(ids)
    by_id = {m_["id"]: m_ for m_ in peer.seen if "method" not in m_}
    assert by_id[ids[0]]["result"] == {"echo": {"a": 1}}
    assert by_id[ids[1]]["error"] == {"code": -32099, "message": "refused"}
    assert by_id[ids[2]]["error"]["code"] == INTERNAL_ERROR
    assert by_id[ids[3]]["error"]["code"] == INTERNAL_ERROR
    assert by_id[ids[4]]["result"] is None
    assert by_id[ids[5]]["error"]["code"] == METHOD_NOT_FOUND
    assert by_id[ids[6]]["error"]["code"] == REQUEST_CANCELLED
    assert by_id["str-id"]["result"] == "pong"
    assert by_id["hang-at-eof"]["error"]["code"] == REQUEST_CANCELLED


@pytest.mark.parametrize("data", [None, {"field": "cwd"}, [1, 2], "text", 0, False])
async def test_request_error_keeps_code_message_and_data(dispatcher: Any, data: Any) -> None:
    m = Methods()

    @m.request("fail")
    async def fail(params: Any, ctx: RequestContext) -> Any:
        raise RequestError("Session 'x' not found", data, code=-32002)

    async with connected(m, dispatcher) as peer:
        resp, _ = await peer.call("fail")
    expected: JSON = {"code": -32002, "message": "Session 'x' not found"}
    if data is not None:
        expected["data"] = data
    assert resp["error"] == expected


async def test_a_handler_bug_is_32603_without_traceback_and_logged(
    dispatcher: Any, caplog: pytest.LogCaptureFixture
) -> None:
    m = Methods()

    @m.request("bug")
    async def bug(params: Any, ctx: RequestContext) -> Any:
        raise ValueError("secret internal detail")

    caplog.set_level(logging.ERROR, logger="acp_agent")
    async with connected(m, dispatcher) as peer:
        resp, _ = await peer.call("bug")
        assert resp["error"]["code"] == INTERNAL_ERROR
        text = orjson.dumps(resp).decode()
        assert "secret internal detail" not in text
        assert "Traceback" not in text
        assert "ValueError" not in text
        assert "\n" not in resp["error"]["message"]
        # the connection survives
        resp, _ = await peer.call("ping")
        assert resp["result"] == "pong"
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is ValueError]
    assert logged, "the traceback of a handler bug must be logged"
    assert "secret internal detail" in str(logged[0].exc_info[1])


async def test_params_named_like_internal_arguments_reach_the_handler(
    dispatcher: Any, request: pytest.FixtureRequest
) -> None:
    m = Methods()

    @m.request("echo")
    async def echo(params: Any, ctx: RequestContext) -> Any:
        return params

    params = {"ctx": 1, "context": 2, "self": 3, "params": 4, "name": 5}
    async with connected(m, dispatcher) as peer:
        resp, _ = await peer.call("echo", params)
        assert resp.get("result") == params


async def test_array_params_reach_the_handler(dispatcher: Any) -> None:
    m = Methods()

    @m.request("echo")
    async def echo(params: Any, ctx: RequestContext) -> Any:
        return params

    async with connected(m, dispatcher) as peer:
        resp, _ = await peer.call("echo", [1, "two", None])
    assert resp["result"] == [1, "two", None]


# --------------------------------------------------------------------------- notifications


async def test_notifications_are_never_answered(
    dispatcher: Any, caplog: pytest.LogCaptureFixture
) -> None:
    m = Methods()
    seen: list[Any] = []

    @m.notification("ok")
    async def ok(params: Any) -> None:
        seen.append(params)

    @m.notification("broken")
    async def broken(params: Any) -> None:
        raise ValueError("notification bug")

    @m.notification("refuses")
    async def refuses(params: Any) -> None:
        raise RequestError("no", code=-32602)

    caplog.set_level(logging.ERROR, logger="acp_agent")
    async with connected(m, dispatcher) as peer:
        await peer.notify("ok", {"n": 1})
        await peer.notify("broken", {})
        await peer.notify("refuses", {})
        await peer.notify("unknown/notification", {})
        await peer.notify("_ext/unknown")
        await peer.send({"jsonrpc": "2.0", "method": "ok", "params": 5})  # bad params
        resp, before = await peer.call("ping")
        assert before == [] and resp["result"] == "pong"
    assert peer.tail == []
    assert seen == [{"n": 1}]
    assert any(r.exc_info and r.exc_info[0] is ValueError for r in caplog.records)
