"""Command line: `python -m acp_agent_conformance [options] -- AGENT_COMMAND...`.

Owns: argument parsing, printing one line per check, the counts and the verdict, the JSON report
and the exit code (0 iff conformant). Everything else lives in `runner.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from . import checks  # noqa: F401  (registers every check)
from .registry import REGISTRY, Options
from .runner import Runner, selected, summary_lines, verdict
from .schema import Schema

USAGE = "python -m acp_agent_conformance [options] -- AGENT_COMMAND [ARGS...]"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m acp_agent_conformance",
        usage=USAGE,
        description="Black-box ACP v1 conformance suite for the agent side (stdio).",
    )
    p.add_argument("--json", metavar="REPORT.json", help="write a full JSON report here")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for each response (10)"
    )
    p.add_argument(
        "--quiet", type=float, default=0.5, help="quiet period for absence checks (0.5 s)"
    )
    p.add_argument(
        "--cancel-prompt",
        metavar="TEXT",
        help="prompt that keeps the agent busy for cancellation races, when it has no /sleep",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="ID",
        help="run only checks whose id or requirement matches (prefix, e.g. R-CANCEL); repeatable",
    )
    p.add_argument("-j", "--jobs", type=int, default=4, help="checks run concurrently (4)")
    p.add_argument(
        "--close-grace", type=float, default=2.0, help="seconds between teardown rungs (2)"
    )
    p.add_argument(
        "--require-exercised",
        action="store_true",
        help="a skipped MUST-tier check (race not exercised, no busy agent) fails the verdict",
    )
    p.add_argument(
        "--schema",
        metavar="PATH",
        help="the official ACP v1 schema.json (default: $ACP_SCHEMA_DIR/schema.json, else "
        "the copy shipped in the package)",
    )
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument(
        "--url",
        help="judge the agent served at this URL (ws://HOST:PORT/acp or http://...) instead "
        "of a command: each check reaches it through `python -m acp_agent.remote.bridge`, "
        "where end of input ends the connection",
    )
    p.add_argument("--token-file", metavar="PATH", help="with --url: the bearer token's file")
    p.add_argument("agent", nargs=argparse.REMAINDER, help="the agent command, after --")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    command = list(args.agent)
    if command and command[0] == "--":
        command = command[1:]
    if args.url:
        token = ["--token-file", args.token_file] if args.token_file else []
        command = [sys.executable, "-m", "acp_agent.remote.bridge", args.url, *token]
    checks_ = selected(REGISTRY, args.only)
    if args.list:
        for c in checks_:
            print(f"{c.id:<22} [{c.tier.value}]  {c.title}")
        print(f"{len(checks_)} checks")
        return 0
    if not command:
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    if not checks_:
        print(f"no check matches {args.only}", file=sys.stderr)
        return 2
    try:
        Schema(args.schema)
    except (OSError, ValueError, KeyError) as exc:
        reason = f"{exc.filename}: {exc.strerror}" if getattr(exc, "strerror", None) else exc
        print(f"conformance: the ACP schema cannot be read: {reason}", file=sys.stderr)
        return 2
    opts = Options(
        argv=command,
        timeout=args.timeout,
        quiet=args.quiet,
        cancel_prompt=args.cancel_prompt,
        close_grace=args.close_grace,
        schema_path=args.schema,
    )
    runner = Runner(opts, jobs=args.jobs)
    t0 = time.monotonic()
    try:
        results = asyncio.run(runner.run(checks_))
    finally:
        runner.cleanup()
    elapsed = time.monotonic() - t0
    prof = runner.profile
    if prof.error:
        print(f"WARNING: discovery (initialize + session/new) failed: {prof.error}")
    for r in results:
        print(r.line())
    print()
    for line in summary_lines(results, args.require_exercised):
        print(line)
    ok, why = verdict(results, args.require_exercised)
    print(f"{len(results)} checks in {elapsed:.1f} s")
    print("CONFORMANT" if ok else "NOT CONFORMANT")
    for w in why:
        print(f"  - {w}")
    if args.json:
        report: dict[str, Any] = {
            "agent": command,
            "seconds": round(elapsed, 3),
            "options": {k: v for k, v in vars(args).items() if k != "agent"},
            "profile": {
                "initialize": prof.init,
                "session_new": prof.new,
                "commands": sorted(prof.commands),
                "error": prof.error,
            },
            "results": [r.to_json() for r in results],
            "verdict": "CONFORMANT" if ok else "NOT CONFORMANT",
            "verdict_reasons": why,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    return 0 if ok else 1
