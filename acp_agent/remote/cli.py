"""``acp-agent-kit serve``: the command line of the remote server.

This module owns the ``serve`` subcommand's own flags (where to listen, TLS, the token
file and every bound of :class:`~acp_agent.remote.registry.Limits`), each with an
environment variable, and turns configuration mistakes into one line on stderr and exit
code 2. The agent and the store options come from the global flags, parsed by
:mod:`acp_agent.cli`, which passes in how to make an agent.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .._loop import Backend
from ..agent import Agent
from ..store import StoreFailed
from .auth import Principals, TokenFileError
from .registry import Limits

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2

DESCRIPTION = """\
Serve the agent to remote clients at http://HOST:PORT/acp: Streamable HTTP (POST,
an SSE stream, DELETE) and a WebSocket upgrade on the same path (ws://HOST:PORT/acp);
with --tls-cert and --tls-key, https:// (HTTP/1.1 and HTTP/2) and wss://. Each
connection is served like a stdio client; all share the session store. Without
--token-file the server listens on loopback only and every client is one principal;
with it, each client sends `Authorization: Bearer <token>` and sees only the sessions
of its own principal. Beyond loopback it also needs TLS, or --insecure-http when TLS
ends in front of it. GET /healthz says whether the session store answers. SIGTERM or
SIGINT stops it within seconds (open turns answer `cancelled`, exit 0).
"""


# The bounds of Limits, one flag each: flag, metavar, Limits field, number type, what it bounds.
_BOUNDS: tuple[tuple[str, str, str, type[int] | type[float], str], ...] = (
    ("--max-message", "BYTES", "max_message", int, "largest JSON-RPC message either way"),
    (
        "--max-connections",
        "N",
        "connections",
        int,
        "open connections (and HTTP requests held open) per principal",
    ),
    ("--max-pending", "N", "pending", int, "unanswered requests per connection"),
    (
        "--idle-timeout",
        "SECONDS",
        "idle_timeout",
        float,
        "close a connection quiet this long with nothing in flight",
    ),
    ("--body-timeout", "SECONDS", "body_timeout", float, "time a request body may take"),
    (
        "--head-timeout",
        "SECONDS",
        "head_timeout",
        float,
        "time a socket may take to send a request head (and the TLS handshake)",
    ),
    (
        "--max-idle-sockets",
        "N",
        "idle_sockets",
        int,
        "sockets carrying no request per peer address",
    ),
)


# The files `serve` reads: flag, what it holds.
_FILES: tuple[tuple[str, str], ...] = (
    (
        "--token-file",
        "lines of `<principal> <token>` or `<principal> sha256:<hex>`, readable by its owner "
        "only; required to listen beyond loopback",
    ),
    ("--tls-cert", "serve https:// and wss:// with this PEM certificate chain (with --tls-key)"),
    ("--tls-key", "the PEM private key of --tls-cert"),
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


class _Parser(argparse.ArgumentParser):
    """Says a mistake in one line (the usage is a ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    d = Limits()
    p = _Parser(
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
    for flag, what in _FILES:
        env = "ACP_AGENT_" + flag[2:].upper().replace("-", "_")
        p.add_argument(flag, metavar="PATH", default=_env(env, None), help=f"{what} [env {env}]")
    p.add_argument(
        "--insecure-http",
        action="store_true",
        default=_env("ACP_AGENT_INSECURE_HTTP", "") == "1",
        help="listen beyond loopback without TLS: TLS ends in a proxy in front of this "
        "server [env ACP_AGENT_INSECURE_HTTP=1]",
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
    if (args.tls_cert is None) != (args.tls_key is None):
        return _fail("--tls-cert and --tls-key go together: give both, or neither")
    try:
        principals = Principals.from_file(args.token_file) if args.token_file else Principals()
        from .serve import RemoteConfigError, Tls, run_http
    except TokenFileError as exc:
        return _fail(str(exc))
    except ModuleNotFoundError as exc:
        return _fail(f"{exc.name} is missing: install the remote extra, acp-agent-kit[remote]")
    make_agent()  # a configuration mistake shows now, not at the first connection

    def ready(url: str) -> None:
        print(f"acp-agent-kit: serving {url} and {url.replace('http', 'ws', 1)}", file=sys.stderr)

    tls = Tls(args.tls_cert, args.tls_key) if args.tls_cert and args.tls_key else None
    try:
        return run_http(
            make_agent,
            backend=backend,
            listen=args.listen,
            principals=principals,
            limits=limits,
            ready=ready,
            tls=tls,
            insecure_http=args.insecure_http,
            **server_options,
        )
    except RemoteConfigError as exc:
        return _fail(str(exc))
    except StoreFailed as exc:  # the store cannot be used: nothing was served
        return _fail(exc.message)


def _fail(message: str) -> int:
    print(f"acp-agent-kit serve: {message}", file=sys.stderr)
    return EXIT_USAGE
