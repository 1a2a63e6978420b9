"""The JSON-RPC connection contract of AgentSession, over a hand-built MethodTable.

No ACP here: the methods are test doubles, the peer is a scripted WireClient on the
in-memory pair. Every test runs against both dispatchers (native and jsonrpcserver),
on asyncio and trio. Races are forced with events, never with sleeps.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
import pytest

from acp_agent.connection import (
    AgentSession,
    MethodTable,
    NativeDispatcher,
    RequestContext,
)
from acp_agent.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    CallTimeout,
    ConnectionClosed,
    RequestError,
)
from acp_agent.jsonrpc import CANCEL_REQUEST
from acp_agent.outbox import HIGH_WATER
from acp_agent.transport import memory_pair
from tests.helpers.memclient import WireClient

with warnings.catch_warnings():
    # jsonrpcserver 5 calls the deprecated importlib.resources.read_text at import time;
    # import it once here so that filterwarnings=error does not turn that into a failure.
    warnings.simplefilter("ignore", DeprecationWarning)
    import jsonrpcserver  # noqa: F401

from acp_agent.jsonrpcserver_dispatch import JsonRpcServerDispatcher

pytestmark = pytest.mark.anyio

FLUSH_RACE = (
    "BUG: AgentSession.flush() returns once the outbox list is empty, while the writer may "
    "still hold the batch it took from it (transport.send not finished); serve() then "
    "cancels the writer and the last answers (e.g. -32800 at EOF) are lost"
)

JSON = dict[str, Any]


@pytest.fixture(params=["native", "jsonrpcserver"])
def dispatcher(request: pytest.FixtureRequest) -> Any:
    return NativeDispatcher if request.param == "native" else JsonRpcServerDispatcher


class Methods:
    """A MethodTable built with decorators, plus a slot for the live connection."""

    def __init__(self) -> None:
        self.table = MethodTable()
        self.conn: AgentSession | None = None
        self.table.requests["ping"] = self._ping

    async def _ping(self, params: Any, ctx: RequestContext) -> Any:
        return "pong"

    def request(self, name: str) -> Callable[[Any], Any]:
        def register(fn: Callable[[Any, RequestContext], Awaitable[Any]]) -> Any:
            self.table.requests[name] = fn
            return fn

        return register

    def notification(self, name: str) -> Callable[[Any], Any]:
        def register(fn: Callable[[Any], Awaitable[None]]) -> Any:
            self.table.notifications[name] = fn
            return fn

        return register

    @property
    def connection(self) -> AgentSession:
        assert self.conn is not None
        return self.conn

    def gated(self, name: str, result: Any) -> anyio.Event:
        """A request ``name`` that waits until the peer sends the ``release`` notification,
        then answers ``result``; returns the event set when the handler has started."""
        entered, release = anyio.Event(), anyio.Event()

        async def handler(params: Any, ctx: RequestContext) -> Any:
            entered.set()
            await release.wait()
            return result

        async def do_release(params: Any) -> None:
            release.set()

        self.table.requests[name] = handler
        self.table.notifications["release"] = do_release
        return entered


class Peer(WireClient):
    """The scripted client side, with the frames it read after EOF."""

    tail: list[JSON]

    async def read_to_eof(self) -> list[JSON]:
        frames: list[JSON] = []
        try:
            while True:
                frames.append(await self.recv())
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
        return frames

    def responses(self, request_id: Any) -> list[JSON]:
        return [m for m in self.seen if "method" not in m and m.get("id") == request_id]


@asynccontextmanager
async def connected(
    methods: Methods,
    dispatcher: Any,
    *,
    max_buffer: float = math.inf,
    **options: Any,
) -> AsyncIterator[Peer]:
    """Serve ``methods`` on one end of a memory pair; yield the peer on the other.

    On exit the peer sends EOF, reads every remaining frame into ``peer.tail`` and
    checks that ``serve()`` returned by itself.
    """
    ours, theirs = memory_pair(max_buffer)
    conn = AgentSession(theirs, methods.table, dispatcher=dispatcher, **options)
    methods.conn = conn
    finished = anyio.Event()

    async def run() -> None:
        try:
            await conn.serve()
        finally:
            await theirs.aclose()
            finished.set()

    peer = Peer(ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            with anyio.fail_after(10):
                yield peer
                await ours.send_eof()
                peer.tail = await peer.read_to_eof()
                await finished.wait()
        finally:
            await ours.aclose()
    assert conn.closed


async def next_response(peer: Peer) -> JSON:
    """The next frame, which must be a response."""
    msg = await peer.recv()
    assert "method" not in msg, msg
    return msg


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


# --------------------------------------------------------------------------- EOF and shutdown


async def test_eof_cancels_inflight_handlers_and_fails_pending_calls(dispatcher: Any) -> None:
    m = Methods()
    entered = anyio.Event()
    failures: list[BaseException] = []

    @m.request("hang")
    async def hang(params: Any, ctx: RequestContext) -> Any:
        entered.set()
        await anyio.Event().wait()

    @m.request("ask_shielded")
    async def ask_shielded(params: Any, ctx: RequestContext) -> Any:
        with anyio.CancelScope(shield=True):
            try:
                await m.connection.call("never_answered", {})
            except ConnectionClosed as exc:
                failures.append(exc)
                return "closed"
        return "answered"

    @m.notification("ask_from_note")
    async def ask_from_note(params: Any) -> None:
        try:
            await m.connection.call("never_answered_either", {})
        except ConnectionClosed as exc:
            failures.append(exc)

    async with connected(m, dispatcher) as peer:
        hang_id = await peer.request("hang")
        ask_id = await peer.request("ask_shielded")
        await peer.notify("ask_from_note")
        await entered.wait()
        outbound = {(await peer.recv())["method"], (await peer.recv())["method"]}
        assert outbound == {"never_answered", "never_answered_either"}
        assert m.connection.pending_count == 2
    # after EOF: serve() returned (checked by connected), every request answered
    by_id = {f["id"]: f for f in peer.tail if "method" not in f}
    assert by_id[hang_id]["error"]["code"] == REQUEST_CANCELLED
    assert by_id[ask_id]["result"] == "closed"
    assert len(failures) == 2
    assert all(isinstance(f, ConnectionClosed) for f in failures)
    assert m.connection.pending_count == 0
    assert m.connection.inflight_count == 0
    with pytest.raises(ConnectionClosed):
        await m.connection.call("after_close", {})
    with pytest.raises(ConnectionClosed):
        await m.connection.notify("after_close", {})


class GatedTransport:
    """Wraps a transport; while ``closed``, ``send`` waits for the gate to open."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = anyio.Event()
        self.gate.set()

    def close_gate(self) -> None:
        self.gate = anyio.Event()

    async def receive(self) -> bytes:
        return await self.inner.receive()  # type: ignore[no-any-return]

    async def send(self, data: bytes) -> None:
        await self.gate.wait()
        await self.inner.send(data)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_shutdown_flush_waits_for_the_batch_being_written(dispatcher: Any) -> None:
    ours, theirs = memory_pair()
    gated = GatedTransport(theirs)
    conn = AgentSession(gated, Methods().table, dispatcher=dispatcher)
    peer = Peer(ours)

    async def run() -> None:
        try:
            await conn.serve()
        finally:
            await theirs.aclose()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(5):
                gated.close_gate()
                rid = await peer.request("ping")
                # the writer has taken the answer and is stuck writing it
                await anyio.wait_all_tasks_blocked()
                await ours.send_eof()
                await anyio.wait_all_tasks_blocked()
                gated.gate.set()  # the slow reader catches up
                frames = await peer.read_to_eof()
    finally:
        await ours.aclose()
    assert frames == [{"jsonrpc": "2.0", "id": rid, "result": "pong"}]


async def test_serve_returns_on_eof_with_nothing_running(dispatcher: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        pass
    assert peer.tail == []


# --------------------------------------------------------------------------- ids and envelopes


async def test_duplicate_inflight_request_id_is_refused(dispatcher: Any) -> None:
    m = Methods()
    entered = m.gated("wait", "first")

    async with connected(m, dispatcher) as peer:
        await peer.request("wait", id=5)
        await entered.wait()
        await peer.request("ping", id=5)
        dup = await next_response(peer)
        assert dup["id"] == 5 and dup["error"]["code"] == INVALID_REQUEST
        await peer.notify("release")
        first = await next_response(peer)
        assert first == {"jsonrpc": "2.0", "id": 5, "result": "first"}
        # the id is free again once answered
        _resp, _ = await peer.call("ping")
        await peer.request("ping", id=5)
        again = await next_response(peer)
        assert again["result"] == "pong"


async def test_same_value_int_and_string_ids_are_distinct(dispatcher: Any) -> None:
    m = Methods()
    entered = m.gated("wait", "waited")

    async with connected(m, dispatcher) as peer:
        await peer.request("wait", id=1)
        await entered.wait()
        await peer.request("ping", id="1")
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": "1", "result": "pong"}
        await peer.notify("release")
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": 1, "result": "waited"}


async def test_frames_leave_in_the_order_they_are_sent(dispatcher: Any) -> None:
    m = Methods()
    count = 1000

    @m.request("spam")
    async def spam(params: Any, ctx: RequestContext) -> Any:
        for i in range(count):
            await m.connection.notify("tick", {"i": i})
        return "done"

    async with connected(m, dispatcher) as peer:
        rid = await peer.request("spam")
        resp, before = await peer.until_response(rid)
        assert resp["result"] == "done"
        assert [b["params"]["i"] for b in before] == list(range(count))
        assert all(b["method"] == "tick" for b in before)


async def test_a_notification_and_the_answer_of_one_step_leave_in_one_write(
    dispatcher: Any,
) -> None:
    # A turn that sends an update and ends without waiting costs the client one wake-up.
    m = Methods()

    @m.request("say")
    async def say(params: Any, ctx: RequestContext) -> Any:
        await m.connection.notify("said", {"n": 1})
        return "done"

    async with connected(m, dispatcher) as peer:
        rid = await peer.request("say")
        chunk = await peer.transport.receive()
        frames = [orjson.loads(line) for line in chunk.splitlines()]
        assert frames == [
            {"jsonrpc": "2.0", "method": "said", "params": {"n": 1}},
            {"jsonrpc": "2.0", "id": rid, "result": "done"},
        ]


async def test_back_pressure_bounds_the_outbox_for_a_slow_reader(dispatcher: Any) -> None:
    m = Methods()
    frame_payload = "x" * 1000
    total = 3 * HIGH_WATER // 1000
    sent = 0

    @m.request("flood")
    async def flood(params: Any, ctx: RequestContext) -> Any:
        nonlocal sent
        for i in range(total):
            await m.connection.notify("blob", {"i": i, "data": frame_payload})
            sent += 1
        return "done"

    async with connected(m, dispatcher, max_buffer=1) as peer:
        rid = await peer.request("flood")
        # the reader reads nothing until every task is stuck
        await anyio.wait_all_tasks_blocked()
        frame_size = (
            len(b'{"jsonrpc":"2.0","method":"blob","params":{"i":0000,"data":""}}\n') + 1000
        )
        assert 0 < sent < total, "the producer must be held back by the full pipe"
        # what was accepted is bounded by the high-water mark plus what the writer
        # and the one-slot pipe hold (a few coalesced batches)
        assert sent * frame_size <= HIGH_WATER + 256 * frame_size
        # now read slowly, chunk by chunk, without parsing line by line
        buf = b""
        lines = 0
        while True:
            chunk = await peer.transport.receive()
            buf += chunk
            *complete, buf = buf.split(b"\n")
            lines += len(complete)
            if complete and orjson.loads(complete[-1]).get("id") == rid:
                last = orjson.loads(complete[-1])
                break
        assert last["result"] == "done"
        assert lines == total + 1
        assert sent == total


async def test_id_null_request_is_answered_with_id_null(dispatcher: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        await peer.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
        resp = await next_response(peer)
    assert resp == {"jsonrpc": "2.0", "id": None, "result": "pong"}


@pytest.mark.parametrize("bad_id", [True, False, 1.5, 2.0, [1], {"a": 1}])
async def test_bad_ids_are_invalid_requests_with_id_null(dispatcher: Any, bad_id: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        await peer.send({"jsonrpc": "2.0", "id": bad_id, "method": "ping"})
        resp = await next_response(peer)
        assert resp["id"] is None
        assert resp["error"]["code"] == INVALID_REQUEST
        resp, _ = await peer.call("ping")
        assert resp["result"] == "pong"


@pytest.mark.parametrize(
    "raw", [b"{not json\n", b'{"jsonrpc": "2.0", "id": 1, \n', b"\xff\xfe\n", b"[1,2\n"]
)
async def test_parse_error_is_32700_with_id_null(dispatcher: Any, raw: bytes) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        await peer.send_raw(raw)
        resp = await next_response(peer)
        assert resp == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": PARSE_ERROR, "message": resp["error"]["message"]},
        }
        resp, _ = await peer.call("ping")
        assert resp["result"] == "pong"


@pytest.mark.parametrize("raw", [b"42\n", b'"text"\n', b"null\n", b'{"foo":"bar"}\n', b"[]\n"])
async def test_non_messages_are_32600_with_id_null(dispatcher: Any, raw: bytes) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        await peer.send_raw(raw)
        resp = await next_response(peer)
        assert resp["id"] is None
        assert resp["error"]["code"] == INVALID_REQUEST
        resp, _ = await peer.call("ping")
        assert resp["result"] == "pong"


async def test_a_batch_is_answered_element_by_element(dispatcher: Any) -> None:
    m = Methods()
    noted: list[Any] = []

    @m.notification("note")
    async def note(params: Any) -> None:
        noted.append(params)

    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "note", "params": {"x": 1}},
        {"jsonrpc": "2.0", "id": "two", "method": "missing"},
        42,
    ]
    async with connected(m, dispatcher) as peer:
        await peer.send(batch)
        frames = [await next_response(peer) for _ in range(3)]
        _resp, before = await peer.call("ping")
        assert before == []
    assert all(isinstance(f, dict) for f in frames)
    by_id = {f["id"]: f for f in frames}
    assert by_id[1]["result"] == "pong"
    assert by_id["two"]["error"]["code"] == METHOD_NOT_FOUND
    assert by_id[None]["error"]["code"] == INVALID_REQUEST
    assert noted == [{"x": 1}]


async def test_an_oversized_line_is_answered_and_the_next_request_served(dispatcher: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher, max_line=1024) as peer:
        big = orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "y" * 4000}}
        )
        # in several chunks, the newline in the last one
        for i in range(0, len(big), 700):
            await peer.send_raw(big[i : i + 700])
        await peer.send_raw(b"\n")
        resp = await next_response(peer)
        assert resp["id"] == 1  # found in the head of the discarded line
        assert isinstance(resp["error"]["code"], int)
        assert "\n" not in resp["error"]["message"]
        resp, before = await peer.call("ping")
        assert before == [] and resp["result"] == "pong"
    assert peer.tail == []


async def test_crlf_and_blank_lines_are_tolerated(dispatcher: Any) -> None:
    m = Methods()
    async with connected(m, dispatcher) as peer:
        await peer.send_raw(b'\n\r\n{"jsonrpc":"2.0","id":3,"method":"ping"}\r\n\n')
        resp = await next_response(peer)
        assert resp == {"jsonrpc": "2.0", "id": 3, "result": "pong"}
        resp, before = await peer.call("ping")
        assert before == []


# --------------------------------------------------------------------------- the call flag


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_asyncio_call_flag_stays_set_after_a_cancelled_wait(anyio_backend: str) -> None:
    import asyncio

    from acp_agent._loop import Flag as _Flag

    flag = _Flag(asyncio.get_running_loop())
    with anyio.move_on_after(0) as scope:
        await flag.wait()
    assert scope.cancelled_caught and not flag.is_set()
    flag.set()  # the answer arrives after its waiter gave up: it is still seen
    assert flag.is_set()
    await flag.wait()  # returns at once
    waiting = _Flag(asyncio.get_running_loop())
    async with anyio.create_task_group() as tg:
        tg.start_soon(waiting.wait)
        await anyio.wait_all_tasks_blocked()
        waiting.set()
    assert waiting.is_set()
