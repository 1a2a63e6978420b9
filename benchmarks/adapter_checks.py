"""The defect table: one scripted check per defect issues 25 and 34 found in ACP adapters.

Each check drives one agent (a fresh session; a fresh process where the check needs its
own ``initialize``) on the fake endpoint and returns a :class:`Finding`: whether the
defect is *present*, and one line of what was seen. A check that could not run says so
(``present`` is None). It owns the checks and their order (:data:`CHECKS`); it does not
own the agents or the client (``adapter_client.py``) nor the report (``adapters.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.adapter_client import HOLD, Recorder, TurnResult, new_session, run_turn, start
from benchmarks.client import REPO_ROOT, AgentFailed, AgentSpec, Message, describe, prompt_params

TIMEOUT = 60.0
SECRET = "acp-bench-secret-" + uuid.uuid4().hex[:12]
#: the text of the fake endpoint's ``slow`` scenario, of which a cancelled turn sends a prefix
SLOW_TEXT = "Working on it... and more"
STARTUP_LIMIT = 1.0
#: seconds a cancelled turn has to answer (the model stalls, the agent must not wait on it)
CANCEL_LIMIT = 20.0


@dataclass
class Finding:
    present: bool | None
    seen: str


@dataclass
class Context:
    """What the checks of one agent share: its spec, a work directory, a running process."""

    spec: AgentSpec
    cwd: str
    home: str
    agent: Recorder | None = None
    init: Message | None = None
    start_seconds: float = 0.0
    broken: dict[str, tuple[TurnResult, TurnResult]] | None = None
    cancel_tried: bool = False
    cancelled: TurnResult | None = None

    async def running(self) -> Recorder:
        if self.agent is None or not self.agent.alive:
            self.agent, self.start_seconds, answer = await start(self.spec, TIMEOUT)
            self.init = answer.get("result") or {}
        self.agent.permission = "allow_once"
        return self.agent

    async def session(self, mcp: list[Message] | None = None) -> tuple[Recorder, str]:
        agent = await self.running()
        return agent, await new_session(agent, self.cwd, mcp)

    async def close(self) -> None:
        if self.agent is not None:
            await self.agent.close()
            self.agent = None


Check = Callable[[Context], Awaitable[Finding]]


def call_updates(turn: TurnResult) -> dict[str, list[Message]]:
    out: dict[str, list[Message]] = {}
    for update in turn.updates():
        if update.get("sessionUpdate") in ("tool_call", "tool_call_update"):
            out.setdefault(update["toolCallId"], []).append(update)
    return out


def content_text(updates: list[Message]) -> str:
    return "".join(
        str(item.get("content", {}).get("text", ""))
        for u in updates
        for item in u.get("content") or ()
        if isinstance(item, dict) and item.get("type") == "content"
    )


def last_status(updates: list[Message]) -> str | None:
    found = [u["status"] for u in updates if u.get("status")]
    return found[-1] if found else None


async def unsupported_methods(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    caps = ((ctx.init or {}).get("agentCapabilities") or {}).get("sessionCapabilities") or {}
    advertised = [name for name in ("close", "resume", "fork") if caps.get(name) is not None]
    missing = []
    for name in advertised:
        params: Message = {"sessionId": session_id}
        if name != "close":
            params.update(cwd=ctx.cwd, mcpServers=[])
        answer = await agent.call(f"session/{name}", params, TIMEOUT)
        if (answer.get("error") or {}).get("code") == -32601:
            missing.append(name)
    seen = f"advertises {advertised or 'none'}"
    return Finding(bool(missing), seen + (f"; Method not found: {missing}" if missing else ""))


async def load_unknown(ctx: Context) -> Finding:
    agent = await ctx.running()
    loads = bool(((ctx.init or {}).get("agentCapabilities") or {}).get("loadSession"))
    params = {"sessionId": "sess-" + uuid.uuid4().hex, "cwd": ctx.cwd, "mcpServers": []}
    answer = await agent.call("session/load", params, TIMEOUT)
    error = answer.get("error")
    told = f"error {error.get('message')}" if error else f"result {answer.get('result')}"
    seen = f"loadSession={loads}; {told}"
    return Finding(error is None, seen)


async def echoes_version(ctx: Context) -> Finding:
    params = {"protocolVersion": 99, "clientCapabilities": {}}
    agent, _, answer = await start(ctx.spec, TIMEOUT, params)
    await agent.close()
    version = (answer.get("result") or {}).get("protocolVersion")
    return Finding(version == 99, f"answered protocolVersion {version}")


async def forgets_turns(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    await run_turn(agent, session_id, "fake:cold", TIMEOUT)
    turn = await run_turn(agent, session_id, "fake:echo", TIMEOUT)
    said = turn.text()
    return Finding(said.count("user") < 2, f"second turn's model saw {said!r}")


async def load_forgets(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    await run_turn(agent, session_id, "fake:cold", TIMEOUT)
    await ctx.close()
    agent = await ctx.running()
    answer = await agent.call("session/load", load_params(ctx, session_id), TIMEOUT)
    if "error" in answer:
        return Finding(True, f"session/load in a new process: error {error_text(answer)}")
    said = (await run_turn(agent, session_id, "fake:echo", TIMEOUT)).text()
    return Finding(said.count("user") < 2, f"loaded; next turn's model saw {said!r}")


#: a turn killed at one of these moments: its prompt, and what is awaited before the kill
KILLS = {
    "permission pending": ("fake:call run_command command=ls", "asked"),
    "answer streaming": ("fake:slow", "first_chunk"),
}


async def killed_then_loaded(ctx: Context, text: str, moment: str) -> tuple[bool, bool, str]:
    """Kill the process at ``moment`` of a turn, load its session in a new one: whether
    the replay shows the killed prompt, whether the model's next request has it, and
    what was seen."""
    agent, session_id = await ctx.session()
    agent.permission = HOLD
    agent.asked.clear()
    agent.first_chunk.clear()
    future, _ = agent.send_request("session/prompt", prompt_params(session_id, text))
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    await asyncio.wait_for(getattr(agent, moment).wait(), TIMEOUT)
    await agent.kill()
    ctx.agent = None
    agent = await ctx.running()
    mark = len(agent.log)
    answer = await agent.call("session/load", load_params(ctx, session_id), TIMEOUT)
    if "error" in answer:
        return False, False, f"session/load: error {error_text(answer)}"
    shown = any(
        e.update.get("sessionUpdate") == "user_message_chunk"
        and text in str(e.update.get("content", {}).get("text", ""))
        for e in agent.log[mark:]
    )
    said = (await run_turn(agent, session_id, "fake:echo", TIMEOUT)).text()
    remembered = said.count("user") >= 2
    return shown, remembered, f"replay shows the prompt: {shown}, the model saw {said!r}"


async def kill_forgets(ctx: Context) -> Finding:
    """Present when the model's next request lacks the killed prompt: the replay shows it
    (the person and the model disagree) or does not (the person's prompt is lost)."""
    present, seen = False, []
    for name, (text, moment) in KILLS.items():
        _, remembered, what = await killed_then_loaded(ctx, text, moment)
        present = present or not remembered
        seen.append(f"{name}: {what}")
    return Finding(present, "; ".join(seen))


async def idle_cancel(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    agent.notify("session/cancel", {"sessionId": session_id})
    turn = await run_turn(agent, session_id, "fake:cold", TIMEOUT)
    return Finding(turn.stop_reason == "cancelled", f"next prompt: {turn.stop_reason}")


async def thoughts_dropped(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    turn = await run_turn(agent, session_id, "fake:reasoning", TIMEOUT)
    thoughts = turn.text("agent_thought_chunk")
    return Finding(not thoughts, f"thought chunks {thoughts!r}, text {turn.text()!r}")


async def output_raw_only(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    turn = await run_turn(agent, session_id, "fake:call read_file path=notes.txt", TIMEOUT)
    calls = call_updates(turn)
    if not calls:
        return Finding(None, f"no tool call streamed ({turn.stop_reason or turn.error})")
    updates = next(iter(calls.values()))
    in_content = bool(content_text(updates).strip())
    in_raw = any(u.get("rawOutput") for u in updates)
    return Finding(not in_content, f"output in content: {in_content}, in rawOutput: {in_raw}")


async def approved_turn(ctx: Context, option: str | None) -> tuple[TurnResult, Message | None]:
    agent, session_id = await ctx.session()
    agent.permission = option
    turn = await run_turn(agent, session_id, "fake:call run_command command=ls", TIMEOUT)
    request = next(
        (e.message for e in turn.events if e.message.get("method") == "session/request_permission"),
        None,
    )
    return turn, request


async def pending_after_progress(ctx: Context) -> Finding:
    turn, request = await approved_turn(ctx, "allow_once")
    if request is None:
        return Finding(None, f"no permission request ({turn.stop_reason or turn.error})")
    before: list[str] = []
    for event in turn.events:
        if event.message is request:
            break
        if event.update.get("status"):
            before.append(event.update["status"])
    asked = request["params"]["toolCall"].get("status")
    present = "in_progress" in before and asked in (None, "pending")
    return Finding(present, f"statuses before the request {before}, request shows {asked}")


async def permission_id_differs(ctx: Context) -> Finding:
    turn, request = await approved_turn(ctx, "allow_once")
    if request is None:
        return Finding(None, f"no permission request ({turn.stop_reason or turn.error})")
    asked = request["params"]["toolCall"]["toolCallId"]
    streamed = list(call_updates(turn))
    return Finding(asked not in streamed, f"request {asked}, streamed {streamed}")


async def dismiss_breaks(ctx: Context) -> Finding:
    turn, request = await approved_turn(ctx, None)
    if request is None:
        return Finding(None, f"no permission request ({turn.stop_reason or turn.error})")
    statuses = {call: last_status(u) for call, u in call_updates(turn).items()}
    error = turn.error
    stuck = [s for s in statuses.values() if s not in ("completed", "failed")]
    ended = f"error {error.get('code')}: {error.get('message')}" if error else turn.stop_reason
    return Finding(bool(error) or bool(stuck), f"turn ended {ended}; calls end {statuses}")


async def rejected_completed(ctx: Context) -> Finding:
    turn, request = await approved_turn(ctx, "reject_once")
    if request is None:
        return Finding(None, f"no permission request ({turn.stop_reason or turn.error})")
    statuses = {call: last_status(u) for call, u in call_updates(turn).items()}
    ended = turn.stop_reason or f"error {turn.error}"
    present = any(s == "completed" for s in statuses.values())
    return Finding(present, f"turn ended {ended}; calls end {statuses}")


async def cancelled_turn(ctx: Context) -> TurnResult | None:
    """A turn cancelled at its first chunk while the model stalls (run once per agent);
    None if the turn did not end within :data:`CANCEL_LIMIT` of the cancel."""
    if not ctx.cancel_tried:
        ctx.cancel_tried = True
        agent, session_id = await ctx.session()
        try:
            ctx.cancelled = await run_turn(
                agent, session_id, "fake:slow", CANCEL_LIMIT, cancel_after_chunk=True
            )
        except AgentFailed:
            await ctx.close()  # the turn still runs: a new process for the next checks
    return ctx.cancelled


async def cancel_hangs(ctx: Context) -> Finding:
    turn = await cancelled_turn(ctx)
    if turn is None:
        return Finding(True, f"no answer to the prompt within {CANCEL_LIMIT:g} s of the cancel")
    return Finding(False, f"answered {turn.stop_reason or turn.error} after the cancel")


async def cancel_injects(ctx: Context) -> Finding:
    turn = await cancelled_turn(ctx)
    if turn is None:
        return Finding(None, "the cancelled turn did not end")
    said = turn.text()
    return Finding(not SLOW_TEXT.startswith(said), f"stop {turn.stop_reason}, text sent {said!r}")


async def bare_model_error(ctx: Context) -> Finding:
    agent, session_id = await ctx.session()
    turn = await run_turn(agent, session_id, "fake:unauthorized", TIMEOUT)
    error = turn.error
    if error is None:
        return Finding(False, f"stop {turn.stop_reason}, text {turn.text()[:80]!r}")
    data = str(error.get("data") or "")[:80]
    seen = f"error {error.get('code')}: {error.get('message')!r}, data {data!r}"
    return Finding(error.get("message") == "Internal error", seen)


#: broken model answers (the fake endpoint's scenarios), each turn then one more turn
BROKEN = ("truncated", "no-finish", "empty")


async def broken_turns(ctx: Context) -> dict[str, tuple[TurnResult, TurnResult]]:
    """Each broken answer's turn and the next turn of its session (run once per agent)."""
    if ctx.broken is None:
        ctx.broken = {}
        for scenario in BROKEN:
            agent, session_id = await ctx.session()
            turn = await run_turn(agent, session_id, f"fake:{scenario} please", TIMEOUT)
            after = await run_turn(agent, session_id, "fake:echo", TIMEOUT)
            ctx.broken[scenario] = (turn, after)
    return ctx.broken


def ended(turn: TurnResult) -> str:
    if turn.error is not None:
        return f"error {turn.error.get('code')} {str(turn.error.get('message'))[:60]!r}"
    return f"{turn.stop_reason}, text {turn.text()[:40]!r}"


async def broken_is_answer(ctx: Context) -> Finding:
    turns = await broken_turns(ctx)
    answered = [name for name, (turn, _) in turns.items() if turn.error is None]
    seen = "; ".join(f"{name}: {ended(turn)}" for name, (turn, _) in turns.items())
    return Finding(bool(answered), seen)


async def broken_remembered(ctx: Context) -> Finding:
    turns = await broken_turns(ctx)
    kept = [name for name, (_, after) in turns.items() if "assistant" in after.text()]
    unread = [name for name, (_, after) in turns.items() if after.stop_reason != "end_turn"]
    seen = "; ".join(
        f"{name}: next model saw {after.text()!r}" for name, (_, after) in turns.items()
    )
    return Finding(True if kept else None if unread else False, seen)


async def secrets_on_disk(ctx: Context) -> Finding:
    await ctx.running()
    caps = ((ctx.init or {}).get("agentCapabilities") or {}).get("mcpCapabilities") or {}
    servers: list[Message] = [
        {
            "name": "calc",
            "command": sys.executable,
            "args": [str(REPO_ROOT / "tests" / "llm" / "fixtures" / "mcp_calc.py")],
            "env": [{"name": "ACP_BENCH_TOKEN", "value": SECRET}],
        }
    ]
    if caps.get("http"):
        header = {"name": "Authorization", "value": f"Bearer {SECRET}"}
        servers.append(
            {"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": [header]}
        )
    agent = await ctx.running()
    answer = await agent.call("session/new", {"cwd": ctx.cwd, "mcpServers": servers}, TIMEOUT)
    note = f"session/new with {len(servers)} MCP server(s): "
    if "error" in answer:
        note += f"error {answer['error'].get('message')}"
    else:
        turn = await run_turn(agent, answer["result"]["sessionId"], "fake:cold", TIMEOUT)
        note += f"turn {turn.stop_reason or turn.error}"
    await ctx.close()  # the agent's last writes happen before it exits
    found = [str(p) for p in files_holding(Path(ctx.home), SECRET)]
    found += [str(p) for p in files_holding(Path(ctx.cwd), SECRET)]
    return Finding(bool(found), note + (f"; found in {found[:2]}" if found else "; on disk: no"))


def load_params(ctx: Context, session_id: str) -> Message:
    return {"sessionId": session_id, "cwd": ctx.cwd, "mcpServers": []}


def error_text(answer: Message) -> str:
    error = answer.get("error") or {}
    return f"{error.get('code')} {str(error.get('message'))[:80]!r}"


def files_holding(root: Path, needle: str) -> list[Path]:
    found = []
    data = needle.encode()
    for dirpath, _, names in os.walk(root):
        if "pycache" in dirpath:
            continue
        for name in names:
            path = Path(dirpath, name)
            try:
                if data in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


async def slow_start(ctx: Context) -> Finding:
    await ctx.running()
    took = ctx.start_seconds
    return Finding(took > STARTUP_LIMIT, f"initialize answered after {took * 1000:.0f} ms")


CHECKS: list[tuple[str, Check]] = [
    ("advertises close/resume/fork, answers Method not found", unsupported_methods),
    ("`session/load` of an unknown id succeeds", load_unknown),
    ("echoes `protocolVersion` 99", echoes_version),
    ("forgets earlier turns", forgets_turns),
    ("`session/load` in a new process fails, or the model forgets", load_forgets),
    ("killed mid-turn, then loaded: the model lacks the killed prompt", kill_forgets),
    ("idle `session/cancel` cancels the next prompt", idle_cancel),
    ("thoughts dropped", thoughts_dropped),
    ("tool output only in `rawOutput`", output_raw_only),
    ("permission request shows the call `pending` after `in_progress`", pending_after_progress),
    ("permission `toolCallId` differs from the streamed call's", permission_id_differs),
    ("dismissed permission: error, or the call left unfinished", dismiss_breaks),
    ("rejected permission: the call is shown `completed`", rejected_completed),
    (f"cancel while the model stalls: no answer within {CANCEL_LIMIT:g} s", cancel_hangs),
    ("cancel injects text the agent never said", cancel_injects),
    ("model error is a bare `Internal error`", bare_model_error),
    ("a broken answer (cut, unfinished, empty) ends the turn as if whole", broken_is_answer),
    ("a broken answer is sent back to the model as its reply", broken_remembered),
    (f"start-up to `initialize` over {STARTUP_LIMIT:g} s", slow_start),
    ("MCP env/header secrets written to disk", secrets_on_disk),
]


async def run_checks(
    spec: AgentSpec, cwd: str, home: str, log: Callable[[str], None]
) -> dict[str, Finding]:
    """Every check on one agent, in order; the process is restarted after a failure."""
    ctx = Context(spec, cwd, home)
    found: dict[str, Finding] = {}
    try:
        for title, check in CHECKS:
            try:
                found[title] = await check(ctx)
            except Exception as exc:
                found[title] = Finding(None, f"could not run: {describe(exc)}")
                await ctx.close()
            log(f"  {spec.name}: {title}: {found[title].present} ({found[title].seen})")
    finally:
        await ctx.close()
    return found
