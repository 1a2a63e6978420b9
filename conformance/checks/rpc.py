"""JSON-RPC envelope (R-RPC-*), initialization (R-INIT-*), capabilities and auth advertising."""

from __future__ import annotations

from typing import Any

from ..harness import ClientConfig
from ..registry import Ctx, Fail, Skip, Tier, cap, check, not_cap
from ._util import error_of, result_of


@check(
    "R-RPC-2",
    Tier.MUST,
    "response ids echo int and string ids exactly (re-initialize)",
    reqs=("R-RPC-2", "R-INIT-8"),
)
async def id_echo(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    params = {"protocolVersion": 1, "clientCapabilities": {}}
    for rid in (424242, "tck-string-id"):
        await agent.send_request("initialize", params, rid=rid)
        try:
            m = await agent.wait_response(rid, what=f"initialize id {rid!r}")
        except Exception:
            loose = [x.obj.get("id") for x in agent.inbox if x.kind == "response"]
            raise Fail(
                f"no response with id {rid!r} (exact type); response ids seen: {loose!r}"
            ) from None
        result_of(m, f"initialize id {rid!r}")
    return "both ids echoed with their JSON type"


@check("R-RPC-5", Tier.MUST, 'a request with "id": null is answered with "id": null')
async def null_id(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    await agent.send({"jsonrpc": "2.0", "id": None, "method": "_probe/x"})
    try:
        m = await agent.wait_for(
            lambda m: m.kind == "response" and "id" in m.obj and m.obj["id"] is None,
            what="response with id null",
        )
    except Exception as e:
        raise Fail(
            f"no response with id null ({e}); the agent treated it as a notification?"
        ) from None
    return "answered with " + ("an error" if "error" in m.obj else "a result")


@check(
    "R-RPC-4",
    Tier.MUST,
    "notifications are never answered (session/cancel idle, _probe/ping, $/cancel_request)",
    reqs=("R-RPC-4", "R-CANCEL-1", "R-CANCEL-10", "R-EXT-6"),
)
async def notifications_unanswered(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    await agent.collect(lambda m: True, min(ctx.quiet, 0.3))
    start = len(agent.inbox)
    await agent.notify("session/cancel", {"sessionId": sid})
    await agent.notify("_probe/ping", {})
    await agent.notify("$/cancel_request", {"requestId": 999})
    await agent.notify("session/cancel", {"sessionId": "tck-does-not-exist"})
    got = await agent.collect(lambda m: m.kind == "response", ctx.quiet, start=start)
    if got:
        raise Fail(f"answered a notification: {got[0].obj}")
    await agent.new_session()
    return f"nothing answered within {ctx.quiet:g} s; session/new still works"


@check("R-EXT-5", Tier.MUST, "an unknown request without params gets some response with its id")
async def unknown_request_answered(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    m = await agent.request("_tck/unknown", omit_params=True)
    return "answered with " + (
        f"error {m.obj['error'].get('code')}" if "error" in m.obj else "a result"
    )


@check("R-RPC-6", Tier.SHOULD, "an unknown method gets -32601")
async def unknown_method_code(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    m = await agent.request("_tck/does_not_exist", omit_params=True)
    err = error_of(m, "_tck/does_not_exist")
    if err.get("code") != -32601:
        raise Fail(f"code {err.get('code')}, expected -32601")
    return "-32601"


@check(
    "R-RPC-3.error",
    Tier.MUST,
    "session/new without cwd gets a well-formed error response",
    reqs=("R-RPC-3", "R-ERR-1", "R-NEW-3"),
)
async def missing_cwd_envelope(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    m = await agent.request("session/new", {"mcpServers": []})
    err = error_of(m, "session/new without cwd")
    if "result" in m.obj:
        raise Fail("response has both result and error")
    if (
        not isinstance(err.get("code"), int)
        or isinstance(err.get("code"), bool)
        or not isinstance(err.get("message"), str)
    ):
        raise Fail(f"malformed error object {err}")
    return f"error {err['code']}: {err['message']!r}"


@check("R-RPC-7", Tier.SHOULD, "session/new without cwd gets -32602")
async def missing_cwd_code(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    err = error_of(
        await agent.request("session/new", {"mcpServers": []}), "session/new without cwd"
    )
    if err.get("code") != -32602:
        raise Fail(f"code {err.get('code')}, expected -32602")
    return "-32602"


@check("R-RPC-9", Tier.SHOULD, "the connection keeps working after an erroneous request")
async def survives_errors(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    await agent.request("_tck/does_not_exist", omit_params=True)
    await agent.request("session/new", {"mcpServers": []})
    await agent.new_session()
    return "session/new works after two errors"


async def _malformed(ctx: Ctx, data: bytes, expect: int) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    start = len(agent.inbox)
    await agent.send_raw(data)
    got = await agent.collect(lambda m: m.kind == "response", ctx.quiet, start=start)
    if not got:
        seen = "silence"
    else:
        o = got[0].obj
        code = o.get("error", {}).get("code") if isinstance(o.get("error"), dict) else None
        seen = f"error {code} with id {o.get('id')!r}" + (
            "" if code == expect else f" (JSON-RPC says {expect})"
        )
    ctx.details["reply"] = seen
    try:
        await agent.new_session()
    except Exception as e:
        raise Fail(f"replied {seen}; then session/new failed: {e}") from None
    return f"replied {seen}; session/new still works"


@check(
    "R-RPC-10",
    Tier.SHOULD,
    "malformed JSON: survives (reply recorded; -32700 expected by JSON-RPC)",
)
async def malformed_json(ctx: Ctx) -> str:
    return await _malformed(ctx, b"{not valid json at all\n", -32700)


@check(
    "R-RPC-11", Tier.SHOULD, '{"foo":"bar"}: survives (reply recorded; -32600 expected by JSON-RPC)'
)
async def invalid_request(ctx: Ctx) -> str:
    return await _malformed(ctx, b'{"foo": "bar"}\n', -32600)


@check(
    "R-INIT-9",
    Tier.SHOULD,
    "a request before initialize is answered (error or result), not ignored",
)
async def before_initialize(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    m = await agent.request("session/new", {"cwd": str(agent.cwd), "mcpServers": []})
    return "answered with " + (
        f"error {m.obj['error'].get('code')}" if "error" in m.obj else "a result"
    )


# -- initialize ----------------------------------------------------------------------------------


async def _init(ctx: Ctx, version: int, **extra: Any) -> dict[str, Any]:
    agent = await ctx.spawn()
    params = {"protocolVersion": version, "clientCapabilities": {}, **extra}
    r = result_of(await agent.request("initialize", params), "initialize")
    if not isinstance(r, dict):
        raise Fail(f"initialize result is not an object: {r!r}")
    return r


@check(
    "R-INIT-1",
    Tier.MUST,
    "initialize returns protocolVersion and agentCapabilities (schema-valid)",
    reqs=("R-INIT-1", "R-CAP-3"),
)
async def init_shape(ctx: Ctx) -> str:
    r = await _init(ctx, 1)
    errs = ctx.schema.errors("InitializeResponse", r)
    if errs:
        raise Fail(errs[0])
    if not isinstance(r.get("agentCapabilities"), dict):
        raise Fail("agentCapabilities missing")
    return f"protocolVersion {r.get('protocolVersion')!r}"


@check("R-INIT-2", Tier.MUST, "protocolVersion 1 is answered with 1", reqs=("R-INIT-2", "R-INIT-4"))
async def init_v1(ctx: Ctx) -> str:
    v = (await _init(ctx, 1)).get("protocolVersion")
    if not (isinstance(v, int) and not isinstance(v, bool) and v == 1):
        raise Fail(f"answered protocolVersion {v!r}")
    return "1"


@check(
    "R-INIT-3",
    Tier.MUST,
    "protocolVersion 65535 (with a v2 'info' key) is answered with 1",
    reqs=("R-INIT-3", "R-EXT-8"),
)
async def init_v65535(ctx: Ctx) -> str:
    r = await _init(ctx, 65535, info={"name": "acp-conformance", "version": "x"})
    v = r.get("protocolVersion")
    if v != 1 or isinstance(v, bool):
        raise Fail(
            f"answered protocolVersion {v!r}"
            + (" (echoed the unsupported version)" if v == 65535 else "")
        )
    return "1"


@check(
    "R-INIT-3.v0",
    Tier.MUST,
    "protocolVersion 0 (pre-release) is answered with 1",
    reqs=("R-INIT-3", "R-INIT-4"),
)
async def init_v0(ctx: Ctx) -> str:
    v = (await _init(ctx, 0)).get("protocolVersion")
    if v != 1 or isinstance(v, bool):
        raise Fail(f"answered protocolVersion {v!r}")
    return "1"


@check("R-INIT-5", Tier.SHOULD, "agentInfo with name and version")
async def init_agent_info(ctx: Ctx) -> str:
    info = (await _init(ctx, 1)).get("agentInfo")
    if (
        not isinstance(info, dict)
        or not isinstance(info.get("name"), str)
        or not isinstance(info.get("version"), str)
    ):
        raise Fail(f"agentInfo is {info!r}")
    return f"{info['name']} {info['version']}"


@check("R-INIT-10", Tier.SHOULD, "authMethods is always sent (an array)")
async def init_auth_methods(ctx: Ctx) -> str:
    r = await _init(ctx, 1)
    if not isinstance(r.get("authMethods"), list):
        raise Fail(f"authMethods is {r.get('authMethods', '<absent>')!r}")
    return f"{len(r['authMethods'])} method(s)"


_BOOL = [
    ("loadSession",),
    ("promptCapabilities", "image"),
    ("promptCapabilities", "audio"),
    ("promptCapabilities", "embeddedContext"),
    ("mcpCapabilities", "http"),
    ("mcpCapabilities", "sse"),
]
_OBJ = [
    ("sessionCapabilities", k)
    for k in ("list", "delete", "resume", "close", "additionalDirectories")
]
_OBJ.append(("auth", "logout"))


@check(
    "R-CAP-2",
    Tier.MUST,
    "capability encodings: booleans vs {} object markers",
    reqs=("R-CAP-2", "R-CAP-7"),
)
async def cap_encodings(ctx: Ctx) -> str:
    r = await _init(ctx, 1)
    caps = r.get("agentCapabilities")
    if not isinstance(caps, dict):
        raise Fail("agentCapabilities missing")
    bad = []
    for path in _BOOL + _OBJ:
        c: Any = caps
        for p in path[:-1]:
            c = c.get(p) if isinstance(c, dict) else None
        if not isinstance(c, dict) or path[-1] not in c:
            continue
        v = c[path[-1]]
        ok = isinstance(v, bool) if path in _BOOL else (v is None or isinstance(v, dict))
        if not ok:
            bad.append(f"{'.'.join(path)}={v!r}")
    if isinstance(caps.get("sessionCapabilities"), dict) and "load" in caps["sessionCapabilities"]:
        bad.append("sessionCapabilities.load (load support is the boolean loadSession)")
    if bad:
        raise Fail("wrong encodings: " + ", ".join(bad))
    errs = ctx.schema.errors("InitializeResponse", r)
    if errs:
        raise Fail(errs[0])
    return "all present capabilities use the v1 types"


@check("R-CAP-1", Tier.INFO, "which capabilities the agent states explicitly")
async def cap_inventory(ctx: Ctx) -> str:
    caps = (await _init(ctx, 1)).get("agentCapabilities") or {}
    return "states: " + (", ".join(sorted(caps)) or "nothing")


@check("R-AUTH-2", Tier.MUST, "no terminal auth method without clientCapabilities.auth.terminal")
async def no_terminal_auth(ctx: Ctx) -> str:
    methods = (await _init(ctx, 1)).get("authMethods") or []
    bad = [m for m in methods if isinstance(m, dict) and m.get("type") == "terminal"]
    if bad:
        raise Fail(f"terminal auth method offered: {bad[0]}")
    return f"{len(methods)} method(s), none of type terminal"


@check("R-AUTH-3", Tier.SHOULD, "authMethods ids are unique")
async def auth_ids_unique(ctx: Ctx) -> str:
    agent = await ctx.spawn(ClientConfig())
    r = await agent.initialize()
    ids = [m.get("id") for m in r.get("authMethods") or [] if isinstance(m, dict)]
    if len(ids) != len(set(map(repr, ids))):
        raise Fail(f"duplicate ids {ids}")
    return f"{len(ids)} unique id(s)"


@check("R-AUTH-5", Tier.SHOULD, "with no authMethods, session/new never answers -32000")
async def no_auth_required_without_methods(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    r = await agent.initialize()
    if r.get("authMethods"):
        raise Skip("the agent advertises authMethods")
    m = await agent.request("session/new", {"cwd": str(agent.cwd), "mcpServers": []})
    if isinstance(m.obj.get("error"), dict) and m.obj["error"].get("code") == -32000:
        raise Fail("session/new answered -32000 with no way to authenticate")
    return "session/new not gated"


@check(
    "R-AUTH-9",
    Tier.SHOULD,
    "logout without the logout capability gets -32601",
    gate=not_cap("auth", "logout"),
)
async def logout_not_advertised(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    err = error_of(await agent.request("logout", {}), "logout")
    if err.get("code") != -32601:
        raise Fail(f"code {err.get('code')}, expected -32601")
    return "-32601"


@check(
    "R-INIT-6",
    Tier.MUST,
    "initialize without clientCapabilities works; no client calls follow",
    reqs=("R-INIT-6", "R-CAP-5"),
)
async def init_no_caps(ctx: Ctx) -> str:
    agent = await ctx.spawn(ClientConfig(capabilities=None))
    await agent.initialize(caps=None)
    sid, _ = await agent.new_session()
    await agent.prompt(sid, "hello")
    calls = [
        m.method
        for m in agent.inbox
        if m.kind == "request"
        and (m.method or "").split("/")[0] in ("fs", "terminal", "elicitation")
    ]
    if calls:
        raise Fail(f"called {calls[0]} without the capability")
    return "initialize, session/new and a prompt worked; no fs/terminal/elicitation call"


@check(
    "R-LOAD-1",
    Tier.SHOULD,
    "session/load without loadSession advertised gets -32601",
    gate=not_cap("loadSession"),
)
async def load_not_advertised(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    err = error_of(
        await agent.request(
            "session/load", {"sessionId": sid, "cwd": str(agent.cwd), "mcpServers": []}
        ),
        "session/load",
    )
    if err.get("code") != -32601:
        raise Fail(f"code {err.get('code')}, expected -32601")
    return "-32601"


@check(
    "R-RPC-8",
    Tier.CAPABILITY,
    "session/list with no params member returns a normal result",
    gate=cap("sessionCapabilities", "list"),
)
async def list_no_params(ctx: Ctx) -> str:
    agent, _ = await ctx.session()
    r = result_of(
        await agent.request("session/list", omit_params=True), "session/list without params"
    )
    if not isinstance(r, dict) or not isinstance(r.get("sessions"), list):
        raise Fail(f"result {r!r}")
    return f"{len(r['sessions'])} session(s)"
