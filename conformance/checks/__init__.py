"""Every conformance check; importing this package registers them in `registry.REGISTRY`."""

from . import cancel, clientcaps, modes, rpc, sessions, tools, transport, turn

__all__ = ["cancel", "clientcaps", "modes", "rpc", "sessions", "tools", "transport", "turn"]
