"""The JSON-RPC connection contract of AgentSession, over a hand-built MethodTable: the wire.

EOF and shutdown, ids and envelopes, batching, write order and back pressure. The calls
themselves (concurrency, cancellation, the error boundary, notifications) are in
``test_connection.py``; the doubles are in ``_connection.py``.

The setting is ``test_connection.py``'s: test doubles for methods, a scripted peer, both
dispatchers, asyncio and trio, races forced with events.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import anyio
import orjson
import pytest

from acp_agent.connection import WRITE_BUFFER, AgentSession, RequestContext
from acp_agent.errors import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosed,
)
from acp_agent.transport import StdioTransport, memory_pair
from tests.core._connection import Methods, Peer, connected, next_response

pytestmark = pytest.mark.anyio


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


async def test_back_pressure_holds_a_sender_back_while_the_reader_reads_nothing(
    dispatcher: Any,
) -> None:
    m = Methods()
    payload = "x" * 1000
    total = 10 * WRITE_BUFFER
    sent = 0

    @m.request("flood")
    async def flood(params: Any, ctx: RequestContext) -> Any:
        nonlocal sent
        for i in range(total):
            await m.connection.notify("blob", {"i": i, "data": payload})
            sent += 1
        return "done"

    async with connected(m, dispatcher, max_buffer=1) as peer:
        rid = await peer.request("flood")
        await anyio.wait_all_tasks_blocked()  # the reader has read nothing yet
        # held: what the stream holds, one batch being written, one in the pipe
        assert 0 < sent <= 4 * WRITE_BUFFER
        resp, before = await peer.until_response(rid)
        assert resp["result"] == "done"
        assert [b["params"]["i"] for b in before] == list(range(total))
        assert sent == total


async def test_a_sender_cancelled_while_held_back_tears_no_frame(
    dispatcher: Any, tmp_path: Any
) -> None:
    """Over a real pipe: frames larger than the pipe, the sender cancelled while the
    reader reads nothing; every line the reader then gets is whole JSON, the answer once."""
    m = Methods()
    blocked = anyio.Event()

    @m.request("flood")
    async def flood(params: Any, ctx: RequestContext) -> Any:
        big = "y" * (3 << 19)  # larger than the pipe holds
        while True:
            blocked.set()
            await m.connection.notify("blob", {"data": big})

    to_agent_r, to_agent_w = os.pipe()
    from_agent_r, from_agent_w = os.pipe()
    ours = StdioTransport(from_agent_r, to_agent_w)
    theirs = StdioTransport(to_agent_r, from_agent_w, closefd=True)
    conn = m.conn = AgentSession(theirs, m.table, dispatcher=dispatcher)
    frames: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            try:
                await conn.serve()
            finally:
                await theirs.aclose()

        tg.start_soon(run)
        with anyio.fail_after(20):
            await ours.send(b'{"jsonrpc":"2.0","id":1,"method":"flood"}\n')
            await blocked.wait()
            await anyio.wait_all_tasks_blocked()
            cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}
            await ours.send(orjson.dumps(cancel) + b"\n")
            buf = b""
            while not any(f.get("id") == 1 for f in frames):
                buf += await ours.receive()
                *lines, buf = buf.split(b"\n")
                frames.extend(orjson.loads(line) for line in lines)
            os.close(to_agent_w)  # EOF for the agent
            rest = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    rest += await ours.receive()
            frames.extend(orjson.loads(line) for line in (buf + rest).split(b"\n") if line)
        await ours.aclose()
        os.close(from_agent_r)
    answers = [f for f in frames if f.get("id") == 1]
    error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
    assert answers == [{"jsonrpc": "2.0", "id": 1, "error": error}]
    assert all(f.get("method") == "blob" for f in frames if "id" not in f)


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
