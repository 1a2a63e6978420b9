"""``ServerOptions``: how an :class:`~acp_agent.server.AcpServer` serves, as one value.

The command line builds it once; :mod:`acp_agent.runner` and :mod:`acp_agent.remote`
pass it on whole. It owns the options' names, types and defaults. It does not know
argparse, environment variables or how a store is opened (the store and its lease
time are the runner's), nor which principal a connection serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .dispatch import Dispatcher, MethodTable

#: what a prompt meets when its session already runs one: an error, or a FIFO line
BusyPolicy = Literal["reject", "queue"]

#: the largest input line a connection reads (bytes), unless told otherwise
MAX_LINE = 64 * 1024 * 1024


@dataclass(frozen=True)
class ServerOptions:
    """The server's options; every field has the default a plain ``acp-agent-kit`` uses."""

    #: a prompt for a busy session: refused at once, or queued in arrival order
    busy_policy: BusyPolicy = "reject"
    #: seconds a prompt turn may run before it ends with an error (None: no limit)
    turn_timeout: float | None = None
    #: let the agent's file calls reach paths outside the session's roots
    allow_outside_roots: bool = False
    #: the largest input line, in bytes
    max_line: int = MAX_LINE
    #: how a request finds its handler (None: the connection's native dispatcher)
    dispatcher: Callable[[MethodTable], Dispatcher] | None = None
    #: serve and advertise the unstable methods (``session/fork``, ``session/set_title``)
    unstable: bool = False

    def __post_init__(self) -> None:
        if self.busy_policy not in ("reject", "queue"):
            raise ValueError(f"busy_policy must be 'reject' or 'queue', not {self.busy_policy!r}")
        if self.turn_timeout is not None and not self.turn_timeout > 0:
            raise ValueError("turn_timeout must be a positive number of seconds")
        if self.max_line < 1:
            raise ValueError("max_line must be at least 1")


__all__ = ["MAX_LINE", "BusyPolicy", "ServerOptions"]
