"""``acp-agent-kit serve``: the command line of the remote server.

This module owns the ``serve`` subcommand's own flags (where to listen, the token file
and every bound of :class:`~acp_agent.remote.registry.Limits`), each with an
environment variable, and turns configuration mistakes into one line on stderr and exit
code 2. The agent and the store options come from the global flags, parsed by
:mod:`acp_agent.cli`, which passes in how to make an agent.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._loop import Backend
from ..agent import Agent
from ..store import StoreFailed
from .auth import Principals, TokenFileError
from .registry import Limits

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2

DESCRIPTION = """\
Serve the agent to remote clients at http://HOST:PORT/acp: Streamable HTTP (POST,
an SSE stream, DELETE) and a WebSocket upgrade on the same path (ws://HOST:PORT/acp).
Each connection is served like a stdio client; all share the session store. Without
--token-file the server listens on loopback only and every client is one principal;
with it, each client sends `Authorization: Bearer <token>` and sees only the sessions
of its own principal. SIGTERM or SIGINT stops it gracefully (open turns answer
`cancelled`, exit 0).
"""


# The bounds of Limits, one flag each: flag, metavar, Limits field, number type, what it bounds.
_BOUNDS: tuple[tuple[str, str, str, type[int] | type[float], str], ...] = (
    ("--max-message", "BYTES", "max_message", int, "largest JSON-RPC message either way"),
    ("--max-connections", "N", "connections", int, "open connections per principal"),
    ("--max-pending", "N", "pending", int, "unanswered requests per connection"),
    (
        "--idle-timeout",
        "SECONDS",
        "idle_timeout",
        float,
        "close a connection quiet this long with nothing in flight",
    ),
)


def _env(name: str, default: Any) -> Any:
    return os.environ.get(name) or default


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    d = Limits()
    p = argparse.ArgumentParser(
        prog="acp-agent-kit serve",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=_env("ACP_AGENT_LISTEN", "127.0.0.1:8765"),
        help="where to listen (default 127.0.0.1:8765) [env ACP_AGENT_LISTEN]",
    )
    p.add_argument(
        "--token-file",
        metavar="PATH",
        default=_env("ACP_AGENT_TOKEN_FILE", None),
        help="lines of `<principal> <token>`; required to listen beyond loopback "
        "[env ACP_AGENT_TOKEN_FILE]",
    )
    for flag, metavar, field, kind, what in _BOUNDS:
        env = "ACP_AGENT_" + flag[2:].upper().replace("-", "_")
        default = getattr(d, field)
        shown = f"{default:g}" if kind is float else default
        p.add_argument(
            flag,
            metavar=metavar,
            dest=field,
            type=_positive(kind),
            default=_env(env, default),
            help=f"{what} (default {shown}) [env {env}]",
        )
    return p


def main(
    argv: Sequence[str],
    *,
    make_agent: Callable[[], Agent],
    backend: Backend = "auto",
    **server_options: Any,
) -> int:
    """Run ``acp-agent-kit serve ARGV``; ``server_options`` go to ``serve_http``."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    try:
        bounds: dict[str, Any] = {
            field: kind(getattr(args, field)) for _, _, field, kind, _ in _BOUNDS
        }
        limits = Limits(**bounds)
    except ValueError as exc:  # a value from the environment
        parser.error(str(exc))
    try:
        principals = Principals.from_file(args.token_file) if args.token_file else Principals()
        from .serve import RemoteConfigError, run_http
    except TokenFileError as exc:
        return _fail(str(exc))
    except ModuleNotFoundError as exc:
        return _fail(f"{exc.name} is missing: install the remote extra, acp-agent-kit[remote]")
    make_agent()  # a configuration mistake shows now, not at the first connection

    def ready(url: str) -> None:
        print(f"acp-agent-kit: serving {url} and {url.replace('http', 'ws', 1)}", file=sys.stderr)

    try:
        return run_http(
            make_agent,
            backend=backend,
            listen=args.listen,
            principals=principals,
            limits=limits,
            ready=ready,
            **server_options,
        )
    except RemoteConfigError as exc:
        return _fail(str(exc))
    except StoreFailed as exc:  # the store cannot be used: nothing was served
        return _fail(exc.message)


def _fail(message: str) -> int:
    print(f"acp-agent-kit serve: {message}", file=sys.stderr)
    return EXIT_USAGE
