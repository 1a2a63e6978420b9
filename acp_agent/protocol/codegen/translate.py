"""Schema to specs: every ``$defs`` type as a class or an alias, and the method table.

It owns the translation rules of the package docstring (``Generator``) and how methods are
found through ``x-method`` markers (``method_table``); it writes nothing (see ``render``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .ir import (
    AliasSpec,
    ClassSpec,
    FieldSpec,
    Schema,
    TypeExpr,
    first_paragraph,
    merge_exprs,
    pascal,
    ref_name,
    snake,
    union_expr,
)


class Generator:
    """Turns the ``$defs`` of the schema into class and alias specifications."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.defs: dict[str, Schema] = schema["$defs"]
        self.items: list[ClassSpec | AliasSpec] = []
        self.private_aliases: dict[str, AliasSpec] = {}
        self.names: set[str] = set()

    # -- types -------------------------------------------------------------

    def int_type(self, s: Schema) -> TypeExpr:
        lo, hi = s.get("minimum"), s.get("maximum")
        if lo is None and hi is None:
            return TypeExpr("int")
        name = (
            "_Int" + (f"Ge{lo}" if lo is not None else "") + (f"Le{hi}" if hi is not None else "")
        )
        name = name.replace("-", "M")
        if name not in self.private_aliases:
            args = ", ".join(
                a
                for a in (
                    f"ge={lo}" if lo is not None else "",
                    f"le={hi}" if hi is not None else "",
                )
                if a
            )
            self.private_aliases[name] = AliasSpec(name, f"Annotated[int, Field({args})]", set())
        return TypeExpr(name, {name})

    def type_of(self, s: Schema) -> TypeExpr:
        """The annotation for a property (or array item) schema."""
        if "$ref" in s:
            name = ref_name(s["$ref"])
            return TypeExpr(name, {name})
        if "allOf" in s and len(s["allOf"]) == 1 and "type" not in s:
            return self.type_of(s["allOf"][0])
        alts = s.get("anyOf") or s.get("oneOf")
        if alts is not None and "type" not in s:
            nullable = False
            parts: list[TypeExpr] = []
            for alt in self._flat_alternatives(alts):
                if alt.get("type") == "null":
                    nullable = True
                    continue
                parts.append(self.type_of(alt))
            expr = union_expr([p.expr for p in parts])
            deps = set().union(*(p.deps for p in parts)) if parts else set()
            return TypeExpr(expr, deps, nullable or any(p.nullable for p in parts))
        if "const" in s:
            return TypeExpr(f"Literal[{s['const']!r}]")
        t = s.get("type")
        nullable = False
        if isinstance(t, list):
            nullable = "null" in t
            rest = [x for x in t if x != "null"]
            t = rest[0] if len(rest) == 1 else None
        if t == "null":
            return TypeExpr("None")
        if t == "string":
            return TypeExpr("str", set(), nullable)
        if t == "integer":
            te = self.int_type(s)
            te.nullable = nullable
            return te
        if t == "number":
            return TypeExpr("float", set(), nullable)
        if t == "boolean":
            return TypeExpr("bool", set(), nullable)
        if t == "array":
            item = self.type_of(s["items"]) if "items" in s else TypeExpr("Any")
            inner = f"Optional[{item.expr}]" if item.nullable else item.expr
            return TypeExpr(f"List[{inner}]", item.deps, nullable)
        if t == "object":
            ap = s.get("additionalProperties")
            if isinstance(ap, dict) and ap:
                val = self.type_of(ap)
                inner = f"Optional[{val.expr}]" if val.nullable else val.expr
                return TypeExpr(f"Dict[str, {inner}]", val.deps, nullable)
            return TypeExpr("Dict[str, Any]", set(), nullable)
        return TypeExpr("Any", set(), False)

    def _flat_alternatives(self, alts: list[Schema]) -> Iterator[Schema]:
        """Inline nested untyped ``anyOf`` groups (the envelopes nest them)."""
        for alt in alts:
            inner = alt.get("anyOf") or alt.get("oneOf")
            if inner is not None and "type" not in alt and "properties" not in alt:
                yield from self._flat_alternatives(inner)
            else:
                yield alt

    # -- fields ------------------------------------------------------------

    def make_field(
        self, wire: str, s: Schema, required: bool, force_optional: bool = False
    ) -> FieldSpec:
        te = self.type_of(s)
        ann = te.expr
        nullable = te.nullable
        py = snake(wire)
        default: str | None = None
        factory: str | None = None
        if required and not force_optional:
            pass
        elif "default" in s:
            value = s["default"]
            if isinstance(value, list):
                assert value == [], value
                factory = "list"
            elif isinstance(value, dict):
                if ann.startswith("Dict["):
                    assert value == {}, value
                    factory = "dict"
                elif value == {}:
                    factory = f"lambda: {ann}()"
                else:
                    factory = f"lambda: {ann}.model_validate({value!r})"
            else:
                default = repr(value)
        elif nullable or ann == "Any":
            default = "None"
        elif ann.startswith("List[") and not force_optional:
            factory = "list"
        elif ann.startswith("Dict[") and not force_optional:
            factory = "dict"
        else:
            nullable = True
            default = "None"
        if nullable and ann != "Any":
            ann = f"Optional[{ann}]"
        return FieldSpec(py, wire, ann, default, factory, te.deps)

    def fields_of(self, s: Schema, *, skip: Iterable[str] = ()) -> tuple[list[FieldSpec], set[str]]:
        required = set(s.get("required", ()))
        out: list[FieldSpec] = []
        deps: set[str] = set()
        for wire, ps in s.get("properties", {}).items():
            if wire in skip:
                continue
            out.append(self.make_field(wire, ps, wire in required))
            deps |= self.type_of(ps).deps
        return out, deps

    # -- top level ---------------------------------------------------------

    def run(self) -> None:
        for name, s in self.defs.items():
            self.names.add(name)
            self.gen_def(name, s)

    def gen_def(self, name: str, s: Schema) -> None:
        doc = first_paragraph(s.get("description"))
        alts = s.get("oneOf") or s.get("anyOf")
        if "properties" in s and alts is not None:
            tag = self.common_tag(alts)
            if tag is not None and all(self.variant_ref(a) for a in alts):
                self.gen_tagged_object(name, s, alts, tag, doc)
            else:
                self.gen_flattened(name, s, doc)
            return
        if s.get("type") == "object" or "properties" in s:
            fields, deps = self.fields_of(s)
            self.items.append(ClassSpec(name, ["AcpModel"], doc, fields, deps))
            return
        if alts is not None:
            self.gen_union(name, alts, doc)
            return
        te = self.type_of(s)
        expr = f"Optional[{te.expr}]" if te.nullable else te.expr
        self.items.append(AliasSpec(name, expr, te.deps, doc))

    @staticmethod
    def tag_of(alt: Schema) -> tuple[str, Any] | None:
        for wire, ps in alt.get("properties", {}).items():
            if "const" in ps and wire in alt.get("required", ()):
                return wire, ps["const"]
        return None

    def common_tag(self, alts: list[Schema]) -> str | None:
        tags = [self.tag_of(a) for a in alts]
        if any(t is None for t in tags) or any("not" in a for a in alts):
            return None
        props = {t[0] for t in tags if t is not None}
        return props.pop() if len(props) == 1 else None

    @staticmethod
    def variant_ref(alt: Schema) -> str | None:
        all_of = alt.get("allOf")
        if all_of and len(all_of) == 1 and "$ref" in all_of[0]:
            return ref_name(all_of[0]["$ref"])
        if "$ref" in alt:
            return ref_name(alt["$ref"])
        return None

    def gen_union(self, name: str, alts: list[Schema], doc: str) -> None:
        # unions of constants -> Literal
        if all(
            "const" in a
            or (
                "type" in a
                and a.get("type") != "object"
                and "title" in a
                and "items" not in a
                and a.get("type") != "null"
            )
            for a in alts
        ) and any("const" in a for a in alts):
            consts = [a["const"] for a in alts if "const" in a]
            others = [a for a in alts if "const" not in a]
            lit = f"Literal[{', '.join(repr(c) for c in consts)}]"
            if others:
                te = self.type_of({k: v for k, v in others[0].items() if k != "title"})
                assert len(others) == 1 and not te.deps
                lit = f"Union[{lit}, {te.expr}]"
            self.items.append(AliasSpec(name, lit, set(), doc))
            return
        tag = self.common_tag(alts)
        members: list[str] = []
        deps: set[str] = set()
        all_objects = True
        tagged: dict[str, str] = {}  # tag value -> class, for a partly tagged union
        tag_wire: str | None = None
        missing: str | None = None  # the variant for an object without the tag property
        unknown: str | None = None  # the fallback variant for an unknown tag value
        for alt in alts:
            t = self.tag_of(alt)
            ref = self.variant_ref(alt)
            if t is not None:
                wire, value = t
                cls = self.variant_name(pascal(str(value)) + name)
                rest = {k: v for k, v in alt.get("properties", {}).items() if k != wire}
                fields, fdeps = self.fields_of(
                    {"properties": rest, "required": alt.get("required", [])}
                )
                tag_field = FieldSpec(snake(wire), wire, f"Literal[{value!r}]", repr(value))
                bases = [ref, "_Tagged"] if ref else ["_Tagged"]
                self.items.append(
                    ClassSpec(
                        cls,
                        bases,
                        f"The ``{value}`` variant of :data:`{name}`.",
                        [*fields, tag_field],
                        fdeps | set(bases),
                        tag=snake(wire),
                    )
                )
                members.append(cls)
                deps.add(cls)
                tagged[str(value)] = cls
                tag_wire = wire
            elif ref is not None and "properties" not in alt:
                members.append(ref)
                deps.add(ref)
                missing = missing or ref
                all_objects = all_objects and self.is_object_def(ref)
            elif alt.get("type") == "object" or "properties" in alt:
                cls = self.variant_name(pascal(alt.get("title", "variant")) + name)
                sub = {k: v for k, v in alt.items() if k not in ("not",)}
                fields, fdeps = self.fields_of(sub)
                extra = (
                    alt.get("additionalProperties") is True
                    or alt.get("unevaluatedProperties") is True
                )
                self.items.append(
                    ClassSpec(
                        cls,
                        ["AcpModel"],
                        first_paragraph(alt.get("description"))
                        or f"The ``{alt.get('title')}`` variant of :data:`{name}`.",
                        fields,
                        fdeps,
                        extra_allow=extra,
                    )
                )
                members.append(cls)
                deps.add(cls)
                if "not" in alt:
                    unknown = cls
                else:
                    missing = missing or cls
            else:
                te = self.type_of(alt)
                members.append(
                    f"Optional[{te.expr}]" if te.nullable and te.expr != "None" else te.expr
                )
                deps |= te.deps
                all_objects = False
        expr = union_expr(members)
        if tag is not None and len(members) > 1:
            expr = f"Annotated[{expr}, Field(discriminator={snake(tag)!r})]"
        elif tagged and tag_wire is not None and all_objects:
            # a tag default must not let a tagged variant swallow untagged input: dispatch
            dispatch = (
                f"_TagDispatch({tag_wire!r}, {snake(tag_wire)!r}, {tagged!r}, "
                f"{missing!r}, {(unknown or missing)!r})"
            )
            tagged_members = ", ".join(f"Annotated[{m}, Tag({m!r})]" for m in members)
            expr = f"Annotated[Union[{tagged_members}], Discriminator({dispatch})]"
        elif all_objects and len(members) > 1:
            expr = f"Annotated[{expr}, Field(union_mode='left_to_right')]"
        self.items.append(AliasSpec(name, expr, deps, doc))

    def variant_name(self, name: str) -> str:
        """A variant's class name; ``Variant`` is appended when a ``$defs`` name is taken."""
        return name + "Variant" if name in self.defs else name

    def is_object_def(self, name: str) -> bool:
        s = self.defs[name]
        return s.get("type") == "object" or "properties" in s

    def gen_tagged_object(
        self, name: str, s: Schema, alts: list[Schema], tag: str, doc: str
    ) -> None:
        base = name + "Base"
        fields, deps = self.fields_of(s)
        self.items.append(
            ClassSpec(
                base, ["AcpModel"], f"The properties shared by every :data:`{name}`.", fields, deps
            )
        )
        members = []
        for alt in alts:
            t = self.tag_of(alt)
            ref = self.variant_ref(alt)
            assert t is not None and ref is not None
            cls = self.variant_name(pascal(str(t[1])) + name)
            tag_field = FieldSpec(snake(tag), tag, f"Literal[{t[1]!r}]", repr(t[1]))
            bases = [base, ref, "_Tagged"]
            self.items.append(
                ClassSpec(
                    cls,
                    bases,
                    f"The ``{t[1]}`` variant of :data:`{name}`.",
                    [tag_field],
                    set(bases),
                    tag=snake(tag),
                )
            )
            members.append(cls)
        expr = f"Annotated[{union_expr(members)}, Field(discriminator={snake(tag)!r})]"
        self.items.append(AliasSpec(name, expr, set(members), doc))

    # -- flattening --------------------------------------------------------

    def alternative_props(self, alt: Schema) -> tuple[dict[str, list[Schema]], set[str]]:
        """Properties (wire -> schemas) and required names of one alternative, flattened."""
        ref = self.variant_ref(alt)
        props: dict[str, list[Schema]] = {}
        required: set[str] = set(alt.get("required", ()))
        for wire, ps in alt.get("properties", {}).items():
            props.setdefault(wire, []).append(ps)
        if ref is not None:
            sub = self.defs[ref]
            sp, sr = self.object_props(sub)
            for wire, lst in sp.items():
                props.setdefault(wire, []).extend(lst)
            required |= sr
        inner = alt.get("anyOf") or alt.get("oneOf")
        if inner is not None and "properties" in alt:
            ip, ir = self.merge_alternatives(inner)
            for wire, lst in ip.items():
                props.setdefault(wire, []).extend(lst)
            required |= ir
        return props, required

    def object_props(self, s: Schema) -> tuple[dict[str, list[Schema]], set[str]]:
        props = {w: [ps] for w, ps in s.get("properties", {}).items()}
        required = set(s.get("required", ()))
        alts = s.get("anyOf") or s.get("oneOf")
        if alts is not None:
            ap, ar = self.merge_alternatives(alts)
            for wire, lst in ap.items():
                props.setdefault(wire, []).extend(lst)
            required |= ar
        return props, required

    def merge_alternatives(self, alts: list[Schema]) -> tuple[dict[str, list[Schema]], set[str]]:
        props: dict[str, list[Schema]] = {}
        req_sets: list[set[str]] = []
        for alt in alts:
            p, r = self.alternative_props(alt)
            for wire, lst in p.items():
                props.setdefault(wire, []).extend(lst)
            req_sets.append(r)
        required = set.intersection(*req_sets) if req_sets else set()
        return props, required

    def gen_flattened(self, name: str, s: Schema, doc: str) -> None:
        props, required = self.object_props(s)
        fields: list[FieldSpec] = []
        deps: set[str] = set()
        for wire, schemas in props.items():
            exprs: list[str] = []
            nullable = False
            for ps in schemas:
                te = self.type_of(ps)
                deps |= te.deps
                nullable = nullable or te.nullable
                exprs.append(te.expr)
            merged = merge_exprs(exprs)
            req = wire in required
            ann = merged if req and not nullable else f"Optional[{merged}]"
            fdeps: set[str] = set()
            for ps in schemas:
                fdeps |= self.type_of(ps).deps
            fields.append(FieldSpec(snake(wire), wire, ann, None if req else "None", None, fdeps))
        note = "The schema's alternatives are flattened into this one model."
        self.items.append(ClassSpec(name, ["AcpModel"], f"{doc} {note}".strip(), fields, deps))


# --------------------------------------------------------------------------- methods table


@dataclass
class Method:
    name: str
    direction: str
    kind: str
    params: str
    result: str | None


def method_table(schema: Schema, meta: Schema) -> list[Method]:
    defs: dict[str, Schema] = schema["$defs"]
    result_names: set[str] = set()
    for env in ("AgentResponse", "ClientResponse"):
        result_names |= set(re.findall(r'"#/\$defs/(\w+)"', json.dumps(defs[env])))
    params: dict[str, str] = {}
    results: dict[str, str] = {}
    for name, s in defs.items():
        method = s.get("x-method")
        if method is None:
            continue
        target = results if name in result_names else params
        assert method not in target, (method, name)
        target[method] = name
    out: list[Method] = []
    groups = (
        ("agentMethods", "client->agent"),
        ("clientMethods", "agent->client"),
        ("protocolMethods", "both"),
    )
    for key, direction in groups:
        for method in sorted(meta[key].values()):
            result = results.get(method)
            out.append(
                Method(
                    method,
                    direction,
                    "request" if result else "notification",
                    params[method],
                    result,
                )
            )
    return out
