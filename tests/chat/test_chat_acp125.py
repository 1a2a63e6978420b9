"""``acp-agent chat`` advertises ACP 1.25's notices and compactions and shows them."""

from __future__ import annotations

from pathlib import Path

from .test_chat_scripted import chat


def test_notices_and_compactions_are_shown(tmp_path: Path) -> None:
    result = chat(tmp_path, ["/notice warning the disk is nearly full", "/compact 2"])
    out = result.stdout
    assert result.returncode == 0, result.stderr
    # the agent sent a notice, not the message it sends clients without session.notices
    assert "warning: the disk is nearly full" in out
    assert "notice: the disk" not in out
    assert "compacting the context" in out
    assert "summary: summary 1summary 2" in out
    assert "compaction completed" in out
    assert "not supported by this client" not in out
