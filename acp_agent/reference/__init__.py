"""The reference agent (layer 5): the deterministic agent of ``reference-agent.md``.

``acp-agent-kit`` serves it when no language model is configured. It is also the worked
example of an agent written with this library: :mod:`.agent` is the ``Agent``
subclass, :mod:`.commands` holds one small function per slash command and
:mod:`.args` reads a command line.

It is built only on the public API (``acp_agent.agent``, ``client``, ``session``,
``errors``) and knows nothing of the connection.
"""

from __future__ import annotations

from .agent import ReferenceAgent

__all__ = ["ReferenceAgent"]
