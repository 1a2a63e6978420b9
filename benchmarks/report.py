"""The benchmark's markdown report: the table of medians, the ratios, the targets, the spread.

It owns how recorded values become the report (rows, cells, ratios to `sdk`, the acp-agent
targets, the machine description) and the smoke verdict. It does not run anything: the
scenarios are in `scenarios.py`, the command line in `driver.py`.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import os
import platform
import re
import sys
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from typing import Final

from benchmarks.client import MIB, REPO_ROOT, Settings
from benchmarks.scenarios import SCENARIOS, AgentResult

PACKAGES = ["agent-client-protocol", "orjson"]


@dataclass(frozen=True)
class Row:
    scenario: str
    label: str
    key: str
    unit: str = ""
    higher_is_better: bool = False


def rows_for(settings: Settings) -> list[Row]:
    size = f"{settings.big_size // MIB} MiB"
    return [
        Row("S1", "spawn → `initialize` response, ms", "s1_ms"),
        Row("S1", "RSS after `initialize`, MB", "s1_rss"),
        Row("S2", "`/echo hi` turn, µs (median)", "s2_median"),
        Row("S2", "`/echo hi` turn, µs (p99)", "s2_p99"),
        Row("S2", "turns/s", "s2_rate", higher_is_better=True),
        Row(
            "S3",
            f"`/stream {settings.stream_count} {settings.stream_size}`: updates/s",
            "s3_rate",
            higher_is_better=True,
        ),
        Row("S3", "peak RSS (VmHWM), MB", "s3_hwm"),
        Row("S4", f"`fs/read_text_file` round trip, µs ({settings.reads} reads)", "s4_read"),
        Row("S5", f"{size} `fs/read_text_file` answer: works", "s5_read_ok"),
        Row("S5", f"{size} `fs/read_text_file` answer: turn, ms", "s5_read_ms"),
        Row("S5", f"{size} `fs/read_text_file` answer: peak RSS, MB", "s5_read_hwm"),
        Row("S5", f"{size} `fs/read_text_file` answer: RSS growth, MB", "s5_read_growth"),
        Row("S5", f"{size} `/echo` prompt: works", "s5_echo_ok"),
        Row("S5", f"{size} `/echo` prompt: turn, ms", "s5_echo_ms"),
        Row("S5", f"{size} `/echo` prompt: peak RSS, MB", "s5_echo_hwm"),
        Row("S5", f"{size} `/echo` prompt: RSS growth, MB", "s5_echo_growth"),
        Row("S6", "`session/cancel` → prompt response, ms", "s6_ms"),
        Row("S6", "stop reason", "s6_stop"),
    ]


def fmt_number(value: float) -> str:
    if value >= 10_000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(result: AgentResult, key: str) -> str:
    if not result.started:
        return "did not start"
    values = result.values.get(key, [])
    if key.endswith("_ok"):
        if not values:
            return "not run"
        good = sum(1 for v in values if v)
        return f"{'yes' if good == len(values) else 'NO'} ({good}/{len(values)})"
    if key == "s6_stop":
        if not values:
            return "failed"
        return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in Counter(values).items())
    median = result.median(key)
    return "failed" if median is None else fmt_number(median)


def ratio(result: AgentResult, sdk: AgentResult | None, key: str) -> str:
    if sdk is None or not result.started or not sdk.started:
        return "—"
    mine, theirs = result.median(key), sdk.median(key)
    if mine is None or theirs is None or theirs == 0 or key.endswith(("_ok", "_stop")):
        return "—"
    return f"{mine / theirs:.2f}x"


Verdict = tuple[str, bool | None]


class Targets:
    """The acp-agent targets, judged against the other agents' medians in this run."""

    def __init__(self, results: dict[str, AgentResult], settings: Settings) -> None:
        self.results = results
        self.settings = settings
        self.ours = results.get("acp-agent")

    def _median(self, name: str, key: str) -> float | None:
        result = self.results.get(name)
        return result.median(key) if result is not None and result.started else None

    def _relative(self, key: str, other: str, factor: float, at_most: bool) -> Verdict:
        sign = "≤" if at_most else "≥"
        text = f"{sign} {other}" if factor == 1 else f"{sign} {factor:g}x {other}"
        mine, theirs = self._median("acp-agent", key), self._median(other, key)
        if mine is None:
            return text, False
        if theirs is None:
            return f"{text} ({other} not measured)", None
        return text, mine <= factor * theirs if at_most else mine >= factor * theirs

    def _absolute(self, key: str, limit: float, text: str) -> Verdict:
        mine = self._median("acp-agent", key)
        return text, (mine is not None and mine < limit)

    def _all_true(self, key: str, text: str) -> Verdict:
        values = self.ours.values.get(key, []) if self.ours else []
        return text, bool(values) and all(values)

    def verdicts(self, key: str) -> list[Verdict]:
        if key == "s1_ms":
            return [self._relative(key, "sdk", 0.35, at_most=True)]
        if key == "s1_rss":
            return [self._absolute(key, 35.0, "< 35 MB")]
        if key == "s2_median":
            return [self._relative(key, "sdk", 0.85, at_most=True)]
        if key == "s2_p99":
            return [self._relative(key, "sdk", 1.0, at_most=True)]
        if key == "s3_rate":
            return [self._relative(key, "sdk", 3.0, at_most=False)]
        if key == "s3_hwm":
            return [self._relative(key, "sdk", 1.0, at_most=True)]
        if key == "s4_read":
            return [self._relative(key, "sdk", 0.9, at_most=True)]
        if key in ("s5_read_ok", "s5_echo_ok"):
            return [self._all_true(key, "works every time")]
        if key in ("s5_read_ms", "s5_echo_ms"):
            return [self._relative(key, "sdk", 1.0, at_most=True)]
        if key == "s6_ms":
            return [self._absolute(key, 2.0, "< 2 ms")]
        if key == "s6_stop":
            values = self.ours.values.get(key, []) if self.ours else []
            return [("`cancelled`", bool(values) and all(v == "cancelled" for v in values))]
        return []

    def cell(self, key: str) -> str:
        if self.ours is None:
            return ""
        if not self.ours.started:
            return "acp-agent did not start" if self.verdicts(key) else ""
        parts = []
        for text, met in self.verdicts(key):
            mark = "n/a" if met is None else ("met" if met else "**not met**")
            parts.append(f"{text}: {mark}")
        return "; ".join(parts)

    def summary(self) -> tuple[int, int]:
        verdicts = [v for row in rows_for(self.settings) for _, v in self.verdicts(row.key)]
        judged = [v for v in verdicts if v is not None]
        return sum(1 for v in judged if v), len(judged)


def machine_description() -> list[str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = []
    for package in dependency_names():
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return [
        f"- CPU: {cpu}, {os.cpu_count()} cores",
        f"- OS: {platform.system()} {platform.release()}",
        f"- Python: {platform.python_version()} ({sys.executable})",
        f"- Packages: {', '.join(versions)}",
    ]


def dependency_names() -> list[str]:
    """acp-agent's runtime dependencies (from its metadata or pyproject) plus the SDK."""
    requirements: list[str] = []
    try:
        requirements = [r for r in metadata.requires("acp-agent-kit") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        with contextlib.suppress(ImportError, OSError, KeyError):
            tomllib = importlib.import_module("tomllib")  # Python 3.11+
            with open(REPO_ROOT / "pyproject.toml", "rb") as pyproject:
                requirements = tomllib.load(pyproject)["project"]["dependencies"]
    names = [re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in requirements]
    return list(dict.fromkeys([*names, *PACKAGES]))


SPREAD_KEYS: Final = (
    ("S2", "`/echo hi` turn, µs (median)", "s2_median"),
    ("S3", "updates/s", "s3_rate"),
    ("S4", "`fs/read_text_file` round trip, µs", "s4_read"),
)


def spread(results: list[AgentResult], sdk: AgentResult | None) -> list[str]:
    """How much the per-round values moved: the range of each agent's values and, since
    the agents ran interleaved, the range of its round-by-round ratio to ``sdk``."""
    if not any(len(r.values.get(key, [])) > 1 for r in results for _, _, key in SPREAD_KEYS):
        return []
    lines = [
        "",
        "Spread over the rounds (lowest to highest per-round value; in brackets, the range of the "
        "round-by-round ratio to `sdk`, the agents having run back to back in each round):",
        "",
        "| scenario | metric | " + " | ".join(f"`{r.spec.name}`" for r in results) + " |",
        "|---|---|" + "---|" * len(results),
    ]
    for scenario, label, key in SPREAD_KEYS:
        cells = []
        for result in results:
            values = [v for v in result.values.get(key, []) if isinstance(v, (int, float))]
            if not values:
                cells.append("—")
                continue
            text = f"{fmt_number(min(values))} to {fmt_number(max(values))}"
            theirs = [] if sdk is None or result is sdk else sdk.values.get(key, [])
            # round by round only when both have every round (a failed round would shift them)
            if theirs and len(theirs) == len(values) and all(theirs):
                ratios = [a / b for a, b in zip(values, theirs, strict=True)]
                text += f" ({min(ratios):.2f}x to {max(ratios):.2f}x)"
            cells.append(text)
        lines.append(f"| {scenario} | {label} | " + " | ".join(cells) + " |")
    return lines


def render(
    results: list[AgentResult], settings: Settings, elapsed: float, smoke: bool, command: str
) -> str:
    by_name = {r.spec.name: r for r in results}
    sdk = by_name.get("sdk")
    others = [r for r in results if r.spec.name != "sdk"] if sdk else []
    targets = Targets(by_name, settings)
    mode = "smoke (quick settings)" if smoke else settings.mode
    lines = [
        "# acp-agent benchmarks",
        "",
        f"Generated by `{command}`; do not edit by hand. "
        "See `benchmarks/README.md` for what each scenario measures.",
        "",
        f"- Date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- Mode: **{mode}**: {settings.rounds} rounds; S1 {settings.spawns_per_round} spawns "
        f"per round; S2 {settings.echo_turns} turns (+{settings.warmup_turns} warm-up); "
        f"S3 `/stream {settings.stream_count} {settings.stream_size}`; S4 {settings.reads} "
        f"reads; S5 {settings.big_size // MIB} MiB; S6 {settings.cancels_per_round} cancels "
        f"per round, {settings.cancel_after * 1e3:.0f} ms into `/sleep 10000`",
        f"- Run time: {elapsed:.1f} s",
        *machine_description(),
        "- Agents' environment: the driver's, without PYTHONDONTWRITEBYTECODE, with a per-run "
        "PYTHONPYCACHEPREFIX filled by one unmeasured warm-up start per agent and per-run "
        "XDG_DATA_HOME, XDG_STATE_HOME, XDG_CACHE_HOME and XDG_CONFIG_HOME under /tmp",
        "",
        "Agents:",
        "",
    ]
    for result in results:
        state = "" if result.started else f" — **did not start**: {result.start_error}"
        lines.append(f"- `{result.spec.name}`: `{result.spec.command}`{state}")
    header = ["scenario", "metric", *[f"`{r.spec.name}`" for r in results]]
    header += [f"{r.spec.name}/sdk" for r in others]
    if targets.ours is not None:
        header.append("target (acp-agent)")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows_for(settings):
        label = row.label + (" ↑" if row.higher_is_better else "")
        cells = [row.scenario, label, *[cell(r, row.key) for r in results]]
        cells += [ratio(r, sdk, row.key) for r in others]
        if targets.ours is not None:
            cells.append(targets.cell(row.key))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Medians over the rounds (S1 and S6: over every sample). ↑ = higher is better, otherwise "
        "lower is better. Ratios are agent ÷ `sdk` for the same metric. MB = 10^6 bytes.",
    ]
    lines += spread(results, sdk)
    if targets.ours is not None and targets.ours.started:
        met, judged = targets.summary()
        lines += ["", f"acp-agent targets met: **{met} of {judged}**."]
    elif targets.ours is not None:
        lines += ["", "acp-agent targets: **not judged, acp-agent did not start**."]
    floor = by_name.get("floor")
    if floor and sdk and floor.median("s3_rate") and sdk.median("s3_rate"):
        headroom = (floor.median("s3_rate") or 0) / (sdk.median("s3_rate") or 1)
        lines += [
            "",
            f"Driver headroom: the floor agent streams {headroom:.1f}x as many updates/s as "
            "`sdk` through the same driver, so the driver is not what limits the other agents.",
        ]
    durable = by_name.get("floor-sqlite")
    floor_turn = floor.median("s2_median") if floor else None
    durable_turn = durable.median("s2_median") if durable else None
    if floor_turn and durable_turn:
        lines += [
            "",
            f"Durable floor: the floor agent committing each turn to SQLite before answering "
            f"(`floor-sqlite`) takes {fmt_number(durable_turn)} µs per S2 turn, "
            f"{durable_turn / floor_turn:.2f}x the floor's {fmt_number(floor_turn)} µs: what "
            "one SQLite commit per turn, before its answer, adds on this machine.",
        ]
    failures = [
        f"- `{r.spec.name}` {scenario}: {reason}"
        for r in results
        for scenario, reasons in r.failures.items()
        for reason in dict.fromkeys(reasons)
    ]
    if failures:
        lines += ["", "## Failures", "", *failures]
    return "\n".join(lines) + "\n"


def incomplete(results: list[AgentResult]) -> list[str]:
    """Smoke verdict: the scenarios that did not complete for an agent that started."""
    problems = []
    for result in results:
        if not result.started:
            continue
        for scenario in SCENARIOS:
            if result.failures.get(scenario):
                problems.append(f"{result.spec.name} {scenario}: {result.failures[scenario][0]}")
    if not any(r.started for r in results):
        problems.append("no agent started")
    return problems
