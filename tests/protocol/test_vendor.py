"""The vendored official schema: present, unedited, shipped, and refreshable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from acp_agent.protocol import vendor


def test_every_vendored_file_matches_its_recorded_checksum() -> None:
    assert vendor.checksums() == vendor.recorded_checksums()
    assert set(vendor.recorded_checksums()) == set(vendor.FILES)


def test_the_package_ships_the_schema_the_models_are_generated_from() -> None:
    schema = json.loads(vendor.official_schema().read_text(encoding="utf-8"))
    assert "SessionUpdate" in schema["$defs"]
    from acp_agent.protocol import codegen

    assert codegen.SCHEMA_RELEASE == vendor.release() == "1.25.0"
    assert f"release {vendor.release()}" in codegen.BANNER


def test_refresh_copies_byte_for_byte_and_rewrites_the_record(tmp_path: Path) -> None:
    root = tmp_path / "acp"
    shutil.copytree(vendor.OFFICIAL_DIR, root)
    newer = tmp_path / "newer"
    shutil.copytree(vendor.OFFICIAL_DIR, newer)
    changed_text = (newer / "v1/meta.json").read_text(encoding="utf-8").replace("{", "{ ", 1)
    (newer / "v1/meta.json").write_text(changed_text, encoding="utf-8")

    changed = vendor.refresh(newer, "9.9.9", root)

    assert changed == ["v1/meta.json"]
    assert (root / "v1/meta.json").read_bytes() == (newer / "v1/meta.json").read_bytes()
    assert vendor.release(root) == "9.9.9"
    assert vendor.recorded_checksums(root) == vendor.checksums(root)
    assert vendor.recorded_checksums(root) != vendor.recorded_checksums()


def test_refresh_refuses_a_copy_that_is_not_json(tmp_path: Path) -> None:
    root = tmp_path / "acp"
    shutil.copytree(vendor.OFFICIAL_DIR, root)
    newer = tmp_path / "newer"
    shutil.copytree(vendor.OFFICIAL_DIR, newer)
    (newer / "v2/schema.json").write_text("{", encoding="utf-8")
    try:
        vendor.refresh(newer, "9.9.9", root)
    except ValueError:
        pass
    else:
        raise AssertionError("a broken copy was accepted")
    assert vendor.checksums(root) == vendor.recorded_checksums(root)
