"""Cancellation races (R-CANCEL-*): session/cancel, $/cancel_request, cancel during permission
and terminal waits. A race that was not exercised is a SKIP, never a PASS."""

from __future__ import annotations

import time

from ..harness import ClientConfig, WaitTimeout
from ..registry import Ctx, Fail, Skip, Tier, all_of, check, commands
from ._util import busy_turn, judge_cancelled, stop_reason


@check(
    "R-CANCEL-3",
    Tier.MUST,
    "session/cancel during a busy turn ends it with stopReason cancelled",
    reqs=("R-CANCEL-3", "R-RPC-14"),
)
async def cancel_busy(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    rid, _, t0 = await busy_turn(ctx, agent, sid)
    t_cancel = time.monotonic()
    await agent.cancel(sid)
    m = await judge_cancelled(ctx, agent, rid, t0, t_cancel)
    return f"cancelled {m.t - (t_cancel - agent.t0):.2f} s after the cancel"


@check("R-CANCEL-2", Tier.SHOULD, "a cancelled turn ends within 2 s of session/cancel")
async def cancel_prompt(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    rid, _, t0 = await busy_turn(ctx, agent, sid)
    t_cancel = time.monotonic()
    await agent.cancel(sid)
    m = await judge_cancelled(ctx, agent, rid, t0, t_cancel)
    took = m.t - (t_cancel - agent.t0)
    if took > 2.0:
        raise Fail(f"took {took:.2f} s")
    return f"{took:.2f} s"


@check("R-CANCEL-4", Tier.MUST, "no session/update after the cancelled response")
async def cancel_no_late_updates(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    rid, _, t0 = await busy_turn(ctx, agent, sid)
    t_cancel = time.monotonic()
    await agent.cancel(sid)
    m = await judge_cancelled(ctx, agent, rid, t0, t_cancel)
    late = await agent.collect(
        lambda x: x.method == "session/update" and x.session_id() == sid,
        ctx.quiet,
        start=m.index + 1,
    )
    if late:
        raise Fail(f"{late[0].update().get('sessionUpdate')} after the cancelled response")
    return f"quiet for {ctx.quiet:g} s after the response"


@check("R-CANCEL-6", Tier.SHOULD, "a cancel on an idle session does not leak into the next turn")
async def cancel_idle_then_prompt(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    await agent.notify("session/cancel", {"sessionId": sid})
    await agent.collect(lambda m: True, min(ctx.quiet, 0.3))
    text = "/echo hi" if "echo" in ctx.profile.commands else "hello"
    sr = stop_reason(await agent.prompt(sid, text))
    if sr == "cancelled":
        raise Fail("the next turn ended 'cancelled' (stale cancel)")
    return f"next turn: {sr}"


@check(
    "R-CANCEL-9",
    Tier.MUST,
    "$/cancel_request for a running prompt: exactly one response (cancelled or -32800)",
    reqs=("R-CANCEL-9", "R-CANCEL-8"),
)
async def cancel_request(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    rid, start, _ = await busy_turn(ctx, agent, sid)
    await agent.notify("$/cancel_request", {"requestId": rid})
    m = await agent.wait_response(
        rid, timeout=ctx.timeout, what="session/prompt after $/cancel_request"
    )
    await agent.collect(lambda x: True, ctx.quiet)
    dup = [
        x
        for x in agent.inbox[start:]
        if x.kind == "response" and x.obj.get("id") == rid and x is not m
    ]
    if dup:
        raise Fail("the prompt was answered more than once")
    if "error" in m.obj:
        code = m.obj["error"].get("code") if isinstance(m.obj["error"], dict) else None
        if code != -32800:
            raise Fail(f"answered error {code}; expected stopReason cancelled or -32800")
        return "-32800 (allowed; clients prefer stopReason cancelled)"
    sr = stop_reason(m)
    if sr == "cancelled":
        return "stopReason cancelled"
    ctx.details["ignored"] = True
    return f"ignored (MAY): the turn ran to {sr}"


@check(
    "R-CANCEL-5",
    Tier.MUST,
    "cancel while a permission request is pending: no write, stopReason cancelled",
    reqs=("R-CANCEL-5", "R-PERM-4", "R-RPC-14"),
    gate=commands("write"),
)
async def cancel_during_permission(ctx: Ctx) -> str:
    agent, sid = await ctx.session(ClientConfig(permission="hold"))
    target = agent.cwd / "a.txt"
    t0 = time.monotonic()
    rid = await agent.send_prompt(sid, f"/write {target} x")
    try:
        await agent.wait_for(
            lambda m: m.method == "session/request_permission", what="session/request_permission"
        )
    except WaitTimeout:
        if agent.fs_writes:
            raise Skip("the agent wrote without asking (auto mode?)") from None
        raise
    t_cancel = time.monotonic()
    await agent.cancel(sid)  # also answers the held request with outcome cancelled
    await judge_cancelled(ctx, agent, rid, t0, t_cancel)
    await agent.collect(lambda m: True, ctx.quiet)
    writes = agent.requests("fs/write_text_file")
    if writes or target.exists():
        raise Fail("fs/write_text_file was sent after the permission came back cancelled")
    return "no write; stopReason cancelled"


@check(
    "R-CANCEL-7",
    Tier.SHOULD,
    "cancel during /run sleep 30: terminal killed/released, cancelled quickly",
    reqs=("R-CANCEL-7", "R-TERM-3"),
    gate=all_of(commands("run")),
)
async def cancel_during_terminal(ctx: Ctx) -> str:
    agent, sid = await ctx.session(ClientConfig(permission="first"))
    t0 = time.monotonic()
    rid = await agent.send_prompt(sid, "/run sleep 30")
    await agent.wait_for(
        lambda m: m.method == "terminal/wait_for_exit", what="terminal/wait_for_exit"
    )
    t_cancel = time.monotonic()
    await agent.cancel(sid)
    m = await judge_cancelled(ctx, agent, rid, t0, t_cancel)
    took = m.t - (t_cancel - agent.t0)
    await agent.collect(lambda x: True, ctx.quiet)
    created = [x for x in agent.inbox if x.method == "terminal/create"]
    released = {x.params.get("terminalId") for x in agent.requests("terminal/release")}
    killed = agent.requests("terminal/kill")
    if not released:
        raise Fail(f"terminal never released ({len(created)} created, {len(killed)} kill)")
    if took > 3.0:
        raise Fail(f"cancelled only after {took:.2f} s")
    return f"cancelled in {took:.2f} s; {len(killed)} kill, {len(released)} release"
