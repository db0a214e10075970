"""JSON-RPC framing under hostile input (RELIABILITY.md PROTO-01, 02, 03, 07).

Property tests on ``appliance.rpc.jsonrpc.parse``: whatever arrives, the answer is a Message
or an InvalidRequest/ParseError (never another exception), an invalid message always names
the offending member, and a valid one keeps its id, method and params exactly.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.errors import InvalidParams, InvalidRequest, ParseError
from appliance.rpc.jsonrpc import MAX_DEPTH, MAX_ID_LENGTH, Message, parse, too_deep

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
QUICK = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON scalars orjson round-trips exactly (it reads integers beyond 64 bits as floats).
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
valid_ids = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=MAX_ID_LENGTH)
methods = st.text(min_size=1, max_size=30)
params = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
MEMBERS = ["jsonrpc", "id", "method", "params", "result", "error"]


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and len(value) <= MAX_ID_LENGTH)


def is_valid_message(doc: Any) -> bool:
    """The oracle: JSON-RPC 2.0's rules for one request, notification or response."""
    if not isinstance(doc, dict) or doc.get("jsonrpc") != "2.0":
        return False
    if "method" in doc:
        if not isinstance(doc["method"], str) or not doc["method"]:
            return False
        if "params" in doc and not isinstance(doc["params"], dict):
            return False
        return "id" not in doc or _valid_id(doc["id"])
    return "id" in doc and (("result" in doc) != ("error" in doc))


# Objects built from the members a message may have, each with a right or a wrong value, so
# that the examples land near the boundary instead of being obviously not a request.
near_messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "2.1", "1.0", 2.0, None]) | json_values,
        "id": valid_ids | json_values | st.text(min_size=MAX_ID_LENGTH + 1, max_size=MAX_ID_LENGTH + 3),
        "method": methods | json_values,
        "params": params | json_values,
        "result": json_values,
        "error": json_values,
        "extra": json_values,
    },
)


@FAST
@given(st.binary(max_size=300))
def test_any_bytes_become_a_message_or_a_request_error(body: bytes) -> None:
    try:
        msg = parse(body)
    except InvalidRequest:  # ParseError is one
        return
    assert isinstance(msg, Message)


@FAST
@given(json_values | near_messages)
def test_any_json_that_is_not_a_valid_message_is_an_invalid_request_naming_a_member(doc: Any) -> None:
    body = orjson.dumps(doc)
    if is_valid_message(doc):
        assert isinstance(parse(body), Message)
        return
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    exc = caught.value
    assert not isinstance(exc, ParseError)
    assert exc.rpc_code == -32600
    assert exc.field in {*MEMBERS, "message", "batch"}
    # A valid id is echoed so the error can be correlated; an invalid one never is.
    if isinstance(doc, dict) and "id" in doc and _valid_id(doc["id"]) and exc.field != "batch":
        echoed = exc.data.get("id", doc["id"])
        assert echoed == doc["id"] and type(echoed) is type(doc["id"])
    else:
        assert "id" not in exc.data


@QUICK
@given(st.lists(json_values, max_size=3))
def test_a_batch_is_refused_naming_batch(items: list[Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(orjson.dumps(items))
    assert caught.value.field == "batch"


@FAST
@given(valid_ids, methods, st.none() | params)
def test_a_valid_request_keeps_its_id_method_and_params(msg_id: Any, method: str, args: Any) -> None:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if args is not None:
        doc["params"] = args
    msg = parse(orjson.dumps(doc))
    assert msg.kind == "request"
    assert msg.id == msg_id and type(msg.id) is type(msg_id)
    assert msg.method == method
    assert msg.params == (args if args is not None else {})


@QUICK
@given(methods, params)
def test_a_message_without_an_id_is_a_notification(method: str, args: dict[str, Any]) -> None:
    msg = parse(orjson.dumps({"jsonrpc": "2.0", "method": method, "params": args}))
    assert (msg.kind, msg.id, msg.method, msg.params) == ("notification", None, method, args)


def test_ids_1_and_string_1_stay_distinct() -> None:
    as_int = parse(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')
    as_str = parse(b'{"jsonrpc": "2.0", "id": "1", "method": "ping"}')
    assert type(as_int.id) is int and type(as_str.id) is str
    assert as_int.id != as_str.id
    # ... and so do the ids an error echoes.
    with pytest.raises(InvalidRequest) as caught:
        parse(b'{"jsonrpc": "1.0", "id": "1", "method": "ping"}')
    assert caught.value.data["id"] == "1"
    with pytest.raises(InvalidRequest) as caught:
        parse(b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}')
    assert type(caught.value.data["id"]) is int


@pytest.mark.parametrize("bad_id", ["null", "true", "1.5", "[1]", '{"a": 1}', '"' + "x" * 300 + '"'])
def test_an_invalid_id_is_named_and_never_echoed(bad_id: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(b'{"jsonrpc": "2.0", "method": "ping", "id": ' + bad_id.encode() + b"}")
    assert caught.value.field == "id"
    assert "id" not in caught.value.data


@FAST
@given(methods, methods, valid_ids, valid_ids)
def test_duplicate_keys_resolve_last_wins(first: str, last: str, id_a: Any, id_b: Any) -> None:
    def enc(value: Any) -> bytes:
        return orjson.dumps(value)

    body = (
        b'{"jsonrpc": "2.0", "id": ' + enc(id_a) + b', "method": ' + enc(first)
        + b', "id": ' + enc(id_b) + b', "method": ' + enc(last) + b"}"
    )  # fmt: skip
    msg = parse(body)
    assert msg.method == last
    assert msg.id == id_b and type(msg.id) is type(id_b)
    assert msg.raw["method"] == last


def test_a_duplicate_jsonrpc_key_is_judged_on_its_last_value() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "jsonrpc": "1.0"}')
    assert caught.value.field == "jsonrpc"
    assert parse(b'{"jsonrpc": "1.0", "id": 1, "method": "ping", "jsonrpc": "2.0"}').method == "ping"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping"} trailing',
        b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": 1e400}}',
        b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}',
        b"\xff\xfe",
        b"[" * 5000 + b"]" * 5000,
        b'{"a":' * 2000 + b"1" + b"}" * 2000,
    ],
)
def test_bodies_that_are_not_json_are_parse_errors(body: bytes) -> None:
    with pytest.raises(ParseError) as caught:
        parse(body)
    assert caught.value.rpc_code == -32700


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "batch"),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], "batch"),
        ("ping", "message"),
        (None, "message"),
        ({"id": 1, "method": "ping"}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1, "method": ""}, "method"),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, "method"),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1, 2]}, "params"),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None}, "params"),
        ({"jsonrpc": "2.0", "id": 1}, "method"),
        ({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}, "method"),
    ],
)
def test_the_spec_examples_of_invalid_requests_name_the_member(doc: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(orjson.dumps(doc))
    assert caught.value.field == field
    assert not isinstance(caught.value, ParseError)


def test_a_response_is_recognised_and_carries_its_id() -> None:
    msg = parse(b'{"jsonrpc": "2.0", "id": "abc", "result": {}}')
    assert (msg.kind, msg.id, msg.method) == ("response", "abc", None)
    err = parse(b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}')
    assert (err.kind, err.id) == ("response", None)


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def _call(arguments: Any) -> bytes:
    doc = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "use_tool", "arguments": arguments},
    }
    return orjson.dumps(doc)


def test_nesting_up_to_the_limit_parses_and_one_level_more_is_refused() -> None:
    # The envelope and params are two levels: arguments may use the rest.
    ok = parse(_call(_nested(MAX_DEPTH - 2)))
    assert ok.refusal is None
    deep = parse(_call(_nested(MAX_DEPTH - 1)))
    assert deep.kind == "request" and deep.id == 7
    assert isinstance(deep.refusal, InvalidParams)
    assert (deep.refusal.rpc_code, deep.refusal.field, deep.refusal.data["limit"]) == (
        -32602,
        "params",
        MAX_DEPTH,
    )
    assert f"deeper than {MAX_DEPTH} levels" in deep.refusal.public_message


def _arrays(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth  # orjson writes at most 254 levels: build the text


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 990, 1020])
def test_a_message_nested_deeper_than_the_limit_elsewhere_is_an_invalid_request(depth: int) -> None:
    # As a notification (no id: nothing to answer for), as a response, as a bare array.
    deep = _arrays(depth)
    notification = '{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": ' + deep + "}}"
    response = '{"jsonrpc": "2.0", "id": 1, "result": ' + deep + "}"
    for body in (notification, response):
        with pytest.raises(InvalidRequest) as info:
            parse(body.encode())
        assert (info.value.rpc_code, info.value.field, info.value.data["limit"]) == (
            -32600,
            "message",
            MAX_DEPTH,
        )
    with pytest.raises(InvalidRequest):
        parse(_arrays(depth).encode())


@pytest.mark.parametrize("depth", [990, 1020])
def test_a_request_nested_990_levels_is_refused_by_its_params(depth: int) -> None:
    head = '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "use_tool", '
    msg = parse((head + '"arguments": {"tool": ' + _arrays(depth) + "}}}").encode())
    assert msg.id == 3 and isinstance(msg.refusal, InvalidParams)


def test_the_depth_walk_is_iterative_and_exact() -> None:
    assert not too_deep({}, 1) and too_deep({"a": {}}, 1) and not too_deep({"a": {}}, 2)
    assert not too_deep([1, [2], {"b": 3}], 2) and too_deep([1, [2, [3]]], 2)
    # Far deeper than Python's stack: no RecursionError, just the answer.
    assert too_deep(_nested(100_000), MAX_DEPTH)
