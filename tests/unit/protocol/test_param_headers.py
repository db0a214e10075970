"""SEP-2243 ``x-mcp-header``: which schemas are valid, what a client sends, what a server accepts."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.protocol.param_headers import InvalidAnnotation, annotated_params, headers_for, mismatch

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "limit": {"type": "integer", "x-mcp-header": "Limit"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "where": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
        "query": {"type": "string"},
    },
}


def test_annotations_are_found_along_properties_chains_only() -> None:
    assert annotated_params(SCHEMA) == {
        ("region",): "Region",
        ("limit",): "Limit",
        ("dry",): "Dry",
        ("where", "zone"): "Zone",
    }


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"a": {"type": "number", "x-mcp-header": "A"}}},
        {"properties": {"a": {"type": "string", "x-mcp-header": ""}}},
        {"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}},
        {
            "properties": {
                "a": {"type": "string", "x-mcp-header": "A"},
                "b": {"type": "string", "x-mcp-header": "a"},
            }
        },
        {"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}},
        {"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]},
    ],
    ids=["number", "empty", "not-a-token", "duplicate", "under-items", "under-anyOf"],
)
def test_an_annotation_that_breaks_a_rule_invalidates_the_tool(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidAnnotation):
        annotated_params(schema)
    assert headers_for(schema, {"a": "x"}) == {}


def test_a_client_mirrors_present_values_encoding_what_is_not_plain_ascii() -> None:
    args = {"region": "Hello, 世界", "limit": 42, "dry": False, "where": {"zone": " padded "}, "query": "q"}
    assert headers_for(SCHEMA, args) == {
        "Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?=",
        "Mcp-Param-Limit": "42",
        "Mcp-Param-Dry": "false",
        "Mcp-Param-Zone": "=?base64?IHBhZGRlZCA=?=",
    }
    assert headers_for(SCHEMA, {"region": "=?base64?literal?="}) == {
        "Mcp-Param-Region": "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
    }
    assert headers_for(SCHEMA, {"region": None, "query": "q"}) == {}


def _h(**values: str | list[str]) -> dict[str, list[str]]:
    return {f"mcp-param-{k}": v if isinstance(v, list) else [v] for k, v in values.items()}


@pytest.mark.parametrize(
    ("args", "headers"),
    [
        ({"region": "Hello"}, _h(region="=?base64?SGVsbG8=?=")),
        ({"region": "SGVsbG8="}, _h(region="SGVsbG8=")),  # no sentinel: a literal
        ({"region": "=?base64?SGVsbG8="}, _h(region="=?base64?SGVsbG8=")),  # no suffix: a literal
        ({"limit": 42}, _h(limit="42.0")),  # integers compare numerically
        ({"dry": True, "region": "eu"}, _h(dry="true", region=" eu ")),  # optional whitespace
        ({"query": "q"}, {}),  # no annotated value, no header expected
    ],
)
def test_a_server_accepts_headers_that_match_the_arguments(args: dict[str, Any], headers: Any) -> None:
    assert mismatch(SCHEMA, args, headers) is None


@pytest.mark.parametrize(
    ("args", "headers", "why"),
    [
        ({"region": "Hello"}, _h(region="=?base64?SGVsbG8?="), "malformed base64"),
        ({"region": "Hello"}, _h(region="=?base64?SGVs!!!bG8=?="), "malformed base64"),
        ({"region": "test-value"}, {}, "missing"),
        ({"region": "eu"}, _h(region="us"), "does not match"),
        ({"region": "eu"}, _h(region=["eu", "eu"]), "more than once"),
        ({"query": "q"}, _h(region="eu"), "absent"),
        ({"dry": True}, _h(dry="True"), "does not match"),
        ({"where": {"zone": "z"}}, _h(zone="y"), "does not match"),
    ],
)
def test_a_server_refuses_headers_that_disagree_naming_the_header(
    args: dict[str, Any], headers: Any, why: str
) -> None:
    problem = mismatch(SCHEMA, args, headers)
    assert problem is not None and "Mcp-Param-" in problem and why in problem


def test_the_call_path_walk_is_remembered_per_schema_object_and_stays_right() -> None:
    from appliance.protocol import param_headers

    first = {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "R"}}}
    assert headers_for(first, {"r": "eu"}) == {"Mcp-Param-R": "eu"}
    assert headers_for(first, {"r": "us"}) == {"Mcp-Param-R": "us"}  # remembered walk, new values
    remembered = id(first)
    del first  # the memory holds it: its id cannot go to the next schema
    second = {"type": "object", "properties": {"s": {"type": "string", "x-mcp-header": "S"}}}
    assert id(second) != remembered
    assert headers_for(second, {"s": "x"}) == {"Mcp-Param-S": "x"}
    invalid = {"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}
    for _ in range(2):  # the refusal is remembered too: no headers, no mismatch
        assert headers_for(invalid, {"a": 1}) == {}
        assert mismatch(invalid, {"a": 1}, {}) is None
    for i in range(param_headers._REMEMBER_MAX + 10):
        headers_for({"properties": {f"p{i}": {"type": "string"}}}, {})
    assert len(param_headers._REMEMBERED) == param_headers._REMEMBER_MAX
