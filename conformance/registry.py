"""Check declarations, tiers, outcomes and the per-check context.

Owns: the `@check` decorator and the registry it fills, the tier and status vocabularies, the
agent profile learned once at start (capabilities, modes, advertised commands), and `Ctx`, which
spawns fresh agent processes for one check and remembers them for the report.

Does not own: scheduling, the verdict or printing (see `runner.py`), nor the wire (`harness.py`).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .harness import AgentProcess, ClientConfig
from .schema import Schema


class Tier(str, enum.Enum):
    MUST = "MUST"  # a failure breaks the verdict
    CAPABILITY = "CAPABILITY"  # only when advertised; then a failure breaks the verdict
    SHOULD = "SHOULD"  # reported
    INFO = "INFO"  # recorded


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    INFO = "INFO"


class Fail(Exception):
    """The check observed a violation."""


class Skip(Exception):
    """The check could not be exercised (not advertised, race not reached, no busy agent)."""


NO_BUSY = "no way to keep the agent busy"


@dataclass
class Options:
    argv: list[str]
    timeout: float = 10.0
    quiet: float = 0.5
    cancel_prompt: str | None = None
    close_grace: float = 2.0
    schema_path: str | None = None


@dataclass
class Profile:
    """What the agent said about itself in a plain initialize + session/new."""

    init: dict[str, Any] | None = None
    new: dict[str, Any] | None = None
    commands: set[str] = field(default_factory=set)
    error: str | None = None
    #: the agent advertises something only the unstable schema knows (the run then
    #: validates every frame against ``schema.unstable.json``)
    unstable: bool = False

    def caps(self) -> dict[str, Any]:
        c = (self.init or {}).get("agentCapabilities")
        return c if isinstance(c, dict) else {}

    def advertised(self, *path: str) -> bool:
        """Object markers count when present and non-null; booleans when true."""
        c: Any = self.caps()
        for p in path:
            if not isinstance(c, dict):
                return False
            c = c.get(p)
        return c is True or isinstance(c, dict)

    def modes(self) -> dict[str, Any] | None:
        m = (self.new or {}).get("modes")
        return m if isinstance(m, dict) else None

    def config_options(self) -> list[dict[str, Any]] | None:
        c = (self.new or {}).get("configOptions")
        return [o for o in c if isinstance(o, dict)] if isinstance(c, list) else None


Gate = Callable[[Profile], "str | None"]
CheckFn = Callable[["Ctx"], Awaitable["str | None"]]


@dataclass
class Check:
    id: str
    tier: Tier
    title: str
    func: CheckFn | None
    reqs: tuple[str, ...] = ()
    gate: Gate | None = None
    aggregate: tuple[str, ...] = ()  # violation codes, for checks judged over every process


REGISTRY: list[Check] = []


def check(
    cid: str, tier: Tier, title: str, *, reqs: tuple[str, ...] = (), gate: Gate | None = None
) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        if any(c.id == cid for c in REGISTRY):
            raise ValueError(f"duplicate check id {cid}")
        REGISTRY.append(Check(cid, tier, title, fn, reqs or (cid.split(".")[0],), gate))
        return fn

    return deco


def aggregate(
    cid: str, tier: Tier, title: str, codes: tuple[str, ...], reqs: tuple[str, ...] = ()
) -> None:
    REGISTRY.append(Check(cid, tier, title, None, reqs or (cid.split(".")[0],), None, codes))


# -- gates -------------------------------------------------------------------------------------


def cap(*path: str) -> Gate:
    def gate(p: Profile) -> str | None:
        return None if p.advertised(*path) else f"agentCapabilities.{'.'.join(path)} not advertised"

    return gate


def not_cap(*path: str) -> Gate:
    def gate(p: Profile) -> str | None:
        return f"agentCapabilities.{'.'.join(path)} is advertised" if p.advertised(*path) else None

    return gate


def has_modes(p: Profile) -> str | None:
    return None if p.modes() else "session/new returned no modes"


def has_config(p: Profile) -> str | None:
    return None if p.config_options() else "session/new returned no configOptions"


def commands(*names: str) -> Gate:
    def gate(p: Profile) -> str | None:
        missing = [n for n in names if n not in p.commands]
        return f"agent does not advertise /{', /'.join(missing)}" if missing else None

    return gate


def all_of(*gates: Gate) -> Gate:
    def gate(p: Profile) -> str | None:
        for g in gates:
            r = g(p)
            if r:
                return r
        return None

    return gate


# -- context -----------------------------------------------------------------------------------

_counter = itertools.count()


class Ctx:
    """What a check gets: options, the agent profile, and fresh agent processes on demand."""

    def __init__(
        self, opts: Options, profile: Profile, schema: Schema, tmp: Path, cid: str
    ) -> None:
        self.opts = opts
        self.profile = profile
        self.schema = schema
        self.tmp = tmp
        self.cid = cid
        self.procs: list[AgentProcess] = []
        self.details: dict[str, Any] = {}

    @property
    def quiet(self) -> float:
        return self.opts.quiet

    @property
    def timeout(self) -> float:
        return self.opts.timeout

    async def spawn(self, config: ClientConfig | None = None) -> AgentProcess:
        n = next(_counter)
        root = self.tmp / f"{self.cid.replace('/', '_')}-{n}"
        agent = AgentProcess(
            self.opts.argv,
            self.schema,
            root=root,
            config=config,
            timeout=self.opts.timeout,
            label=f"{self.cid}#{len(self.procs) + 1}",
        )
        self.procs.append(agent)
        await agent.start()
        return agent

    async def session(
        self, config: ClientConfig | None = None, caps: Any = "config"
    ) -> tuple[AgentProcess, str]:
        agent = await self.spawn(config)
        sid = await agent.start_session(caps)
        return agent, sid

    def busy_prompt(self) -> str:
        """A prompt that keeps the agent busy for seconds, or Skip."""
        if "sleep" in self.profile.commands:
            return "/sleep 5000"
        if self.opts.cancel_prompt:
            return self.opts.cancel_prompt
        raise Skip(NO_BUSY)
