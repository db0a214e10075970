"""Arguments against input schemas: the quick check never accepts what jsonschema refuses."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import orjson
import pytest

from appliance.errors import ArgumentsInvalid
from appliance.gateway import validation
from appliance.gateway.validation import validate_arguments

PLAIN: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "description": "first"},
        "b": {"type": ["number", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
    "required": ["a"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}


def quick(schema: Any) -> Any:
    return validation._quick_for(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))


def test_a_plain_object_schema_gets_the_quick_check_and_it_accepts_valid_arguments() -> None:
    check = quick(PLAIN)
    assert check is not None
    assert check({"a": 1, "b": None, "tags": ["x"], "where": {"zone": "eu"}})
    assert not check({"a": 1, "c": 2})  # not sure: jsonschema decides (and refuses)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        {"type": "any"},
        {"type": "object", "properties": {"a": {"type": "string", "required": True}}},
        {"type": "array", "items": [{"type": "string"}]},
        {"type": "object", "required": "a"},
        False,
    ],
)
def test_anything_beyond_the_plain_subset_is_left_to_jsonschema(schema: Any) -> None:
    assert quick(schema) is None


@pytest.mark.parametrize(
    ("arguments", "pointer"),
    [
        ({}, "/a"),
        ({"a": "1"}, "/a"),
        ({"a": True}, "/a"),
        ({"a": 1, "extra": 1}, "/extra"),
        ({"a": 1, "where": {}}, "/where/zone"),
        ({"a": 1, "tags": ["x", 2]}, "/tags/1"),
    ],
)
def test_refusals_still_come_from_jsonschema_with_the_pointer(
    arguments: dict[str, Any], pointer: str
) -> None:
    with pytest.raises(ArgumentsInvalid) as refused:
        validate_arguments(PLAIN, arguments)
    assert refused.value.field == pointer


def test_an_integer_valued_float_is_left_to_the_schemas_draft() -> None:
    # Draft 4 refuses 1.0 as an integer, later drafts accept it: the quick check says neither.
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"n": {"type": "integer"}}}
    assert not quick(draft4)({"n": 1.0})
    with pytest.raises(ArgumentsInvalid):
        validate_arguments(draft4, {"n": 1.0})
    validate_arguments({**draft4, "$schema": "https://json-schema.org/draft/2020-12/schema"}, {"n": 1.0})


def _schema(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["string", "integer", "number", "boolean", "object", "array", "null"]
    roll = rng.random()
    if roll < 0.05:
        return {}
    if roll < 0.1:
        return {"enum": [1, "a"]}  # outside the subset
    schema: dict[str, Any] = {}
    if rng.random() < 0.8:
        schema["type"] = rng.choice(kinds) if rng.random() < 0.7 else rng.sample(kinds, 2)
    if depth < 3 and rng.random() < 0.6:
        names = rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))
        schema["properties"] = {n: _schema(rng, depth + 1) for n in names}
        if names and rng.random() < 0.5:
            schema["required"] = rng.sample(names, 1)
        if rng.random() < 0.3:
            schema["additionalProperties"] = False
    if depth < 3 and rng.random() < 0.3:
        schema["items"] = _schema(rng, depth + 1)
    if rng.random() < 0.2:
        schema["description"] = "text"
    return schema


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.randint(0, 8)
    if depth >= 3:
        roll = min(roll, 6)
    return [
        lambda: rng.choice(["", "x"]),
        lambda: rng.randint(-3, 3),
        lambda: rng.choice([1.0, 2.5, -0.0]),
        lambda: rng.choice([True, False]),
        lambda: None,
        lambda: 10**20,
        lambda: "1",
        lambda: {k: _value(rng, depth + 1) for k in rng.sample(["a", "b", "c", "d"], rng.randint(0, 4))},
        lambda: [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
    ][roll]()


def test_the_quick_check_never_accepts_what_jsonschema_refuses_on_random_schemas() -> None:
    rng = random.Random(20261130)
    accepted = refused = 0
    for _ in range(3000):
        schema = _schema(rng)
        check = validation._quick(schema)
        reference = jsonschema.Draft202012Validator(schema)
        for _ in range(5):
            value = _value(rng)
            valid = reference.is_valid(value)
            if check is not None and check(value):
                assert valid, (schema, value)
                accepted += 1
            elif not valid:
                refused += 1
    assert accepted > 1000 and refused > 1000  # both sides were exercised


def test_a_stack_deep_schema_or_value_never_escapes_as_a_recursion_error() -> None:
    import sys

    depth = 100  # 200 levels: within orjson's nesting limit (what can be stored at all)
    schema: dict[str, Any] = {"type": "object"}
    value: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"n": schema}}
        value = {"n": value}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(250)  # as if the call ran this deep in the stack already
    try:
        validation._quick_for.cache_clear()
        try:
            validate_arguments(schema, value)
        except ArgumentsInvalid as refused:  # jsonschema's own recursion guard refused it
            assert refused.field == "/"
    finally:
        sys.setrecursionlimit(limit)
        validation._quick_for.cache_clear()
    validate_arguments(schema, value)  # with the usual stack, the quick check accepts it
