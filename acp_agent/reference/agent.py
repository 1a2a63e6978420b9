"""The reference agent: deterministic, no language model, every protocol feature.

:class:`ReferenceAgent` is what ``acp-agent-kit`` serves when no model is configured, and
the worked example of writing an agent with this library. It

* advertises the slash commands of :mod:`.commands` (:meth:`ReferenceAgent.commands`);
* offers two session modes, ``ask`` (the default) and ``auto``, and the same choice as
  a select config option ``mode`` of category ``mode``, which the library keeps in step
  with the session mode;
* accepts image, audio and embedded-resource prompt blocks, and says what it received;
* answers a prompt that is not a command by repeating it and pointing at ``/help``;
* reports the turn's token usage (for the unstable ``usage`` of the prompt result) as
  zero: no model ran.

Its observable behaviour is fixed by ``reference-agent.md``; change both together.
It uses only the public API of acp-agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acp_agent import __version__
from acp_agent.agent import Agent, Command, ConfigOption, Mode, PromptTurn, StopReason
from acp_agent.session import Session

from .args import parse_command
from .commands import COMMANDS, run_command

MODES: list[Mode] = [
    {"id": "ask", "name": "Ask", "description": "Ask before writing files"},
    {"id": "auto", "name": "Auto", "description": "Write files without asking"},
]

#: the usage of every turn: no model, no tokens (only sent with ``--unstable``)
NO_TOKENS: dict[str, int] = {"totalTokens": 0, "inputTokens": 0, "outputTokens": 0}

NO_MODEL_NOTE = (
    "No language model is configured, so acp-agent is running its reference agent, "
    "which understands slash commands only: type /help to list them."
)


class ReferenceAgent(Agent):
    """The deterministic agent of ``reference-agent.md``."""

    name = "acp-agent"
    title = "acp-agent (reference agent)"
    version = __version__
    prompt_capabilities = {"image": True, "audio": True, "embeddedContext": True}

    def commands(self, session: Session) -> Sequence[Command]:
        """Every command, with its input hint where it takes arguments."""
        advertised: list[Command] = []
        for name, spec in COMMANDS.items():
            command: Command = {"name": name, "description": spec.description}
            if spec.hint is not None:
                command["input"] = {"hint": spec.hint}
            advertised.append(command)
        return advertised

    def modes(self, session: Session) -> Sequence[Mode]:
        return MODES

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        """The mode again, as a select option the library keeps in step with it."""
        return [
            {
                "id": "mode",
                "name": "Mode",
                "description": "Whether /write asks for permission",
                "type": "select",
                "category": "mode",
                "default": "ask",
                "options": [{"value": m["id"], "name": m["name"]} for m in MODES],
            }
        ]

    async def prompt(self, turn: PromptTurn) -> StopReason:
        turn.usage = NO_TOKENS
        line = parse_command(turn.blocks)
        if line is not None:
            return await run_command(turn, line)
        await turn.client.message(reply_without_model(turn.text, turn.blocks))
        return "end_turn"


# ----------------------------------------------------------------------- the plain reply


def reply_without_model(text: str, blocks: Sequence[dict[str, Any]]) -> str:
    """The one message for a prompt that is not a command."""
    parts = [f"You said: {text}" if text else "You sent no text.", NO_MODEL_NOTE]
    received = [describe_block(b) for b in blocks if b.get("type") != "text"]
    if received:
        parts.append("Also received: " + "; ".join(received) + ".")
    return "\n\n".join(parts)


def describe_block(block: dict[str, Any]) -> str:
    """A short description of one non-text prompt block."""
    kind = block.get("type")
    if kind in ("image", "audio"):
        data = block.get("data")
        size = len(data) * 3 // 4 if isinstance(data, str) else 0
        return f"an {kind} ({block.get('mimeType', 'unknown type')}, about {size} bytes)"
    if kind == "resource_link":
        return f"a link to {block.get('uri', '?')}"
    if kind == "resource":
        resource = block.get("resource")
        resource = resource if isinstance(resource, dict) else {}
        uri = resource.get("uri", "?")
        if isinstance(resource.get("text"), str):
            return f"the resource {uri} ({len(resource['text'])} characters of text)"
        return f"the resource {uri} (binary)"
    return f"a {kind} block"
