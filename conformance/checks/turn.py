"""Prompt turns (R-TURN-*), content blocks (R-CONTENT-*), `_meta` and notifications (R-EXT-*)."""

from __future__ import annotations

from ..registry import Ctx, Fail, Tier, aggregate, check, commands
from ._util import error_of, simple_prompt, stop_reason, texts

aggregate(
    "R-TURN-2",
    Tier.MUST,
    "every stopReason is one of the five v1 values (all processes)",
    ("R-TURN-2",),
)
aggregate(
    "R-TOOL-8",
    Tier.MUST,
    "tool call locations and diff paths are absolute (all processes)",
    ("R-TOOL-8",),
    ("R-TOOL-8", "R-TOOL-6"),
)
aggregate(
    "R-TOOL-9",
    Tier.SHOULD,
    "tool_call_update only for announced tool calls (all processes)",
    ("R-TOOL-9",),
)


@check(
    "R-TURN-1",
    Tier.MUST,
    "a prompt is answered with a stopReason result (/echo hi: chunk then end_turn)",
    reqs=("R-TURN-1", "R-CAP-3", "R-CONTENT-1"),
)
async def prompt_basic(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    text = simple_prompt(ctx)
    start = len(agent.inbox)
    m = await agent.prompt(sid, text)
    sr = stop_reason(m)
    if text == "/echo hi":
        chunks = texts(agent.updates(sid, start, m.index), "agent_message_chunk")
        if "".join(chunks) != "hi":
            raise Fail(f"/echo hi produced chunks {chunks!r} before the response")
        if sr != "end_turn":
            raise Fail(f"stopReason {sr!r}, expected end_turn")
    return f"stopReason {sr}"


@check("R-TURN-4", Tier.SHOULD, "no session/update for the session after the prompt response")
async def no_update_after_response(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    text = "/tools 2" if "tools" in ctx.profile.commands else simple_prompt(ctx)
    m = await agent.prompt(sid, text)
    stop_reason(m)
    late = await agent.collect(
        lambda x: x.method == "session/update" and x.session_id() == sid,
        ctx.quiet,
        start=m.index + 1,
    )
    if late:
        raise Fail(f"{late[0].update().get('sessionUpdate')} arrived after the {text!r} response")
    return f"quiet for {ctx.quiet:g} s after the response"


@check(
    "R-TURN-7",
    Tier.SHOULD,
    "/fail -32603 boom answers that error; the next prompt works",
    gate=commands("fail"),
)
async def prompt_error(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    err = error_of(await agent.prompt(sid, "/fail -32603 boom"), "/fail")
    if err.get("code") != -32603:
        raise Fail(f"code {err.get('code')}, expected -32603")
    stop_reason(await agent.prompt(sid, simple_prompt(ctx)))
    return "-32603, then a normal turn"


@check("R-TURN-9", Tier.INFO, "session/prompt for an unknown sessionId (code recorded)")
async def prompt_unknown_session(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    m = await agent.prompt("tck-does-not-exist", "hello")
    if "error" in m.obj:
        return f"error {m.obj['error'].get('code')}"
    return f"a result: {m.obj.get('result')!r}"


@check(
    "R-EXT-1",
    Tier.SHOULD,
    "_meta (traceparent) on prompt params and content blocks is accepted",
    reqs=("R-EXT-1", "R-EXT-2", "R-CONTENT-5"),
)
async def meta_tolerated(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    blocks = [
        {
            "type": "text",
            "text": simple_prompt(ctx),
            "_meta": {"tck": True},
            "annotations": {"priority": 0.5},
        }
    ]
    meta = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tck": True}
    m = await agent.prompt(sid, blocks, _meta=meta)
    return f"stopReason {stop_reason(m)}"


@check(
    "R-CONTENT-2",
    Tier.SHOULD,
    "a resource_link block is accepted",
    reqs=("R-CONTENT-2", "R-TURN-8"),
)
async def resource_link(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    (agent.cwd / "notes.txt").write_text("abc\n")
    blocks = [
        {"type": "text", "text": "hello"},
        {
            "type": "resource_link",
            "uri": f"file://{agent.cwd}/notes.txt",
            "name": "notes.txt",
            "mimeType": "text/plain",
        },
    ]
    return f"stopReason {stop_reason(await agent.prompt(sid, blocks))}"


@check("R-EXT-6", Tier.SHOULD, "an unknown '_' notification is ignored and the connection works")
async def unknown_notification(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    await agent.notify("_zed.dev/file_opened", {"path": "/x"})
    got = await agent.collect(lambda m: m.kind == "response", ctx.quiet, start=start)
    if got:
        raise Fail(f"answered the notification: {got[0].obj}")
    stop_reason(await agent.prompt(sid, simple_prompt(ctx)))
    return "ignored; the next prompt works"


@check(
    "R-TURN-10",
    Tier.MUST,
    "two concurrent prompts: the first completes correctly (second recorded)",
)
async def concurrent_prompts(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    busy = "/sleep 1000" if "sleep" in ctx.profile.commands else simple_prompt(ctx)
    a = await agent.send_prompt(sid, busy)
    b = await agent.send_prompt(sid, simple_prompt(ctx))
    ma = await agent.wait_response(a, what="first prompt")
    mb = await agent.wait_response(b, what="second prompt", timeout=ctx.timeout * 2)
    sr = stop_reason(ma, "first session/prompt")
    if sr not in ("end_turn", "cancelled"):
        raise Fail(f"first prompt ended {sr!r}")
    if "error" in mb.obj:
        second = f"refused with error {mb.obj['error'].get('code')}"
    else:
        when = "after" if mb.index > ma.index else "before"
        second = f"answered {mb.obj.get('result')} ({when} the first)"
    ctx.details["second"] = second
    return f"first: {sr}; second: {second}"


@check(
    "R-TURN-5",
    Tier.SHOULD,
    "/stream 3 8: three chunks; any messageId is identical across them",
    gate=commands("stream"),
)
async def stream_message_id(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    start = len(agent.inbox)
    m = await agent.prompt(sid, "/stream 3 8")
    stop_reason(m)
    ups = [
        u
        for u in agent.updates(sid, start, m.index)
        if u.get("sessionUpdate") == "agent_message_chunk"
    ]
    if len(ups) != 3:
        raise Fail(f"{len(ups)} chunks, expected 3")
    ids = {u.get("messageId") for u in ups}
    if len(ids) > 1:
        raise Fail(f"messageIds differ within one message: {ids}")
    return f"3 chunks, messageId {next(iter(ids))!r}"
