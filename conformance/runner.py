"""Runs the selected checks against one agent command and computes the verdict.

Owns: the discovery run (profile), concurrent scheduling (`-j`), per-check timeouts and teardown,
aggregate checks over every process of the run, the printed lines, the JSON report, the verdict.

Does not own: the checks themselves (`checks/`) or the wire (`harness.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .harness import AgentGone, AgentProcess, CallError, ClientConfig, WaitTimeout
from .registry import NO_BUSY, REGISTRY, Check, Ctx, Fail, Options, Profile, Skip, Status, Tier
from .schema import Schema


@dataclass
class Result:
    id: str
    tier: Tier
    title: str
    status: Status
    reason: str
    reqs: tuple[str, ...]
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        head = f"{self.status.value:<4}  {self.id:<22} [{self.tier.value}]"
        return f"{head}  {self.title} — {self.reason}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "tier": self.tier.value,
            "title": self.title,
            "status": self.status.value,
            "reason": self.reason,
            "requirements": list(self.reqs),
            "seconds": round(self.seconds, 3),
        }
        if self.details:
            out["details"] = self.details
        if self.processes:
            out["processes"] = self.processes
        return out


def process_record(agent: AgentProcess) -> dict[str, Any]:
    return {
        "label": agent.label,
        "argv": agent.argv,
        "started_at": agent.started_at,
        "exit": agent.exit,
        "stderr_bytes": agent.stderr_total,
        "stderr_tail": agent.stderr_tail(),
        "violations": [v.__dict__ for v in agent.violations],
        "transcript": agent.transcript,
    }


def selected(checks: list[Check], only: list[str]) -> list[Check]:
    if not only:
        return list(checks)
    pats = [p.strip().upper() for item in only for p in item.split(",") if p.strip()]

    def hit(c: Check) -> bool:
        names = [c.id.upper(), *(r.upper() for r in c.reqs)]
        return any(n == p or n.startswith((p + "-", p + ".")) for n in names for p in pats)

    return [c for c in checks if hit(c)]


class Runner:
    def __init__(self, opts: Options, jobs: int = 4) -> None:
        self.opts = opts
        self.jobs = max(1, jobs)
        self.schema = Schema(opts.schema_path)
        self.tmp = Path(tempfile.mkdtemp(prefix="acp-conformance-"))
        self.all_procs: list[tuple[str, AgentProcess]] = []
        self.profile = Profile()

    async def discover(self) -> Profile:
        """Learn the profile; an agent that advertises what only the unstable schema knows
        is learned again, and judged from then on, against that schema."""
        prof = await self._discover()
        init = prof.init
        if init is None or not self.schema.unknown_keys("InitializeResponse", init):
            return prof
        unstable = self.schema.unstable()
        if unstable is None or unstable.unknown_keys("InitializeResponse", init):
            return prof  # unknown keys either way: R-EXT-3 judges them
        self.schema = unstable
        self.all_procs = [(cid, p) for cid, p in self.all_procs if cid != "discovery"]
        self.profile = Profile(unstable=True)
        return await self._discover()

    async def _discover(self) -> Profile:
        ctx = Ctx(self.opts, self.profile, self.schema, self.tmp, "discovery")
        prof = self.profile
        try:
            agent = await ctx.spawn(ClientConfig())
            prof.init = await agent.initialize()
            sid, prof.new = await agent.new_session()
            with contextlib.suppress(WaitTimeout, AgentGone):
                await agent.wait_for(
                    lambda m: (
                        m.session_id() == sid
                        and m.update().get("sessionUpdate") == "available_commands_update"
                    ),
                    timeout=max(self.opts.quiet, 1.0),
                )
            for u in agent.updates(sid):
                if u.get("sessionUpdate") == "available_commands_update":
                    cmds = u.get("availableCommands") or []
                    prof.commands = {
                        str(c.get("name", "")).lstrip("/") for c in cmds if isinstance(c, dict)
                    }
        except (WaitTimeout, AgentGone, CallError, OSError) as e:
            prof.error = f"{type(e).__name__}: {e}"
        finally:
            for a in ctx.procs:
                await a.close(self.opts.close_grace)
                self.all_procs.append(("discovery", a))
        return prof

    async def run_check(self, c: Check, sem: asyncio.Semaphore) -> Result:
        if c.gate is not None:
            why = c.gate(self.profile)
            if why:
                return Result(c.id, c.tier, c.title, Status.SKIP, why, c.reqs)
        async with sem:
            ctx = Ctx(self.opts, self.profile, self.schema, self.tmp, c.id)
            t0 = time.monotonic()
            status, reason = Status.PASS, "ok"
            assert c.func is not None
            try:
                r = await asyncio.wait_for(c.func(ctx), max(60.0, 6 * self.opts.timeout))
                reason = r or "ok"
            except Fail as e:
                status, reason = Status.FAIL, str(e)
            except Skip as e:
                status, reason = Status.SKIP, str(e)
            except asyncio.TimeoutError:
                status, reason = Status.FAIL, "check timed out"
            except (WaitTimeout, AgentGone, CallError) as e:
                status, reason = Status.FAIL, str(e)
            except OSError as e:
                status, reason = Status.FAIL, f"{type(e).__name__}: {e}"
            finally:
                for a in ctx.procs:
                    with contextlib.suppress(Exception):
                        await a.close(self.opts.close_grace)
            if c.tier is Tier.INFO and status is not Status.SKIP:
                if status is Status.FAIL:
                    reason = f"not observed: {reason}"
                status = Status.INFO
            res = Result(
                c.id, c.tier, c.title, status, reason, c.reqs, time.monotonic() - t0, ctx.details
            )
            if status is Status.FAIL:
                res.processes = [process_record(a) for a in ctx.procs]
            for a in ctx.procs:
                self.all_procs.append((c.id, a))
            return res

    def judge_aggregate(self, c: Check) -> Result:
        hits: list[tuple[str, AgentProcess, list[Any]]] = []
        for cid, a in self.all_procs:
            vs = [v for v in a.violations if v.code in c.aggregate]
            if vs:
                hits.append((cid, a, vs))
        n = len(self.all_procs)
        if not hits:
            return Result(
                c.id, c.tier, c.title, Status.PASS, f"no violation in {n} agent processes", c.reqs
            )
        first = hits[0][2][0]
        total = sum(len(v) for _, _, v in hits)
        reason = (
            f"{total} violation(s) in {len(hits)} of {n} processes; "
            f"first ({hits[0][0]}): {first.detail}"
        )
        res = Result(c.id, c.tier, c.title, Status.FAIL, reason, c.reqs)
        res.details = {"checks_with_violations": sorted({cid for cid, _, _ in hits})}
        res.processes = [process_record(a) for _, a, _ in hits[:3]]
        return res

    async def run(self, checks: list[Check]) -> list[Result]:
        await self.discover()
        sem = asyncio.Semaphore(self.jobs)
        plain = [c for c in checks if c.func is not None]
        results = await asyncio.gather(*(self.run_check(c, sem) for c in plain))
        results += [self.judge_aggregate(c) for c in checks if c.func is None]
        order = {c.id: i for i, c in enumerate(REGISTRY)}
        results.sort(key=lambda r: order.get(r.id, 0))
        return results

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def verdict(results: list[Result], require_exercised: bool) -> tuple[bool, list[str]]:
    why: list[str] = []
    for r in results:
        if r.status is Status.FAIL and r.tier in (Tier.MUST, Tier.CAPABILITY):
            why.append(f"{r.id} failed ({r.tier.value})")
        if require_exercised and r.status is Status.SKIP and r.tier is Tier.MUST:
            why.append(f"{r.id} not exercised ({r.reason})")
    return not why, why


def summary_lines(results: list[Result], require_exercised: bool) -> list[str]:
    lines = []
    for tier in Tier:
        counts = {s: 0 for s in Status}
        for r in results:
            if r.tier is tier:
                counts[r.status] += 1
        if sum(counts.values()):
            lines.append(
                f"{tier.value:<10} " + "  ".join(f"{s.value} {n}" for s, n in counts.items() if n)
            )
    busy = [r.id for r in results if r.status is Status.SKIP and NO_BUSY in r.reason]
    if busy:
        lines.append(
            f"NOTE: {len(busy)} check(s) skipped for lack of a busy agent ({NO_BUSY}): "
            + ", ".join(busy)
            + '. Pass --cancel-prompt TEXT (e.g. "/sleep 5000") to exercise them.'
        )
    must_skips = [r.id for r in results if r.status is Status.SKIP and r.tier is Tier.MUST]
    if must_skips and not require_exercised:
        lines.append(
            f"NOTE: MUST-tier checks not exercised: {', '.join(must_skips)}"
            " (see --require-exercised)"
        )
    return lines
