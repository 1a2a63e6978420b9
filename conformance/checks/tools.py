"""Tool calls, permissions, plans, slash commands, fs and terminals with the capability."""

from __future__ import annotations

import os
from typing import Any

from ..harness import ClientConfig
from ..registry import Ctx, Fail, Tier, check, commands
from ._util import stop_reason

PERM_KINDS = {"allow_once", "allow_always", "reject_once", "reject_always"}


def _tool_updates(ups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in ups if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]


def _statuses(ups: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for u in _tool_updates(ups):
        tid = str(u.get("toolCallId"))
        st = u.get("status")
        if u.get("sessionUpdate") == "tool_call" and st is None:
            st = "pending"
        if st is not None:
            out.setdefault(tid, []).append(str(st))
    return out


@check(
    "R-TOOL-2",
    Tier.MUST,
    "/tools 2: tool_call announcements with unique ids and titles; no 'cancelled' status",
    reqs=("R-TOOL-2", "R-TOOL-3", "R-TOOL-5", "R-TOOL-6"),
    gate=commands("tools"),
)
async def tools_shape(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    m = await agent.prompt(sid, "/tools 2")
    stop_reason(m)
    ups = agent.updates(sid, start, m.index)
    calls = [u for u in ups if u.get("sessionUpdate") == "tool_call"]
    ids = [u.get("toolCallId") for u in calls]
    if len(calls) != 2:
        raise Fail(f"{len(calls)} tool_call announcements, expected 2")
    if len(set(ids)) != len(ids):
        raise Fail(f"duplicate toolCallIds {ids}")
    if any(not isinstance(u.get("title"), str) for u in calls):
        raise Fail("a tool_call has no title")
    if any(u.get("status") == "cancelled" for u in _tool_updates(ups)):
        raise Fail("a tool call used status 'cancelled' (not in v1)")
    return f"2 tool calls, ids {ids}"


@check(
    "R-TOOL-4",
    Tier.SHOULD,
    "/tools 2: each tool call goes pending -> in_progress -> completed",
    gate=commands("tools"),
)
async def tools_progress(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    m = await agent.prompt(sid, "/tools 2")
    stop_reason(m)
    seq = _statuses(agent.updates(sid, start, m.index))
    for tid, st in seq.items():
        if st != ["pending", "in_progress", "completed"]:
            raise Fail(f"tool {tid}: statuses {st}")
    if len(seq) != 2:
        raise Fail(f"{len(seq)} tool calls seen")
    return "both tool calls: pending, in_progress, completed"


@check(
    "R-PERM-2",
    Tier.MUST,
    "/write asks permission with a toolCallId and options of valid kinds",
    gate=commands("write"),
)
async def permission_shape(ctx: Ctx) -> str:
    agent, sid = await ctx.session(ClientConfig(permission="reject"))
    m = await agent.prompt(sid, f"/write {agent.cwd / 'a.txt'} hello")
    stop_reason(m)
    reqs = agent.requests("session/request_permission")
    if not reqs:
        raise Fail("no session/request_permission for /write (in the default mode)")
    p = reqs[0].params or {}
    if p.get("sessionId") != sid or not isinstance(
        (p.get("toolCall") or {}).get("toolCallId"), str
    ):
        raise Fail(f"bad params {p}")
    kinds = [o.get("kind") for o in p.get("options") or [] if isinstance(o, dict)]
    if not kinds or any(k not in PERM_KINDS for k in kinds):
        raise Fail(f"option kinds {kinds}")
    return f"options {kinds}"


@check(
    "R-PERM-3.reject",
    Tier.MUST,
    "rejected permission: no write, tool call failed, turn ends end_turn",
    reqs=("R-PERM-3",),
    gate=commands("write"),
)
async def permission_reject(ctx: Ctx) -> str:
    agent, sid = await ctx.session(ClientConfig(permission="reject"))
    target = agent.cwd / "a.txt"
    start = len(agent.inbox)
    m = await agent.prompt(sid, f"/write {target} hello")
    sr = stop_reason(m)
    if not agent.requests("session/request_permission", start):
        raise Fail("no permission request")
    if agent.requests("fs/write_text_file", start) or target.exists():
        raise Fail("the file was written after a rejection")
    final = {tid: st[-1] for tid, st in _statuses(agent.updates(sid, start, m.index)).items()}
    if "failed" not in final.values():
        raise Fail(f"no tool call ended failed (final statuses {final})")
    if sr != "end_turn":
        raise Fail(f"stopReason {sr!r}, expected end_turn")
    return "no write, tool call failed, end_turn"


@check(
    "R-PERM-3.allow",
    Tier.MUST,
    "allowed permission: fs/write_text_file with the text, tool call completed",
    reqs=("R-PERM-3", "R-FS-3", "R-FS-2"),
    gate=commands("write"),
)
async def permission_allow(ctx: Ctx) -> str:
    agent, sid = await ctx.session(ClientConfig(permission="allow"))
    target = agent.cwd / "a.txt"
    start = len(agent.inbox)
    m = await agent.prompt(sid, f"/write {target} hello world")
    stop_reason(m)
    writes = agent.requests("fs/write_text_file", start)
    if not writes:
        raise Fail("no fs/write_text_file after allow")
    p = writes[0].params or {}
    if p.get("path") != str(target) or p.get("content") != "hello world":
        raise Fail(f"write params {p}")
    perm = agent.requests("session/request_permission", start)
    if perm and perm[0].index > writes[0].index:
        raise Fail("wrote before asking permission")
    final = {tid: st[-1] for tid, st in _statuses(agent.updates(sid, start, m.index)).items()}
    if "completed" not in final.values():
        raise Fail(f"no tool call ended completed ({final})")
    return "written, tool call completed"


@check(
    "R-PLAN-2",
    Tier.MUST,
    "/plan 3: every plan update carries all 3 entries",
    reqs=("R-PLAN-2", "R-PLAN-3"),
    gate=commands("plan"),
)
async def plan_complete(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    m = await agent.prompt(sid, "/plan 3")
    stop_reason(m)
    plans = [u for u in agent.updates(sid, start, m.index) if u.get("sessionUpdate") == "plan"]
    if not plans:
        raise Fail("no plan update")
    sizes = [len(u.get("entries") or []) for u in plans]
    if any(s != 3 for s in sizes):
        raise Fail(f"plan updates with entry counts {sizes}")
    last = [e.get("status") for e in plans[-1].get("entries") or []]
    return f"{len(plans)} plan updates of 3 entries; final statuses {last}"


@check("R-CMD-1", Tier.INFO, "available_commands_update after session/new (commands recorded)")
async def commands_advertised(ctx: Ctx) -> str:
    if not ctx.profile.commands:
        return "no available_commands_update seen"
    return "commands: " + " ".join(sorted("/" + c for c in ctx.profile.commands))


@check(
    "R-NEW-2",
    Tier.MUST,
    "a relative path is resolved against the session cwd (/read notes.txt)",
    reqs=("R-NEW-2", "R-FS-2"),
    gate=commands("read"),
)
async def relative_path(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    (agent.cwd / "notes.txt").write_text("abc\n")
    start = len(agent.inbox)
    stop_reason(await agent.prompt(sid, "/read notes.txt"))
    reads = agent.requests("fs/read_text_file", start)
    if not reads:
        raise Fail("no fs/read_text_file")
    path = (reads[0].params or {}).get("path")
    if path != str(agent.cwd / "notes.txt"):
        raise Fail(f"read {path!r}, expected {str(agent.cwd / 'notes.txt')!r} (the session cwd)")
    return f"read {path}"


@check(
    "R-FS-4",
    Tier.SHOULD,
    "a client error on fs/read_text_file ends the turn normally; session usable",
    gate=commands("read"),
)
async def fs_error(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    m = await agent.prompt(sid, "/read missing-file.txt")
    what = f"stopReason {stop_reason(m)}" if "result" in m.obj else f"error {m.obj.get('error')}"
    stop_reason(await agent.prompt(sid, "/echo ok" if "echo" in ctx.profile.commands else "hello"))
    return f"{what}; next prompt works"


@check(
    "R-TERM-3",
    Tier.MUST,
    "/run echo hi: create, wait/output, release in order; every terminal released",
    reqs=("R-TERM-2", "R-TERM-3", "R-TERM-4"),
    gate=commands("run"),
)
async def terminal_flow(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    m = await agent.prompt(sid, "/run echo hi")
    stop_reason(m)
    await agent.collect(lambda x: True, min(ctx.quiet, 0.3))
    reqs = agent.requests("terminal/", start)
    if not reqs or reqs[0].method != "terminal/create":
        raise Fail(f"terminal calls {[r.method for r in reqs]}")
    cwd = (reqs[0].params or {}).get("cwd")
    if cwd is not None and not os.path.isabs(str(cwd)):
        raise Fail(f"terminal/create cwd {cwd!r} is not absolute")
    rel = [r for r in reqs if r.method == "terminal/release"]
    if not rel:
        raise Fail("terminal never released")
    after = [r.method for r in reqs if r.index > rel[0].index and r.method != "terminal/release"]
    if after:
        raise Fail(f"{after[0]} after terminal/release")
    if rel[0].index > m.index:
        return "released after the prompt response (late, but released)"
    return " -> ".join(r.method.split("/")[1] for r in reqs if r.method)


@check(
    "R-TOOL-7",
    Tier.SHOULD,
    "the terminal is embedded in a tool call before terminal/release",
    gate=commands("run"),
)
async def terminal_embedded(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    stop_reason(await agent.prompt(sid, "/run echo hi"))
    rel = agent.requests("terminal/release", start)
    if not rel:
        raise Fail("terminal never released")
    tid = (rel[0].params or {}).get("terminalId")
    for msg in agent.inbox[start : rel[0].index]:
        u = msg.update()
        for c in u.get("content") or []:
            if isinstance(c, dict) and c.get("type") == "terminal" and c.get("terminalId") == tid:
                return f"embedded in {u.get('sessionUpdate')} before release"
    raise Fail(f"terminal {tid} not embedded in any tool call before release")
