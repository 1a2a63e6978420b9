"""``acp-agent-kit chat``'s command line: its flags, their checks, and ``main``.

It owns the parsing of chat's own arguments (the agent command after ``--``), the
one-line refusals of what cannot work (``--url`` without a scheme or without the remote
extra, ``--token-file`` without ``--url`` or readable by others, a ``--cwd`` that is
not a directory) and the wiring of a :class:`~.app.ChatApp` from them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rich.console import Console

from acp_agent._loop import Backend, run
from acp_agent.errors import AcpError
from acp_agent.transport.remote import read_token, tls_context

from .app import KEYS, LOCAL_COMMANDS, ChatApp
from .client import default_agent_command

EXIT_USAGE = 2
USAGE = (
    "acp-agent-kit [OPTIONS] chat [-h] [--auto-approve | --auto-reject] [--allow-terminals]\n"
    "                          [--cwd DIR] [--init-timeout SECONDS] [--resume ID | --load ID]\n"
    "                          [-p PROMPT [--format text|json]]\n"
    "                          [--url URL [--token-file PATH] [--ca-file PATH]]\n"
    "                          [-- AGENT_COMMAND...]"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-agent-kit chat",
        usage=USAGE,
        description="Talk to an ACP agent from the terminal. The agent command comes after "
        "`--` (default: this package's own server, given the OPTIONS before `chat`). "
        "Local commands: "
        + "; ".join(f"{k}: {v}" for k, v in LOCAL_COMMANDS.items())
        + f". {KEYS}. With a piped stdin, questions are answered by --auto-approve or "
        "rejected.",
    )
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument(
        "--auto-approve",
        action="store_true",
        help="allow every permission request and terminal command without asking",
    )
    answer.add_argument(
        "--auto-reject", action="store_true", help="reject every permission request"
    )
    parser.add_argument(
        "--allow-terminals",
        action="store_true",
        help="run the agent's terminal commands without asking",
    )
    parser.add_argument(
        "--cwd",
        default=os.getcwd(),
        help="the session's working directory; files and terminals are confined to it "
        "(default: the current directory)",
    )
    parser.add_argument(
        "--url",
        help="talk to the agent served at this URL (ws://HOST:PORT/acp, wss://, http://, "
        "https://) instead of starting one",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="with --url: send the token in this file (a bare token, or the first "
        "`<principal> <token>` line)",
    )
    session = parser.add_mutually_exclusive_group()
    session.add_argument(
        "--resume",
        metavar="ID",
        help="continue the stored session ID (session/resume: its history is not replayed)",
    )
    session.add_argument(
        "--load",
        metavar="ID",
        help="open the stored session ID and show its history (session/load)",
    )
    parser.add_argument(
        "-p",
        "--prompt",
        metavar="PROMPT",
        help="send this one prompt, print the answer and exit (0 when the turn ended "
        "normally, 1 otherwise); progress goes to stderr",
    )
    parser.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="with -p: the answer as text, or as a JSON object with the stop reason, the "
        "text and every update (default text)",
    )
    parser.add_argument(
        "--ca-file",
        metavar="PATH",
        help="with an https:// or wss:// --url: trust the server certificates this PEM "
        "file signs (default: the system's authorities)",
    )
    parser.add_argument(
        "--init-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up when the agent has not answered initialize by then (default 30)",
    )
    return parser


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(own options, agent command)`` split at the first ``--``."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


URL_SCHEMES = ("ws://", "wss://", "http://", "https://")


def remote_problem(args: argparse.Namespace, command: Sequence[str]) -> str | None:
    """What is wrong with ``--url``/``--token-file``, in one line, or None."""
    if args.token_file and not args.url:
        return "--token-file is for --url (a local agent takes no token)"
    if not args.url:
        return None
    if command:
        return "give --url or an agent command, not both"
    if not args.url.lower().startswith(URL_SCHEMES):
        return f"--url {args.url}: give a ws://, wss://, http:// or https:// URL (ws://{args.url})"
    if args.url.lower().startswith("ws"):
        try:
            import httpx_ws  # noqa: F401 - the remote extra, imported to open the WebSocket
        except ImportError:
            return "--url ws://...: needs the remote extra: pip install 'acp-agent-kit[remote]'"
    if args.token_file:
        try:
            mode = os.stat(args.token_file).st_mode
        except OSError as exc:
            return f"--token-file {args.token_file}: {exc.strerror}"
        if mode & 0o077:
            return (
                f"--token-file {args.token_file} is readable by others: "
                f"`chmod 600 {args.token_file}` (a token is a password)"
            )
    return None


def main(
    argv: Sequence[str], *, backend: Backend = "auto", agent_options: Sequence[str] = ()
) -> int:
    own, command = split_command(argv)
    args = build_parser().parse_args(own)
    if command and agent_options:
        print(
            f"acp-agent-kit chat: {' '.join(agent_options)}: options before `chat` configure "
            "the server it starts; give them to the agent command after `--`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    cwd = os.path.realpath(args.cwd)
    if not os.path.isdir(cwd):
        print(f"acp-agent-kit chat: --cwd {args.cwd!r} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    if not args.init_timeout > 0:
        print("acp-agent-kit chat: --init-timeout must be positive", file=sys.stderr)
        return EXIT_USAGE
    approve = True if args.auto_approve else False if args.auto_reject else None
    problem = remote_problem(args, command)
    if problem:
        print(f"acp-agent-kit chat: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        token = read_token(args.token_file) if args.token_file else None
        if args.ca_file is not None:
            tls_context(args.ca_file)  # a bad file shows now, as one line
    except ValueError as exc:
        print(f"acp-agent-kit chat: {exc}", file=sys.stderr)
        return EXIT_USAGE
    app = ChatApp(
        command or [*default_agent_command(), *agent_options],
        cwd,
        approve=approve,
        # -p: stdout is for the answer; what else is shown goes to stderr
        console=Console(highlight=False, soft_wrap=True, stderr=args.prompt is not None),
        allow_terminals=args.allow_terminals,
        init_timeout=args.init_timeout,
    )
    app.url, app.token, app.ca_file = args.url, token, args.ca_file
    if args.resume or args.load:
        app.open_session = ("resume", args.resume) if args.resume else ("load", args.load)
    if args.prompt is not None:
        app.one_shot, app.output_format = args.prompt, args.format
    try:
        return int(run(app.run, backend=backend))
    except AcpError as exc:
        print(f"acp-agent-kit chat: {exc}", file=sys.stderr)
        return 1
