"""Client-capability gating (R-FS-1, R-TERM-1, R-ELICIT-1): with `clientCapabilities: {}` no
fs/*, terminal/* or elicitation/create request may appear, for commands and plain language."""

from __future__ import annotations

from typing import Any

from ..harness import AgentProcess, ClientConfig
from ..registry import Ctx, Fail, Tier, check

NL_READ = "Read the file README.md in the current directory and summarize it."
NL_RUN = "Run `ls -la` in a shell and show me the output."
NL_ASK = "Before you continue, ask me which of two options I'd prefer."


async def _probe(
    ctx: Ctx, caps: dict[str, Any], prompts: list[str], prefix: str
) -> tuple[AgentProcess, list[str]]:
    agent = await ctx.spawn(ClientConfig(capabilities=caps))
    await agent.initialize()
    sid, _ = await agent.new_session()
    (agent.cwd / "README.md").write_text("# probe\n")
    for p in prompts:
        await agent.prompt(sid, p, timeout=max(ctx.timeout, 30.0))
    await agent.collect(lambda m: True, min(ctx.quiet, 0.3))
    return agent, [m.method or "" for m in agent.requests(prefix)]


@check(
    "R-FS-1",
    Tier.MUST,
    "no fs/* request without fs capabilities (/read, /write, plain language)",
    reqs=("R-FS-1", "R-CAP-5"),
)
async def no_fs(ctx: Ctx) -> str:
    _, calls = await _probe(ctx, {}, ["/read README.md", "/write x.txt y", NL_READ], "fs/")
    if calls:
        raise Fail(f"{calls[0]} sent with clientCapabilities {{}}")
    return "no fs/* request"


@check("R-FS-1.partial", Tier.MUST, "readTextFile only: no fs/write_text_file", reqs=("R-FS-1",))
async def fs_read_only(ctx: Ctx) -> str:
    caps = {"fs": {"readTextFile": True, "writeTextFile": False}}
    _, calls = await _probe(ctx, caps, ["/write x.txt y"], "fs/write")
    if calls:
        raise Fail("fs/write_text_file sent with writeTextFile false")
    return "no fs/write_text_file"


@check(
    "R-TERM-1",
    Tier.MUST,
    "no terminal/* request without the terminal capability (/run, plain language)",
    reqs=("R-TERM-1", "R-CAP-5"),
)
async def no_terminal(ctx: Ctx) -> str:
    _, calls = await _probe(ctx, {}, ["/run ls", NL_RUN], "terminal/")
    if calls:
        raise Fail(f"{calls[0]} sent with clientCapabilities {{}}")
    return "no terminal/* request"


@check(
    "R-ELICIT-1",
    Tier.MUST,
    "no elicitation/create without an advertised mode ({} and elicitation: {})",
    reqs=("R-ELICIT-1", "R-CAP-5"),
)
async def no_elicitation(ctx: Ctx) -> str:
    for caps in ({}, {"elicitation": {}}):
        _, calls = await _probe(ctx, caps, [NL_ASK], "elicitation/")
        if calls:
            raise Fail(f"elicitation/create sent with clientCapabilities {caps}")
    return "no elicitation/create"
