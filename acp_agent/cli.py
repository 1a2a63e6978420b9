"""``acp-agent-kit``: the command line, and the composition root of the package (layer 6).

With no subcommand it serves an agent over stdio, for an editor to launch: the
reference agent, or the language-model agent of :mod:`acp_agent.llm` when a model is
configured. Subcommands: ``chat`` (a terminal client for any ACP agent), ``demo``
(drive the server through a scripted session), ``conformance`` (the conformance
suite against any agent command), ``serve`` (remote serving), ``sessions`` (the
stored sessions) and ``login``/``logout`` (the model endpoint's API key). Global
options may come before or after the subcommand; a mistake in them is one line on
stderr and exit 2, before anything runs.

This module only wires things together. It imports what each path needs lazily, so
``acp-agent-kit`` starts fast and the serving path never imports rich.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from ._loop import BACKENDS

if TYPE_CHECKING:
    from .options import ServerOptions

EXIT_USAGE = 2

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
    if with_llm:
        from .llm import add_arguments

        add_arguments(parser)
    return parser


def _wants_llm(argv: Sequence[str]) -> bool:
    return bool(os.environ.get(ENV["model"])) or any(
        a in ("-h", "--help") or a.startswith("--model") for a in argv
    )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _check_env_choices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
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


def configure_logging(level: str, log_file: str | None) -> None:
    """Logs go to stderr (stdout is the protocol's), or to ``log_file`` (made readable by
    its owner only when it is created: logs may quote prompts)."""
    if log_file:
        from .store.files import create_private_file

        create_private_file(Path(log_file).expanduser(), parents=False)
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def check_configuration(args: argparse.Namespace) -> None:
    """Refuse, in one line, what cannot work, before anything runs; then set up logging."""
    if args.store:
        from .preflight import store_name_problem

        problem = store_name_problem(args.store)
        if problem:
            fail(f"--store {args.store}: {problem}")
    try:
        configure_logging(args.log_level, args.log_file)
    except OSError as exc:
        fail(f"--log-file {args.log_file}: {exc.strerror or exc}")
    if getattr(args, "log_content", False):
        from .jsonrpc.trace import enable_content

        enable_content()


def fail(message: str) -> NoReturn:
    print(f"{PROG}: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


# ----------------------------------------------------------------------- serving


def build_agent(args: argparse.Namespace, *, require_key: bool = True, check: bool = True) -> Any:
    """The agent to serve: the one ``--agent`` names, else the LLM agent when a model is
    configured, else the reference agent.

    The model's configuration is refused in one line when it cannot work: no API key for
    a hosted endpoint (unless ``require_key`` is False: the agent then asks its client to
    log in), and, before serving (``check``, unless ``--no-check``), an endpoint that does
    not answer or does not list the model."""
    if args.agent:
        from .adapters import LoadError, load

        try:
            return load(args.agent)
        except LoadError as exc:
            fail(str(exc))
    if args.model:
        # Hook: the language-model agent lives in acp_agent.llm (its own package).
        try:
            import acp_agent.llm as llm  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError as exc:
            if exc.name not in ("acp_agent.llm", "acp_agent"):
                raise
            fail(
                f"--model/ACP_AGENT_MODEL is set ({args.model!r}) but this installation "
                "has no language-model agent (acp_agent.llm); unset it to serve the "
                "reference agent"
            )
        try:
            config = llm.config_from_args(args, require_key=require_key)
        except llm.ConfigError as exc:
            fail(str(exc))
        agent = llm.LlmAgent(config)
        if check and not args.no_check and not agent.requires_auth():  # (no key: no check)
            problem = llm.endpoint_problem(config)
            if problem:
                fail(f"{problem} (--no-check skips this check)")
        return agent
    from .reference import ReferenceAgent

    return ReferenceAgent()


def missing_module(*names: str) -> str | None:
    """The first of ``names`` that cannot be imported, or None."""
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):  # ValueError: hidden (None in sys.modules)
            return name
    return None


def dispatcher_for(name: str) -> Any:
    """The dispatcher class for ``--dispatcher`` (None: the connection's native one)."""
    if name == "native":
        return None
    try:
        import jsonrpcserver  # noqa: F401 - an optional extra
    except ModuleNotFoundError as exc:
        if exc.name != "jsonrpcserver":
            raise
        fail(
            f"--dispatcher {name}: the jsonrpcserver package is not installed "
            "(pip install 'acp-agent-kit[jsonrpcserver]')"
        )
    from .jsonrpcserver_dispatch import JsonRpcServerDispatcher

    return JsonRpcServerDispatcher


#: the cyclic collector's youngest-generation threshold in the server process (Python's
#: default is 700): a prompt turn allocates a few hundred short-lived containers, freed by
#: reference counting, so the default runs a collection every few turns for nothing
#: (about 2% of a short turn's instructions, measured under callgrind)
GC_THRESHOLD: Final = 10_000


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The server's options, from the parsed command line."""
    from .options import ServerOptions

    return ServerOptions(
        busy_policy=args.busy_policy,
        turn_timeout=args.turn_timeout,
        dispatcher=dispatcher_for(args.dispatcher),
        unstable=args.unstable,
    )


def serve(args: argparse.Namespace) -> int:
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    if args.agent:
        return serve_spec(args)
    from .runner import run_agent

    agent = build_agent(args, require_key=False)  # without a key it offers a login
    if sys.stdin.isatty():
        from .preflight import waiting_note

        print(waiting_note(PROG), file=sys.stderr, flush=True)
    return run_agent(
        agent,
        backend=args.backend,
        prog=PROG,
        store=args.store,
        lease_timeout=args.lease_timeout,
        hint=False,  # the note above names this command
        options=server_options(args),
    )


def serve_spec(args: argparse.Namespace) -> int:
    """``--agent`` over stdio: a module that cannot be found is refused here; the rest is
    served while the module is imported (:mod:`acp_agent.adapters.loading`)."""
    from .adapters import LoadError, check_spec

    try:
        check_spec(args.agent)
    except LoadError as exc:
        fail(str(exc))
    from .adapters.loading import serve_loading

    if sys.stdin.isatty():
        from .preflight import waiting_note

        print(waiting_note(PROG), file=sys.stderr, flush=True)
    return serve_loading(
        args.agent,
        prog=PROG,
        backend=args.backend,
        store=args.store,
        lease_timeout=args.lease_timeout,
        options=server_options(args),
    )


# ----------------------------------------------------------------------- subcommands


# Options before `chat` or `demo` configure the server it starts: they are passed on to
# it (--backend also runs the chat); with an agent command after `--` they are refused.


def run_chat(args: argparse.Namespace, rest: list[str], options: list[str]) -> int:
    from .chat.command import main as chat_main

    return chat_main(rest, backend=args.backend, agent_options=options)


def run_demo(args: argparse.Namespace, rest: list[str], options: list[str]) -> int:
    from .chat.demo import main as demo_main

    return demo_main(rest, backend=args.backend, agent_options=options)


def run_conformance(rest: list[str]) -> int:
    try:
        from acp_agent_conformance.cli import main as conformance_main
    except ModuleNotFoundError as exc:
        if not str(exc.name).startswith("acp_agent_conformance"):
            raise
        fail("the conformance suite is not installed (the `acp_agent_conformance` package)")
    return int(conformance_main(rest))


def run_sessions(args: argparse.Namespace, rest: list[str]) -> int:
    from .sessions_cli import main as sessions_main

    # `sessions --agent NAME` is read by the top-level parser too: hand it on
    named = ["--agent", args.agent] if args.agent else []
    return sessions_main([*named, *rest], prog=PROG, store=args.store)


def run_serve(args: argparse.Namespace, rest: list[str]) -> int:
    if missing_module("hypercorn", "wsproto") is not None:
        fail("serve needs the remote extra: pip install 'acp-agent-kit[remote]'")
    from .remote.cli import main as serve_main

    build_agent(args)  # refused now, in one line, rather than at the first connection
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    return serve_main(
        rest,
        make_agent=lambda: build_agent(args, check=False),
        backend=args.backend,
        store=args.store,
        lease_timeout=args.lease_timeout,
        options=server_options(args),
    )


def run_login(command: str, rest: list[str]) -> int:
    from .llm.login import login, logout

    if rest:
        fail(f"{command} takes no arguments (got {' '.join(rest)})")
    return login(PROG) if command == "login" else logout(PROG)


def check_store(store: str) -> None:
    """Open the store once and close it, or say in one line why it cannot be used."""
    import anyio

    from .store import open_store
    from .store.base import StoreFailed

    async def probe() -> None:
        await (await open_store(store)).aclose()

    try:
        anyio.run(probe)
    except StoreFailed as exc:
        fail(str(exc))


def _starts_our_server(command: str | None, rest: list[str]) -> bool:
    """Whether ``chat``/``demo`` starts this package's server (no command, no --url)."""
    own = rest[: rest.index("--")] if "--" in rest else rest
    return (
        command in ("chat", "demo")
        and "--" not in rest
        and not any(a == "--url" or a.startswith("--url=") for a in own)
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    global_argv, command, rest = split_argv(argv)
    own = rest[: rest.index("--")] if "--" in rest else rest
    parser = build_parser(with_llm=_wants_llm([*global_argv, *own]))
    lifted, rest = lift_options(parser, rest)
    global_argv += lifted
    args = parser.parse_args(global_argv)
    _check_env_choices(parser, args)
    check_configuration(args)
    if command == "conformance":
        if global_argv:
            fail("options before `conformance` are not used: give them to the agent command")
        return run_conformance(rest)
    if command in ("login", "logout"):
        return run_login(command, rest)
    if _starts_our_server(command, rest) and args.store is not None:
        check_store(args.store)  # an unusable store: one line here, not from chat's child
    if _starts_our_server(command, rest) and args.model:
        build_agent(args)  # a missing key or a dead endpoint: one line here, not in chat
        if not args.no_check:
            global_argv.append("--no-check")  # checked once, here
    if command == "chat":
        return run_chat(args, rest, global_argv)
    if command == "demo":
        return run_demo(args, rest, global_argv)
    if command == "serve":
        return run_serve(args, rest)
    if command == "sessions":
        return run_sessions(args, rest)
    return serve(args)


if __name__ == "__main__":
    raise SystemExit(main())
