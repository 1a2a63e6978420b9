"""Drift test: the committed generated files equal a fresh generation from the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp_agent.protocol import codegen
from acp_agent.protocol.codegen.ir import pascal, snake

from .conftest import REPO, schema_dir

OUTPUTS = [
    codegen.GENERATED_PY,
    codegen.METHODS_PY,
    codegen.INIT_PY,
    codegen.ACCEPTS_JSON,
    codegen.EMITS_JSON,
]


def test_regeneration_is_byte_identical(tmp_path: Path, official_schema: dict[str, Any]) -> None:
    status = codegen.main(["--schema", str(schema_dir()), "--out", str(tmp_path)])
    assert status == 0
    for rel in OUTPUTS:
        fresh = (tmp_path / rel).read_bytes()
        committed = (REPO / rel).read_bytes()
        assert fresh == committed, f"{rel} is stale: run `python -m acp_agent.protocol.codegen`"


def test_check_mode_passes_on_the_committed_tree(
    official_schema: dict[str, Any], capsys: Any
) -> None:
    assert codegen.main(["--schema", str(schema_dir()), "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_mode_reports_drift(
    tmp_path: Path, official_schema: dict[str, Any], capsys: Any
) -> None:
    codegen.main(["--schema", str(schema_dir()), "--out", str(tmp_path)])
    target = tmp_path / codegen.METHODS_PY
    target.write_text(target.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert codegen.main(["--schema", str(schema_dir()), "--out", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert codegen.METHODS_PY in out and "out of date" in out


def test_generation_is_deterministic(official_schema: dict[str, Any]) -> None:
    path = schema_dir() / "schema.json"
    assert codegen.generate(path) == codegen.generate(path)


def test_naming_rule_examples() -> None:
    assert pascal("agent_message_chunk") + "SessionUpdate" == ("AgentMessageChunkSessionUpdate")
    assert snake("mimeType") == "mime_type"
    assert snake("_meta") == "field_meta"
    assert snake("outputByteLimit") == "output_byte_limit"
