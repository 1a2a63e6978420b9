"""The official ACP v1 JSON Schema, as a frame validator for the conformance client.

Owns: finding and loading the official `schema.json` (the copy vendored in `schemas/acp/` and
shipped in the package, see `find_schema`), the method tables derived from its
`x-method` / `x-side` markers, per-type validators (built once, reused), the check of one wire
frame in either direction, and the unknown-root-key sweep (R-EXT-3).

Does not own: transport, timing, or any judgement beyond "this frame matches the schema"; the
checks decide what a violation means for the verdict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from acp_agent.protocol.vendor import official_schema

SCHEMA_ENV = "ACP_SCHEMA_DIR"


def find_schema() -> Path:
    """The official ACP v1 ``schema.json``: ``$ACP_SCHEMA_DIR/schema.json`` if set, else
    the copy shipped in the package (``acp_agent/protocol/official_schema/v1/``)."""
    override = os.environ.get(SCHEMA_ENV)
    candidates = [Path(override) / "schema.json"] if override else []
    candidates.append(official_schema())
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        "the official ACP v1 schema.json was not found: pass --schema PATH or set "
        f"{SCHEMA_ENV} to the folder holding it (looked in: "
        + ", ".join(str(c) for c in candidates)
        + ")"
    )


# Methods whose requests have no params type in the schema: custom (`_`-prefixed) ones.
_ENVELOPES = {
    ("agent", "request"): "AgentRequest",
    ("agent", "notification"): "AgentNotification",
    ("agent", "response"): "AgentResponse",
    ("client", "request"): "ClientRequest",
    ("client", "notification"): "ClientNotification",
    ("client", "response"): "ClientResponse",
}


def frame_kind(msg: dict[str, Any]) -> str:
    """`request`, `notification` or `response` (a message with an `id` member is a request)."""
    if "method" in msg:
        return "request" if "id" in msg else "notification"
    return "response"


class Schema:
    """The v1 schema with its method tables. One instance is shared by every connection."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path or find_schema())
        with open(self.path, encoding="utf-8") as f:
            self.doc: dict[str, Any] = json.load(f)
        self.defs: dict[str, Any] = self.doc["$defs"]
        self._by_name: dict[str, Draft202012Validator] = {}
        self._by_id: dict[int, tuple[Any, Draft202012Validator]] = {}
        # method -> $def name, split by who handles the method.
        self.agent_params: dict[str, str] = {}  # client -> agent requests/notifications
        self.agent_results: dict[str, str] = {}  # agent's answers to those
        self.client_params: dict[str, str] = {}  # agent -> client requests/notifications
        self.client_results: dict[str, str] = {}  # client's answers to those
        for name, d in self.defs.items():
            method, side = d.get("x-method"), d.get("x-side")
            if not method:
                continue
            if side == "protocol":
                self.agent_params[method] = name
                self.client_params[method] = name
            elif name.endswith("Response"):
                (self.agent_results if side == "agent" else self.client_results)[method] = name
            else:
                (self.agent_params if side == "agent" else self.client_params)[method] = name

    def unstable(self) -> Schema | None:
        """The unstable schema published beside this one (``schema.unstable.json``, a
        superset with the unstable methods and fields), if there is one."""
        path = self.path.with_name("schema.unstable.json")
        return Schema(path) if path != self.path and path.is_file() else None

    # -- validators ---------------------------------------------------------------------------

    def validator(self, name: str) -> Draft202012Validator:
        v = self._by_name.get(name)
        if v is None:
            v = Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": self.defs})
            self._by_name[name] = v
        return v

    def _inline(self, sub: Any) -> Draft202012Validator:
        hit = self._by_id.get(id(sub))
        if hit is None:
            schema = {**sub, "$defs": self.defs} if isinstance(sub, dict) else sub
            hit = (sub, Draft202012Validator(schema))
            self._by_id[id(sub)] = hit
        return hit[1]

    def errors(self, name: str, instance: Any) -> list[str]:
        out = []
        for e in self.validator(name).iter_errors(instance):
            where = "/".join(str(p) for p in e.absolute_path)
            out.append(f"{name}{'/' + where if where else ''}: {_short(e.message)}")
            if len(out) >= 5:
                break
        return out

    def all_optional(self, name: str) -> bool:
        return not self.defs.get(name, {}).get("required")

    # -- frames -------------------------------------------------------------------------------

    def check_frame(
        self, msg: dict[str, Any], sender: str, answered_method: str | None = None
    ) -> list[str]:
        """Problems with one frame written by `sender` (`agent` or `client`).

        `answered_method` is the method of the request a response answers, when known.
        """
        problems: list[str] = []
        if msg.get("jsonrpc") != "2.0":
            problems.append('R-RPC-1: missing or wrong "jsonrpc" member')
        kind = frame_kind(msg)
        body = {k: v for k, v in msg.items() if k != "jsonrpc"}
        env = _ENVELOPES[(sender, kind)]
        problems += self.errors(env, body)
        if kind == "response":
            if ("result" in msg) == ("error" in msg):
                problems.append("R-RPC-3: a response must have exactly one of result/error")
            if "error" in msg or answered_method is None:
                return problems
            table = self.agent_results if sender == "agent" else self.client_results
            rname = table.get(answered_method)
            if rname is None:
                return problems
            result = msg.get("result")
            if result is None and self.all_optional(rname):
                return problems  # tolerated (docs quirk); checks judge it where it matters
            problems += self.errors(rname, result)
            if not problems:
                problems += [f"R-EXT-3: unknown key {p}" for p in self.unknown_keys(rname, result)]
            return problems
        method = msg.get("method")
        if not isinstance(method, str):
            return problems
        table = self.client_params if sender == "agent" else self.agent_params
        pname = table.get(method)
        if pname is None:
            if not method.startswith("_"):
                problems.append(f"R-EXT-4: non-spec method {method!r} without a '_' prefix")
            return problems
        params = msg.get("params")
        problems += self.errors(pname, params)
        if not problems:
            problems += [f"R-EXT-3: unknown key {p}" for p in self.unknown_keys(pname, params)]
        return problems

    # -- unknown-root-key sweep (R-EXT-3) -----------------------------------------------------

    def unknown_keys(self, name: str, instance: Any) -> list[str]:
        out: list[str] = []
        self._sweep({"$ref": f"#/$defs/{name}"}, instance, "", out)
        return out

    def _deref(self, schema: Any) -> Any:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 20:
            target = self.defs[schema["$ref"].rsplit("/", 1)[-1]]
            siblings = {k: v for k, v in schema.items() if k not in ("$ref", "description")}
            schema = {**target, **siblings} if siblings else target
            seen += 1
        return schema

    def _collect(self, schema: Any, inst: Any, props: dict[str, list[Any]], st: list[bool]) -> None:
        schema = self._deref(schema)
        if not isinstance(schema, dict):
            return
        if "properties" in schema:
            st[0] = True
            for k, v in schema["properties"].items():
                props.setdefault(k, []).append(v)
        ap = schema.get("additionalProperties")
        if ap is not None and ap is not False:
            st[1] = True
        for sub in schema.get("allOf", []):
            self._collect(sub, inst, props, st)
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if not branches:
                continue
            matching = [b for b in branches if self._inline(b).is_valid(inst)] or branches
            for b in matching:
                self._collect(b, inst, props, st)

    def _items(self, schema: Any, inst: Any, acc: list[Any]) -> None:
        schema = self._deref(schema)
        if not isinstance(schema, dict):
            return
        if isinstance(schema.get("items"), dict):
            acc.append(schema["items"])
        for sub in schema.get("allOf", []):
            self._items(sub, inst, acc)
        for key in ("anyOf", "oneOf"):
            for b in schema.get(key, []):
                if self._inline(b).is_valid(inst):
                    self._items(b, inst, acc)

    def _sweep(self, schema: Any, inst: Any, path: str, out: list[str]) -> None:
        if isinstance(inst, dict):
            props: dict[str, list[Any]] = {}
            st = [False, False]  # has properties, open (additionalProperties)
            self._collect(schema, inst, props, st)
            if not st[0]:
                return
            for k, v in inst.items():
                if k == "_meta":
                    continue
                if k not in props:
                    if not st[1]:
                        out.append(f"{path}.{k}" if path else k)
                    continue
                for sub in props[k]:
                    self._sweep(sub, v, f"{path}.{k}" if path else k, out)
        elif isinstance(inst, list):
            subs: list[Any] = []
            self._items(schema, inst, subs)
            for i, item in enumerate(inst):
                for sub in subs:
                    self._sweep(sub, item, f"{path}[{i}]", out)


def _short(text: str, limit: int = 300) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


_SHARED: Schema | None = None


def shared_schema(path: str | None = None) -> Schema:
    global _SHARED
    if _SHARED is None or path:
        _SHARED = Schema(path)
    return _SHARED
