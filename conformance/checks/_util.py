"""Small helpers shared by the checks: result extraction, text of updates, the cancel race."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ..harness import AgentProcess, Msg, WaitTimeout, same_id
from ..registry import Ctx, Fail, Skip

STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


def result_of(m: Msg, what: str) -> Any:
    if "error" in m.obj:
        raise Fail(f"{what} answered with an error: {_short(m.obj['error'])}")
    return m.obj.get("result")


def error_of(m: Msg, what: str) -> dict[str, Any]:
    err = m.obj.get("error")
    if not isinstance(err, dict):
        raise Fail(f"{what} succeeded ({_short(m.obj.get('result'))}); expected an error")
    return err


def stop_reason(m: Msg, what: str = "session/prompt") -> str:
    r = result_of(m, what)
    sr = r.get("stopReason") if isinstance(r, dict) else None
    if sr not in STOP_REASONS:
        raise Fail(f"{what} result has no valid stopReason: {_short(r)}")
    return str(sr)


def texts(updates: list[dict[str, Any]], kind: str) -> list[str]:
    out = []
    for u in updates:
        if u.get("sessionUpdate") == kind:
            c = u.get("content")
            if isinstance(c, dict) and c.get("type") == "text":
                out.append(str(c.get("text")))
    return out


def simple_prompt(ctx: Ctx) -> str:
    return "/echo hi" if "echo" in ctx.profile.commands else "hello"


def _short(x: Any, n: int = 200) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."


async def busy_turn(ctx: Ctx, agent: AgentProcess, sid: str) -> tuple[Any, int, float]:
    """Start a turn that keeps the agent busy; returns (prompt id, inbox index, start time).

    Waits for the first update of the turn or 0.5 s, then Skips if the turn already ended.
    """
    text = ctx.busy_prompt()
    start = len(agent.inbox)
    t0 = time.monotonic()
    rid = await agent.send_prompt(sid, text)
    with contextlib.suppress(WaitTimeout):
        await agent.wait_for(
            lambda m: (
                (m.kind == "response" and same_id(m.obj.get("id"), rid))
                or (m.method == "session/update" and m.session_id() == sid)
            ),
            timeout=0.5,
            start=start,
        )
    if answered(agent, rid, start):
        raise Skip("race not exercised: the prompt was answered before the cancel could be sent")
    return rid, start, t0


def answered(agent: AgentProcess, rid: Any, start: int = 0) -> Msg | None:
    for m in agent.inbox[start:]:
        if m.kind == "response" and same_id(m.obj.get("id"), rid):
            return m
    return None


async def judge_cancelled(
    ctx: Ctx,
    agent: AgentProcess,
    rid: Any,
    t_prompt: float,
    t_cancel: float,
    allow_error: int | None = None,
) -> Msg:
    """Wait for the busy prompt's answer after a cancel and require `cancelled` (race-aware)."""
    m = await agent.wait_response(rid, what="session/prompt after the cancel")
    after = m.t - (t_cancel - agent.t0)
    if "error" in m.obj:
        err = m.obj["error"]
        if allow_error is not None and isinstance(err, dict) and err.get("code") == allow_error:
            return m
        raise Fail(
            f"cancelled turn answered a JSON-RPC error, not stopReason cancelled: {_short(err)}"
        )
    sr = stop_reason(m)
    if sr == "cancelled":
        return m
    natural = 5.0 if "sleep" in ctx.profile.commands else None
    ran = m.t - (t_prompt - agent.t0)
    if natural is not None and ran < natural - 0.5:
        raise Fail(f"turn cut short {after:.2f} s after the cancel but answered stopReason {sr!r}")
    if natural is None and after <= max(ctx.quiet, 2.0):
        raise Skip(f"race not exercised: the turn ended ({sr}) {after:.2f} s after the cancel")
    raise Fail(f"stopReason {sr!r} {after:.2f} s after the cancel; expected 'cancelled'")
