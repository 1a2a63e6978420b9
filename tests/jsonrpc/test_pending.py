"""PendingCalls: id allocation and response correlation."""

from __future__ import annotations

from acp_agent.jsonrpc import PendingCalls


def test_sequential_unique_ids() -> None:
    calls: PendingCalls[str] = PendingCalls()
    ids = [calls.allocate("m", f"p{i}") for i in range(5)]
    assert ids == [0, 1, 2, 3, 4]
    assert len(calls) == 5
    assert all(i in calls for i in ids)


def test_pop_returns_method_and_payload_once() -> None:
    calls: PendingCalls[object] = PendingCalls()
    waiter = object()
    id = calls.allocate("session/request_permission", waiter)
    assert calls.pop(id) == ("session/request_permission", waiter)
    assert calls.pop(id) is None
    assert id not in calls
    assert len(calls) == 0


def test_ids_never_reused() -> None:
    calls: PendingCalls[None] = PendingCalls()
    first = calls.allocate("a", None)
    calls.pop(first)
    assert calls.allocate("b", None) != first


def test_unknown_and_wrong_typed_ids() -> None:
    calls: PendingCalls[None] = PendingCalls()
    calls.allocate("a", None)
    one = calls.allocate("b", None)
    assert one == 1
    for wrong in (None, "1", 99, True, 1.0):
        assert calls.pop(wrong) is None  # type: ignore[arg-type]
        assert wrong not in calls
    assert len(calls) == 2


def test_drain_takes_everything_in_order() -> None:
    calls: PendingCalls[str] = PendingCalls()
    calls.allocate("a", "x")
    calls.allocate("b", "y")
    calls.allocate("c", "z")
    calls.pop(1)
    assert calls.drain() == [(0, "a", "x"), (2, "c", "z")]
    assert len(calls) == 0
    assert calls.drain() == []
    assert calls.allocate("d", "w") == 3
    assert "outstanding=1" in repr(calls)
