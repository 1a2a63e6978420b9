"""acp-agent's black-box ACP v1 conformance suite for agents (stdio).

It launches an agent command as a subprocess, drives it as a strict client and judges the wire.
It imports nothing from `acp_agent`. Entry point: `acp_agent_conformance.cli.main(argv)`: the
folder `conformance/` installs as the package `acp_agent_conformance` (see setup.py).
"""
