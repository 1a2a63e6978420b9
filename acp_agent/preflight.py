"""What the command line says before it serves (used by :mod:`acp_agent.cli`): the note
for a person who runs the server in a terminal, where it would otherwise sit silently
waiting for JSON-RPC.

The session store is checked by opening it, before anything is served (see
:mod:`acp_agent.runner`); nothing here looks at it. It knows nothing of the protocol.
"""

from __future__ import annotations


def waiting_note(prog: str) -> str:
    """What a person sees on stderr when they start the server in a terminal."""
    return (
        f"{prog}: serving ACP over stdin/stdout and waiting for a client (an editor) to send "
        f"JSON-RPC messages, one per line.\n"
        f"{prog}: to talk to the agent yourself, run `{prog} chat`; Ctrl-D or Ctrl-C quits."
    )
