"""The code generator for ``acp_agent.protocol``: ``python -m acp_agent.protocol.codegen``.

This package owns the translation of the official ACP v1 JSON Schema (``schema.json`` and
``meta.json``, read from the vendored copy in ``schemas/acp/v1`` (see :mod:`..vendor`), from
``--schema`` or from the directory in ``$ACP_SCHEMA_DIR``) into the committed files:

- ``acp_agent/protocol/_generated.py``: pydantic v2 models for every ``$defs`` type;
- ``acp_agent/protocol/_method_rows.py``: the method table as data (name, direction, kind,
  model names), read by the hand-written ``methods.py``;
- ``acp_agent/protocol/__init__.py``: the lazy re-export of the models;
- ``schemas/accepts.schema.json`` and ``schemas/emits.schema.json``: the JSON Schema of what
  acp-agent accepts (validation mode) and emits (serialization mode), made from the models.

``--check`` regenerates in memory and exits 1 with a diff summary when a committed file
differs; ``--out DIR`` writes the files under another root (used by the drift test). It does
not own the schema files (they are vendored data) and performs no network access.

Its modules: ``files`` (what is written where), ``ir`` (names and specs), ``translate``
(schema to specs, by the rules below), ``render`` (specs to files); this one runs them.

Translation rules
-----------------
- Every ``$defs`` name becomes a module-level name of the same spelling.
- ``type: object`` with ``properties`` -> a class deriving from ``AcpModel``. Field names are
  snake_case; the wire name is the alias (``_meta`` -> ``field_meta``). Required per
  ``required``; a schema ``default`` becomes the field default (object defaults through a
  ``default_factory``). An optional field without a default is ``None`` when the schema
  allows ``null``, an empty list/dict for arrays/maps, and otherwise ``X | None = None``.
- Integers with ``minimum``/``maximum`` -> ``Annotated[int, Field(ge=..., le=...)]``;
  ``["T", "null"]`` -> ``Optional[T]``; ``{}`` -> ``Any``; ``string`` -> ``str``.
- A union of string (or integer) constants -> a ``Literal[...]`` alias; with an untitled
  fallback of the plain type (``"other"``) -> ``Union[Literal[...], str]``.
- Other ``oneOf``/``anyOf`` -> a union alias. Variants are named as follows:

  * a variant carrying a ``const`` property (the tag) is named
    ``PascalCase(tag value) + UnionName``, always (``SessionUpdate`` variant
    ``agent_message_chunk`` -> ``AgentMessageChunkSessionUpdate``). When it is of the form
    ``{properties: {tag: const}, allOf: [{$ref: X}]}`` it is a subclass of ``X`` that adds the
    ``Literal`` tag field (with the constant as default; the tag is always serialized);
  * a variant that is only a ``$ref`` (possibly wrapped in a titled ``allOf``) uses that
    class;
  * any other inline object variant (a titled fallback such as ``"other"``, or ``"Result"``)
    is named ``PascalCase(title) + UnionName``;
  * when such a name is already a ``$defs`` name, ``Variant`` is appended
    (``MultiSelectItems`` variant ``string`` -> ``StringMultiSelectItemsVariant``, a subclass of
    ``StringMultiSelectItems``).

  When every variant is tagged by the same property the alias is
  ``Annotated[Union[...], Field(discriminator=...)]``. When only some variants are tagged
  (``McpServer``, ``AuthMethod``, ``ElicitationPropertySchema``, ``MultiSelectItems``) a callable
  ``Discriminator`` picks the variant: a known tag its class, no tag the untagged variant, an
  unknown tag the ``"other"`` fallback (so a tag default never swallows untagged input). Unions
  of untagged objects validate left to right; anything else is a plain (smart-mode) union.
- An object that has ``properties`` *and* a ``oneOf``/``anyOf``:

  * when every alternative is tagged by the same property (``SessionConfigOption``), the
    shared properties go into ``<Name>Base`` and each alternative is a class
    ``PascalCase(tag) + Name`` deriving from ``<Name>Base`` and the referenced class;
    ``<Name>`` is the discriminated union;
  * otherwise (``SetSessionConfigOptionRequest``, ``CreateElicitationRequest``,
    ``CreateElicitationResponse``, ``ElicitationFormMode``, ``ElicitationUrlMode``) the
    alternatives are flattened into one class: a property is required only when the object
    itself or every alternative requires it. The model accepts a superset of the schema.
- ``x-deserialize-default-on-error`` and ``x-deserialize-skip-invalid-items`` are reading
  habits of the Rust SDK, not protocol rules; they are ignored.
- ``x-method`` / ``x-side`` decide the method table: a type referenced from a ``*Response``
  envelope is a method's result, any other is its params.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path

from .files import (
    ACCEPTS_JSON,
    BANNER,
    DEFAULT_SCHEMA,
    EMITS_JSON,
    GENERATED_PY,
    INIT_PY,
    METHODS_PY,
    REPO_ROOT,
    SCHEMA_RELEASE,
)
from .render import render_generated, render_init, render_methods, render_schemas
from .translate import Generator, method_table

__all__ = [
    "ACCEPTS_JSON",
    "BANNER",
    "EMITS_JSON",
    "GENERATED_PY",
    "INIT_PY",
    "METHODS_PY",
    "SCHEMA_RELEASE",
    "generate",
    "main",
]


def resolve_schema(arg: str | None) -> Path:
    if arg:
        p = Path(arg)
        return p / "schema.json" if p.is_dir() else p
    env = os.environ.get("ACP_SCHEMA_DIR")
    if env:
        return Path(env) / "schema.json"
    return DEFAULT_SCHEMA


def generate(schema_path: Path) -> dict[str, str]:
    """Every generated file: repository-relative path -> content."""
    raw = schema_path.read_bytes()
    schema = json.loads(raw)
    meta = json.loads((schema_path.parent / "meta.json").read_text(encoding="utf-8"))
    gen = Generator(schema)
    gen.run()
    private = sorted(gen.private_aliases.values(), key=lambda a: a.name)
    generated = render_generated(raw, gen.items, private)
    methods = method_table(schema, meta)
    public = ["AcpModel", *(i.name for i in gen.items)]
    files = {
        GENERATED_PY: generated,
        METHODS_PY: render_methods(methods),
        INIT_PY: render_init(public),
    }
    files.update(render_schemas(generated, methods))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_agent.protocol.codegen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--schema",
        help="schema.json (or its directory); default $ACP_SCHEMA_DIR or schemas/acp/v1",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a committed file differs from a fresh generation",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT, help="root to write under (default: the repository)"
    )
    args = parser.parse_args(argv)
    schema_path = resolve_schema(args.schema)
    if not schema_path.is_file():
        print(f"codegen: schema not found: {schema_path}", file=sys.stderr)
        return 2
    files = generate(schema_path)
    if args.check:
        stale = 0
        for rel, text in files.items():
            target = args.out / rel
            old = target.read_text(encoding="utf-8") if target.exists() else ""
            if old != text:
                stale += 1
                diff = list(
                    difflib.unified_diff(
                        old.splitlines(),
                        text.splitlines(),
                        lineterm="",
                        fromfile=f"committed/{rel}",
                        tofile=f"fresh/{rel}",
                    )
                )
                added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
                removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
                print(f"{rel}: differs (+{added} -{removed} lines)" if old else f"{rel}: missing")
                for line in diff[:40]:
                    print(f"    {line}")
        if stale:
            print(
                f"codegen --check: {stale} file(s) out of date; run "
                "`python -m acp_agent.protocol.codegen`"
            )
            return 1
        print("codegen --check: up to date")
        return 0
    for rel, text in files.items():
        target = args.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    return 0
