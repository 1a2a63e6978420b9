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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .cli_args import (
    PROG,
    build_parser,
    check_env_choices,
    lift_options,
    split_argv,
    wants_llm,
)

if TYPE_CHECKING:
    from .options import ServerOptions

EXIT_USAGE = 2


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
    return done_serving(serve_spec(args) if args.agent else serve_built(args))


def done_serving(code: int) -> int:
    """``code``, once the server has shut down cleanly (turns answered, frames flushed,
    the store closed): what is left is the interpreter's teardown, whose collection of a
    framework's heap took 0.7 to 2 s from stdin's EOF to the exit (measured with each
    framework; 50 ms for the reference agent). Everything alive is moved out of the
    collector's reach (``gc.freeze``): the process ends in tens of milliseconds, and
    exit handlers still run."""
    gc.freeze()
    return code


def serve_built(args: argparse.Namespace) -> int:
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
        initialize_wait=args.initialize_wait,
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
    parser = build_parser(with_llm=wants_llm([*global_argv, *own]))
    lifted, rest = lift_options(parser, rest)
    global_argv += lifted
    args = parser.parse_args(global_argv)
    check_env_choices(parser, args)
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
