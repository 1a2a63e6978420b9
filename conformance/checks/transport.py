"""Transport and framing (R-TRANS-*), plus the frame-level checks judged over every process."""

from __future__ import annotations

import base64
import json

from ..harness import ClientConfig
from ..registry import Ctx, Fail, Tier, aggregate, cap, check
from ._util import result_of, simple_prompt, stop_reason, texts

aggregate("R-TRANS-1", Tier.MUST, "every stdout line is UTF-8 (all processes)", ("R-TRANS-1",))
aggregate(
    "R-TRANS-2",
    Tier.MUST,
    "one JSON value per line, newline-terminated (all processes)",
    ("R-TRANS-2",),
)
aggregate(
    "R-TRANS-3",
    Tier.MUST,
    "nothing but JSON-RPC objects on stdout, incl. after stdin EOF (all processes)",
    ("R-TRANS-3",),
)
aggregate(
    "R-TRANS-8", Tier.MUST, "no JSON array (batch) ever written (all processes)", ("R-TRANS-8",)
)
aggregate(
    "R-RPC-1", Tier.MUST, 'every message carries "jsonrpc":"2.0" (all processes)', ("R-RPC-1",)
)
aggregate(
    "R-RPC-3",
    Tier.MUST,
    "every response validates (envelope + result type of its method) (all processes)",
    ("R-RPC-3",),
    ("R-RPC-3", "R-ERR-1", "R-NEW-8", "R-CFG-1", "R-RESUME-3"),
)
aggregate(
    "R-TURN-3",
    Tier.MUST,
    "every session/update validates against SessionNotification (all processes)",
    ("R-TURN-3",),
    ("R-TURN-3", "R-PLAN-3", "R-CFG-7", "R-SINFO-1", "R-USAGE-1", "R-CMD-2", "R-CONTENT-4"),
)
aggregate(
    "R-EXT-4",
    Tier.MUST,
    "agent requests/notifications: spec methods with valid params, or '_' prefix (all processes)",
    ("R-EXT-4",),
)
aggregate(
    "R-EXT-3",
    Tier.MUST,
    "no unknown keys at the root of spec types (all processes)",
    ("R-EXT-3",),
    ("R-EXT-3", "R-CAP-6", "R-EXT-7", "R-USAGE-3", "R-TOOL-10"),
)
aggregate(
    "R-RPC-12", Tier.SHOULD, "error messages are one non-empty line (all processes)", ("R-RPC-12",)
)

UNICODE = "hello é中文 😀"


@check("R-TRANS-1.echo", Tier.MUST, "non-ASCII prompt text round-trips as UTF-8")
async def unicode_roundtrip(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    echo = "echo" in ctx.profile.commands
    start = len(agent.inbox)
    m = await agent.prompt(sid, f"/echo {UNICODE}" if echo else UNICODE)
    stop_reason(m)
    if agent.violations and any(v.code == "R-TRANS-1" for v in agent.violations):
        raise Fail("a stdout line was not valid UTF-8")
    if echo:
        got = "".join(texts(agent.updates(sid, start), "agent_message_chunk"))
        if got != UNICODE:
            raise Fail(f"/echo returned {got!r}, expected {UNICODE!r}")
        return "echoed exactly"
    return "answered; every line decoded as UTF-8"


@check(
    "R-TRANS-3.eof",
    Tier.MUST,
    "stdout stays pure through a full exchange and after stdin EOF",
    reqs=("R-TRANS-3", "R-TRANS-2"),
)
async def purity_after_eof(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    await agent.prompt(sid, simple_prompt(ctx))
    await agent.close(ctx.opts.close_grace)
    bad = [
        v
        for v in agent.violations
        if v.code in ("R-TRANS-1", "R-TRANS-2", "R-TRANS-3", "R-TRANS-8")
    ]
    if bad:
        raise Fail(f"{bad[0].code}: {bad[0].detail}")
    late = [m for m in agent.inbox if m.after_eof]
    return f"{agent.raw_lines} lines, {len(late)} written after stdin EOF, all JSON-RPC"


@check("R-TRANS-5", Tier.SHOULD, "exits on its own within 2 s of stdin EOF")
async def exit_on_eof(ctx: Ctx) -> str:
    agent, _ = await ctx.session()
    ex = await agent.close(2.0)
    if ex["rung"] != "eof":
        raise Fail(f"still running 2 s after stdin EOF; needed {ex['rung']}")
    return f"exited in {ex['seconds']:.2f} s (code {ex['code']})"


@check(
    "R-TRANS-5.term",
    Tier.SHOULD,
    "exits on SIGTERM without writing garbage",
    reqs=("R-TRANS-5", "R-TRANS-3"),
)
async def exit_on_sigterm(ctx: Ctx) -> str:
    agent, _ = await ctx.session()
    ex = await agent.terminate(2.0)
    bad = [v for v in agent.violations if v.code.startswith("R-TRANS")]
    if bad:
        raise Fail(f"{bad[0].code}: {bad[0].detail}")
    if ex["rung"] != "sigterm":
        raise Fail("did not exit within 2 s of SIGTERM")
    return f"exited in {ex['seconds']:.2f} s (code {ex['code']})"


@check("R-TRANS-7.crlf", Tier.SHOULD, "tolerates \\r\\n line endings and blank lines")
async def crlf_and_blank(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    await agent.send_raw(b"\n\r\n" + json.dumps(init).encode() + b"\r\n\n")
    result_of(await agent.wait_response(1, what="initialize sent with \\r\\n"), "initialize")
    new = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/new",
        "params": {"cwd": str(agent.cwd), "mcpServers": []},
    }
    await agent.send_raw(b"   \n" + json.dumps(new).encode() + b"\r\n")
    result_of(await agent.wait_response(2, what="session/new sent with \\r\\n"), "session/new")
    return "both requests answered"


@check("R-TRANS-7.long", Tier.SHOULD, "reads a 5 MB request line and stays usable")
async def long_line(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    pad = "x" * (5 * 1024 * 1024)
    frame = {"jsonrpc": "2.0", "id": 77, "method": "_probe/long", "params": {"pad": pad}}
    await agent.send_raw(
        (json.dumps(frame) + "\n").encode(), note="_probe/long id 77 with a 5 MB pad"
    )
    m = await agent.wait_response(77, what="5 MB _probe/long")
    await agent.new_session()
    kind = f"error {m.obj['error'].get('code')}" if "error" in m.obj else "result"
    return f"answered ({kind}); session/new still works"


@check(
    "R-CONTENT-3.image",
    Tier.CAPABILITY,
    "a prompt with a 5 MB image block is answered (image advertised)",
    reqs=("R-CONTENT-3", "R-TRANS-7", "R-TURN-8"),
    gate=cap("promptCapabilities", "image"),
)
async def image_prompt(ctx: Ctx) -> str:
    agent, sid = await ctx.session()
    png = b"\x89PNG\r\n\x1a\n" + bytes(5 * 1024 * 1024)
    blocks = [
        {"type": "text", "text": "what is this"},
        {"type": "image", "mimeType": "image/png", "data": base64.b64encode(png).decode()},
    ]
    rid = await agent.send_prompt(sid, blocks)
    m = await agent.wait_response(rid, timeout=max(ctx.timeout, 30.0), what="image prompt")
    return f"stopReason {stop_reason(m)}"


@check("R-TRANS-7.huge", Tier.SHOULD, "survives a 70 MB line (records what it answered)")
async def huge_line(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    head = b'{"jsonrpc":"2.0","id":78,"method":"_probe/huge","params":{"pad":"'
    data = head + b"y" * (70 * 1024 * 1024) + b'"}}\n'
    ok = await agent.send_raw(data, note="_probe/huge id 78 with a 70 MB pad")
    if not ok:
        raise Fail("the agent stopped reading stdin during the 70 MB line")
    try:
        m = await agent.wait_response(78, what="70 MB line")
        answer = f"error {m.obj['error'].get('code')}" if "error" in m.obj else "a result"
    except Exception as e:
        answer = f"nothing ({type(e).__name__})"
    ctx.details["answer"] = answer
    try:
        await agent.new_session()
    except Exception as e:
        raise Fail(f"answered {answer}; afterwards session/new failed: {e}") from None
    return f"answered {answer}; session/new still works"


@check("R-TRANS-4", Tier.INFO, "stderr bytes written during initialize + session/new")
async def stderr_volume(ctx: Ctx) -> str:
    agent, _ = await ctx.session()
    await agent.close(ctx.opts.close_grace)
    return f"{agent.stderr_total} bytes on stderr"


@check(
    "R-TRANS-8.batch",
    Tier.MUST,
    "a received batch array gets no array back and the connection stays usable",
    reqs=("R-TRANS-8", "R-RPC-9"),
)
async def batch(ctx: Ctx) -> str:
    agent = await ctx.spawn(ClientConfig())
    await agent.initialize()
    await agent.send_raw(b'[{"jsonrpc":"2.0","id":7,"method":"_x"}]\n')
    got = await agent.collect(lambda m: True, ctx.quiet)
    if any(v.code == "R-TRANS-8" for v in agent.violations):
        raise Fail("the agent wrote a JSON array")
    try:
        await agent.new_session()
    except Exception as e:
        raise Fail(f"connection unusable after a batch: {e}") from None
    return f"{len(got)} message(s) in reply; session/new still works"


@check("R-RPC-9.bare", Tier.SHOULD, "a bare JSON value (42) does not break the connection")
async def bare_value(ctx: Ctx) -> str:
    agent = await ctx.spawn()
    await agent.initialize()
    await agent.send_raw(b"42\n")
    got = await agent.collect(lambda m: True, ctx.quiet)
    try:
        await agent.new_session()
    except Exception as e:
        raise Fail(f"connection unusable after '42': {e}") from None
    codes = [m.obj.get("error", {}).get("code") for m in got if m.kind == "response"]
    return f"replied {codes or 'nothing'}; session/new still works"
