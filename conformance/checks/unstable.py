"""Unstable ACP features, judged only when the agent advertises them (against the unstable
schema, see `runner.py`): `session/fork` (R-FORK), `session/set_title` with the title in
`session/list` (R-TITLE), and `usage` on the `session/prompt` result (R-USAGE).
"""

from __future__ import annotations

from typing import Any

from ..harness import AgentProcess
from ..registry import Ctx, Fail, Profile, Skip, Tier, all_of, cap, check
from ._util import error_of, result_of, simple_prompt, stop_reason, texts


def unstable(p: Profile) -> str | None:
    return None if p.unstable else "the agent advertises no unstable feature"


async def _load_texts(agent: AgentProcess, sid: str) -> str:
    start = len(agent.inbox)
    m = await agent.request(
        "session/load", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
    )
    result_of(m, "session/load")
    return "".join(texts(agent.updates(sid, start, m.index), "user_message_chunk"))


@check(
    "R-FORK",
    Tier.CAPABILITY,
    "session/fork makes a new session holding a copy of the history",
    gate=all_of(cap("sessionCapabilities", "fork"), cap("loadSession")),
)
async def fork(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    stop_reason(await agent.prompt(sid, "/echo before the fork"))
    result = result_of(
        await agent.request(
            "session/fork", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
        ),
        "session/fork",
    )
    forked = result.get("sessionId") if isinstance(result, dict) else None
    if not isinstance(forked, str) or forked == sid:
        raise Fail(f"session/fork returned no new sessionId: {result!r}")
    stop_reason(await agent.prompt(forked, "/echo only in the fork"))
    copied = await _load_texts(agent, forked)
    if "before the fork" not in copied or "only in the fork" not in copied:
        raise Fail(f"the fork's history is not the source's plus its own: {copied!r}")
    source = await _load_texts(agent, sid)
    if "only in the fork" in source:
        raise Fail("a prompt in the fork appeared in the source session's history")
    missing = await agent.request(
        "session/fork", {"sessionId": "no-such-session", "cwd": str(agent.cwd), "mcpServers": []}
    )
    if error_of(missing, "session/fork of an unknown session").get("code") != -32002:
        raise Fail("session/fork of an unknown session did not answer -32002")
    return "the fork holds the history; the source is untouched"


@check(
    "R-TITLE",
    Tier.CAPABILITY,
    "session/set_title stores the title; session/list shows it",
    gate=all_of(cap("sessionCapabilities", "title"), cap("sessionCapabilities", "list")),
)
async def set_title(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    result = result_of(
        await agent.request("session/set_title", {"sessionId": sid, "title": "  Fix the build "}),
        "session/set_title",
    )
    title = result.get("title") if isinstance(result, dict) else None
    if not isinstance(title, str) or not title.strip():
        raise Fail(f"session/set_title answered no stored title: {result!r}")
    listed = result_of(await agent.request("session/list", {"cwd": str(agent.cwd)}), "session/list")
    mine = [s for s in (listed or {}).get("sessions", []) if s.get("sessionId") == sid]
    if not mine or mine[0].get("title") != title:
        raise Fail(f"session/list shows {mine[0].get('title') if mine else None!r}, not {title!r}")
    for bad in ({"sessionId": sid, "title": "   "}, {"sessionId": sid}):
        err = error_of(await agent.request("session/set_title", bad), f"session/set_title {bad}")
        if err.get("code") != -32602:
            raise Fail(f"session/set_title {bad} answered {err.get('code')}, not -32602")
    gone = await agent.request("session/set_title", {"sessionId": "no-such", "title": "x"})
    if error_of(gone, "session/set_title of an unknown session").get("code") != -32002:
        raise Fail("session/set_title of an unknown session did not answer -32002")
    return f"stored and listed as {title!r}"


def _usage_problem(usage: Any) -> str | None:
    if not isinstance(usage, dict):
        return f"usage is not an object: {usage!r}"
    total, parts = usage.get("totalTokens"), [usage.get("inputTokens"), usage.get("outputTokens")]
    parts += [usage.get(k) for k in ("thoughtTokens",) if usage.get(k) is not None]
    if not all(isinstance(n, int) and n >= 0 for n in [total, *parts]):
        return f"usage counts are not non-negative integers: {usage!r}"
    if total < sum(parts):
        return f"totalTokens {total} is less than the sum of its parts {sum(parts)}"
    return None


@check(
    "R-USAGE",
    Tier.CAPABILITY,
    "usage on the session/prompt result adds up (when the agent reports it)",
    gate=unstable,
)
async def prompt_usage(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    m = await agent.prompt(sid, simple_prompt(ctx))
    stop_reason(m)
    usage = (m.obj.get("result") or {}).get("usage")
    if usage is None:
        raise Skip("no usage on the session/prompt result")
    problem = _usage_problem(usage)
    if problem:
        raise Fail(problem)
    return f"usage {usage.get('totalTokens')} tokens"
