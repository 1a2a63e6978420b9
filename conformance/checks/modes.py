"""Session modes (R-MODE-*) and session config options (R-CFG-*)."""

from __future__ import annotations

from typing import Any

from ..registry import Ctx, Fail, Skip, Tier, check, has_config, has_modes
from ._util import error_of, result_of


def _mode_ids(modes: dict[str, Any]) -> list[str]:
    return [m.get("id") for m in modes.get("availableModes") or [] if isinstance(m, dict)]


def _values(opt: dict[str, Any]) -> list[Any]:
    vals: list[Any] = []
    for o in opt.get("options") or []:
        if not isinstance(o, dict):
            continue
        if "group" in o and isinstance(o.get("options"), list):
            vals += [x.get("value") for x in o["options"] if isinstance(x, dict)]
        else:
            vals.append(o.get("value"))
    return vals


@check(
    "R-MODE-1",
    Tier.CAPABILITY,
    "availableModes is non-empty and contains currentModeId",
    gate=has_modes,
)
async def modes_state(ctx: Ctx) -> str:
    modes = ctx.profile.modes() or {}
    ids = _mode_ids(modes)
    if not ids:
        raise Fail("availableModes is empty")
    if modes.get("currentModeId") not in ids:
        raise Fail(f"currentModeId {modes.get('currentModeId')!r} not in availableModes {ids}")
    return f"current {modes['currentModeId']!r} of {ids}"


@check(
    "R-MODE-2", Tier.CAPABILITY, "session/set_mode to an advertised mode returns {}", gate=has_modes
)
async def set_mode(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    sid, r = await agent.new_session()
    modes = r.get("modes") or {}
    ids = _mode_ids(modes)
    target = next((i for i in ids if i != modes.get("currentModeId")), modes.get("currentModeId"))
    res = result_of(
        await agent.request("session/set_mode", {"sessionId": sid, "modeId": target}),
        "session/set_mode",
    )
    if not isinstance(res, dict):
        raise Fail(f"result {res!r}")
    return f"switched to {target!r}"


@check(
    "R-MODE-2.bad",
    Tier.SHOULD,
    "session/set_mode to an unknown mode is an error",
    reqs=("R-MODE-2",),
    gate=has_modes,
)
async def set_mode_unknown(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    err = error_of(
        await agent.request("session/set_mode", {"sessionId": sid, "modeId": "tck-no-such-mode"}),
        "set_mode",
    )
    return f"error {err.get('code')}"


def _mode_option(opts: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    for o in opts or []:
        if o.get("category") == "mode" and o.get("type") == "select":
            return o
    return None


@check(
    "R-MODE-3",
    Tier.CAPABILITY,
    "current_mode_update carries currentModeId (provoked via set_config_option)",
    reqs=("R-MODE-3", "R-MODE-4"),
    gate=has_modes,
)
async def current_mode_update(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    sid, r = await agent.new_session()
    opt = _mode_option(r.get("configOptions"))
    if opt is None:
        raise Skip("no select config option of category mode to provoke a current_mode_update")
    target = next((v for v in _values(opt) if v != opt.get("currentValue")), None)
    if target is None:
        raise Skip("the mode option has a single value")
    start = len(agent.inbox)
    await agent.call(
        "session/set_config_option", {"sessionId": sid, "configId": opt.get("id"), "value": target}
    )
    await agent.collect(lambda m: True, ctx.quiet)
    ups = [u for u in agent.updates(sid, start) if u.get("sessionUpdate") == "current_mode_update"]
    if not ups:
        raise Skip("no current_mode_update was sent (modes not kept in step, R-MODE-4)")
    bad = [u for u in ups if not isinstance(u.get("currentModeId"), str)]
    if bad:
        raise Fail(f"current_mode_update without currentModeId: {bad[0]}")
    if ups[-1]["currentModeId"] != target:
        raise Fail(f"current_mode_update says {ups[-1]['currentModeId']!r}, mode set to {target!r}")
    return f"current_mode_update currentModeId={target!r}"


@check(
    "R-CFG-3",
    Tier.CAPABILITY,
    "every select option's currentValue is one of its values",
    reqs=("R-CFG-3", "R-CFG-2"),
    gate=has_config,
)
async def config_current_values(ctx: Ctx) -> str:
    bad = [
        o.get("id")
        for o in ctx.profile.config_options() or []
        if o.get("type") == "select" and o.get("currentValue") not in _values(o)
    ]
    if bad:
        raise Fail(f"currentValue not among the values for {bad}")
    return f"{len(ctx.profile.config_options() or [])} option(s) consistent"


@check(
    "R-CFG-5",
    Tier.CAPABILITY,
    "set_config_option returns the complete list with the value applied",
    gate=has_config,
)
async def set_config(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    sid, r = await agent.new_session()
    opts = [o for o in r.get("configOptions") or [] if isinstance(o, dict)]
    opt = next((o for o in opts if o.get("type") == "select" and len(_values(o)) > 1), None)
    if opt is None:
        raise Skip("no select option with two values")
    target = next(v for v in _values(opt) if v != opt.get("currentValue"))
    res = result_of(
        await agent.request(
            "session/set_config_option", {"sessionId": sid, "configId": opt["id"], "value": target}
        ),
        "session/set_config_option",
    )
    got = res.get("configOptions") if isinstance(res, dict) else None
    if not isinstance(got, list):
        raise Fail(f"result has no configOptions list: {res!r}")
    ids = {o.get("id") for o in got if isinstance(o, dict)}
    missing = {o.get("id") for o in opts} - ids
    if missing:
        raise Fail(f"result lacks options {sorted(map(str, missing))}")
    now = next(o for o in got if isinstance(o, dict) and o.get("id") == opt["id"])
    if now.get("currentValue") != target:
        raise Fail(f"{opt['id']} is {now.get('currentValue')!r} after setting {target!r}")
    return f"{opt['id']}={target!r}, {len(ids)} option(s) returned"


@check(
    "R-CFG-6",
    Tier.SHOULD,
    "set_config_option with an unknown configId is an error",
    gate=has_config,
)
async def set_config_unknown(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    m = await agent.request(
        "session/set_config_option",
        {"sessionId": sid, "configId": "tck-no-such-option", "value": "x"},
    )
    return f"error {error_of(m, 'set_config_option').get('code')}"


@check(
    "R-CFG-4",
    Tier.MUST,
    "no boolean config option without clientCapabilities.session.configOptions.boolean",
)
async def no_boolean_options(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize(caps={})
    sid, r = await agent.new_session()
    await agent.prompt(sid, "hello")
    found = [
        o.get("id")
        for o in r.get("configOptions") or []
        if isinstance(o, dict) and o.get("type") == "boolean"
    ]
    for u in agent.updates(sid):
        if u.get("sessionUpdate") == "config_option_update":
            found += [
                o.get("id")
                for o in u.get("configOptions") or []
                if isinstance(o, dict) and o.get("type") == "boolean"
            ]
    if found:
        raise Fail(f"boolean option(s) {found} offered to a client without the capability")
    return "no boolean option"
