"""The terminal client (layer 5): ``acp-agent-kit chat`` and ``acp-agent-kit demo``.

An ACP *client* built on the project's own layers: :mod:`.connection` (a JSON-RPC
peer on :mod:`acp_agent.jsonrpc` and a subprocess transport), :mod:`.workspace`
(files and terminals served to the agent, confined to one directory),
:mod:`.client` (the client side of ACP, for any agent command), :mod:`.render`
(rich output), :mod:`.lines` (reading the person's input), :mod:`.app` (the
interactive chat), :mod:`.command` (chat's command line) and :mod:`.demo` (a
scripted, checked session).

Nothing here is imported by the server: ``acp-agent-kit`` loads it only for ``chat`` and
``demo``.
"""
