"""The official ACP schema files the project carries: where they are, and their refresh.

Owns: the path of the vendored copy (``schemas/acp/`` in the repository, shipped inside the
package as ``acp_agent/protocol/official_schema``), the list of files, the release recorded in
``PROVENANCE.md`` and its checksums, and ``python -m acp_agent.protocol.vendor DIR``, which copies
a newer release in byte for byte and rewrites that record.

Does not own: what the schema means (``codegen`` reads it, the conformance suite validates with
it); it never edits a schema file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

OFFICIAL_DIR = Path(__file__).resolve().parent / "official_schema"
FILES = tuple(
    f"{version}/{name}"
    for version in ("v1", "v2")
    for name in ("meta.json", "meta.unstable.json", "schema.json", "schema.unstable.json")
)
PROVENANCE = "PROVENANCE.md"
_SUMS = re.compile(r"(SHA-256:\n\n```\n)(.*?)(```)", re.S)
_RELEASE = re.compile(r"^Release: (\S+)$", re.M)


def official_schema(name: str = "v1/schema.json") -> Path:
    """The path of one vendored file (default: the stable v1 schema)."""
    return OFFICIAL_DIR / name


def release(root: Path = OFFICIAL_DIR) -> str:
    """The schema release recorded in ``PROVENANCE.md``."""
    found = _RELEASE.search((root / PROVENANCE).read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{root / PROVENANCE}: no 'Release:' line")
    return found.group(1)


def checksums(root: Path = OFFICIAL_DIR) -> dict[str, str]:
    """SHA-256 of each vendored file, as computed now."""
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in FILES}


def recorded_checksums(root: Path = OFFICIAL_DIR) -> dict[str, str]:
    """SHA-256 of each vendored file, as ``PROVENANCE.md`` records it."""
    found = _SUMS.search((root / PROVENANCE).read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{root / PROVENANCE}: no checksum block")
    sums = {}
    for line in found.group(2).splitlines():
        digest, name = line.split()
        sums[name] = digest
    return sums


def refresh(source: Path, new_release: str, root: Path = OFFICIAL_DIR) -> list[str]:
    """Copy the files of ``source`` over the vendored ones; record the release and sums."""
    for name in FILES:
        json.loads((source / name).read_text(encoding="utf-8"))  # refuse a broken copy
    changed = []
    for name in FILES:
        data = (source / name).read_bytes()
        target = root / name
        if not target.is_file() or target.read_bytes() != data:
            changed.append(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
    page = root / PROVENANCE
    text = page.read_text(encoding="utf-8")
    block = "".join(f"{digest}  {name}\n" for name, digest in checksums(root).items())
    text = _SUMS.sub(lambda m: m.group(1) + block + m.group(3), text)
    text = _RELEASE.sub(f"Release: {new_release}", text)
    page.write_text(text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_agent.protocol.vendor",
        description="Copy a newer release of the official ACP schema files into schemas/acp/.",
    )
    parser.add_argument("source", type=Path, help="a folder holding v1/ and v2/")
    parser.add_argument("--release", required=True, help="the release copied, e.g. 1.26.0")
    args = parser.parse_args(argv)
    missing = [name for name in FILES if not (args.source / name).is_file()]
    if missing:
        print(f"vendor: not in {args.source}: {', '.join(missing)}", file=sys.stderr)
        return 2
    changed = refresh(args.source, args.release)
    print(f"vendor: release {args.release}; changed: {', '.join(changed) or 'nothing'}")
    print("now run: python -m acp_agent.protocol.codegen")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
