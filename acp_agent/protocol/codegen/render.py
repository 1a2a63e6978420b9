"""Specs to files: the models module, the method rows, the package init, the JSON schemas.

It owns the layout of every generated file (byte for byte: ``--check`` compares them); what
goes into them is decided by ``translate``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import types
from typing import Any

from .files import ACCEPTS_JSON, BANNER, EMITS_JSON, SCHEMA_RELEASE
from .ir import AliasSpec, ClassSpec, FieldSpec, docstring
from .translate import Method

# --------------------------------------------------------------------------- rendering


def ordered(
    items: list[ClassSpec | AliasSpec], private: list[AliasSpec]
) -> list[ClassSpec | AliasSpec]:
    """Schema order, except that every name comes after what it uses (depth first).

    The module evaluates annotations at import (no ``from __future__ import annotations``:
    string annotations cost a ``compile`` each when pydantic resolves them), so a class comes
    after its bases and the types of its fields. A field whose type is only defined later
    (a cycle) is written as a string annotation.
    """
    by_name: dict[str, ClassSpec | AliasSpec] = {i.name: i for i in items}
    for p in private:
        by_name[p.name] = p
    done: set[str] = {"AcpModel", "_Tagged"}
    out: list[ClassSpec | AliasSpec] = []

    def visit(item: ClassSpec | AliasSpec, stack: tuple[str, ...]) -> None:
        if item.name in done:
            return
        hard = item.bases if isinstance(item, ClassSpec) else sorted(item.deps)
        soft = sorted(item.deps - set(hard)) if isinstance(item, ClassSpec) else []
        for dep in hard:
            assert dep not in stack, (*stack, item.name, dep)
            if dep in by_name:
                visit(by_name[dep], (*stack, item.name))
        for dep in soft:
            if dep in by_name and dep not in stack and dep != item.name:
                visit(by_name[dep], (*stack, item.name))
        done.add(item.name)
        out.append(item)

    for p in private:
        visit(p, ())
    for item in items:
        visit(item, ())
    return out


PRELUDE = """
from typing import Any, ClassVar, Dict, List, Literal, Optional, Union

from pydantic import ConfigDict, Discriminator, Field, Tag
from typing_extensions import Annotated, TypeAlias

from acp_agent.protocol._base import AcpModel, _Tagged, _TagDispatch
"""


def render_generated(
    schema_bytes: bytes, items: list[ClassSpec | AliasSpec], private: list[AliasSpec]
) -> str:
    digest = hashlib.sha256(schema_bytes).hexdigest()
    lines = [
        f'"""{BANNER}.',
        "",
        "ACP v1 as pure data: pydantic v2 models for every ``$defs`` type of the stable schema",
        f"(schema.json sha256 {digest[:16]}). The naming rules are in the docstring of",
        "``acp_agent.protocol.codegen``. Models are built lazily (``defer_build``).",
        '"""',
    ]
    lines += PRELUDE.rstrip("\n").split("\n")
    all_names = ["AcpModel"]
    emitted: set[str] = {"AcpModel", "_Tagged"}
    for item in ordered(items, private):
        lines += ["", ""]
        if isinstance(item, AliasSpec):
            lines.append(f"{item.name}: TypeAlias = {item.expr}")
            if item.doc:
                lines += docstring(item.doc, "")
        else:
            lines.append(f"class {item.name}({', '.join(item.bases)}):")
            body = docstring(item.doc, "    ") or ['    """(no description)"""']
            if item.extra_allow:
                body += ["", '    model_config = ConfigDict(extra="allow")']
            if item.tag is not None:
                body += ["", f"    __acp_tag__: ClassVar[str] = {item.tag!r}"]
            if item.fields:
                body.append("")
            for f in item.fields:
                body.append("    " + render_field(f, quote=not f.deps <= emitted))
            lines += body
        emitted.add(item.name)
        if not item.name.startswith("_"):
            all_names.append(item.name)
    lines += ["", "", "__all__ = ["]
    lines += [f"    {n!r}," for n in sorted(all_names)]
    lines += ["]", ""]
    return "\n".join(lines)


def needs_alias(f: FieldSpec) -> bool:
    from pydantic.alias_generators import to_camel

    expected = "_meta" if f.py == "field_meta" else to_camel(f.py)
    return bool(expected != f.wire)


def render_field(f: FieldSpec, quote: bool = False) -> str:
    annotation = repr(f.annotation) if quote else f.annotation
    args: list[str] = []
    if f.factory is not None:
        args.append(f"default_factory={f.factory}")
    elif f.default is not None and needs_alias(f):
        args.append(f"default={f.default}")
    if needs_alias(f):
        args.append(f"alias={f.wire!r}")
    if args:
        return f"{f.py}: {annotation} = Field({', '.join(args)})"
    if f.default is not None:
        return f"{f.py}: {annotation} = {f.default}"
    return f"{f.py}: {annotation}"


METHODS_TEMPLATE = '''"""{banner}

The ACP v1 method table as data: every method of ``meta.json`` as (name, direction, kind,
params model, result model), the model names found through the schema's ``x-method``
markers. ``acp_agent.protocol.methods`` builds its ``MethodSpec`` table from it.
"""

from __future__ import annotations

METHOD_ROWS: tuple[tuple[str, str, str, str, str | None], ...] = (
{entries}
)
'''


def render_methods(methods: list[Method]) -> str:
    entries = []
    for m in methods:
        result = "None" if m.result is None else json.dumps(m.result)
        fields = [*(json.dumps(v) for v in (m.name, m.direction, m.kind, m.params)), result]
        line = f"    ({', '.join(fields)}),"
        if len(line) > 100:  # laid out as ruff format would
            line = "    (\n" + "".join(f"        {f},\n" for f in fields) + "    ),"
        entries.append(line)
    return METHODS_TEMPLATE.format(banner=wrapped_banner(), entries="\n".join(entries))


INIT_TEMPLATE = '''"""ACP v1 as pure data: the generated models, re-exported lazily.

{banner}

Importing this package does not import pydantic: the first attribute access imports
``acp_agent.protocol._generated``. The method table is in ``acp_agent.protocol.methods`` and the
wire helpers in ``acp_agent.protocol.wire``. No I/O of any kind lives here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acp_agent.protocol._generated import (
{imports}
    )

__all__ = [
{names}
]

_LAZY = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module("acp_agent.protocol._generated"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
'''


def wrapped_banner() -> str:
    return "\n".join(textwrap.wrap(BANNER + ".", width=92))


def render_init(names: list[str]) -> str:
    imports = sorted(names, key=lambda n: (n.lower(), n))  # the order isort uses for imports
    return INIT_TEMPLATE.format(
        banner=wrapped_banner(),
        imports="\n".join(f"        {n}," for n in imports),
        names="\n".join(f'    "{n}",' for n in sorted(names)),
    )


# --------------------------------------------------------------------------- JSON schema export


def load_module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


_counter = 0


def render_schemas(generated_source: str, methods: list[Method]) -> dict[str, str]:
    from pydantic.json_schema import models_json_schema

    global _counter
    _counter += 1
    name = f"_acp_codegen_fresh_{_counter}"
    module = load_module(generated_source, name)
    try:
        accepts: list[str] = []
        emits: list[str] = []
        for m in methods:
            # (accepted, emitted) by the agent: params of methods it handles, results of the
            # calls it makes; the reverse for what it emits. Protocol methods go both ways.
            if m.direction in ("client->agent", "both"):
                accepts.append(m.params)
                if m.result:
                    emits.append(m.result)
            if m.direction in ("agent->client", "both"):
                emits.append(m.params)
                if m.result:
                    accepts.append(m.result)
        out: dict[str, str] = {}
        for path, names, mode, what in (
            (
                ACCEPTS_JSON,
                accepts,
                "validation",
                "accepts (params of the methods it handles, "
                "results of the calls it makes, notifications it receives)",
            ),
            (
                EMITS_JSON,
                emits,
                "serialization",
                "emits (results of the methods it handles, "
                "params of the calls it makes, notifications it sends)",
            ),
        ):
            uniq = sorted(set(names))
            models: list[Any] = [(getattr(module, n), mode) for n in uniq]
            _, top = models_json_schema(models, by_alias=True, ref_template="#/$defs/{model}")
            doc = {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": f"acp-agent ACP v1: what the agent {what.split(' ')[0]}",
                "description": f"What acp-agent {what}. Generated from the pydantic models "
                f"(mode={mode}) by `python -m acp_agent.protocol.codegen`; ACP v1 schema "
                f"release {SCHEMA_RELEASE}.",
                "anyOf": [{"$ref": f"#/$defs/{n}"} for n in uniq],
                "$defs": top.get("$defs", {}),
            }
            out[path] = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        return out
    finally:
        sys.modules.pop(name, None)
