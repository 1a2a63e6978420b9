"""The command line's table: every global option of ``acp-agent-kit``, its environment
variable, its help, and how the arguments split around a subcommand.

It owns what a person may type and what it means (:func:`build_parser`, :data:`ENV`,
:func:`split_argv`, :func:`lift_options`, the check of values from the environment); it
does not run anything: :mod:`acp_agent.cli` does, with what this parses.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Final

from ._loop import BACKENDS

#: the command (not `acp-agent`: an unrelated project on PyPI installs a command of that name)
PROG: Final = "acp-agent-kit"

SUBCOMMANDS = ("chat", "demo", "conformance", "serve", "sessions", "login", "logout")

# flag -> environment variable; every flag has one.
ENV = {
    "log_level": "ACP_AGENT_LOG_LEVEL",
    "log_file": "ACP_AGENT_LOG_FILE",
    "log_content": "ACP_AGENT_LOG_CONTENT",
    "store": "ACP_AGENT_DB",
    "busy_policy": "ACP_AGENT_BUSY_POLICY",
    "turn_timeout": "ACP_AGENT_TURN_TIMEOUT",
    "lease_timeout": "ACP_AGENT_LEASE_TIMEOUT",
    "backend": "ACP_AGENT_BACKEND",
    "dispatcher": "ACP_AGENT_DISPATCHER",
    "model": "ACP_AGENT_MODEL",
    "unstable": "ACP_AGENT_UNSTABLE",
    "no_check": "ACP_AGENT_NO_CHECK",
    "agent": "ACP_AGENT_AGENT",
    "initialize_wait": "ACP_AGENT_INITIALIZE_WAIT",
}

DESCRIPTION = """\
Serve an ACP (Agent Client Protocol) agent over stdio: JSON-RPC 2.0, one JSON
message per line. An editor such as Zed launches this command and talks to it
on stdin/stdout. Without a language model configured it serves the reference
agent, whose slash commands (/help lists them) exercise every protocol feature.
"""

EPILOG = """\
subcommands:
  chat [--auto-approve|--auto-reject] [--resume ID|--load ID] [-p PROMPT]
       [--url URL] [-- AGENT_COMMAND...]
                        talk to an ACP agent from the terminal (default agent:
                        this server); `acp-agent-kit chat --help` for more
  demo [-- AGENT_COMMAND...]
                        run this server as a subprocess through a scripted
                        session and check every step
  conformance [OPTIONS] -- AGENT_COMMAND...
                        run the conformance suite against an agent command
  serve [--listen HOST:PORT] [--token-file PATH]
                        serve the agent over Streamable HTTP and WebSocket at
                        /acp; `acp-agent-kit serve --help` for more
  sessions [--agent NAME] list | show ID | delete ID | agents
           | prune --older-than DAYS [--dry-run | --yes]
                        see and manage the stored sessions (SQLite or
                        PostgreSQL), with their sizes
  login | logout        keep (or forget) the model endpoint's API key, readable
                        by you only, for the language-model agent

options may come before or after the subcommand (`chat --store memory`).

every flag can also be set through its environment variable (the flag wins).
logs go to stderr (stdout carries only protocol messages), or to --log-file.

exit codes:
  0  success (the server ran until its client closed stdin, or SIGTERM)
  1  a demo step or a conformance check failed
  2  usage or configuration error
"""


def _env(name: str) -> str | None:
    value = os.environ.get(ENV[name])
    return value if value else None


def build_parser(*, with_llm: bool = False) -> argparse.ArgumentParser:
    """The command line. ``with_llm`` adds the language-model agent's flags (importing
    it costs start-up time, so only when a model is asked for, or for ``--help``)."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument(
        "--log-level",
        default=_env("log_level") or "WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="how much to log (default WARNING, i.e. quiet) [env ACP_AGENT_LOG_LEVEL]",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        default=_env("log_file"),
        help="append logs to this file instead of stderr [env ACP_AGENT_LOG_FILE]",
    )
    parser.add_argument(
        "--log-content",
        action="store_true",
        default=_env("log_content") in ("1", "true", "yes"),
        help="also log what messages carry (prompts, file contents) at DEBUG; off by "
        "default, as sessions hold people's code and words [env ACP_AGENT_LOG_CONTENT]",
    )
    parser.add_argument(
        "--store",
        metavar="PATH|memory|URL",
        default=_env("store"),
        help="where sessions are kept: a SQLite file, `memory` to keep nothing, or a "
        "PostgreSQL database shared by several hosts (a libpq URL, postgresql://...) "
        "(default: sessions/AGENT.sqlite3 in the user data directory, one file per "
        "agent; see `sessions list`) [env ACP_AGENT_DB]",
    )
    parser.add_argument(
        "--busy-policy",
        default=_env("busy_policy") or "reject",
        choices=["reject", "queue"],
        help="a prompt for a session that is already busy is refused at once "
        "(reject, the default) or waits its turn (queue) [env ACP_AGENT_BUSY_POLICY]",
    )
    parser.add_argument(
        "--turn-timeout",
        metavar="SECONDS",
        default=_env("turn_timeout"),
        type=_positive_float,
        help="end any prompt turn that runs longer with an error (default: no limit) "
        "[env ACP_AGENT_TURN_TIMEOUT]",
    )
    parser.add_argument(
        "--lease-timeout",
        metavar="SECONDS",
        default=_env("lease_timeout") or 30.0,
        type=_positive_float,
        help="with a PostgreSQL store, how long a session stays this host's after it stops "
        "renewing its lease (a crash, a pause) before another host may take it over "
        "(default 30) [env ACP_AGENT_LEASE_TIMEOUT]",
    )
    parser.add_argument(
        "--backend",
        default=_env("backend") or "auto",
        choices=BACKENDS,
        help="the event loop to run on: auto (uvloop where installed, else asyncio; the "
        "default), asyncio, uvloop or trio [env ACP_AGENT_BACKEND]",
    )
    parser.add_argument(
        "--dispatcher",
        default=_env("dispatcher") or "native",
        choices=["native", "jsonrpcserver"],
        help="how requests are dispatched to handlers (default native) [env ACP_AGENT_DISPATCHER]",
    )
    parser.add_argument(
        "--unstable",
        action="store_true",
        default=_env("unstable") not in (None, "0", "false", "no"),
        help="serve and advertise ACP's unstable features: session/fork, session/set_title, "
        "usage on prompt results (default off) [env ACP_AGENT_UNSTABLE=1]",
    )
    parser.add_argument(
        "--model",
        default=_env("model"),
        help="serve the language-model agent with this model instead of the "
        "reference agent [env ACP_AGENT_MODEL]",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        default=_env("no_check") not in (None, "0", "false", "no"),
        help="do not ask the model endpoint, before serving, whether it answers and lists "
        "the model [env ACP_AGENT_NO_CHECK=1]",
    )
    parser.add_argument(
        "--agent",
        metavar="MODULE:OBJECT",
        default=_env("agent"),
        help="serve this agent: one of ours, or a pydantic-ai, LangGraph or OpenAI Agents "
        "SDK agent (see docs/adapters.md) [env ACP_AGENT_AGENT]",
    )
    parser.add_argument(
        "--initialize-wait",
        metavar="SECONDS",
        default=_env("initialize_wait") or 15.0,
        type=_seconds,
        help="with --agent over stdio: how long initialize may wait for the module's import "
        "to announce the object's own capabilities; past it, what every agent supports "
        "(default 15; 0: at once) [env ACP_AGENT_INITIALIZE_WAIT]",
    )
    if with_llm:
        from .llm import add_arguments

        add_arguments(parser)
    return parser


def wants_llm(argv: Sequence[str]) -> bool:
    return bool(os.environ.get(ENV["model"])) or any(
        a in ("-h", "--help") or a.startswith("--model") for a in argv
    )


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    return _positive_float(text, zero=True)


def _positive_float(text: str, *, zero: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value >= 0 if zero else value > 0):
        raise argparse.ArgumentTypeError(f"must be {'0 or more' if zero else 'positive'}: {text!r}")
    return value


def check_env_choices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse checks ``choices`` of typed flags only; values from the environment too."""
    for action in parser._actions:  # argparse offers no public listing
        if action.choices is None or action.dest not in ENV:
            continue
        value = getattr(args, action.dest)
        if value is not None and value not in action.choices:
            parser.error(
                f"{ENV[action.dest]}={value!r}: choose from {', '.join(map(str, action.choices))}"
            )
    for name in ("turn_timeout", "lease_timeout"):  # from the environment: still text
        raw = getattr(args, name, None)
        if isinstance(raw, str):
            try:
                setattr(args, name, _positive_float(raw))
            except argparse.ArgumentTypeError as exc:
                parser.error(f"{ENV[name]}: {exc}")


def split_argv(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """``(global options, subcommand or None, the subcommand's own arguments)``."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg in SUBCOMMANDS and (i == 0 or argv[i - 1] not in _TAKES_VALUE):
            return list(argv[:i]), arg, list(argv[i + 1 :])
    return list(argv), None, []


#: the global options that take a value (the language-model agent's come from its parser)
_TAKES_VALUE: Final = frozenset(
    {
        "--log-level",
        "--log-file",
        "--store",
        "--busy-policy",
        "--turn-timeout",
        "--lease-timeout",
        "--initialize-wait",
        "--backend",
        "--dispatcher",
        "--model",
    }
)


def lift_options(
    parser: argparse.ArgumentParser, rest: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(global options, the rest)``: the global options a person gave after the
    subcommand (before its ``--``), so that ``chat --store memory`` works too."""
    flags = {
        flag: action.nargs != 0
        for action in parser._actions  # argparse offers no public listing
        for flag in action.option_strings
        if flag not in ("-h", "--help", "--version")
    }
    lifted: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            kept += rest[i:]
            break
        name, has_value, _ = arg.partition("=")
        takes = flags.get(name)
        width = 1 if takes is None or not takes or has_value else 2
        (kept if takes is None else lifted).extend(rest[i : i + width])
        i += width
    return lifted, kept
