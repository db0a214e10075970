"""OpenAPI / Swagger schema objects → compact JSON Schema (Draft 2020-12) for tool inputs.

Why a translator and not the spec's schemas verbatim: OAS 3.0 and Swagger schemas are
*not* JSON Schema (``nullable``, boolean ``exclusiveMinimum``, ``type: file``, tuple
``items: [..]``), they point into the whole document with ``$ref``, and real specs are
cyclic and huge. A tool schema must stand alone, be valid, and cost few tokens.

``$ref`` policy (deterministic; depends only on the document):

* a target that lies on a cycle of the reference graph (``JSONSchemaProps`` → itself,
  ``apiAgent`` ↔ ``apiAgentSpan``) goes once into the tool schema's ``$defs`` and is
  referenced as ``#/$defs/<Name>``; recursion is therefore represented, never expanded;
* any other target is inlined while the reference depth allows; beyond it, a non-leaf
  target collapses to a permissive ``{"type": "object", "description": "… (nested
  schema omitted)"}``; leaf targets (enums, formatted strings) are always inlined;
* references to other files or URLs are never fetched: :class:`RefError`.

Translations are memoised per (target, depth), so Kubernetes' 1,123 operations sharing
a few hundred definitions cost one translation each. Results are shared between tools
and must never be mutated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from appliance.catalogue.schema_values import copy_scalars, normalise_type, trim, valid_regex
from appliance.errors import ImportFailed

_MAX_WORK = 2_000_000  # schema nodes visited per document: stops YAML alias bombs
_EMPTY: frozenset[str] = frozenset()
_SUBSCHEMA_KEYS = ("properties", "items", "prefixItems", "allOf", "anyOf", "oneOf", "not")
_OMITTED = " (nested schema omitted)"
_NODE_BYTES = 16


class RefError(Exception):
    """A ``$ref`` that cannot be followed; the operation using it is skipped."""


@dataclass(frozen=True, slots=True)
class Translated:
    schema: Any  # a dict, or a boolean schema
    size: int  # approximate JSON bytes of ``schema`` (a cheap proxy for tokens)
    needs: frozenset[str]  # cyclic targets referenced as #/$defs/…


class SchemaTranslator:
    """Translates schemas of one document; holds its memo tables."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self._memo: dict[tuple[str, int], Translated] = {}
        self._defs_memo: dict[tuple[str, int], Translated] = {}
        self._edges: dict[str, frozenset[str]] = {}
        self._cyclic: dict[str, bool] = {}
        self._def_names: dict[str, str] = {}
        self._taken_def_names: set[str] = set()
        self._work = 0

    # -- references -------------------------------------------------------------------

    def pointer(self, ref: Any) -> str:
        """The normalised JSON pointer of a local ``$ref``; RefError for anything else."""
        if not isinstance(ref, str):
            raise RefError(f"$ref must be a string, not {type(ref).__name__}")
        if not ref.startswith("#"):
            raise RefError(f"$ref {trim(ref, 120)!r} points outside this document; it is not followed")
        return unquote(ref[1:])

    def resolve(self, ref: Any) -> Any:
        """The value a local ``$ref`` points at (``~0``/``~1`` and percent escapes decoded)."""
        ptr = self.pointer(ref)
        node: Any = self.doc
        if ptr == "":
            return node
        if not ptr.startswith("/"):
            raise RefError(f"$ref {trim(ref, 120)!r} is not a JSON pointer")
        for raw in ptr[1:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise RefError(f"$ref {trim(ref, 120)!r} does not resolve")
        return node

    def resolve_object(self, value: Any, hops: int = 16) -> Any:
        """Follow ``{"$ref": …}`` chains on non-schema objects (parameters, bodies)."""
        while isinstance(value, dict) and "$ref" in value:
            if hops == 0:
                raise RefError("$ref chain is too long or circular")
            value = self.resolve(value["$ref"])
            hops -= 1
        return value

    def _refs_below(self, ptr: str) -> frozenset[str]:
        found = self._edges.get(ptr)
        if found is not None:
            return found
        refs: set[str] = set()
        try:
            stack: list[Any] = [self.resolve("#" + ptr)]
        except RefError:
            stack = []
        while stack:
            node = stack.pop()
            self._tick()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith("#"):
                    refs.add(unquote(ref[1:]))
                stack.extend(v for v in node.values() if isinstance(v, dict | list))
            elif isinstance(node, list):
                stack.extend(v for v in node if isinstance(v, dict | list))
        found = self._edges[ptr] = frozenset(refs)
        return found

    def _is_cyclic(self, start: str) -> bool:
        """Whether ``start`` lies on a cycle of the reference graph (Tarjan, iterative)."""
        known = self._cyclic.get(start)
        if known is not None:
            return known
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on_stack: set[str] = set()
        stack: list[str] = []
        work: list[tuple[str, list[str]]] = [(start, sorted(self._refs_below(start)))]
        index[start] = low[start] = 0
        stack.append(start)
        on_stack.add(start)
        while work:
            node, succ = work[-1]
            if succ:
                nxt = succ.pop()
                if nxt in self._cyclic and nxt not in index:
                    continue  # component already settled by an earlier search
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(self._refs_below(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                loop = len(members) > 1 or node in self._refs_below(node)
                for member in members:
                    self._cyclic[member] = loop
        return self._cyclic[start]

    def def_name(self, ptr: str) -> str:
        name = self._def_names.get(ptr)
        if name is None:
            last = ptr.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
            base = re.sub(r"[^A-Za-z0-9._-]+", "_", last).strip("_") or "schema"
            name = base
            counter = 2
            while name in self._taken_def_names:
                name = f"{base}_{counter}"
                counter += 1
            self._taken_def_names.add(name)
            self._def_names[ptr] = name
        return name

    # -- translation ------------------------------------------------------------------

    def translate(self, schema: Any, depth: int) -> tuple[Any, dict[str, Any], int]:
        """``(schema, $defs, size)`` for a root schema, inlining refs ``depth`` deep."""
        result = self.node(schema, depth)
        defs: dict[str, Any] = {}
        size = result.size
        todo = sorted(result.needs)
        while todo:
            ptr = todo.pop()
            name = self.def_name(ptr)
            if name in defs:
                continue
            found = self._def(ptr, depth)
            defs[name] = found.schema
            size += found.size
            todo.extend(sorted(found.needs))
        return result.schema, defs, size

    def _tick(self, n: int = 1) -> None:
        self._work += n
        if self._work > _MAX_WORK:
            raise ImportFailed("the document's schemas are too large or too deeply aliased", field="document")

    def _def(self, ptr: str, depth: int) -> Translated:
        key = (ptr, depth)
        found = self._defs_memo.get(key)
        if found is None:
            found = self.node(self.resolve("#" + ptr), depth)
            if isinstance(found.schema, dict) and set(found.schema) == {"$ref"}:
                # A pure alias inside a cycle (A = B, B = A) would make validators loop.
                found = Translated({}, 2, _EMPTY)
            self._defs_memo[key] = found
        return found

    def _ref(self, ref: Any, depth: int) -> Translated:
        ptr = self.pointer(ref)
        target = self.resolve(ref)
        if self._is_cyclic(ptr):
            ref_schema = {"$ref": f"#/$defs/{self.def_name(ptr)}"}
            return Translated(ref_schema, 20 + len(ref_schema["$ref"]), frozenset((ptr,)))
        key = (ptr, depth)
        found = self._memo.get(key)
        if found is None:
            if depth <= 0 and _has_subschemas(target):
                collapsed = _collapsed(target)
                found = Translated(collapsed, 40 + len(collapsed["description"]), _EMPTY)
            else:
                found = self.node(target, max(depth - 1, 0))
            self._memo[key] = found
        return found

    def node(self, s: Any, depth: int) -> Translated:
        """One schema object (request side: ``readOnly`` properties are dropped)."""
        self._tick()
        if isinstance(s, bool):
            return Translated(s, 5, _EMPTY)
        if not isinstance(s, dict):
            return Translated({}, 2, _EMPTY)
        if "$ref" in s:
            found = self._ref(s["$ref"], depth)
            desc = s.get("description")
            if isinstance(desc, str) and isinstance(found.schema, dict) and "$ref" not in found.schema:
                schema = {**found.schema, "description": trim(desc)}
                found = Translated(schema, found.size + len(schema["description"]), found.needs)
            return found
        out: dict[str, Any] = {}
        size = _NODE_BYTES
        needs: set[str] = set()

        def sub(value: Any) -> Any:
            nonlocal size
            found = self.node(value, depth)
            size += found.size
            needs.update(found.needs)
            return found.schema

        types = normalise_type(s.get("type"))
        nullable = s.get("nullable") is True or s.get("x-nullable") is True
        if nullable and types and "null" not in types:
            types.append("null")
        if types:
            out["type"] = types[0] if len(types) == 1 else types
        if s.get("type") == "file" and "format" not in s:
            out["format"] = "binary"
        desc = s.get("description")
        if isinstance(desc, str) and desc.strip():
            out["description"] = trim(desc)
            size += len(out["description"])
        props = s.get("properties")
        dropped: set[str] = set()
        if isinstance(props, dict):
            out_props: dict[str, Any] = {}
            for name, value in props.items():
                if isinstance(value, dict) and value.get("readOnly") is True:
                    dropped.add(str(name))  # the server sets it; a caller cannot
                    continue
                out_props[str(name)] = sub(value)
                size += len(str(name)) + 4
            out["properties"] = out_props
        required = s.get("required")
        if isinstance(required, list):
            strings = [r for r in required if isinstance(r, str) and r not in dropped]
            names = list(dict.fromkeys(strings))
            if names:
                out["required"] = names
        for key in ("additionalProperties", "not"):
            value = s.get(key)
            if isinstance(value, dict | bool):
                out[key] = sub(value)
        items = s.get("items")
        if isinstance(items, dict | bool):
            out["items"] = sub(items)
        elif isinstance(items, list) and items:
            out["prefixItems"] = [sub(v) for v in items]  # tuple-style items (Slack)
        prefix = s.get("prefixItems")
        if isinstance(prefix, list) and prefix and "prefixItems" not in out:
            out["prefixItems"] = [sub(v) for v in prefix]
        for key in ("allOf", "anyOf", "oneOf"):
            value = s.get(key)
            if isinstance(value, list) and value:
                out[key] = [sub(v) for v in value]
        patterns = s.get("patternProperties")
        if isinstance(patterns, dict):
            kept = {k: sub(v) for k, v in patterns.items() if valid_regex(k)}
            if kept:
                out["patternProperties"] = kept
        size += copy_scalars(s, out, nullable)
        if nullable and not types and "enum" not in out and out:
            # e.g. ``allOf: [$ref], nullable: true`` (OAS 3.0): no type to extend.
            return Translated({"anyOf": [out, {"type": "null"}]}, size + 30, frozenset(needs))
        return Translated(out, size, frozenset(needs) if needs else _EMPTY)


def _has_subschemas(target: Any) -> bool:
    if not isinstance(target, dict):
        return False
    if "$ref" in target or isinstance(target.get("additionalProperties"), dict):
        return True
    return any(key in target for key in _SUBSCHEMA_KEYS)


def _collapsed(target: Any) -> dict[str, Any]:
    """A permissive stand-in for a schema too deep to inline."""
    out: dict[str, Any] = {}
    types = normalise_type(target.get("type")) if isinstance(target, dict) else []
    if len(types) == 1 and types[0] in ("object", "array"):
        out["type"] = types[0]
    desc = trim(target.get("description"), 120) if isinstance(target, dict) else ""
    out["description"] = (desc + _OMITTED).strip()
    return out
