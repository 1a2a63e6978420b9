"""Session lifecycle: new, load, resume, list, delete, close, additional directories."""

from __future__ import annotations

import os
import time
from typing import Any

from ..harness import ClientConfig
from ..registry import Ctx, Fail, Tier, cap, check
from ._util import busy_turn, error_of, judge_cancelled, result_of, simple_prompt, texts

HISTORY = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")


@check("R-NEW-1", Tier.MUST, "session/new returns unique non-empty string ids")
async def new_unique(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    a, _ = await agent.new_session()
    b, _ = await agent.new_session()
    if not a or not b or a == b:
        raise Fail(f"ids {a!r} and {b!r}")
    return "two distinct ids"


@check("R-NEW-4", Tier.MUST, "session/new without mcpServers is accepted as []")
async def new_without_mcp(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    r = result_of(
        await agent.request("session/new", {"cwd": str(agent.cwd)}),
        "session/new without mcpServers",
    )
    if not isinstance(r, dict) or not r.get("sessionId"):
        raise Fail(f"result {r!r}")
    return "accepted"


@check("R-NEW-3", Tier.SHOULD, "session/new with a relative cwd gets -32602")
async def new_relative_cwd(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    err = error_of(
        await agent.request("session/new", {"cwd": "relative/dir", "mcpServers": []}),
        "relative cwd",
    )
    if err.get("code") != -32602:
        raise Fail(f"code {err.get('code')}, expected -32602")
    return "-32602"


@check(
    "R-NEW-9",
    Tier.SHOULD,
    "no session/update for a new session before the session/new response",
    reqs=("R-NEW-9", "R-CMD-4"),
)
async def no_update_before_new_response(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    rid = await agent.send_request("session/new", {"cwd": str(agent.cwd), "mcpServers": []})
    resp = await agent.wait_response(rid, what="session/new")
    sid = result_of(resp, "session/new").get("sessionId")
    await agent.collect(lambda m: True, ctx.quiet)
    early = [
        m
        for m in agent.inbox[: resp.index]
        if m.method == "session/update" and m.session_id() == sid
    ]
    if early:
        raise Fail(f"{early[0].update().get('sessionUpdate')} sent before the session/new response")
    return "nothing for the session preceded the response"


@check(
    "R-NEW-7",
    Tier.SHOULD,
    "an http MCP server without mcpCapabilities.http is rejected with -32602",
    gate=lambda p: (
        "mcpCapabilities.http is advertised" if p.advertised("mcpCapabilities", "http") else None
    ),
)
async def new_http_mcp_unadvertised(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    server = {"type": "http", "name": "probe", "url": "http://127.0.0.1:9/mcp", "headers": []}
    m = await agent.request("session/new", {"cwd": str(agent.cwd), "mcpServers": [server]})
    err = error_of(m, "session/new with an unadvertised http MCP server")
    if err.get("code") != -32602:
        raise Fail(f"code {err.get('code')}, expected -32602")
    return "-32602"


@check("R-EXT-8", Tier.SHOULD, "unknown fields in request params are ignored")
async def unknown_param_fields(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize(futureField={"x": 1})
    r = result_of(
        await agent.request(
            "session/new", {"cwd": str(agent.cwd), "mcpServers": [], "futureField": 1}
        ),
        "session/new with an unknown field",
    )
    if not isinstance(r, dict) or not r.get("sessionId"):
        raise Fail(f"result {r!r}")
    return "initialize and session/new accepted unknown fields"


# -- load ----------------------------------------------------------------------------------------


async def _prompted_session(ctx: Ctx) -> tuple[Any, str, str]:
    agent, sid = await ctx.session()
    text = simple_prompt(ctx)
    await agent.prompt(sid, text)
    await agent.collect(lambda m: True, min(ctx.quiet, 0.3))
    return agent, sid, text


@check(
    "R-LOAD-2",
    Tier.CAPABILITY,
    "session/load replays the conversation before answering {}",
    reqs=("R-LOAD-2", "R-LOAD-3", "R-LOAD-6"),
    gate=cap("loadSession"),
)
async def load_replay(ctx: Ctx) -> str:
    agent, sid, text = await _prompted_session(ctx)
    start = len(agent.inbox)
    m = await agent.request(
        "session/load", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
    )
    result_of(m, "session/load")
    before = agent.updates(sid, start, m.index)
    users = "".join(texts(before, "user_message_chunk"))
    if text not in users:
        raise Fail(f"no user_message_chunk {text!r} replayed before the response (got {users!r})")
    if text == "/echo hi" and "hi" not in "".join(texts(before, "agent_message_chunk")):
        raise Fail("no agent_message_chunk 'hi' replayed before the response")
    return f"{len(before)} update(s) replayed before the response"


@check(
    "R-LOAD-4",
    Tier.CAPABILITY,
    "nothing for the session after the session/load response",
    reqs=("R-LOAD-4", "R-CMD-4"),
    gate=cap("loadSession"),
)
async def load_quiet_after(ctx: Ctx) -> str:
    agent, sid, _ = await _prompted_session(ctx)
    m = await agent.request(
        "session/load", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
    )
    result_of(m, "session/load")
    late = await agent.collect(
        lambda x: x.method == "session/update" and x.session_id() == sid,
        ctx.quiet,
        start=m.index + 1,
    )
    if late:
        raise Fail(f"{late[0].update().get('sessionUpdate')} sent after the session/load response")
    return f"quiet for {ctx.quiet:g} s"


@check(
    "R-LOAD-5",
    Tier.SHOULD,
    "session/load result is an object ({}), not null",
    gate=cap("loadSession"),
)
async def load_result_object(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    r = result_of(
        await agent.request(
            "session/load", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
        ),
        "session/load",
    )
    if not isinstance(r, dict):
        raise Fail(f"result is {r!r}")
    return "object"


@check(
    "R-LOAD-8", Tier.SHOULD, "session/load of an unknown id is an error", gate=cap("loadSession")
)
async def load_unknown(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    m = await agent.request(
        "session/load", {"sessionId": "tck-does-not-exist", "cwd": str(agent.cwd), "mcpServers": []}
    )
    err = error_of(m, "session/load of an unknown session")
    return f"error {err.get('code')}"


# -- resume --------------------------------------------------------------------------------------


@check(
    "R-RESUME-2",
    Tier.CAPABILITY,
    "session/resume (no mcpServers) answers an object without replaying history",
    reqs=("R-RESUME-2", "R-RESUME-3", "R-RESUME-4", "R-RESUME-5"),
    gate=cap("sessionCapabilities", "resume"),
)
async def resume_no_replay(ctx: Ctx) -> str:
    agent, sid, _ = await _prompted_session(ctx)
    start = len(agent.inbox)
    m = await agent.request("session/resume", {"sessionId": sid, "cwd": str(agent.cwd)})
    r = result_of(m, "session/resume")
    if not isinstance(r, dict):
        raise Fail(f"result is {r!r}")
    replay = [u for u in agent.updates(sid, start, m.index) if u.get("sessionUpdate") in HISTORY]
    if replay:
        raise Fail(f"history replayed before the response: {replay[0].get('sessionUpdate')}")
    return "no history replayed"


# -- list ----------------------------------------------------------------------------------------

LIST = cap("sessionCapabilities", "list")


async def _list_all(agent: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):
        p = dict(params)
        if cursor is not None:
            p["cursor"] = cursor
        r = result_of(await agent.request("session/list", p), "session/list")
        if not isinstance(r, dict) or not isinstance(r.get("sessions"), list):
            raise Fail(f"session/list result {r!r}")
        out += [s for s in r["sessions"] if isinstance(s, dict)]
        cursor = r.get("nextCursor")
        if cursor is None:
            return out
        if not isinstance(cursor, str):
            raise Fail(f"nextCursor is not a string: {cursor!r}")
    raise Fail("more than 100 pages")


@check(
    "R-LIST-2",
    Tier.CAPABILITY,
    "session/list {} lists the new session with its absolute cwd",
    reqs=("R-LIST-2", "R-LIST-5"),
    gate=LIST,
)
async def list_basic(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    sessions = await _list_all(agent, {})
    mine = [s for s in sessions if s.get("sessionId") == sid]
    if not mine:
        raise Fail(f"session {sid} not listed ({len(sessions)} listed)")
    if not os.path.isabs(str(mine[0].get("cwd", ""))):
        raise Fail(f"cwd {mine[0].get('cwd')!r} is not absolute")
    return f"{len(sessions)} session(s) listed"


@check("R-LIST-3", Tier.CAPABILITY, "a cwd filter matching nothing returns sessions: []", gate=LIST)
async def list_empty(ctx: Ctx) -> str:
    agent, _ = await ctx.session()
    r = result_of(
        await agent.request("session/list", {"cwd": str(agent.cwd / "no-session-here")}),
        "session/list",
    )
    if not isinstance(r, dict) or r.get("sessions") != []:
        raise Fail(f"result {r!r}")
    return "[]"


@check(
    "R-LIST-4",
    Tier.CAPABILITY,
    "a cwd filter returns only sessions with exactly that cwd",
    gate=LIST,
)
async def list_filter(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    other = agent.cwd / "other"
    other.mkdir(exist_ok=True)
    a, _ = await agent.new_session(str(agent.cwd))
    b, _ = await agent.new_session(str(other))
    got = await _list_all(agent, {"cwd": str(other)})
    ids = [s.get("sessionId") for s in got]
    if b not in ids or a in ids or any(s.get("cwd") != str(other) for s in got):
        raise Fail(
            f"filter by {other} returned {[(s.get('sessionId'), s.get('cwd')) for s in got]}"
        )
    return f"{len(got)} session(s), all in the filtered cwd"


@check(
    "R-LIST-6",
    Tier.CAPABILITY,
    "pagination: following nextCursor lists every session exactly once",
    gate=LIST,
)
async def list_pagination(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    mine = set()
    for _ in range(30):
        sid, _ = await agent.new_session()
        mine.add(sid)
    got = await _list_all(agent, {"cwd": str(agent.cwd)})
    ids = [s.get("sessionId") for s in got]
    if len(ids) != len(set(ids)):
        raise Fail("a session appears on more than one page")
    missing = mine - set(ids)
    if missing:
        raise Fail(f"{len(missing)} of 30 sessions never listed")
    return "30 sessions over the pages, each once"


@check(
    "R-LIST-6.cursor",
    Tier.SHOULD,
    "an invalid cursor is rejected with an error",
    reqs=("R-LIST-6",),
    gate=LIST,
)
async def list_bad_cursor(ctx: Ctx) -> str:
    agent, _ = await ctx.session()
    err = error_of(
        await agent.request("session/list", {"cursor": "garbage-cursor"}),
        "session/list with a garbage cursor",
    )
    return f"error {err.get('code')}"


# -- delete --------------------------------------------------------------------------------------

DELETE = cap("sessionCapabilities", "delete")


@check(
    "R-DEL-2",
    Tier.CAPABILITY,
    "session/delete returns {} (and the session leaves session/list)",
    reqs=("R-DEL-2", "R-DEL-3"),
    gate=DELETE,
)
async def delete_basic(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    r = result_of(await agent.request("session/delete", {"sessionId": sid}), "session/delete")
    if not isinstance(r, dict):
        raise Fail(f"result {r!r}")
    if ctx.profile.advertised("sessionCapabilities", "list"):
        listed = await _list_all(agent, {})
        if any(s.get("sessionId") == sid for s in listed):
            raise Fail("deleted session still listed")
        return "{} and no longer listed"
    return "{}"


@check("R-DEL-4", Tier.SHOULD, "deleting an unknown session succeeds silently", gate=DELETE)
async def delete_unknown(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    r = result_of(
        await agent.request("session/delete", {"sessionId": "tck-never-created-session"}),
        "session/delete",
    )
    return f"result {r!r}"


# -- close ---------------------------------------------------------------------------------------

CLOSE = cap("sessionCapabilities", "close")


@check("R-CLOSE-3", Tier.CAPABILITY, "session/close of an idle session returns {}", gate=CLOSE)
async def close_idle(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    r = result_of(await agent.request("session/close", {"sessionId": sid}), "session/close")
    if not isinstance(r, dict):
        raise Fail(f"result {r!r}")
    return "{}"


@check(
    "R-CLOSE-2",
    Tier.CAPABILITY,
    "session/close during a turn answers {} and the turn ends cancelled",
    reqs=("R-CLOSE-2", "R-CANCEL-13"),
    gate=CLOSE,
)
async def close_busy(ctx: Ctx) -> str:
    agent, sid = await ctx.session(ClientConfig(permission="cancelled"))
    rid, _, t0 = await busy_turn(ctx, agent, sid)
    t_cancel = time.monotonic()
    agent._cancelled_sessions.add(sid)
    m_close = await agent.request("session/close", {"sessionId": sid}, rid="tck-close")
    result_of(m_close, "session/close")
    await judge_cancelled(ctx, agent, rid, t0, t_cancel)
    return "{} and stopReason cancelled"


# -- additional directories ----------------------------------------------------------------------

DIRS = cap("sessionCapabilities", "additionalDirectories")


@check(
    "R-DIRS-2",
    Tier.CAPABILITY,
    "session/new accepts absolute additionalDirectories",
    reqs=("R-DIRS-2", "R-DIRS-6"),
    gate=DIRS,
)
async def dirs_accept(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    extra = agent.cwd / "extra"
    extra.mkdir(exist_ok=True)
    await agent.new_session(additionalDirectories=[str(extra)])
    return "accepted"


@check(
    "R-DIRS-3",
    Tier.CAPABILITY,
    "a relative additionalDirectories entry is rejected with -32602",
    gate=DIRS,
)
async def dirs_relative(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    m = await agent.request(
        "session/new",
        {"cwd": str(agent.cwd), "mcpServers": [], "additionalDirectories": ["relative/dir"]},
    )
    err = error_of(m, "relative additionalDirectories entry")
    if err.get("code") != -32602:
        raise Fail(f"code {err.get('code')}, expected -32602")
    return "-32602"
