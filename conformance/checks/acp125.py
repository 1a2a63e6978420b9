"""ACP 1.25: notices (R-NOTICE), context compaction (R-COMPACT), the tool call's name
(R-TOOL-NAME), logout (R-AUTH-8) and leniency (R-INIT-LENIENT, R-AUTH-LEGACY) where it does
not cost strictness (R-INIT-STRICT).

Notices and compactions are driven through the reference agent's `/notice` and `/compact`
(gated on the agent advertising them); the rest through plain requests.
"""

from __future__ import annotations

from typing import Any

from ..harness import FULL_CAPS, AgentProcess
from ..registry import Ctx, Fail, Skip, Tier, all_of, cap, check, commands
from ._util import error_of, result_of, stop_reason

PLAIN: dict[str, Any] = {k: v for k, v in FULL_CAPS.items() if k not in ("auth", "session")}
NOTICES: dict[str, Any] = {**PLAIN, "session": {"notices": {}}}
COMPACTION: dict[str, Any] = {**PLAIN, "session": {"compaction": {}}}
COMPACTION_KINDS = ("compaction_update", "compaction_summary_chunk")


async def _turn(agent: AgentProcess, sid: str, text: str) -> list[dict[str, Any]]:
    start = len(agent.inbox)
    m = await agent.prompt(sid, text)
    stop_reason(m, f"session/prompt {text!r}")
    return agent.updates(sid, start, m.index)


async def _load(agent: AgentProcess, sid: str) -> list[dict[str, Any]]:
    start = len(agent.inbox)
    m = await agent.request(
        "session/load", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
    )
    result_of(m, "session/load")
    return agent.updates(sid, start, m.index)


def _kinds(updates: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [u for u in updates if u.get("sessionUpdate") in kinds]


# -- notices -------------------------------------------------------------------------------


@check(
    "R-NOTICE-1",
    Tier.MUST,
    "no notice update to a client without session.notices (/notice)",
    gate=commands("notice"),
)
async def notice_gated(ctx: Ctx) -> str:
    agent, sid = await ctx.session(caps=PLAIN)
    sent = _kinds(await _turn(agent, sid, "/notice warning disk almost full"), "notice")
    if sent:
        raise Fail(f"notice sent to a client that did not advertise session.notices: {sent[0]}")
    return "no notice without session.notices"


@check(
    "R-NOTICE-2",
    Tier.MUST,
    "a notice is live only: sent with session.notices, never replayed by session/load",
    gate=all_of(commands("notice"), cap("loadSession")),
)
async def notice_live_only(ctx: Ctx) -> str:
    agent, sid = await ctx.session(caps=NOTICES)
    sent = _kinds(await _turn(agent, sid, "/notice info build finished"), "notice")
    if [(u.get("severity"), u.get("title")) for u in sent] != [("info", "build finished")]:
        raise Fail(f"expected one notice (info, 'build finished'), got {sent}")
    replayed = _kinds(await _load(agent, sid), "notice")
    if replayed:
        raise Fail(f"session/load replayed a notice: {replayed[0]}")
    return "one live notice, none replayed"


# -- compaction ----------------------------------------------------------------------------


@check(
    "R-COMPACT-1",
    Tier.MUST,
    "no compaction update to a client without session.compaction (/compact)",
    gate=commands("compact"),
)
async def compaction_gated(ctx: Ctx) -> str:
    agent, sid = await ctx.session(caps=PLAIN)
    sent = _kinds(await _turn(agent, sid, "/compact 2"), *COMPACTION_KINDS)
    if sent:
        raise Fail(f"{sent[0].get('sessionUpdate')} sent without session.compaction")
    return "no compaction update without session.compaction"


def _judge_compaction(updates: list[dict[str, Any]], n: int) -> str:
    ids = {u.get("compactionId") for u in updates}
    shape = [(u.get("sessionUpdate"), u.get("status")) for u in updates]
    want = [
        ("compaction_update", "in_progress"),
        *[("compaction_summary_chunk", None)] * n,
        ("compaction_update", "completed"),
    ]
    if shape != want or len(ids) != 1:
        raise Fail(f"expected {want} under one compactionId, got {shape} ({len(ids)} ids)")
    return str(ids.pop())


@check(
    "R-COMPACT-2",
    Tier.MUST,
    "a compaction is history: replayed exactly by session/load, only to clients that may see it",
    gate=all_of(commands("compact"), cap("loadSession")),
)
async def compaction_replayed(ctx: Ctx) -> str:
    agent, sid = await ctx.session(caps=COMPACTION)
    live = _kinds(await _turn(agent, sid, "/compact 2"), *COMPACTION_KINDS)
    _judge_compaction(live, 2)
    replayed = _kinds(await _load(agent, sid), *COMPACTION_KINDS)
    if replayed != live:
        raise Fail(f"session/load replayed {replayed} for the compaction sent as {live}")
    await agent.initialize(PLAIN)  # the same connection, now without session.compaction
    hidden = _kinds(await _load(agent, sid), *COMPACTION_KINDS)
    if hidden:
        raise Fail(f"{hidden[0].get('sessionUpdate')} replayed to a client without the capability")
    return "replayed exactly, and not to a client without session.compaction"


# -- the tool call's name ------------------------------------------------------------------


@check(
    "R-TOOL-NAME",
    Tier.MUST,
    "a tool call's name, when sent, is a string kept across its updates (/tools)",
    gate=commands("tools"),
)
async def tool_name(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    calls = _kinds(await _turn(agent, sid, "/tools 2"), "tool_call", "tool_call_update")
    names: dict[str, Any] = {}
    for u in calls:
        if u.get("name") is None:
            continue
        if not isinstance(u["name"], str) or not u["name"]:
            raise Fail(f"tool call name {u['name']!r} is not a non-empty string")
        first = names.setdefault(str(u.get("toolCallId")), u["name"])
        if first != u["name"]:
            raise Fail(f"tool call {u.get('toolCallId')} renamed from {first!r} to {u['name']!r}")
    return f"{len(names)} named tool call(s)" if names else "no tool call names sent"


# -- logout --------------------------------------------------------------------------------


@check(
    "R-AUTH-8",
    Tier.CAPABILITY,
    "logout answers {} when auth.logout is advertised; new sessions then need authentication",
    gate=cap("auth", "logout"),
)
async def logout(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    init = await agent.initialize()
    result = result_of(await agent.request("logout", {}), "logout")
    if not isinstance(result, dict):
        raise Fail(f"logout result is not an object: {result!r}")
    if not init.get("authMethods"):
        return "logout answered (no authMethods: nothing to log in to again)"
    m = await agent.request("session/new", {"cwd": str(agent.cwd), "mcpServers": []})
    err = m.obj.get("error")
    if not isinstance(err, dict) or err.get("code") != -32000:
        raise Fail(f"after logout, session/new answered {m.obj.get('error') or 'a session'}")
    return "logout answered; session/new then needs authentication (-32000)"


# -- leniency ------------------------------------------------------------------------------


@check(
    "R-INIT-LENIENT",
    Tier.SHOULD,
    'a protocolVersion sent as a string ("1", a date) negotiates version 1',
)
async def version_as_string(ctx: Ctx) -> str:
    for version in ("1", "2025-06-18"):
        agent = await ctx.spawn()
        params = {"protocolVersion": version, "clientCapabilities": {}}
        m = await agent.request("initialize", params)
        if "error" in m.obj:
            raise Fail(f"initialize with protocolVersion {version!r} failed: {m.obj['error']}")
        got = (m.obj.get("result") or {}).get("protocolVersion")
        if got != 1:
            raise Fail(f"protocolVersion {version!r} negotiated {got!r}, not 1")
        sid, _ = await agent.new_session()
        if not sid:
            raise Fail("no session after a lenient initialize")
    return "strings negotiate version 1"


@check(
    "R-INIT-STRICT",
    Tier.MUST,
    "initialize without a protocolVersion, or with one of another type, is an error",
)
async def version_required(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    for params in ({"clientCapabilities": {}}, {"protocolVersion": {"v": 1}}):
        error_of(await agent.request("initialize", params), f"initialize {params}")
    return "refused"


def _terminal_methods(result: Any) -> list[Any]:
    methods = result.get("authMethods") if isinstance(result, dict) else None
    return [m for m in methods or [] if isinstance(m, dict) and m.get("type") == "terminal"]


@check(
    "R-AUTH-LEGACY",
    Tier.SHOULD,
    'clientCapabilities._meta["terminal-auth"] counts as auth.terminal',
)
async def legacy_terminal_auth(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    modern = _terminal_methods(await agent.initialize({**PLAIN, "auth": {"terminal": True}}))
    if not modern:
        raise Skip("no terminal auth method offered even with auth.terminal")
    legacy = _terminal_methods(await agent.initialize({**PLAIN, "_meta": {"terminal-auth": True}}))
    if [m.get("id") for m in legacy] != [m.get("id") for m in modern]:
        raise Fail(f"legacy terminal-auth got {legacy}, auth.terminal got {modern}")
    plain = _terminal_methods(await agent.initialize(PLAIN))
    if plain:
        raise Fail(f"terminal auth method offered to a client without the capability: {plain}")
    return "the legacy marker is honoured"
