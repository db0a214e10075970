"""Compact schemas lose no argument: on every tool of the fixture specs, every property path,
type, required flag, enum value, const and default of the full schema is in the compact form,
folded five tools at a time the way a search answer is."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.catalogue.openapi import convert_openapi
from appliance.catalogue.schema_compact import DEFS, compact, fold, short
from appliance.catalogue.spec_loader import parse_document
from appliance.models import ToolDraft
from tests.support.servers import FIXTURES

SPECS = sorted(
    p.name for p in FIXTURES.iterdir() if p.suffix in {".json", ".yaml"} and "webhook" not in p.name
)
ANSWER = 5  # results per search answer in the acceptance figure


@functools.cache
def tools(name: str) -> list[ToolDraft]:
    doc = parse_document((FIXTURES / name).read_bytes(), source=name, max_bytes=50_000_000)
    return convert_openapi(doc, "t").tools


Fact = tuple[Any, ...]


def facts(
    schema: Any, resolve: Any, path: tuple[str, ...] = (), on_path: frozenset[str] = frozenset()
) -> Iterator[Fact]:
    """What a schema says a call may carry, at every depth; a reference is followed once per path
    (recursive definitions stop where they recur)."""
    if isinstance(schema, str):  # a terse property: "type: text"
        yield ("type", path, schema.split(":", 1)[0])
        return
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in on_path:
        yield from facts(resolve(ref), resolve, path, on_path | {ref})
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        for kind in kinds:
            yield ("type", path, kind)
    for value in schema.get("enum") or []:
        yield ("enum", path, json.dumps(value, sort_keys=True))
    for key in ("const", "default"):
        if key in schema:
            yield (key, path, json.dumps(schema[key], sort_keys=True))
    for name in schema.get("required") or []:
        yield ("required", path, name)
    for name, sub in (schema.get("properties") or {}).items():
        yield ("property", (*path, name))
        yield from facts(sub, resolve, (*path, name), on_path)
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            yield from facts(schema[key], resolve, (*path, f"<{key}>"), on_path)
    for key in ("allOf", "anyOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key) or []):
            yield from facts(sub, resolve, (*path, f"<{key}{i}>"), on_path)


def local(schema: dict[str, Any]) -> Any:
    return lambda ref: (schema.get("$defs") or {}).get(ref.removeprefix("#/$defs/"), {})


def in_answer(defs: dict[str, Any]) -> Any:
    return lambda ref: defs.get(ref.removeprefix(DEFS), {})


@pytest.mark.parametrize("name", SPECS)
def test_every_argument_a_full_schema_accepts_is_in_the_compact_answer(name: str) -> None:
    drafts = tools(name)
    full_bytes = compact_bytes = 0
    for start in range(0, len(drafts), ANSWER):
        chunk = drafts[start : start + ANSWER]
        schemas, defs = fold([compact(t.input_schema) for t in chunk])
        for tool, small in zip(chunk, schemas, strict=True):
            want = set(facts(tool.input_schema, local(tool.input_schema)))
            got = set(facts(small, in_answer(defs)))
            missing = want - got
            assert not missing, f"{tool.name}: lost {sorted(missing, key=str)[:5]}"
            assert any(f[0] == "property" for f in want) == any(f[0] == "property" for f in got)
        full_bytes += len(json.dumps([t.input_schema for t in chunk]))
        compact_bytes += len(json.dumps({"s": schemas, "defs": defs}))
    assert compact_bytes <= full_bytes, (compact_bytes, full_bytes)  # never bigger than the original


def test_prose_is_cut_to_its_first_sentence_and_markup_dropped() -> None:
    assert short("Name of the pod. Must be unique in its namespace.") == "Name of the pod."
    assert short("Sends a <b>message</b> to a channel.") == "Sends a message to a channel."
    assert short("e.g. a version like v1.2 is kept whole") == "e.g. a version like v1.2 is kept whole"
    long = short("word " * 100)
    assert len(long) <= 60 and long.endswith("…")
    assert short(None) == ""


def test_a_repeated_sub_schema_goes_once_into_defs_and_keeps_each_use_described() -> None:
    meta = {
        "type": "object",
        "properties": {
            n: {"type": "string", "description": f"The {n} of it."} for n in ("name", "uid", "kind")
        },
        "required": ["name"],
    }
    a = {"type": "object", "properties": {"metadata": {**meta, "description": "Standard metadata."}}}
    b = {
        "type": "object",
        "properties": {
            "meta": {**meta, "description": "Its metadata."},
            "n": {"type": "integer", "default": 3},
        },
    }
    (sa, sb), defs = fold([compact(a), compact(b)])
    assert sa["properties"]["metadata"] == {"$ref": "#/defs/metadata", "description": "Standard metadata."}
    assert sb["properties"]["meta"] == {"$ref": "#/defs/metadata", "description": "Its metadata."}
    assert defs["metadata"]["required"] == ["name"]
    assert defs["metadata"]["properties"]["uid"] == "string: The uid of it."  # a plain property, tersely
    assert sb["properties"]["n"] == {"type": "integer", "default": 3}  # a default keeps the schema form


def test_a_tool_s_own_recursive_defs_join_the_answer_under_free_names() -> None:
    node = {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}, "v": {"type": "string"}}}
    one = {"type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}}, "$defs": {"Node": node}}
    other = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "integer"}},
    }
    (s1, s2), defs = fold([compact(one), compact(other)])
    assert s1["properties"]["root"] == {"$ref": "#/defs/Node"}
    assert s2["properties"]["x"] == {"$ref": "#/defs/Node2"}
    assert defs["Node"]["properties"]["child"] == {"$ref": "#/defs/Node"}
    assert defs["Node2"] == "integer"
    assert "$defs" not in s1 and "$defs" not in s2


def test_keywords_that_only_bound_or_decorate_are_left_to_describe_tools() -> None:
    full = {
        "type": "object",
        "title": "T",
        "additionalProperties": False,
        "properties": {
            "when": {"type": "string", "format": "date-time", "pattern": "^.+$", "examples": ["x"]},
            "n": {"type": "integer", "minimum": 1, "maximum": 9, "format": "int32"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    assert compact(full) == {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }


def test_deep_and_many_fold_in_linear_work_without_recursion_trouble() -> None:
    deep: dict[str, Any] = {"type": "string", "enum": ["leaf"]}
    for _ in range(240):  # about what orjson stores (it refuses nesting past 255)
        deep = {"type": "array", "items": deep}
    (small,), _ = fold([compact({"type": "object", "properties": {"x": deep}})])
    node = small["properties"]["x"]
    for _ in range(240):
        node = node["items"]
    assert node == {"type": "string", "enum": ["leaf"]}
    # 2,000 different repeated objects all under one property name: each gets its own def name
    many = [
        {
            "type": "object",
            "properties": {
                "x": {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d"}}}
            },
        }
        for i in range(2_000)
    ]
    schemas, defs = fold([compact(s) for s in many + many])
    assert len(defs) == 2_000 and {"x", "x2", "x2000"} <= set(defs)
    assert schemas[0]["properties"]["x"] == {"$ref": "#/defs/x"}
