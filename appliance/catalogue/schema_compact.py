"""Tool input schemas as a search answer shows them: every argument kept, the prose cut (pure).

A search answer is read by a model choosing among several tools, so it needs what a call may
carry (every property name, type, required flag, enum, const and default, at every depth) and
enough words to tell the arguments apart; the rest of the schema (long descriptions, titles,
examples, bounds, patterns) waits for ``describe_tools``, which returns the full schema.

The schemas of one answer are then folded together: a sub-schema that occurs more than once
(Kubernetes' object metadata, a spec's shared pagination parameters) and every tool's own
``$defs`` go once into the answer's ``defs``, referenced as ``{"$ref": "#/defs/<name>"}``.
Repeats are found by a digest computed bottom-up, so the whole answer is walked a constant
number of times: linear in its size.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from typing import Any

from appliance.catalogue.schema_values import trim

DESCRIPTION = 60  # characters of a property's description in a compact schema
TOOL_DESCRIPTION = 120  # characters of the tool's own description in a search result
# A repeated sub-schema smaller than this costs less inline than as a def and its references;
# a plain property is written tersely inline (``_terse_leaf``), so it must be longer to pay.
FOLD_BYTES = 60
FOLD_LEAF_BYTES = 60
DEFS = "#/defs/"
_LOCAL = "#/$defs/"
# Keywords that carry what a call may send; everything else is prose or a bound.
_SCALARS = ("type", "enum", "const", "default")
_ONE = ("items", "additionalProperties", "not")
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
# A sentence ends at . ! or ? after two word characters, before a capital or digit: "e.g. a"
# and "v1.2" go on. The text is whitespace-normalised first, so one space is the gap.
_SENTENCE = re.compile(r"(?<=[a-z0-9)\]`'\"]{2})[.!?](?= [A-Z0-9])")
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_TAG = re.compile(r"<[^<>]{0,200}>")  # HTML markup in spec prose: no words for a model


def short(text: Any, limit: int = DESCRIPTION) -> str:
    """The first sentence of ``text``, cut at a word boundary near ``limit`` characters."""
    if not isinstance(text, str):
        return ""
    # Only the head can show, so only the head is read: the work is bounded by ``limit``.
    text = " ".join(_TAG.sub(" ", text[: limit * 8]).split())
    end = _SENTENCE.search(text, 0, limit + 1)
    return trim(text[: end.start() + 1] if end else text, limit)


def compact(schema: Any) -> dict[str, Any]:
    """``schema`` with every argument it accepts and short descriptions; its ``$defs`` kept."""
    if not isinstance(schema, dict):
        return {}
    out = _node(schema)
    defs = schema.get("$defs")
    if isinstance(defs, dict) and defs:
        out["$defs"] = {k: _node(v) for k, v in defs.items() if isinstance(v, dict)}
    return out


def _node(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        out["$ref"] = ref
    for key in _SCALARS:
        if key in schema:
            out[key] = schema[key]
    if "string" in _types(schema) and isinstance(schema.get("format"), str):
        out["format"] = schema["format"]  # date-time, uri, binary: how to write the value
    text = short(schema.get("description"))
    if text:
        out["description"] = text
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: _node(v) if isinstance(v, dict) else {} for k, v in props.items()}
    required = schema.get("required")
    if isinstance(required, list) and required:
        out["required"] = required
    for key in _ONE:
        if isinstance(schema.get(key), dict):  # additionalProperties: false/true says nothing to add
            out[key] = _node(schema[key])
    for key in _MANY:
        if isinstance(schema.get(key), list):
            out[key] = [_node(s) if isinstance(s, dict) else {} for s in schema[key]]
    return out


def _types(schema: dict[str, Any]) -> list[Any]:
    t = schema.get("type")
    return t if isinstance(t, list) else [t]


def fold(schemas: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Compact schemas of one answer → the same with shared parts moved to one ``defs``."""
    folder = _Folder()
    for s in schemas:
        folder.adopt_local_defs(s)
    for s in schemas:
        folder.count(s, top=True)
    for d in list(folder.defs.values()):
        folder.count(d, top=True)
    out = [folder.rewrite(s, top=True) for s in schemas]
    folder.finish()
    return [_terse(s) for s in out], {k: _terse_leaf(v) for k, v in folder.defs.items()}


def _terse_leaf(node: Any) -> Any:
    """A plain property, ``{"type": T, "description": D}``, as the string ``"T: D"`` (or ``"T"``):
    a third of the bytes, and as plain to a model. Anything more stays a schema."""
    if isinstance(node, dict) and isinstance(node.get("type"), str) and set(node) <= {"type", "description"}:
        return f"{node['type']}: {node['description']}" if node.get("description") else node["type"]
    return _terse(node)


def _terse(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    out = dict(node)
    props = node.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: _terse_leaf(v) for k, v in props.items()}
    for key in _ONE:
        if isinstance(node.get(key), dict):
            out[key] = _terse(node[key])
    for key in _MANY:
        if isinstance(node.get(key), list):
            out[key] = [_terse(v) for v in node[key]]
    return out


def _relink(node: Any, names: dict[str, str]) -> None:
    """``#/$defs/X`` → ``#/defs/<X's name in the answer>``, in place, iteratively (deep schemas)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith(_LOCAL) and ref[len(_LOCAL) :] in names:
                item["$ref"] = DEFS + names[ref[len(_LOCAL) :]]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class _Folder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        # id(node) -> (digest, bytes, node): the node is held so that its id is never reused
        self.digest: dict[int, tuple[str, int, dict[str, Any]]] = {}
        self.seen: dict[str, int] = {}  # digest -> occurrences outside folded repeats
        self.named: dict[str, str] = {}  # digest -> def name
        self.taken: set[str] = set()  # def names given
        self.suffix: dict[str, int] = {}  # base name -> last number appended
        self.pending: deque[tuple[str, dict[str, Any]]] = deque()  # defs to write, first seen first

    def adopt_local_defs(self, schema: dict[str, Any]) -> None:
        """A tool's own ``$defs`` (recursive definitions) join the answer's, renamed if taken;
        its references to them are rewritten in place (the schema is this answer's own copy)."""
        local = schema.pop("$defs", None)
        if not isinstance(local, dict) or not local:
            return
        names = {k: self._free(k) for k in local}
        for k in local:
            self.defs[names[k]] = {}  # reserve the name before the next one is chosen
        for k, v in local.items():
            _relink(v, names)
            self.defs[names[k]] = v
        _relink(schema, names)

    def _free(self, want: str) -> str:
        """A def name from ``want``: ``body``, then ``body2``…; each base counts on from where it
        stopped, so naming stays linear however many defs share a base."""
        base = _NAME.sub("_", want)[:40] or "def"
        name = base
        while name in self.taken:
            self.suffix[base] = self.suffix.get(base, 1) + 1
            name = f"{base}{self.suffix[base]}"
        self.taken.add(name)
        return name

    def _measure(self, node: dict[str, Any]) -> tuple[str, int]:
        """Digest and approximate bytes of ``node``, bottom-up. An object's own description is
        left out (it stays where the object is used, so differently described uses share a
        def); a leaf's description is its content."""
        key = id(node)
        if key in self.digest:
            return self.digest[key][:2]
        h = hashlib.blake2b(digest_size=12)
        size = 2
        for k in sorted(node):
            if k == "description" and "properties" in node:
                size += len(node[k]) + 16
                continue
            v = node[k]
            h.update(k.encode())
            size += len(k) + 4
            if k == "properties" and isinstance(v, dict):
                for name in sorted(v):
                    d, b = self._measure(v[name])
                    h.update(b"\x00" + name.encode() + b"\x01" + d.encode())
                    size += len(name) + 4 + b
            elif k in _ONE and isinstance(v, dict):
                d, b = self._measure(v)
                h.update(d.encode())
                size += b
            elif k in _MANY and isinstance(v, list):
                for s in v:
                    d, b = self._measure(s)
                    h.update(b"\x02" + d.encode())
                    size += b + 1
            else:
                text = repr(v)
                h.update(b"\x03" + text.encode())
                size += len(text)
        self.digest[key] = (h.hexdigest(), size, node)
        return h.hexdigest(), size

    def _children(self, node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        kids: list[tuple[str, dict[str, Any]]] = []
        props = node.get("properties")
        if isinstance(props, dict):
            kids.extend((name, v) for name, v in props.items())
        for key in _ONE:
            if isinstance(node.get(key), dict):
                kids.append((key, node[key]))
        for key in _MANY:
            if isinstance(node.get(key), list):
                kids.extend((key, s) for s in node[key])
        return kids

    def _foldable(self, node: dict[str, Any]) -> bool:
        least = FOLD_BYTES if len(node) > 2 or "properties" in node else FOLD_LEAF_BYTES
        return "$ref" not in node and self._measure(node)[1] >= least

    def count(self, node: dict[str, Any], *, top: bool = False) -> None:
        """Occurrences of each foldable sub-schema; a repeat's insides are counted once."""
        if not top and self._foldable(node):
            digest = self._measure(node)[0]
            self.seen[digest] = self.seen.get(digest, 0) + 1
            if self.seen[digest] > 1:
                return
        for _, child in self._children(node):
            self.count(child)

    def rewrite(self, node: dict[str, Any], *, top: bool = False, name: str = "") -> dict[str, Any]:
        if not top and self._foldable(node):
            digest = self._measure(node)[0]
            if self.seen.get(digest, 0) > 1:
                keep = "properties" in node  # an object's description stays at each use
                if digest not in self.named:
                    self.named[digest] = self._free(name)
                    body = {k: v for k, v in node.items() if k != "description" or not keep}
                    self.pending.append((self.named[digest], body))
                ref: dict[str, Any] = {"$ref": DEFS + self.named[digest]}
                if keep and "description" in node:
                    ref["description"] = node["description"]
                return ref
        out = dict(node)
        props = node.get("properties")
        if isinstance(props, dict):
            out["properties"] = {k: self.rewrite(v, name=k) for k, v in props.items()}
        for key in _ONE:
            if isinstance(node.get(key), dict):
                out[key] = self.rewrite(node[key], name=name or key)
        for key in _MANY:
            if isinstance(node.get(key), list):
                out[key] = [self.rewrite(s, name=name or key) for s in node[key]]
        return out

    def finish(self) -> None:
        """Write the folded bodies (their insides folded too) and rewrite the adopted defs."""
        for name in list(self.defs):
            self.defs[name] = self.rewrite(self.defs[name], top=True)
        while self.pending:
            name, body = self.pending.popleft()
            self.defs[name] = self.rewrite(body, top=True)


__all__ = ["DEFS", "compact", "fold", "short"]
