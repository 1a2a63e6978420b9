"""The sans-IO peer: bytes in, events out, frames from ``send_*`` (no event loop)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from acp_agent.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ConnectionClosed,
    OversizedLine,
    RequestError,
)
from acp_agent.jsonrpc import (
    CANCEL_REQUEST,
    CancelRequested,
    Incoming,
    Invalid,
    Notification,
    Peer,
    Request,
)


class Box:
    """A waiter that records how it was settled."""

    def __init__(self) -> None:
        self.settled: list[tuple[Any, BaseException | None]] = []

    def settle(self, result: Any, error: BaseException | None) -> None:
        self.settled.append((result, error))


def make_peer(max_line: int = 1 << 16) -> Peer[Box, list[str]]:
    return Peer(lambda req: [req.method], max_line=max_line)


def line(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


STREAM = (
    line({"jsonrpc": "2.0", "id": 1, "method": "a", "params": {}})
    + line({"jsonrpc": "2.0", "method": "note", "params": [1]})
    + line({"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": 1}})
    + b"{not json\n"
)


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_stream_gives_the_same_events_whole_and_byte_by_byte() -> None:
    whole = make_peer().receive_data(STREAM)
    peer = make_peer()
    split: list[Any] = []
    for i in range(len(STREAM)):
        split += peer.receive_data(STREAM[i : i + 1])
    assert (
        kinds(whole) == kinds(split) == ["Incoming", "Notification", "CancelRequested", "Invalid"]
    )
    incoming = whole[0]
    assert isinstance(incoming, Incoming)
    assert incoming.request == Request(1, "a", {})
    assert incoming.context == ["a"]
    cancel = whole[2]
    assert isinstance(cancel, CancelRequested) and cancel.context is incoming.context
    assert whole[1] == Notification("note", [1])
    assert peer.received == 4


def test_a_cancel_for_an_unknown_or_answered_request_is_no_event() -> None:
    peer = make_peer()
    peer.receive_data(line({"jsonrpc": "2.0", "id": "x", "method": "a"}))
    peer.send_answer("x", (True, None))
    for request_id in ("x", 7, True, None, [1]):
        note = {"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": request_id}}
        assert peer.receive_data(line(note)) == []
    assert peer.inflight_count == 0


def test_a_repeated_inbound_id_is_refused_until_answered() -> None:
    peer = make_peer()
    request = line({"jsonrpc": "2.0", "id": 3, "method": "a"})
    assert kinds(peer.receive_data(request)) == ["Incoming"]
    refused = peer.receive_data(request)
    assert refused == [Invalid(3, INVALID_REQUEST, "Request id is already in use")]
    # "3" is another id than 3
    assert kinds(peer.receive_data(line({"jsonrpc": "2.0", "id": "3", "method": "a"}))) == [
        "Incoming"
    ]
    assert orjson.loads(peer.send_answer(3, (True, {"ok": 1}))) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"ok": 1},
    }
    assert kinds(peer.receive_data(request)) == ["Incoming"]


def test_answers_settle_our_requests_and_late_ones_are_dropped() -> None:
    peer = make_peer()
    ok, bad = Box(), Box()
    first, frame = peer.send_request("fs/read", {"path": "/a"}, ok)
    assert orjson.loads(frame) == {
        "jsonrpc": "2.0",
        "id": first,
        "method": "fs/read",
        "params": {"path": "/a"},
    }
    second, _ = peer.send_request("fs/write", None, bad)
    assert first != second and peer.pending_count == 2
    events = peer.receive_data(
        line({"jsonrpc": "2.0", "id": first, "result": "text"})
        + line({"jsonrpc": "2.0", "id": second, "error": {"code": -32002, "message": "gone"}})
        + line({"jsonrpc": "2.0", "id": first, "result": "again"})  # late: dropped
    )
    assert events == []
    assert ok.settled == [("text", None)]
    [(result, error)] = bad.settled
    assert result is None and isinstance(error, RequestError) and error.code == -32002
    assert peer.pending_count == 0


def test_giving_up_on_a_request_sends_a_cancel_once() -> None:
    peer = make_peer()
    request_id, _ = peer.send_request("session/request_permission", {}, Box())
    frame = peer.send_cancel(request_id)
    assert frame is not None
    assert orjson.loads(frame) == {
        "jsonrpc": "2.0",
        "method": CANCEL_REQUEST,
        "params": {"requestId": request_id},
    }
    assert peer.send_cancel(request_id) is None
    assert peer.pending_count == 0


def test_close_settles_every_waiting_call_with_connection_closed() -> None:
    peer = make_peer()
    boxes = [Box(), Box()]
    for box in boxes:
        peer.send_request("m", None, box)
    peer.close("the connection closed")
    for box in boxes:
        [(_, error)] = box.settled
        assert isinstance(error, ConnectionClosed)
        assert "the connection closed before 'm' was answered" in str(error)
    assert peer.pending_count == 0


def test_the_one_exception_boundary() -> None:
    assert Peer.outcome_of(RequestError("bad", {"x": 1}, code=-32602), "m") == (
        False,
        {"code": -32602, "message": "bad", "data": {"x": 1}},
    )
    assert Peer.outcome_of(ConnectionClosed("gone"), "m") == (
        False,
        {"code": INTERNAL_ERROR, "message": "The connection closed"},
    )
    assert Peer.outcome_of(KeyError("bug"), "m") == (
        False,
        {"code": INTERNAL_ERROR, "message": "Internal error"},
    )


@pytest.mark.parametrize(
    "outcome",
    [(True, 2**64), (False, {"code": 2**64, "message": "x"}), (True, {1: object()})],
)
def test_an_answer_json_cannot_carry_becomes_an_internal_error(outcome: Any) -> None:
    peer = make_peer()
    peer.receive_data(line({"jsonrpc": "2.0", "id": 5, "method": "a"}))
    assert orjson.loads(peer.send_answer(5, outcome)) == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
    }
    assert peer.inflight_count == 0


def test_an_oversized_line_and_an_unterminated_last_line() -> None:
    peer = make_peer(max_line=64)
    events = peer.receive_data(b'{"jsonrpc":"2.0","id":9,"method":"a","params":"' + b"x" * 100)
    events += peer.receive_data(b'"}\n{"jsonrpc":"2.0","method":"n"}')
    assert kinds(events) == ["OversizedLine"]
    assert isinstance(events[0], OversizedLine)
    assert peer.receive_eof() == [Notification("n", None)]
