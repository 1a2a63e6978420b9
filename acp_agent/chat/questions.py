"""The questions ``acp-agent-kit chat`` asks the person: permissions and terminal commands.

Owns :class:`Questions`: the answer to the agent's ``session/request_permission`` (a menu,
or the automatic answer of ``--auto-approve`` / ``--auto-reject`` or of a piped stdin) and
whether a terminal the agent starts may run (asked only when the agent did not ask for
permission first, or ``--allow-terminals``). A permission the person allowed for a command
lets the command it runs next through without a second question.

It does not know the session loop, the connection or how updates are shown (the chat's
:class:`~acp_agent.chat.render.Renderer` is given).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from .lines import LineReader
from .render import Renderer

__all__ = ["PIPED", "Questions", "pick_option"]

PIPED = "stdin is not a terminal; --auto-approve allows"


class Questions:
    """What the chat asks the person, and what it answers for them when it may not ask."""

    def __init__(
        self,
        renderer: Renderer,
        reader: LineReader,
        cwd: str,
        *,
        approve: bool | None,
        allow_terminals: bool,
        interactive: bool,
    ) -> None:
        self.renderer = renderer
        self.reader = reader
        self.cwd = cwd
        self.approve = approve  # None: ask the person (reject when stdin is piped)
        self.allow_terminals = allow_terminals or approve is True
        self.interactive = interactive
        self.approved_runs = 0  # commands the person allowed in a permission question

    async def ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        tool = params.get("toolCall") or {}
        call_id = str(tool.get("toolCallId", ""))
        title = tool.get("title") or self.renderer.tool_titles.get(call_id, call_id)
        if self.approve is not None or not self.interactive:
            wanted = "allow" if self.approve else "reject"
            why = "automatic" if self.approve is not None else PIPED
            for option in options:
                if str(option.get("kind", "")).startswith(wanted):
                    self.renderer.info(f"permission for {title}: {option.get('name')} ({why})")
                    self._approved(tool, option)
                    return {"outcome": "selected", "optionId": option["optionId"]}
            self.renderer.info(f"permission for {title}: cancelled ({why})")
            return {"outcome": "cancelled"}
        menu = Text(f"permission needed: {title}", style="bold yellow")
        for i, option in enumerate(options, 1):
            menu.append(f"\n  {i}) {option.get('name')} [{option.get('kind')}]")
        self.renderer.line(menu)
        while True:
            answer = await self.ask(f"choose 1-{len(options)}: ")
            if answer is None:
                return {"outcome": "cancelled"}
            chosen = pick_option(options, answer)
            if chosen is not None:
                self._approved(tool, chosen)
                return {"outcome": "selected", "optionId": chosen["optionId"]}
            self.renderer.error(f"not an option: {answer!r}")

    def _approved(self, tool: dict[str, Any], option: dict[str, Any]) -> None:
        """The person allowed a tool call: a command it runs next is not asked again."""
        call_id = str(tool.get("toolCallId", ""))
        kind = tool.get("kind") or self.renderer.tool_kinds.get(call_id)
        if kind == "execute" and option.get("kind") == "allow_always":
            self.allow_terminals = True  # the agent will not ask again: neither does chat
        elif kind == "execute" and str(option.get("kind", "")).startswith("allow"):
            self.approved_runs += 1

    async def allow_terminal(self, params: dict[str, Any]) -> bool:
        args = params.get("args") if isinstance(params.get("args"), list) else []
        command = shlex.join([str(params.get("command")), *map(str, args or [])])
        where = params.get("cwd") or self.cwd
        if self.allow_terminals:
            return True
        if self.approved_runs:  # the agent asked, the person allowed: asked once only
            self.approved_runs -= 1
            return True
        if self.approve is False or not self.interactive:
            why = "--auto-reject" if self.approve is False else PIPED
            self.renderer.info(f"not running {command} ({why}; --allow-terminals allows)")
            return False
        self.renderer.line(Text(f"the agent wants to run: {command}  (in {where})", "bold yellow"))
        answer = await self.ask("run it? [y/N]: ")
        return answer is not None and answer.strip().lower() in ("y", "yes")

    async def ask(self, prompt: str) -> str | None:
        """One line from the person, typed after ``prompt``."""
        self.renderer.clear_status()
        self.renderer.prompt_open = self.interactive
        try:
            return await self.reader.readline(prompt)
        finally:
            self.renderer.prompt_open = False


def pick_option(options: Sequence[dict[str, Any]], answer: str) -> dict[str, Any] | None:
    """The option an answer names: its number, id, kind, name, or y/n."""
    answer = answer.strip().lower()
    if answer.isdigit() and 1 <= int(answer) <= len(options):
        return options[int(answer) - 1]
    for option in options:
        names = {str(option.get(k, "")).lower() for k in ("optionId", "kind", "name")}
        if answer in names:
            return option
    prefix = {"y": "allow", "yes": "allow", "n": "reject", "no": "reject"}.get(answer)
    if prefix is not None:
        for option in options:
            if str(option.get("kind", "")).startswith(prefix):
                return option
    return None
