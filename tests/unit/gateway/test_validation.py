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


# -- what a refusal says ---------------------------------------------------------------------

NOTE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 200},
        "body": {"type": "string", "maxLength": 10000},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
        "size": {"type": "integer", "minimum": 1},
        "color": {"enum": ["red", "green"]},
        "id": {"type": "integer"},
    },
    "required": ["title", "id"],
    "additionalProperties": False,
}


def refusal(schema: Any, arguments: Any) -> ArgumentsInvalid:
    with pytest.raises(ArgumentsInvalid) as refused:
        validate_arguments(schema, arguments)
    return refused.value


def test_a_long_value_is_quoted_after_the_reason_and_cut_short() -> None:
    error = refusal(NOTE, {"title": "x" * 100_000, "id": 1})
    message = error.public_message
    assert "/title: must be at most 200 characters, got 100000" in message
    assert "x" * 50 not in message  # the value itself is not echoed at length
    assert len(message) < 300
    assert error.field == "/title" and error.data["path"] == "/title"


def test_a_long_pattern_value_says_the_rule_before_the_quoted_value() -> None:
    # 900 characters: long, yet within what gateway/patterns.py asserts for one repeat.
    message = refusal(NOTE, {"title": "t", "id": 1, "tags": ["Y" * 900]}).public_message
    reason = message.index("must match the pattern")
    assert reason < message.index("YYYY")
    assert "(900 characters)" in message
    assert len(message) < 300


def test_every_error_is_listed_with_its_pointer_not_only_the_first() -> None:
    error = refusal(NOTE, {"title": "", "size": 0, "color": "blue", "tags": ["ok", 7], "extra": True})
    listed = {e["path"]: e["message"] for e in error.data["errors"]}
    assert listed == {
        "/extra": 'unexpected property "extra"',
        "/id": 'missing required property "id"',
        "/title": "must be at least 1 characters, got 0",
        "/tags/1": "must be string, got integer 7",
        "/size": "must be at least 1, got 0",
        "/color": 'must be one of ["red", "green"], got "blue"',
    }
    assert error.data["error_count"] == 6
    assert error.public_message.startswith("6 invalid arguments: ")
    for path, why in listed.items():
        assert f"{path}: {why}" in error.public_message
    assert error.field == error.data["errors"][0]["path"]


def test_beyond_ten_errors_the_rest_are_counted_not_listed() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(25)}}
    error = refusal(schema, {f"p{i}": "no" for i in range(25)})
    assert len(error.data["errors"]) == 10
    assert error.data["error_count"] == 25
    assert error.public_message.startswith("25 invalid arguments: ")
    assert error.public_message.endswith("; and 15 more")
    paths = [e["path"] for e in error.data["errors"]]
    assert len(set(paths)) == 10 and set(paths) <= {f"/p{i}" for i in range(25)}


def test_the_work_and_the_answer_stay_bounded_for_a_huge_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.gateway import validation_errors

    written = []
    reason = validation_errors._reason
    monkeypatch.setattr(validation_errors, "_reason", lambda err: written.append(1) or reason(err))
    error = refusal({"type": "array", "items": {"type": "integer"}}, ["x" * 100] * 200_000)
    assert error.data["error_count"] == validation_errors.MAX_COUNTED  # counting stopped there
    assert error.public_message.startswith(f"more than {validation_errors.MAX_COUNTED} invalid arguments")
    assert len(written) == validation_errors.MAX_LISTED  # only listed errors are written out
    assert len(error.public_message) < 2000
    huge_key = refusal({"type": "object", "additionalProperties": False}, {"k" * 100_000: 1})
    assert len(huge_key.public_message) < 600 and len(huge_key.field) <= validation_errors.POINTER_CHARS


def test_an_anyof_refusal_names_the_deepest_relevant_error() -> None:
    schema = {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"type": "string"}]}
    error = refusal(schema, {"a": "x"})
    assert error.field == "/a"
    assert error.public_message == 'invalid argument: /a: must be integer, got string "x"'
