"""Every conformance check; importing this package registers them in `registry.REGISTRY`."""

from . import acp125, cancel, clientcaps, modes, rpc, sessions, tools, transport, turn, unstable

__all__ = [
    "acp125",
    "cancel",
    "clientcaps",
    "modes",
    "rpc",
    "sessions",
    "tools",
    "transport",
    "turn",
    "unstable",
]
