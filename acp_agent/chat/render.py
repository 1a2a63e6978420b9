"""Showing a session in the terminal, with rich.

:class:`Renderer` turns ``session/update`` notifications into terminal output as they
arrive: message chunks are streamed as plain text, thoughts dimmed, plans as check
lists (redrawn in place on a terminal when nothing came between two plans), tool calls
with their status, diffs coloured line by line (a write over a file that exists is shown
as a replacement of what is on disk), the output of a terminal embedded in a tool call
once that call finishes, live notices by severity, and context compactions (their start,
their summary as it streams, their end). On a terminal it can show a transient status
line (a turn that runs), erased by the next output, and it ends the line of an open
input prompt before printing. It also keeps what the rest of the chat needs from the
stream: the advertised slash commands (for completion), the current mode and each tool
call's title.

It knows nothing of the connection or of reading input.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from .workspace import TerminalState

STATUS_STYLE = {
    "pending": "yellow",
    "in_progress": "cyan",
    "completed": "green",
    "failed": "red",
}
STATUS_MARK = {"pending": "○", "in_progress": "◐", "completed": "●", "failed": "✗"}
PLAN_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
NOTICE_STYLE = {"info": "cyan", "warning": "yellow", "error": "bold red"}
#: characters of a cancelled turn's stream still shown after Ctrl-C
CANCELLED_TAIL = 400
TERMINAL_PREFIX = "  │ "


def indented(text: str, prefix: str = "  ") -> str:
    """``text`` with every line indented, not only its first."""
    return "\n".join(prefix + line for line in text.split("\n"))


class Renderer:
    """Prints one session's updates; remembers what the chat needs from them."""

    def __init__(
        self,
        console: Console,
        terminal_lookup: Callable[[str], TerminalState | None] = lambda _: None,
        file_text: Callable[[str], str | None] = lambda _: None,
    ) -> None:
        self.console = console
        self.terminal_lookup = terminal_lookup
        self.file_text = file_text  # what a path holds now, for a diff without oldText
        self.prompt_open = False  # an input prompt is on the screen, its line not ended
        self._status = False  # a status line is on the screen
        self._plan_lines = 0  # the last output was a plan of this many lines
        self.commands: dict[str, dict[str, Any]] = {}
        self.mode: str | None = None
        self.tool_titles: dict[str, str] = {}
        self.tool_kinds: dict[str, str] = {}
        self.config_options: dict[str, dict[str, Any]] = {}
        self._tool_terminals: dict[str, list[str]] = {}
        self._live_terminals: set[str] = set()  # terminals whose output was shown live
        self._streaming: str | None = None  # the chunk kind whose line is still open
        #: -p: the agent's message text goes here, raw, instead of the console
        self.answer: Callable[[str], None] | None = None
        #: after Ctrl-C, characters of the cancelled stream still shown (None: all)
        self.tail: int | None = None

    # -- plumbing ------------------------------------------------------------------

    def _clear(self) -> None:
        """Make room for output: erase the status line, end an open prompt's line."""
        self._plan_lines = 0
        if self._status:
            self._status = False
            self.console.file.write("\r\x1b[K")
        if self.prompt_open:
            self.prompt_open = False
            self.console.out("")

    def end_line(self) -> None:
        """Close a streamed line before printing anything else."""
        self._clear()
        if self._streaming is not None:
            self.console.out("")
            self._streaming = None

    def line(self, text: RenderableType, style: str | None = None) -> None:
        self.end_line()
        self.console.print(text, style=style, highlight=False)

    def status(self, text: str) -> None:
        """A transient line (terminals only), kept until the next output; not shown
        while a streamed line or a prompt is open."""
        if not self.console.is_terminal or self._streaming is not None or self.prompt_open:
            return
        self.console.file.write("\r\x1b[K" + text)
        self.console.file.flush()
        self._status = True

    def clear_status(self) -> None:
        if self._status:
            self._status = False
            self.console.file.write("\r\x1b[K")
            self.console.file.flush()

    def info(self, text: str) -> None:
        self.line(Text(text, style="dim"))

    def error(self, text: str) -> None:
        self.line(Text(text, style="bold red"))

    def notice(self, method: str, params: dict[str, Any]) -> None:
        """A request the client served for the agent."""
        if method == "fs/read_text_file":
            self.info(f"  (read {params.get('path')})")
        elif method == "fs/write_text_file":
            self.info(
                f"  (wrote {len(str(params.get('content', '')))} chars to {params.get('path')})"
            )
        elif method == "terminal/create":
            command = " ".join([str(params.get("command")), *map(str, params.get("args") or [])])
            self.info(f"  (started a terminal: {command})")

    # -- updates ---------------------------------------------------------------------

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(update)

    def cancelling(self) -> None:
        """The person cancelled the turn: show only a short tail of what still streams."""
        self.tail = CANCELLED_TAIL

    def _stream(self, kind: str, text: str, style: str | None, prefix: str = "") -> None:
        if self.tail is not None:
            if self.tail <= 0:
                return
            text = text[: self.tail]
            self.tail -= len(text)
            if self.tail <= 0:
                text += " …(the rest of the cancelled turn is not shown)\n"
        self._clear()
        if self._streaming != kind:
            self.end_line()
            if prefix:
                self.console.out(prefix, end="", style=style, highlight=False)
        self.console.out(text, end="", style=style, highlight=False)
        self._streaming = kind
        if text.endswith("\n"):
            self._streaming = None

    @staticmethod
    def _content_text(update: dict[str, Any]) -> str:
        content = update.get("content")
        if not isinstance(content, dict):
            return ""
        if content.get("type") == "text":
            return str(content.get("text", ""))
        return f"[{content.get('type')}]"

    def _on_agent_message_chunk(self, update: dict[str, Any]) -> None:
        if self.answer is not None:
            self.answer(self._content_text(update))
            return
        self._stream("message", self._content_text(update), None)

    def _on_agent_thought_chunk(self, update: dict[str, Any]) -> None:
        self._stream("thought", self._content_text(update), "dim italic", "thinking: ")

    def _on_user_message_chunk(self, update: dict[str, Any]) -> None:
        self._stream("user", self._content_text(update), "bold", "> ")

    def _on_plan(self, update: dict[str, Any]) -> None:
        entries = update.get("entries") or []
        text = Text("plan", style="bold magenta")
        for entry in entries:
            status = str(entry.get("status", "pending"))
            text.append(f"\n  {PLAN_MARK.get(status, '[?]')} {entry.get('content', '')}")
        redraw = self._plan_lines if self.console.is_terminal else 0
        self.end_line()
        if redraw:  # the previous plan is the last thing on the screen: draw over it
            self.console.file.write(f"\x1b[{redraw}F\x1b[J")
        self.line(text)
        self._plan_lines = len(self.console.render_lines(text, pad=False))

    def _on_available_commands_update(self, update: dict[str, Any]) -> None:
        commands = update.get("availableCommands") or []
        self.commands = {str(c.get("name")): c for c in commands if isinstance(c, dict)}
        names = " ".join(f"/{name}" for name in self.commands)
        self.info(f"commands: {names}" if names else "no commands")

    def _on_current_mode_update(self, update: dict[str, Any]) -> None:
        self.mode = str(update.get("currentModeId"))
        self.info(f"mode: {self.mode}")

    def config(self, options: Any) -> None:
        """Keep the session's config options (from a session response or an update)."""
        for option in options or []:
            if isinstance(option, dict) and option.get("id") is not None:
                self.config_options[str(option["id"])] = option
                if option.get("category") == "mode":
                    self.mode = str(option.get("currentValue"))

    def _on_config_option_update(self, update: dict[str, Any]) -> None:
        self.config(update.get("configOptions"))
        values = [
            f"{o.get('id')}={o.get('currentValue')}"
            for o in update.get("configOptions") or []
            if isinstance(o, dict)
        ]
        self.info("config: " + ", ".join(values))

    def _on_session_info_update(self, update: dict[str, Any]) -> None:
        if update.get("title"):
            self.info(f"title: {update['title']}")

    def _on_notice(self, update: dict[str, Any]) -> None:
        severity = str(update.get("severity", "info"))
        text = Text(f"{severity}: ", style=NOTICE_STYLE.get(severity, "bold"))
        text.append(str(update.get("title", "")), style="bold")
        if update.get("description"):
            text.append("\n" + indented(str(update["description"])))
        self.line(text)

    def _on_compaction_update(self, update: dict[str, Any]) -> None:
        status = str(update.get("status"))
        label = "compacting the context" if status == "in_progress" else f"compaction {status}"
        if update.get("error"):
            label += f": {update['error']}"
        self.info(label)

    def _on_compaction_summary_chunk(self, update: dict[str, Any]) -> None:
        self._stream("compaction", self._content_text(update), "dim", "summary: ")

    def _on_tool_call(self, update: dict[str, Any]) -> None:
        call_id = str(update.get("toolCallId"))
        title = str(update.get("title", call_id))
        self.tool_titles[call_id] = title
        if update.get("kind"):
            self.tool_kinds[call_id] = str(update["kind"])
        self._tool_line(call_id, str(update.get("status", "pending")), update.get("kind"))
        self._tool_content(call_id, update.get("content"))

    def _on_tool_call_update(self, update: dict[str, Any]) -> None:
        call_id = str(update.get("toolCallId"))
        if "title" in update:
            self.tool_titles[call_id] = str(update["title"])
        status = update.get("status")
        if status is not None:
            self._tool_line(call_id, str(status), update.get("kind"))
        self._tool_content(call_id, update.get("content"))
        if status in ("completed", "failed"):
            for terminal_id in self._tool_terminals.pop(call_id, []):
                self._show_terminal(terminal_id)

    def _tool_line(self, call_id: str, status: str, kind: Any) -> None:
        style = STATUS_STYLE.get(status, "white")
        text = Text(f"{STATUS_MARK.get(status, '?')} ", style=style)
        text.append(self.tool_titles.get(call_id, call_id), style="bold")
        if kind:
            text.append(f" ({kind})", style="dim")
        text.append(f" {status}", style=style)
        self.line(text)

    def _tool_content(self, call_id: str, content: Any) -> None:
        for item in content or []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "diff":
                has_old = item.get("oldText") is not None
                existing = None if has_old else self.file_text(str(item.get("path")))
                self.line(diff_text(item, existing))
            elif kind == "terminal":
                terminal_id = str(item.get("terminalId"))
                self._tool_terminals.setdefault(call_id, []).append(terminal_id)
                self.info(f"  terminal {terminal_id} attached")
            elif kind == "content":
                self.line(Text(indented(self._content_text(item)), style="dim"))

    def terminal_output(self, terminal_id: str, text: str) -> None:
        """A piece of a terminal's output as the command writes it, each line indented."""
        self._live_terminals.add(terminal_id)
        kind = f"terminal {terminal_id}"
        for i, piece in enumerate(text.split("\n")):
            if i > 0:
                if self._streaming == kind:
                    self.console.out("")
                    self._streaming = None
                elif self.tail is None or self.tail > 0:
                    self.line(Text(TERMINAL_PREFIX.rstrip(), style="dim"))
            if piece:
                self._stream(kind, piece, "dim", TERMINAL_PREFIX)

    def _show_terminal(self, terminal_id: str) -> None:
        if terminal_id in self._live_terminals:
            self.end_line()  # its output is on the screen already
            return
        term = self.terminal_lookup(terminal_id)
        if term is None:
            return
        output = term.text().rstrip("\n")
        title = f"$ {escape(term.command)}"
        self.line(
            Panel(Text(output or "(no output)"), title=title, title_align="left", expand=False)
        )


def diff_text(item: dict[str, Any], existing: str | None = None) -> Text:
    """A coloured unified diff of one ``diff`` content item; ``existing`` is what the file
    holds now when the item has no ``oldText`` (the write replaces it)."""
    path = str(item.get("path", "?"))
    old = item.get("oldText")
    new = str(item.get("newText", ""))
    kind = "edit"
    if old is None:
        old, kind = (existing, "replace") if existing is not None else (None, "new file")
    old_lines = old.splitlines() if isinstance(old, str) else []
    header = f"  {kind}: {path}"
    text = Text(header, style="bold")
    lines = difflib.unified_diff(old_lines, new.splitlines(), lineterm="", n=2)
    for line in list(lines)[2:]:  # skip the ---/+++ header
        style = (
            "green"
            if line.startswith("+")
            else "red"
            if line.startswith("-")
            else "cyan"
            if line.startswith("@@")
            else None
        )
        text.append("\n  " + line, style=style)
    return text
